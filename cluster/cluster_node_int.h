/*
 * Internals of this host's place in its cluster, shared by node.c (the log's records
 * applied, the configuration following the member list, snapshots, status) and node_join.c
 * (JOIN from strangers and ADMIN from members: the wire and the answers).
 */
#ifndef CLUSTER_NODE_INT_H
#define CLUSTER_NODE_INT_H

#include "cluster_node.h"

#define RECORD_MEMBER 'M'
#define RECORD_LEAVE  'L'
/* LEDGER: 'J' | op (1) | tenant length (1, 1..63) | tenant | body. A tenant's journal records,
 * which every member writes into its copy of DATA/tenants/T/ledger.db (node_ledger.c). Bodies:
 * APPEND and CHUNK carry count (4, big-endian) then count x (length (4) | record); BEGIN and
 * END none; NOOP has neither tenant nor body ('J' 'N': a barrier, applied as nothing). */
#define RECORD_LEDGER 'J'
#define LEDGER_APPEND 'A' /* the records go at the end of the tenant's journal */
#define LEDGER_BEGIN  'B' /* the tenant's staging copy is emptied */
#define LEDGER_CHUNK  'C' /* the records go at the end of the staging copy */
#define LEDGER_END    'E' /* in one transaction the journal becomes the staging copy */
#define LEDGER_NOOP   'N'
#define ADMIN_LEAVE   1
#define RECONCILE_MS  500
/* A follower's lease frames go over this many connections to the leader at once: a segment
 * lost on one (its recovery waits for a timer: a round trip or more) costs nothing while a
 * copy arrives on another. Duplicates are the lease protocol's to drop (it drops resends). */
#define LEASE_LANES        2
#define CLOCK_PROBE_MS     2000 /* a follower probes the leader's clock this often */
#define CLOCK_SKEW_WARN_MS 250  /* a member's skew this large is logged as a warning */
#define CLOCK_SAMPLES      4    /* a skew is the one of the shortest of the last few round trips */
#define JOINS_MAX          4
/* A member that left stays in the log's configuration this long after its LEAVE applied here,
 * so that heartbeats carry the commit to it and it learns it left. */
#define REMOVE_GRACE_MS 1500

struct pending_join {
    uint64_t token; /* the stranger's connection */
    uint64_t id;    /* the member id it will get */
};

struct cluster_node {
    char data[512];
    struct cluster_state st;
    struct cluster_hostkey key;
    cluster_log *lg;
    struct cluster_net_hooks hooks;
    uv_timer_t reconcile;
    bool change_busy;
    struct pending_join joins[JOINS_MAX];
    struct pending_join leaves[JOINS_MAX]; /* ADMIN leave requests waiting for their commit */
    struct {
        uint64_t id;
        uint64_t at_ms; /* uv_now when its LEAVE applied */
    } departed[JOINS_MAX];
    /* Lease frames (node_lease.c): a follower's links to the leader (LEASE_LANES connections,
     * each frame sent on every one); the leader's links from the members. */
    struct cluster_lease_cbs lease_cbs;
    cluster_conn *lease_out[LEASE_LANES];
    bool lease_out_ready[LEASE_LANES];
    bool lease_up;         /* a lane is ready (as the front was last told) */
    uint64_t lease_out_to; /* the leader it dials */
    struct {
        uint64_t token, member;
        uint64_t opened; /* its order among the links (the oldest goes first) */
    } lease_in[CLUSTER_MEMBERS_MAX * LEASE_LANES];
    uint64_t lease_opened;
    bool role_known, role_leading, role_link; /* as last told */
    /* Clocks (node_lease.c): each member's wall clock minus the leader's, in ms, measured by
     * the member over its lease link and reported to the leader. A follower knows its own
     * (clock_self_*); the leader knows every member's that reports (clock_of[]). */
    struct {
        uint64_t sent_hr;     /* uv_hrtime of the probe in flight (0: none) */
        int64_t sent_wall_us; /* its wall clock, echoed by the leader */
        uint64_t next_ms;     /* uv_now of the next probe */
        bool known, warned;   /* a measurement is there; its size was logged as too large */
        int64_t skew_ms;      /* of the sample with the shortest round trip of the last few */
        struct {
            int64_t rtt_us, skew_us; /* rtt_us 0: an empty slot */
        } sample[CLOCK_SAMPLES];
        unsigned at; /* the slot the next sample takes */
    } clock_self;
    struct {
        uint64_t member;
        bool known, warned;
        int64_t skew_ms;
    } clock_of[CLUSTER_MEMBERS_MAX];
    bool closing, log_closed;
    struct node_config *config; /* tally.db on the log (node_config.c), made at first use */
    struct node_ledger *ledger; /* every tenant's journal copy (node_ledger.c) */
    uv_loop_t *loop;
    void (*close_cb)(void *data);
    void *close_data;
};

/** The wall clock (Unix ms): invites expire by it. */
int64_t cluster__wall_ms(void);
/** One info line about member id (address and detail may be NULL). */
void cluster__log_member(const char *event, uint64_t id, const char *address, const char *detail);
void cluster__put_u64(uint8_t *p, uint64_t v);
uint64_t cluster__get_u64(const uint8_t *p);

static inline uint32_t
cluster__get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void
cluster__put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/** Refuses the JOIN or ADMIN of connection `token` with status and a reason. */
void cluster__join_refuse(cluster_node *n, uint64_t token, uint8_t status, const char *why);
/** Answers a JOIN whose MEMBER record (member id) is committed. */
void cluster__join_accept(cluster_node *n, uint64_t token, uint64_t id);
/** Lease links (node_lease.c): dials or drops the link to the leader as leadership says and
 *  tells the front where its leases come from. */
void cluster__lease_tick(cluster_node *n);
/** Whether a supervisor may start from this member's copy of `tenant`'s journal (after a
 *  barrier): TALLY_OK, or TALLY_EUNAVAIL (logged) while the copy is broken (node_ledger.c). */
int cluster__ledger_ready(cluster_node *n, const char *tenant);
/** Closes the lease links; true when nothing is left open (else cluster__node_maybe_free
 *  runs again once the link to the leader is closed). */
bool cluster__lease_close(cluster_node *n);
/** True while a lane to the leader is open (or closing). */
bool cluster__lease_open_any(const cluster_node *n);
/** Frees n once its log and its lease link are both closed. */
void cluster__node_maybe_free(cluster_node *n);
int cluster__on_lease_open(void *ctx, uint64_t token, uint64_t member);
void cluster__on_lease_msg(void *ctx, uint64_t token, const uint8_t *msg, size_t len);
void cluster__on_lease_close(void *ctx, uint64_t token);
/* Ledgers on the log (node_ledger.c). */
/** Makes n's table of journal copies (before the log opens: a snapshot restores at start).
 *  TALLY_OK or TALLY_ENOMEM. */
int cluster__ledger_init(cluster_node *n);
/** Closes every open copy and frees the table; no-op when none. */
void cluster__ledger_close(cluster_node *n);
/** A committed LEDGER record (p: after its type byte), the log's `count`-th batch: written
 *  into the tenant's copy, unless the copy holds it already. A malformed record is logged
 *  and ignored; a copy that fails is logged and skipped from then on (node_ledger.c). */
void cluster__ledger_apply(cluster_node *n, uint64_t count, const uint8_t *p, size_t len);
/** A snapshot's bytes: head (head_len bytes, borrowed) then every tenant's copy as of
 *  `applied` batches. *buf from tally_malloc. TALLY_OK; TALLY_EIO while a copy is broken,
 *  TALLY_ETOOBIG over 512 MiB, or a store error (each logged). */
int cluster__ledger_snapshot(cluster_node *n, uint64_t applied, const uint8_t *head,
                             size_t head_len, uint8_t **buf /* OUT */, size_t *len /* OUT */);
/** Puts the copies of a snapshot's ledger part (what follows its head) in place. TALLY_OK
 *  (a copy that fails is logged and broken), TALLY_EPROTO (malformed: nothing changed) or
 *  TALLY_ENOMEM. */
int cluster__ledger_restore(cluster_node *n, const uint8_t *p, size_t len);
/** Whether a snapshot's ledger part parses whole (nothing is changed): TALLY_OK,
 *  TALLY_EPROTO or TALLY_ENOMEM. */
int cluster__ledger_snap_check(const uint8_t *p, size_t len);
/** The log's restore callback (node.c): a snapshot (cluster__node_snapshot's format) put in
 *  place, the members, tally.db and the ledger copies. Every part is checked before any is
 *  written: TALLY_EPROTO changes nothing. */
int cluster__node_restore(void *data, const uint8_t *p, size_t len);

/* The state the log's records made: CLUSTER_SNAPSHOT_VERSION (1), the member list ([n (1)]
 * then each member as MEMBER records carry it), the next member id (8), tally.db as the
 * CONFIG records made it (its applied index (8), its length (4), its bytes), then every
 * tenant's ledger (node_ledger_snap.c). Read too: the format without the next id (0xF2: the
 * highest member's + 1 then), the one without tally.db (0xF1), and the first, with no version
 * byte (it began with n, at most CLUSTER_MEMBERS_MAX). */
#define CLUSTER_SNAPSHOT_LEDGERS 0xF1 /* members, ledgers */
#define CLUSTER_SNAPSHOT_CONFIG  0xF2 /* members, tally.db, ledgers */
#define CLUSTER_SNAPSHOT_VERSION 0xF3 /* members, next id, tally.db, ledgers */
/** cluster_net_hooks (ctx: the node). */
bool cluster__strangers_welcome(void *ctx);
int cluster__on_join(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES],
                     const uint8_t *msg, size_t len);
int cluster__on_admin(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES],
                      const uint8_t *msg, size_t len);

#endif /* CLUSTER_NODE_INT_H */

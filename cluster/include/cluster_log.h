/*
 * The replicated log of a cluster, behind a narrow interface: append a batch
 * (leader only), be called back once it is committed on a majority, be called
 * back with every committed batch in log order on every member, be told when
 * the leader changes. Today's engine is libraft 0.15 (raft_uv on the caller's
 * libuv loop, its disk files in one directory, its connections over host
 * channels: cluster_net.h); nothing above this header sees libraft, so another
 * engine could replace it.
 *
 * libraft's traps handled here: an entry is a multiple of 8 bytes (a batch is
 * framed and padded); snapshots are taken rarely (every 100,000 batches by
 * default), and only when the state above provides them: their bytes are made
 * on the loop and written off it (raft_uv 0.15 has no asynchronous snapshots:
 * a large state must make its bytes cheaply); the process must ignore SIGPIPE (a raft
 * stream is a socketpair, written after its peer may have closed).
 *
 * Loop thread only.
 */
#ifndef CLUSTER_LOG_H
#define CLUSTER_LOG_H

#include "cluster_net.h"

typedef struct cluster_log cluster_log;

struct cluster_log_cbs {
    /** A committed batch, on every member, in the same order everywhere: n counts the
     *  batches applied by this member so far, this one included. batch valid until
     *  return. */
    void (*apply)(void *data, uint64_t n, const uint8_t *batch, size_t len);
    /** The leader changed: its id (0 when none is known), and whether it is this member.
     *  Optional. */
    void (*leader)(void *data, uint64_t leader_id, bool self);
    /** The state every batch applied so far made, as bytes (*buf from tally_malloc, the
     *  log frees it): a snapshot, after which the log forgets those batches. Loop thread
     *  (keep it cheap); written to disk off the loop. Optional: without it the log keeps
     *  everything. */
    int (*snapshot)(void *data, uint8_t **buf /* OUT */, size_t *len /* OUT */);
    /** Replaces the state with a snapshot's (a member that was too far behind gets one
     *  instead of the batches). Required with snapshot. */
    int (*restore)(void *data, const uint8_t *buf, size_t len);
};

struct cluster_log_opts {
    uv_loop_t *loop;
    const char *dir; /* libraft's files: an existing directory, this log's alone */
    uint64_t id;     /* this member's id: one of members[] */
    const struct cluster_hostkey *self;
    const struct cluster_member *members; /* the voters (copied) */
    size_t n_members;
    bool bootstrap;          /* a pristine dir starts with members[] as its configuration */
    unsigned election_ms;    /* 0: 1000; heartbeats every tenth of it */
    unsigned snapshot_every; /* with snapshots: batches between two (0: 100000) */
    uint32_t handshake_ms;   /* 0: 2000 */
    const struct cluster_net_hooks *hooks; /* strangers that come to join (optional) */
    const struct cluster_log_cbs *cbs;
    void *data;
};

/** The outcome of an append: TALLY_OK once committed on a majority and applied here;
 *  TALLY_EUNAVAIL when leadership was lost first (it may still commit later: the apply
 *  callback is the truth); TALLY_ECANCELED when the log closed first. */
typedef void (*cluster_log_done_fn)(void *req_data, int rc);

/** Opens (and starts) the log. *out is the caller's, release with cluster_log_close().
 *  TALLY_OK, TALLY_EINVAL (options, or this id not a member), TALLY_EIO (libraft's files
 *  or port: the log line says which) or TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_log_open(const struct cluster_log_opts *o,
                                      cluster_log **out /* OUT */);
/** Appends batch (copied, len <= CLUSTER_CHAN_MSG_MAX / 2). done comes once, later.
 *  TALLY_OK, TALLY_EUNAVAIL (not the leader: no callback), TALLY_ETOOBIG or
 *  TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_log_append(cluster_log *lg, const uint8_t *batch, size_t len,
                                        cluster_log_done_fn done, void *req_data);
#define CLUSTER_LOG_SERVERS_MAX 16

/* A server's role in the log's current configuration. */
enum cluster_log_role {
    CLUSTER_LOG_VOTER = 0,
    CLUSTER_LOG_STANDBY = 1, /* replicates, does not vote */
    CLUSTER_LOG_SPARE = 2,   /* neither */
};

struct cluster_log_status {
    uint64_t self, leader, term;
    uint64_t commit_index, applied_index, last_index;
    uint64_t first_index;    /* the oldest entry still held (older ones are in the snapshot) */
    uint64_t snapshot_index; /* the last snapshot's (0: none) */
    size_t n;                /* servers in the current configuration */
    struct {
        uint64_t id;
        enum cluster_log_role role;
        bool progress_known; /* this member leads: match_index is what it knows */
        uint64_t match_index;
    } servers[CLUSTER_LOG_SERVERS_MAX];
};

/** What this member knows of the log now. */
void cluster_log_status(cluster_log *lg, struct cluster_log_status *out /* OUT */);
/** The outcome of a membership change (TALLY_OK once the new configuration is committed,
 *  else TALLY_EUNAVAIL: not the leader, another change in flight, the server did not catch
 *  up in time). */
typedef void (*cluster_log_change_fn)(void *req_data, int rc);
/** Leader: adds server id at address to the configuration, as a spare (it neither votes
 *  nor replicates until assigned a role). TALLY_OK (done comes later) or TALLY_EUNAVAIL. */
TALLY_MUST_CHECK int cluster_log_add(cluster_log *lg, uint64_t id, const char *address,
                                     cluster_log_change_fn done, void *req_data);
/** Leader: gives server id a role; to voter only once it caught up with the log.
 *  TALLY_OK (done comes later) or TALLY_EUNAVAIL. */
TALLY_MUST_CHECK int cluster_log_assign(cluster_log *lg, uint64_t id, enum cluster_log_role role,
                                        cluster_log_change_fn done, void *req_data);
/** Leader: removes server id from the configuration. TALLY_OK (done comes later) or
 *  TALLY_EUNAVAIL. */
TALLY_MUST_CHECK int cluster_log_remove(cluster_log *lg, uint64_t id, cluster_log_change_fn done,
                                        void *req_data);
/** Server id's role in the current configuration, or -1 when it is not in it. */
int cluster_log_role_of(cluster_log *lg, uint64_t id);
/** True iff this member leads. */
bool cluster_log_leading(cluster_log *lg);
/** The members the network knows from now on (keys let in, addresses dialed); copied.
 *  TALLY_OK or TALLY_ENOMEM (the old table stays). */
TALLY_MUST_CHECK int cluster_log_set_members(cluster_log *lg, const struct cluster_member *m,
                                             size_t n);
/** Answers a stranger's JOIN (cluster_net_hooks) and ends its connection: TALLY_OK or
 *  TALLY_ENOTFOUND (it left; nothing to do). */
int cluster_log_join_answer(cluster_log *lg, uint64_t token, const uint8_t *msg, size_t len);
/** Lease connections from members (cluster_net_hooks): cluster_transport_lease_send and
 *  cluster_transport_lease_close on the log's transport. */
int cluster_log_lease_send(cluster_log *lg, uint64_t token, const uint8_t *msg, size_t len);
void cluster_log_lease_close(cluster_log *lg, uint64_t token);
/** The leader's id as this member knows it (0: none known). */
uint64_t cluster_log_leader(cluster_log *lg);
/** Batches applied here so far. */
uint64_t cluster_log_applied(const cluster_log *lg);
/** Stops the log; pending appends end with TALLY_ECANCELED; cb(data) once everything is
 *  closed and lg freed. */
void cluster_log_close(cluster_log *lg, void (*cb)(void *data), void *data);

#endif /* CLUSTER_LOG_H */

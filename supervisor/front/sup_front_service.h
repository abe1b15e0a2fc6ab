/*
 * sup_front: tallyd's decision service (internal to supervisor/front/; what tallyd's main
 * uses is sup_front.h). It owns the in-memory configuration
 * (reloaded when the config database changes), the deployment key, the child
 * counters (one per tenant and endpoint, each with its own SQLite file) and
 * the supervisor manager, and answers one question per request: may this
 * token make this call now?
 *
 * Auth comes first: the token's keyed hash must resolve to a live link
 * allowed on the endpoint before anything else is looked at or created (no
 * child, no file, no process for noise). Then the child decides from its
 * leases; when it has none it asks the tenant's supervisor and the request
 * waits (at most wait_ms) for the grant.
 *
 * Header-wide rules: loop thread only. A request lives in caller-owned memory
 * (struct sup_front_req) from sup_front_check() until its done callback runs
 * or sup_front_cancel() returns; done may run before sup_front_check returns.
 */
#ifndef SUP_FRONT_SERVICE_H
#define SUP_FRONT_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "proto_client.h"
#include "proto_stats.h"
#include "sup_front.h"

typedef struct sup_front sup_front;

/* The supervisor processes, as counted by the manager (sup_manager.h). */
struct sup_manager_stats {
    uint64_t starts;          /* processes spawned */
    uint64_t restarts;        /* spawns after a crash or lock refusal */
    uint64_t exits;           /* idle exits */
    uint64_t crashes;         /* non-zero exits and signals */
    uint32_t live;            /* running now */
    uint64_t start_failures;  /* starts that ended before a first answer (crash, lock refusal,
                                 failed spawn) */
    uint32_t failing;         /* tenants whose last start failed, until their supervisor answers */
    uint64_t start_failed_ms; /* loop time of the last failed start (0: none yet) */
    uint32_t starting;        /* started, no answer yet */
    uint32_t starting_max;    /* the most starting at once so far */
    uint64_t spare_exits;     /* spares (forked ahead of a tenant) that ended before one */
};
struct front_child;
struct front_caller_req;

struct sup_front_config {
    const char *data;
    const char *exe;               /* tallyd itself, to spawn supervisors */
    bool strict;                   /* durability */
    int64_t wait_ms;               /* longest wait for the supervisor; 0 = 50 */
    int64_t cold_start_ms;         /* longest wait for a supervisor being started; 0 = 5000 */
    int64_t idle_exit_ms;          /* supervisors hibernate after this; 0 = 10000 */
    uint32_t max_supervisors;      /* 0 = sup_max_supervisors_default() */
    int64_t batch_sync_ms;         /* batched: supervisors' journal sync delay; 0 = theirs (100) */
    uint64_t journal_compact_rows; /* supervisors' compaction threshold; 0 = theirs (4096) */
    int64_t keep_lease_ms;         /* supervisors' longest kept lease; 0 = theirs (1 h) */
    int64_t child_idle_ms;         /* a child counter unused this long closes its file; 0 = 60000 */
    uint32_t max_open_children;    /* child files open at once (about 3 descriptors each); the
                                      least recently used idle one closes first; 0 = 1024 */
};

struct sup_front_req;

/* Where a request is on its way from sup_front_check() to its answer. The path reads
 * top to bottom: auth and policy (front.c); a child counter whose file is being opened
 * (or closed, then opened again) on the thread pool keeps the request waiting (OPENING)
 * until it is ready or the cold-start deadline passes; then the child decides (front_child.c
 * front_child_run); a request it cannot decide yet waits for a lease (LEASE) and is
 * re-run when its link changes or its deadline passes; an admitted expensive request
 * then waits for a concurrency slot (SLOT); once the slot's answer has come it is
 * SLOT_ANSWERED until the reply is written. */
enum sup_front_stage {
    SUP_FRONT_IDLE = 0,      /* not parked: being decided, or answered */
    SUP_FRONT_OPENING,       /* parked until the child's file is open or its deadline */
    SUP_FRONT_LEASE,         /* parked until a grant or its deadline */
    SUP_FRONT_SLOT,          /* admitted, parked until the slot's answer or its deadline */
    SUP_FRONT_SLOT_ANSWERED, /* the slot's answer came: unparking must not cancel it */
};

/* What a parked request waits for (tally_wait_timeouts_total{for=...}). */
enum sup_front_wait_for {
    SUP_FRONT_WAIT_FILE = 0, /* its child counter's file, being opened */
    SUP_FRONT_WAIT_GRANT,    /* a grant from the supervisor */
    SUP_FRONT_WAIT_MARK,     /* a durable mark: the child's own write (strict) */
    SUP_FRONT_WAIT_SLOT,     /* a concurrency slot */
    SUP_FRONT_WAIT_KINDS
};

typedef void (*sup_front_done_fn)(struct sup_front_req *r, const struct proto_check_reply *reply);

/* One request in flight: embed it in the connection; the fields below the line
 * are private. */
struct sup_front_req {
    sup_front_done_fn done;
    void *data;
    /* private */
    struct sup_front_req *next, *prev;
    struct front_child *child;
    char link[TENANT_LINK_ID_LEN + 1];
    int64_t cost;
    int64_t give_up_ms;
    uint64_t lease_id;
    uint64_t slot_op;
    enum sup_front_stage stage;
    uint8_t wait_for; /* enum sup_front_wait_for: what a parked request waits for */
    bool degraded;
    bool outage;                   /* 503 by the endpoint's policy: the authority did not answer */
    bool shadow;                   /* the endpoint is in shadow mode: a refusal is admitted */
    struct front_child *owner;     /* the child deciding it (for its mode), or NULL */
    struct front_caller_req *creq; /* a caller request waiting for its authorities, or NULL */
    uint64_t start_ns;             /* uv_hrtime() at sup_front_check */
};

/* Latency histograms (decisions, lease round trips): fixed buckets, upper bounds
 * in sup_front_hist_bounds_ns[], counts per bucket (not cumulative); the last
 * bucket is +Inf. */
#define SUP_FRONT_HIST_BOUNDS 18
struct sup_front_hist {
    uint64_t bucket[SUP_FRONT_HIST_BOUNDS + 1];
    uint64_t count;
    uint64_t sum_ns;
};
/* 10us, 25us, 50us, 100us, 250us, 500us, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms, 250ms,
 * 500ms, 1s: a decision from a lease takes microseconds, a lease round trip milliseconds */
extern const uint64_t sup_front_hist_bounds_ns[SUP_FRONT_HIST_BOUNDS];
void sup_front_hist_observe(struct sup_front_hist *h, uint64_t ns);

struct sup_front_stats {
    uint64_t checks;
    uint64_t admitted, refused, unauthorized, bad_request, unavailable, internal;
    uint64_t degraded;
    uint64_t refused_by_scope[7]; /* by enum tenant_scope */
    uint64_t waits;
    uint64_t wait_timeouts[SUP_FRONT_WAIT_KINDS]; /* waits that ran out, by what they were for */
    uint64_t lease_messages;                      /* lease frames sent to supervisors */
    uint64_t lease_send_failures; /* lease frames not sent (supervisor down, in backoff): the
                                     child's retransmit timers send them again */
    uint64_t pump_deferrals;      /* pumps cut short by their round limit, resumed next turn */
    uint64_t reloads;
    uint64_t recalls;       /* child counters that dropped their leases for a changed limit */
    uint64_t leases_parked; /* kept leases left in their file by an idle close */
    uint64_t leases_warmed; /* leases asked for a tenant's other links at its supervisor's start */
    uint64_t first_turns;   /* new tenants' first leases granted by tallyd (front_first.c) */
    uint64_t first_turns_not_made; /* ... left to the supervisor (lock held, ledger found) */
    uint64_t reload_failures;
    uint32_t reload_fail_streak;
    uint64_t shadow_refused;     /* refusals admitted because the endpoint is in shadow mode */
    uint64_t mode_changes[3];    /* endpoints entering normal, degraded, unavailable mode */
    uint32_t endpoints_degraded; /* child counters now answering degraded */
    uint32_t endpoints_unavailable;
    struct sup_front_hist decision;  /* sup_front_check to the answer */
    struct sup_front_hist lease_rtt; /* a lease request's first send to its answer */
    uint32_t children;               /* child counters known: open, opening or closing */
    uint32_t children_open;          /* of those, with their file open (or being opened) */
    uint64_t child_opens;  /* child files opened (first use, or again after an idle close) */
    uint64_t child_closes; /* child files closed for idleness (the child freed) */
    uint64_t child_sleeps; /* child files closed for the --max-open-children cap (child kept) */
    uint64_t child_open_failures;
    uint32_t live_links;
    struct sup_manager_stats sup;
    /* Endpoints keyed by caller (front_callers.c): decisions, and what the authorities
     * hold. Their answers are also in the counters above. */
    struct {
        uint64_t checks, admitted, refused, unavailable, degraded, bad_request;
        uint64_t sketched;          /* decisions an authority made from its sketch */
        uint64_t cancels;           /* charges taken back (another authority refused, or
                                       the answer had gone out as 503) */
        uint64_t entries;           /* exact entries, summed over the authorities' last word */
        uint64_t table_bytes;       /* the memory of their caller tables, the same way */
        uint64_t authority_starts;  /* caller authority processes started */
        uint64_t authority_crashes; /* ... that exited with a failure or a signal */
        uint32_t authorities_live;
    } callers;
};

/** *out is owned by the caller, release with sup_front_close(). Loads the key and
 *  the configuration. TALLY_OK, TALLY_ENODATA, TALLY_ENOKEY, storage errors. */
TALLY_MUST_CHECK int sup_front_open(uv_loop_t *loop, const struct sup_front_config *cfg,
                                    sup_front **out /* OUT */);
/** Decides a request; r->done runs exactly once unless sup_front_cancel() is called
 *  first. `token` (borrowed) is wiped from nothing: the caller owns it. cost 0 =
 *  the endpoint's default. */
void sup_front_check(sup_front *f, struct sup_front_req *r, const char *token, const char *endpoint,
                     int64_t cost);
/** Decides a request on an endpoint keyed by caller: `callers` (n strings of lens[i]
 *  bytes "KIND:VALUE", borrowed for the call) each its own budget, all or nothing.
 *  `token` (may be NULL) never keys it: a valid one only picks its tenant's plan's
 *  policy. r->done runs exactly once unless sup_front_cancel() is called first. */
void sup_front_check_callers(sup_front *f, struct sup_front_req *r, const char *token,
                             const char *endpoint, const char *const *callers, const size_t *lens,
                             size_t n, int64_t cost);
/** The key of `endpoint`'s policies: TENANT_KEY_CALLER or TENANT_KEY_TOKEN, -1 when no
 *  policy has that name. */
int sup_front_endpoint_key(const sup_front *f, const char *endpoint);
/** Releases slot `slot_id` of the token's link (idempotent). PROTO_ADMITTED when
 *  queued, PROTO_UNAUTHORIZED for a bad token, PROTO_BAD_REQUEST otherwise. */
int sup_front_release(sup_front *f, const char *token, int64_t slot_id);
/** The caller gives up on r (its connection closed): done will not run. */
void sup_front_cancel(sup_front *f, struct sup_front_req *r);
/** Re-reads the configuration now if it changed (force: even if not). TALLY_OK or
 *  a storage error (the old configuration stays). */
int sup_front_reload(sup_front *f, bool force);
/** Makes every child counter of `tenant` give its leases back now (retired and reported, as on
 *  a configuration change), so that its supervisor's ledger holds what they admitted: for
 *  `tally usage`. TALLY_OK, or TALLY_ENOTFOUND for a tenant the configuration does not have. */
int sup_front_flush(sup_front *f, const char *tenant);
void sup_front_stats(const sup_front *f, struct sup_front_stats *out /* OUT */);
/** The answer to a STATS request (front_obs.c): the counters above and, when
 *  `tenant` is not "", each endpoint of that tenant with a child counter. */
void sup_front_stats_reply(sup_front *f, const char *tenant,
                           struct proto_stats_reply *out /* OUT */);
enum sup_front_health {
    SUP_FRONT_HEALTHY = 0,
    SUP_FRONT_DATA_UNWRITABLE,     /* the data dir cannot be written (read-only, permissions) */
    SUP_FRONT_SUPERVISORS_FAILING, /* a supervisor failed to start within the last 30 s and
                                      has not answered since */
};
/** The service's health for /healthz (front_obs.c). The data dir is probed with
 *  access(W_OK) at most once a second (a read-only mount fails it even for root);
 *  the supervisors from the manager's counters. Loop thread. */
enum sup_front_health sup_front_health(sup_front *f);
/** What the open of DATA/lease-use.map found, for the start line ("created", "resumed";
 *  anything else has had its own line); *kept gets the counters kept for resumed leases. */
const char *sup_front_use_state(const sup_front *f, int64_t *kept /* OUT */);
/* ---- cluster mode (front_cluster.c) ----
 * Every host's children lease from the supervisors of the leader's tallyd: a follower's
 * lease frames go to the leader over the cluster, and the leader runs the tenants'
 * supervisors for every member. A child's name at a supervisor carries its member id
 * ("E-hN"), so the children of one endpoint on different hosts are different holders. */
struct sup_front_cluster {
    uint64_t self; /* this member's id */
    /** Sends one lease frame of `tenant`: member 0, to the leader (a follower's children);
     *  else, on the leader, to that member's children. TALLY_OK or TALLY_EUNAVAIL. */
    int (*send)(void *ctx, uint64_t member, const char *tenant, const void *frame, size_t len);
    /** Leader: `tenant`'s supervisor went away; the members' children are told. */
    void (*down)(void *ctx, const char *tenant);
    /** Leader: appends one of `tenant`'s journal records (op and body as a BATCH carries them;
     *  op 0: a barrier, no record) to the log; sup_front_cluster_journal_done answers `id`
     *  once it is committed and applied here, or not. TALLY_OK or an error (no answer). */
    int (*journal)(void *ctx, const char *tenant, uint64_t id, bool sync, uint8_t op,
                   const uint8_t *body, size_t len);
    void *ctx;
};
/** Enters cluster mode (c copied): from now on children's names carry c->self, and this host
 *  is a follower with no leader until sup_front_cluster_role() says otherwise. */
void sup_front_cluster_set(sup_front *f, const struct sup_front_cluster *c);
/** This host leads (its own supervisors decide for every member) or follows, and whether
 *  its link to the leader is up. Losing the lead sends this host's supervisors to
 *  hibernation. */
void sup_front_cluster_role(sup_front *f, bool leading, bool link_up);
/** A lease frame from the cluster: from member's children (member != 0: this host leads),
 *  or from the leader for this host's children (member 0). Bad frames are dropped. */
void sup_front_cluster_frame(sup_front *f, uint64_t member, const char *tenant, const void *frame,
                             size_t len);
/** The outcome of sup_front_cluster.journal(id): READY (sync) or DONE to tenant's supervisor. */
void sup_front_cluster_journal_done(sup_front *f, const char *tenant, uint64_t id, bool sync,
                                    int rc);
/** The leader says `tenant`'s supervisor went away (NULL: the link to the leader is lost). */
void sup_front_cluster_down(sup_front *f, const char *tenant);
/** Returns leases (RETURN to the supervisors), flushes the child files, closes
 *  every child and the manager, then calls cb. */
void sup_front_close(sup_front *f, void (*cb)(void *data), void *data);

#endif /* SUP_FRONT_SERVICE_H */

/*
 * sup_child_host: what a child counter asks of the process that hosts it (tallyd's front).
 * The child is a pure state machine (sup_child.h); everything else is an intent the host
 * carries out:
 *   messages: sup_child_next_message() until TALLY_ENOTFOUND; encode and send each one;
 *   timers:   arm one timer at sup_child_next_wake_ms() (monotonic) and call sup_child_tick();
 *   writes:   sup_child_next_persist() until TALLY_ENOTFOUND; write each to the child's SQLite
 *             file (PUT = upsert by lease id, DELETE), then report it with sup_child_persisted();
 *   replies:  sup_child_on_message() for every decoded reply; its event says which parked
 *             requests to re-run.
 * A request that gets SUP_ADMIT_WAIT is parked by the caller and re-run with sup_child_admit
 * when an event names its link (or after sup_child_persisted), or at give_up_ms with
 * SUP_ADMIT_GIVE_UP, which decides it as if the supervisor were unreachable.
 *
 * Start: open with a fresh incarnation (the caller persists a counter and adds one per start),
 * then sup_child_resume() each stored lease row before anything else: a row whose deadline is
 * still ahead is resumed with used := its persisted mark (strict: nothing admitted before the
 * crash is admitted twice), the others are deleted. Shutdown: sup_child_shutdown(), then drain
 * messages (RETURNs) and writes.
 *
 * Strict mode (persist_marks): the child admits on a lease only up to a mark `reserved_upto` that
 * is durable; it asks for the next mark ahead of need, in chunks, and a lease it reports back is
 * deleted durably first, so a lease can never be both credited and resumed. A lease of at most
 * mark_chunk_min tokens gets no row: it is used at once and, after a crash, left to expire as
 * spent (the supervisor's journal, not the child's file, is what keeps a grant from being
 * handed out twice; the row only lets a restart resume what it held).
 *
 * Header-wide rules: those of sup_child.h.
 */
#ifndef SUP_CHILD_HOST_H
#define SUP_CHILD_HOST_H

#include "sup_child.h"

/* A lease row of the child's own file (written by the caller, never read on the hot path; on disk
 * encoded by sup_child_codec.h, never as this struct's bytes). */
struct sup_child_lease_rec {
    uint64_t lease_id;
    uint64_t incarnation;
    char link[PROTO_LEASE_LINK_BUF];
    int64_t n;
    int64_t mark;             /* reserved_upto: admissions never pass it before it is durable */
    int64_t ttl_ms;           /* as granted */
    int64_t sent_mono_ms;     /* when the ACQUIRE was first sent (monotonic) */
    int64_t deadline_mono_ms; /* sent_mono_ms + ttl - ceil(ttl * epsilon) - 1 */
    int64_t deadline_wall_ms; /* the same instant on the wall clock */
    uint32_t flags;           /* SUP_CHILD_REC_*: what the grant said of the lease */
};

/* What a grant said of its lease, kept with the row so a lease resumed from it (after an idle
 * close or a restart) is still kept to its deadline, not renewed by age past a window end, and
 * still asks ahead for the next windows. */
#define SUP_CHILD_REC_KEEP 0x1u /* PROTO_LEASE_GRANT_KEEP */
#define SUP_CHILD_REC_EDGE 0x2u /* it ends at a window end of its path */
#define SUP_CHILD_REC_LAST 0x4u /* PROTO_LEASE_GRANT_LAST: every window of its path ends then */
#define SUP_CHILD_REC_ALL  0x7u

/* Exact use counters (optional, sup_child_config.counters). A row's mark runs ahead of use, so
 * a lease resumed from it after a crash loses what lies between. A host that can keep a count
 * across the crash of its process (tallyd: the page cache, store_use.h) gives each lease that may
 * get a row a counter, and the child stores what it admitted on the lease into it on every
 * admission, before the answer leaves (a plain store: the state machine does no I/O).
 *   bind:   a counter for the lease `rec` (borrowed: id, link, n, ttl, sent and deadlines are
 *           set; mark is what the child holds). *used in: what the child counts as admitted
 *           (0 for a new lease, the mark for a resumed one); out: what the host knows was
 *           admitted exactly, for a resumed lease, never more than the value in. NULL: none.
 *   unbind: the lease is done with its counter (its row is gone, or the child closes). */
struct sup_child_counters {
    int64_t *(*bind)(void *ctx, const struct sup_child_lease_rec *rec, int64_t *used);
    void (*unbind)(void *ctx, int64_t *counter);
    void *ctx;
};

enum sup_persist_op { SUP_PERSIST_PUT = 1, SUP_PERSIST_DELETE = 2 };

/* A kept lease with less than this to live is returned at an idle close, not parked. */
#define SUP_CHILD_PARK_MIN_MS 2000

struct sup_child_persist {
    enum sup_persist_op op;
    struct sup_child_lease_rec rec; /* DELETE: lease_id only */
};

struct sup_child_stats {
    uint64_t admits, degraded, refused, unavailable, waits, acquires, grants, denies, returns;
    uint64_t retransmits, messages, writes, resumed, prefetches;
    uint64_t warms;           /* sup_child_warm calls that asked for a lease */
    uint64_t recalls;         /* sup_child_recall calls */
    uint64_t leases_parked;   /* kept leases left in the file by sup_child_park */
    uint64_t lease_recalls;   /* leases retired by a RECALL from the supervisor */
    uint64_t grants_no_room;  /* grants the link's table had no room for, handed back */
    uint64_t grants_foreign;  /* grants naming another link than the request's, handed back */
    uint64_t grants_stranded; /* of both, left to expire (no request slot for the RETURN) */
    uint32_t links, live_leases, inflight;
    bool reachable;
};

/** Next message to send at `now`, into *out (owned by the caller). TALLY_OK, or TALLY_ENOTFOUND
 *  when nothing is due. */
TALLY_MUST_CHECK int sup_child_next_message(sup_child *c, struct sup_time now,
                                            struct proto_lease_msg *out /* OUT */);
/** Handles a decoded reply or RECALL `m` (borrowed). Messages for another child or incarnation,
 *  and duplicates, are ignored. *ev tells what changed. TALLY_OK, or TALLY_EPROTO for a request
 * type.
 */
TALLY_MUST_CHECK int sup_child_on_message(sup_child *c, struct sup_time now,
                                          const struct proto_lease_msg *m,
                                          struct sup_child_event *ev /* OUT */);
/** Runs the timers due at `now`: lease expiry, idle returns, prefetch by age, heartbeats. */
void sup_child_tick(sup_child *c, struct sup_time now);
/** Monotonic instant of the next timer (INT64_MAX when none; 0 when a message or a write can
 *  be pulled right now). */
int64_t sup_child_next_wake_ms(const sup_child *c);
/** The caller's view of the connection: false makes the supervisor unreachable at once. */
void sup_child_set_connected(sup_child *c, bool connected, struct sup_time now);
/** A new way to the supervisor (in a cluster, a link to a new leader): every request in
 *  flight goes again at the next pull, its backoff back to the first step. */
void sup_child_resend_now(sup_child *c, struct sup_time now);
/** Monotonic instant of the last reply from the supervisor (very negative when none yet). */
int64_t sup_child_last_reply_ms(const sup_child *c);
/** True iff the supervisor counts as reachable at `now`. */
bool sup_child_reachable(const sup_child *c, struct sup_time now);

/** Next row write, into *out. TALLY_OK or TALLY_ENOTFOUND. */
TALLY_MUST_CHECK int sup_child_next_persist(sup_child *c, struct sup_child_persist *out /* OUT */);
/** Reports that write `p` (borrowed) is durable; *ev (may be NULL) names a link whose parked
 *  requests may now proceed. */
void sup_child_persisted(sup_child *c, const struct sup_child_persist *p,
                         struct sup_child_event *ev /* OUT */);
/** Resumes a stored row at start (before the first message). TALLY_OK whether it was resumed or
 *  scheduled for deletion; TALLY_EINVAL for a malformed row. */
TALLY_MUST_CHECK int sup_child_resume(sup_child *c, const struct sup_child_lease_rec *rec,
                                      struct sup_time now);
/** Stops using every lease and queues their RETURNs. */
void sup_child_shutdown(sup_child *c, struct sup_time now);
/** Closing while idle: like sup_child_shutdown, except that every kept (or resumed) lease with
 *  at least SUP_CHILD_PARK_MIN_MS to live is parked instead: a PUT writes its row with mark :=
 *  what it admitted, and it is neither used nor reported again by this incarnation. The next
 *  open resumes it exactly (nothing lost, nothing twice) without asking the supervisor, which
 *  counts it as outstanding until then. Drain the writes (and RETURNs) before closing. */
uint32_t sup_child_park(sup_child *c, struct sup_time now); /* leases parked */

void sup_child_stats(const sup_child *c, struct sup_time now,
                     struct sup_child_stats *out /* OUT */);

/* A lease as the simulation sees it (the suites only: child_visit.c, linked through
 * tally_child_internal). */
struct sup_child_lease_info {
    const char *link; /* borrowed, valid during the callback */
    uint64_t lease_id;
    int64_t n, used, mark, deadline_mono_ms;
    int64_t mark_first; /* the mark its first row carries (the wanted one until handed out) */
    bool live, foreign, pass;
    bool row_durable; /* mark is a durable row's; before, a crash leaves no row */
};
/** Calls cb for every lease the child holds (live or waiting to be reported). */
int sup_child_each_lease(const sup_child *c,
                         int (*cb)(void *ctx, const struct sup_child_lease_info *l), void *ctx);

#endif /* SUP_CHILD_HOST_H */

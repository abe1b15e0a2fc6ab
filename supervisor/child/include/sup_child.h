/*
 * sup_child: the child counter for one (tenant, endpoint), a pure state machine
 * (docs/LEASE-PROTOCOL.md §3 "Child admit path", docs/LEASE-PROTOCOL.md). It holds leases per link
 * and admits locally from them: the hot path sup_child_admit does no I/O, reads no clock and
 * allocates nothing once the link is known. What the child asks of its host (messages, timers,
 * file writes, replies, start and shutdown) is in sup_child_host.h.
 * Header-wide rules: a handle belongs to one thread. Times come in a struct sup_time: mono_ms
 * (the host's monotonic clock, which survives a process restart on the same boot) for deadlines
 * and durations, wall_ms for degraded windows and persisted deadlines. Strings passed in are
 * borrowed for the call. A refusal is a verdict, not an error.
 */
#ifndef SUP_CHILD_H
#define SUP_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_lease.h"
#include "tally_common.h"
#include "tenant.h"
#include "tenant_count.h"

typedef struct sup_child sup_child;
struct sup_child_counters; /* sup_child_host.h */

struct sup_time {
    int64_t mono_ms;
    int64_t wall_ms;
};

/* Defaults (docs/LEASE-PROTOCOL.md §4). */
#define SUP_CHILD_WAIT_MS_DEFAULT        50    /* how long a request waits for a grant */
#define SUP_CHILD_IDLE_MS_DEFAULT        1000  /* RETURN leases unused this long */
#define SUP_CHILD_RETRANSMIT_MS_DEFAULT  20    /* first retransmission; doubles up to 1 s */
#define SUP_CHILD_UNREACHABLE_MS_DEFAULT 1000  /* no answer this long: supervisor unreachable */
#define SUP_CHILD_RENEW_MS_DEFAULT       2000  /* T_renew: a lease lasts about this long */
#define SUP_CHILD_LEAD_MS_DEFAULT        1000  /* watermark: RTT p99 with a disk stall */
#define SUP_CHILD_EPSILON_PPM_DEFAULT    20000 /* drift bound over a lease's first T_lease */
/* The drift bound past a lease's first T_lease: 0.1 %, twice the largest frequency correction the
 * kernel makes to a clock disciplined by NTP (500 ppm); on one host the monotonic and the wall
 * clock advance at the same rate. */
#define SUP_CHILD_EPSILON_LONG_PPM_DEFAULT 1000
#define SUP_CHILD_MARK_CHUNK_MIN_DEFAULT   4
#define SUP_CHILD_MARK_LEAD_MS_DEFAULT     1000 /* strict: a mark runs rate x this ahead of use */
#define SUP_CHILD_INFLIGHT                 32 /* requests in flight; half the supervisor's window */

struct sup_child_config {
    char tenant[TENANT_NAME_MAX + 1];
    struct tenant_endpoint policy; /* name = the child's name; on_unavailable, degraded_limits */
    uint64_t incarnation;          /* 1.., larger than any earlier run of this child */
    uint32_t max_links;            /* 0 = 256; idle links are evicted when full */
    uint32_t links_max;            /* the table's hard maximum (it grows to it); 0 = 2^20 */
    bool persist_marks;            /* strict durability (see above) */
    /* Exact use counters of leases with rows, or NULL (sup_child_host.h); borrowed, copied. */
    const struct sup_child_counters *counters;
    int64_t wait_ms; /* 0 = the defaults above, likewise the rest */
    int64_t idle_ms;
    int64_t heartbeat_ms;
    int64_t retransmit_ms;
    int64_t unreachable_ms;
    int64_t renew_ms;
    int64_t lead_ms;
    int64_t epsilon_ppm;
    int64_t epsilon_long_ppm;
    int64_t mark_chunk_min;
    int64_t mark_lead_ms;
    int64_t l_min;
    int64_t l_max;
};

enum sup_admit_verdict {
    SUP_ADMIT_OK = 0,       /* admitted; degraded when the supervisor was out of reach */
    SUP_ADMIT_REFUSED,      /* over a limit: scope, retry_after_ms (TENANT_RETRY_NEVER) */
    SUP_ADMIT_WAIT,         /* park until an event for the link, at most until give_up_ms */
    SUP_ADMIT_UNAVAILABLE,  /* on_unavailable closed and no lease: 503 with retry_after_ms */
    SUP_ADMIT_UNAUTHORIZED, /* the supervisor refuses the link (revoked, expired, not allowed) */
};

enum sup_admit_flags {
    SUP_ADMIT_GIVE_UP = 1 << 0, /* the wait is over: decide without the supervisor */
};

enum sup_wait_reason { SUP_WAIT_GRANT = 1, SUP_WAIT_MARK = 2 };

struct sup_admit {
    enum sup_admit_verdict verdict;
    bool degraded;           /* OK or REFUSED under the endpoint's degraded limits */
    enum tenant_scope scope; /* REFUSED: the scope that fired */
    int64_t retry_after_ms;  /* REFUSED and UNAVAILABLE */
    int64_t limit;           /* REFUSED: that bound's N when known, else 0 */
    int64_t give_up_ms;      /* WAIT: monotonic instant to re-run with SUP_ADMIT_GIVE_UP */
    enum sup_wait_reason wait;
    uint64_t lease_id; /* OK, not degraded: the lease charged (for sup_child_refund) */
    /* OK: what is left for the link after this admission, never more than truly remains. From
     * leases: the tokens left on the link's live leases (each reserved on every budget of its
     * path, so at most what any of them has left). Degraded: exactly what the first degraded
     * limit has left, a window this child owns. */
    int64_t left;
};

/* What a reply (or a durable write) changed for the caller. */
enum sup_child_event_kind {
    SUP_EV_NONE = 0,
    SUP_EV_LINK,         /* leases or refusals of `link` changed: re-run its parked requests */
    SUP_EV_SLOT_GRANTED, /* op got slot_id (0: nothing bounds it, nothing to release) */
    SUP_EV_SLOT_DENIED,  /* op refused: retry_after_ms */
    SUP_EV_SLOT_FAILED,  /* op refused by an error (link, endpoint): retry_after_ms */
};

struct sup_child_event {
    enum sup_child_event_kind kind;
    char link[PROTO_LEASE_LINK_BUF];
    uint64_t op;
    int64_t slot_id;
    int64_t retry_after_ms;
};

/** Opens a child counter for `cfg` (borrowed, copied). *out is owned by the caller, release with
 *  sup_child_close(). TALLY_OK, TALLY_EINVAL/TALLY_ECONFIG, TALLY_ENOMEM. */
TALLY_MUST_CHECK int sup_child_open(const struct sup_child_config *cfg, sup_child **out /* OUT */);
/** Takes a new policy for the same endpoint (a reload): on_unavailable and the degraded limits
 *  apply from the next decision; the degraded windows restart when their limits changed.
 *  TALLY_OK; TALLY_EINVAL (another endpoint) or TALLY_ECONFIG (bad degraded limits), and then
 *  nothing changed. */
TALLY_MUST_CHECK int sup_child_set_policy(sup_child *c, const struct tenant_endpoint *policy);
/** Stops using every lease the child holds or has asked for, at once: live leases are
 *  retired (reported as usual, so the supervisor credits what is unused), and a grant that
 *  answers a request sent before this call is handed back unused when it arrives. Cached
 *  refusals are forgotten. For a configuration change: no lease sized under an old limit
 *  admits anything after the change. The caller pumps the child afterwards. */
void sup_child_recall(sup_child *c, struct sup_time now);
/** Drops every cached refusal: the configuration changed (a raised limit), so the next
 *  request of each refused link asks the supervisor again. */
void sup_child_forget_refusals(sup_child *c);
/** Frees the child; NULL is a no-op. Leases still held are left to expire as spent. */
void sup_child_close(sup_child *c);

/** Decides a request of `cost` on `link` at `now`. Never allocates for a known link (a new link
 *  allocates once; TALLY_EFULL when the table is full of busy links). TALLY_OK with *out filled,
 *  TALLY_ECOST, TALLY_EINVAL (bad link id), TALLY_EFULL, TALLY_ENOMEM. */
TALLY_MUST_CHECK int sup_child_admit(sup_child *c, const char *link, int64_t cost,
                                     struct sup_time now, unsigned flags,
                                     struct sup_admit *out /* OUT */);
/** Asks ahead for a lease on `link` (an ACQUIRE with need 0, off any request's path) when the
 *  link holds no live lease and asks for none: its tenant's supervisor is being started for
 *  another link, and this link's first request would otherwise start it again. Nothing is asked
 *  for a link refused, unauthorized, unavailable or in pass-through. *asked says whether an
 *  ACQUIRE was queued. TALLY_OK, TALLY_EINVAL (bad link id), TALLY_EFULL, TALLY_ENOMEM. */
TALLY_MUST_CHECK int sup_child_warm(sup_child *c, const char *link, struct sup_time now,
                                    bool *asked /* OUT */);
/** Gives back `cost` admitted on lease `lease_id` of `link` (an expensive operation that got no
 *  slot). TALLY_OK; TALLY_ENOTFOUND when that lease is no longer in use (nothing to do). */
TALLY_MUST_CHECK int sup_child_refund(sup_child *c, const char *link, uint64_t lease_id,
                                      int64_t cost);

/** Queues a SLOT_ACQUIRE for an expensive operation on `link`; *op identifies it in events.
 *  TALLY_OK, TALLY_EFULL (too many operations pending), TALLY_EINVAL. */
TALLY_MUST_CHECK int sup_child_slot_acquire(sup_child *c, const char *link, struct sup_time now,
                                            uint64_t *op /* OUT */);
/** Gives up waiting for op: a slot granted later is released at once. */
void sup_child_slot_cancel(sup_child *c, uint64_t op);
/** Queues an idempotent SLOT_RELEASE of slot_id on `link` (retransmitted until acknowledged).
 *  TALLY_OK, TALLY_EFULL, TALLY_EINVAL. */
TALLY_MUST_CHECK int sup_child_slot_release(sup_child *c, const char *link, int64_t slot_id,
                                            struct sup_time now);

#endif /* SUP_CHILD_H */

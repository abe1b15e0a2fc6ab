/*
 * Struct layouts and internals shared by the child_*.c files (the child counter). Not installed.
 * The child owns its link table (links allocated when they first appear), a fixed table of
 * requests in flight and the degraded window state; nothing else is allocated.
 *
 * The files are facets of one state machine, and some call each other both ways on purpose:
 * child_core.c (the tables) asks child_admit.c whether a link is idle and to retire a lease,
 * and child_admit.c finds links in child_core.c; child_sched.c (queues and timers) rolls
 * windows and asks for leases through child_admit.c, which marks each link it changes for the
 * scheduler with sup__child_touch(). child_slot.c borrows the request table (child_req.c), and a
 * slot release arriving in a reply is handed back to child_slot.c. Splitting them further would
 * put one transition's steps in two places; the entry points are in sup_child.h, and every
 * mutual call is a module-internal sup__child_* function declared below.
 */
#ifndef SUP_CHILD_INT_H
#define SUP_CHILD_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "sup_child_host.h"
#include "tenant_index.h"

#define CHILD_LEASES           4  /* per link: in use, prefetched, and being reported */
#define CHILD_LIVE_MAX         2  /* live leases per link: in use and prefetched */
#define CHILD_SEQ_WINDOW       48 /* newest seq - oldest in flight stays below the supervisor's 64 */
#define CHILD_BACKOFF_MAX_MS   1000
#define CHILD_NEVER_CACHE_MS   60000 /* a "never" refusal is remembered this long */
#define CHILD_RECALLED         8     /* RECALLs remembered for grants still on their way */
#define CHILD_REQ_INITIAL      4     /* request entries at open */
#define SUP_CHILD_LEASE_TTL_MS 5000  /* T_lease until a WELCOME says otherwise */
/* Asking ahead for the next windows (NEXT): a link used within NEXT_ACTIVE_MS asks between
 * NEXT_AHEAD_MIN_MS and NEXT_AHEAD_MAX_MS before its last lease of the windows ends (spread by
 * tenant, so that one supervisor start serves a tenant's links), at most a quarter of that
 * lease's life ahead. */
#define NEXT_ACTIVE_MS    300000
#define NEXT_AHEAD_MIN_MS 30000
#define NEXT_AHEAD_MAX_MS 240000

/* PARKED: a kept lease left to the next incarnation when the child closes while idle: written
 * with its exact use, never reported, resumed by the next open. */
enum child_lease_state { CL_FREE = 0, CL_LIVE, CL_RETIRED, CL_PARKED };

struct child_lease {
    enum child_lease_state state;
    uint64_t id;
    int64_t n, used;
    int64_t ttl_ms, sent_mono, deadline_mono, deadline_wall, got_mono;
    int64_t mark_durable, mark_want, mark_sent; /* strict mode: reserved_upto */
    int64_t mark_first; /* the mark its first row was written with; 0 until handed out */
    bool row_durable;   /* a row of it is durable: admissions wait for mark_durable */
    bool pass;          /* a pass-through grant */
    bool keep;          /* granted KEEP: not returned when idle, it lives to its deadline */
    bool edge;          /* its TTL ends at a window boundary, or was cut short: no renewal by age */
    bool last;          /* every window of its path ends at its deadline: not reported then */
    bool foreign;       /* resumed from an earlier incarnation: never reported */
    bool park_due;      /* parked: its row (mark := used) is to be handed out */
    /* Retired: */
    bool report_due; /* n - used must be reported (own incarnation, used < n) */
    bool quiet;      /* used up: reported only on an ACQUIRE going out anyway (until its deadline),
                        so that the supervisor stops counting it as a holder; nothing to credit */
    uint64_t report_seq; /* the request carrying the report, 0 = none yet */
    bool recalled;       /* retired by a RECALL or a configuration recall */
    bool row;            /* a row may exist in the file */
    bool delete_due;     /* a DELETE is to be handed out */
    int64_t *use;        /* its exact use counter (sup_child_counters), NULL = none */
    int64_t start_mono;  /* a NEXT lease: not usable before this (its windows start); 0 once
                            a timer has seen it start */
};

/* The mark a lease's first row carries: the wanted one until that row is handed out. */
static inline int64_t
child_first_mark(const struct child_lease *cl)
{
    return cl->mark_first > 0 ? cl->mark_first : cl->mark_want;
}

struct child_link {
    char id[PROTO_LEASE_LINK_BUF];
    struct child_lease l[CHILD_LEASES];
    bool acq_due;      /* an ACQUIRE is wanted */
    int64_t acq_need;  /* its need (0 = prefetch) */
    uint64_t acq_seq;  /* the ACQUIRE in flight, 0 = none */
    bool acq_next;     /* the wanted ACQUIRE asks ahead for the next windows (NEXT) */
    uint64_t next_for; /* the LAST lease a NEXT was asked for, 0 = none */
    /* Cached refusals (envoy's over-limit cache): */
    int64_t deny_until, deny_cost, deny_limit;
    uint8_t deny_scope;
    bool deny_never;
    int64_t unauth_until, unavail_until;
    bool pass; /* near exhaustion: no prefetch */
    /* Sizing: */
    int64_t l_slow, rate_milli, acc, rate_since, last_use;
    /* Degraded admissions not yet charged: */
    int64_t debt_new, debt_sent;
    /* Scheduling (child_sched.c): */
    bool in_msgq, in_pq; /* in the message / write queue */
    int64_t timer_at;    /* its entry in the timer heap, INT64_MAX = none */
};

/* Links that may have a message (msgq) or a write (pq) to hand out; each link at most once. */
struct child_queue {
    uint32_t *item;
    uint32_t len, cap;
};

struct child_timer {
    int64_t at;
    uint32_t link;
};

struct child_req {
    uint64_t seq;                   /* 0 = free */
    int32_t link;                   /* index into links, -1 = none */
    int64_t first_mono, first_wall; /* first send; -1 until sent */
    int64_t next_mono, backoff;
    bool cancelled; /* SLOT_ACQUIRE given up by the caller */
    uint64_t report_lease;
    int64_t debt;
    int32_t hb_link[PROTO_LEASE_HB_MAX];
    int64_t hb_debt[PROTO_LEASE_HB_MAX];
    struct proto_lease_msg msg; /* exactly what is sent, again and again */
};

struct sup_child {
    char tenant[TENANT_NAME_MAX + 1];
    struct tenant_endpoint policy;
    uint64_t incarnation;
    bool persist_marks;
    struct sup_child_counters counters; /* bind NULL = none */
    int64_t wait_ms, idle_ms, heartbeat_ms, retransmit_ms, unreachable_ms, renew_ms, lead_ms;
    int64_t next_ahead_ppm; /* where in its range this tenant asks ahead (NEXT), in ppm */
    int64_t epsilon_ppm, epsilon_long_ppm, mark_chunk_min, mark_lead_ms, l_min, l_max;

    struct child_link **links;
    uint32_t max_links, link_count;
    uint32_t links_max; /* links_grow stops here: TALLY_EFULL */
    uint32_t link_hw;   /* links[link_hw..] are all NULL */
    struct tenant_index link_index;
    struct child_queue msgq, pq;
    struct child_timer *heap;
    uint32_t heap_len, heap_cap;
    int64_t debt_total; /* sum of the links' debt_new */
    int64_t last_use;   /* latest last_use of any link */

    /* Requests in flight: a table grown (doubling) from CHILD_REQ_INITIAL entries up to
     * SUP_CHILD_INFLIGHT when all are busy, so a quiet child stays small. Entries move when
     * it grows: no pointer to one is kept across sup__child_req_new. */
    struct child_req *req;
    uint32_t req_cap;
    uint64_t next_seq;   /* last seq handed out */
    uint64_t recall_seq; /* grants answering seqs up to this one are never used (recall) */
    uint64_t recalled[CHILD_RECALLED]; /* lease ids RECALLed before their GRANT arrived (ring) */
    uint32_t recalled_next;
    uint64_t hello_seq; /* the HELLO in flight, 0 = none */
    bool welcomed;      /* WELCOME received for this incarnation */
    bool connected;
    int64_t last_reply_mono;
    int64_t hb_next_mono;
    uint64_t hb_seq;
    uint32_t children;    /* P_known from WELCOME */
    int64_t lease_ttl_ms; /* T_lease from WELCOME: a shorter grant was cut by a window end */

    struct tenant_window_state degraded;
    struct sup_child_stats stats;
};

/* child_core.c */
struct child_link *sup__child_link_find(const sup_child *c, const char *id, int32_t *index);
struct child_link *sup__child_link_get(sup_child *c, const char *id, int64_t now_ms, int *rc,
                                       int32_t *index);
bool sup__child_reachable(const sup_child *c, int64_t now_mono);

/** Gives lease `cl` of `k` its exact use counter, when the host keeps them; a resumed lease
 *  takes what the host knows it admitted exactly (at most its mark) as its use. */
void sup__child_use_bind(sup_child *c, const struct child_link *k, struct child_lease *cl);
/** Gives the counter of `cl` back (a lease whose row is gone, or a child closing). */
void sup__child_use_unbind(sup_child *c, struct child_lease *cl);

/* What `cl` admitted, into its counter: a plain store, before the answer leaves. */
static inline void
sup__child_use_note(const struct child_lease *cl)
{
    if (cl->use != NULL)
        __atomic_store_n(cl->use, cl->used, __ATOMIC_RELEASE);
}

/* child_admit.c */
/** Retires lease `cl` of `k`: no further use; reported if it was ours and not used up. */
void sup__child_retire(sup_child *c, struct child_link *k, struct child_lease *cl);
/** Expires leases past their deadline; frees retired ones with nothing left to do. */
void sup__child_link_roll(sup_child *c, struct child_link *k, int64_t now_mono);
/** The size to ask for on `k`. */
int64_t sup__child_want(const sup_child *c, const struct child_link *k, int64_t need);
void sup__child_rate_update(struct child_link *k, int64_t now_mono);
/** Asks for an ACQUIRE on `k` with at least `need`, unless one is wanted or in flight. */
void sup__child_want_acquire(struct child_link *k, int64_t need);
/** How much earlier than its TTL says a child stops using a lease of `ttl_ms`: the drift bound
 *  (epsilon over the first T_lease, epsilon_long beyond) plus one tick. */
int64_t sup__child_drift_margin(const sup_child *c, int64_t ttl_ms);
/** A NEXT grant `g` (asked at sent_mono, already placed) moves the end of the link's live LAST
 *  lease to the end it names, less the drift bound over the wait alone (child_sched.c). */
void sup__child_last_end_from_next(const sup_child *c, struct child_link *k,
                                   const struct proto_lease_grant *g, int64_t sent_mono,
                                   int64_t now_mono);
/** Places a granted lease (retired at once, and reported, if it arrived dead). TALLY_OK, or
 *  TALLY_EFULL when every entry of `k` is live or waiting for its row's DELETE: nothing was
 *  placed and the caller must hand the lease back. */
TALLY_MUST_CHECK int sup__child_lease_add(sup_child *c, struct child_link *k,
                                          const struct proto_lease_grant *g,
                                          const struct child_req *r, int64_t now_mono);
struct child_lease *sup__child_lease_by_id(struct child_link *k, uint64_t id);
/** A RECALL of lease `id` on `k` (NULL when the link is unknown): a live lease of this
 *  incarnation is retired and reported; one not granted yet is retired when its GRANT arrives;
 *  anything else (retired already, a duplicate) changes nothing. */
void sup__child_lease_recall(sup_child *c, struct child_link *k, uint64_t id, int64_t now_mono);
/** True iff nothing of `k` would be lost by forgetting it. */
bool sup__child_link_idle(const struct child_link *k);

/* child_sched.c */
bool sup__child_msg_work(const struct child_link *k);
/* A recalled lease with tokens left still waits for its row to go: the link's ACQUIRE waits
 * too, so the supervisor hears the report (and credits it) before it decides the ACQUIRE. */
bool sup__child_acquire_held(const struct child_link *k);
/* child_req.c */
/* True iff a request could go out now: a free entry, or room to grow the table, within the
 * window of seqs. */
bool sup__child_req_room(const sup_child *c);
bool sup__child_persist_work(const struct child_link *k);
/** Puts link `index` in the queues it has work for. */
void sup__child_enqueue(sup_child *c, int32_t index);
/** Re-files link `index` after a change: in the queues it has work for, and its next timer. */
void sup__child_touch(sup_child *c, int32_t index, int64_t now_mono);
/** Removes entry `pos` of queue `q` (the last entry takes its place). */
void sup__child_queue_drop(sup_child *c, struct child_queue *q, uint32_t pos);
/** The earliest timer entry (maybe stale, never late), INT64_MAX when none. */
int64_t sup__child_timer_next(const sup_child *c);
/** Sizes the queues for a table of `links`. TALLY_OK or TALLY_ENOMEM. */
int sup__child_sched_size(sup_child *c, uint32_t links);
void sup__child_sched_free(sup_child *c);

/* child_wire.c */
/** The request in flight with `seq`, NULL when none. */
struct child_req *sup__child_req_find(sup_child *c, uint64_t seq);
struct child_req *sup__child_req_new(sup_child *c, uint8_t type, int32_t link, int64_t now_mono);

#endif /* SUP_CHILD_INT_H */

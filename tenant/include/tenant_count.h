/*
 * tenant_count: the counting arithmetic of docs/DESIGN.md §3, shared by the supervisor, the child
 * counters, the degraded fallback and the tests. Fixed windows anchored to the wall clock, GCRA,
 * concurrency slots, and a path evaluator that decides every budget of a request at once.
 *
 * Header-wide rules:
 * - Times are int64_t milliseconds of wall clock (`now_ms`), always passed in: nothing here reads
 *   a clock, does I/O or allocates. State lives in caller-owned structs: window and GCRA states
 *   are int64_t fields only (plain old data: the store persists them as they are, a child counter
 *   embeds them), a slot table points at a caller-owned array of int64_t pairs. A zeroed window
 *   or GCRA state is a fresh key.
 * - Reentrant, no globals. A state struct belongs to one thread at a time (no locks inside).
 * - Pointers passed in are borrowed for the call; results go to out-parameters marked OUT.
 * - A refusal is a result, not an error: check and decide functions return TALLY_OK and fill the
 *   verdict or decision. Errors are for bad arguments only: TALLY_ECOST (cost outside
 *   1..TENANT_COST_MAX), TALLY_EOVERFLOW (a limit, period, burst, TTL or time above its bound),
 *   TALLY_EINVAL (anything else malformed, e.g. n < 1, two limits with one period, a state that
 *   contradicts itself). On error the state is untouched and OUT values are unspecified.
 * - Backward clocks: every state keeps a high-water mark `last_now_ms`, advanced by charges, and
 *   the arithmetic runs at eval_ms = max(now_ms, last_now_ms) (nginx clamps negative elapsed time
 *   the same way). So window ids in a state never decrease and a clock stepping back opens no
 *   second allowance. A refusal changes no state at all, high-water mark included, so "refused
 *   means untouched" holds byte for byte. Retry-After is still measured from the caller's now_ms.
 * - Limits are matched to state entries by period, not by position, so adding or removing a
 *   limit keeps the counts of the others. A limit whose period is new starts fresh; a month on
 *   a new billing day takes over the running month's count (tenant_window_carry).
 * - GCRA takes no month limit (TALLY_EINVAL): its emission interval needs a fixed length.
 * - Bounds: now_ms in 0..TENANT_TIME_MAX_MS; n and cost 1..2^32; periods 1 ms..365 d (the parser
 *   further asks for whole seconds). Every product that could overflow int64 is checked or done
 *   in 128 bits, so any input inside these bounds is exact and any outside is an error.
 */
#ifndef TENANT_COUNT_H
#define TENANT_COUNT_H

#include <stdbool.h>
#include <stdint.h>

#include "tally_common.h"
#include "tenant.h"

/* Latest now_ms accepted (2^53 - 1 ms, some 285,000 years after 1970): TALLY_EOVERFLOW above. */
#define TENANT_TIME_MAX_MS ((int64_t)9007199254740991)
/* retry_after_ms of a bound that can never admit this cost (cost above its limit or burst). */
#define TENANT_RETRY_NEVER ((int64_t)-1)
/* limit and remaining of a decision that no bound constrains. */
#define TENANT_UNBOUNDED ((int64_t)-1)
/* A concurrency slot frees itself this long after it was acquired (docs/DESIGN.md §3). */
#define TENANT_SLOT_TTL_MS_DEFAULT ((int64_t)30000)
/* Budgets along one request's path: plan, link, endpoint for tenant, endpoint for link, spare. */
#define TENANT_PATH_MAX_BUDGETS 5

/* Which budget a decision speaks for. */
enum tenant_scope {
    TENANT_SCOPE_NONE = 0,
    TENANT_SCOPE_PLAN,
    TENANT_SCOPE_LINK,
    TENANT_SCOPE_ENDPOINT_TENANT,
    TENANT_SCOPE_ENDPOINT_LINK,
    TENANT_SCOPE_CONCURRENCY,
    TENANT_SCOPE_CALLER, /* a budget of an endpoint keyed by caller (tenant_callers.h) */
};

/** Wire name of a scope (docs/DESIGN.md §2): "none", "plan", "link", "endpoint" (both endpoint
 * scopes), "concurrency", "caller"; "unknown" otherwise. Static storage. */
const char *tenant_scope_name(enum tenant_scope scope);

/** Whole seconds for an HTTP Retry-After: ceil(retry_after_ms / 1000), at least 1 when ms > 0,
 *  0 when 0, -1 for TENANT_RETRY_NEVER or any negative input. Rounding up keeps it honest: a
 *  retry after that many seconds is admitted if nothing else was charged meanwhile. */
int64_t tenant_retry_after_seconds(int64_t retry_after_ms);

/** Fixed window holding now_ms: floor(now_ms / period_ms); for a month (tenant.h), the months
 *  since January 1970 up to the one whose billing day last passed, plus one. Non-decreasing in
 *  now_ms. -1 when now_ms < 0 or period_ms < 1. */
int64_t tenant_window_id(int64_t now_ms, int64_t period_ms);
/** First instant after window `window_id`: (window_id + 1) * period_ms; for a month, 00:00 UTC
 *  of the next billing day. -1 when an argument is negative, period_ms < 1, or it overflows. */
int64_t tenant_window_end_ms(int64_t window_id, int64_t period_ms);
/** The window of `to_period_ms` into which what `from_period_ms` counted in `window_id`
 *  carries when the period changes at eval_ms: window_id itself for the same period; for
 *  months on two billing days, the new day's month at eval_ms when window_id is the old day's
 *  month at eval_ms (or later), so a new billing day never hands out a second allowance; -1
 *  when nothing carries. */
int64_t tenant_window_carry(int64_t from_period_ms, int64_t window_id, int64_t to_period_ms,
                            int64_t eval_ms);

/* One bound (one limit of a list, or the slot count) as evaluated by a check. */
struct tenant_bound {
    int64_t limit;          /* N tokens per period; K for slots */
    int64_t period_ms;      /* the limit's period; 0 for slots */
    int64_t remaining;      /* tokens this bound could still admit now, after the charge when
                               admitted, before it otherwise; never negative */
    int64_t reset_ms;       /* wall-clock instant the bound is whole again: window end; GCRA
                               theoretical arrival time; earliest slot expiry (eval_ms if none) */
    int64_t retry_after_ms; /* 0 admits; > 0 ms until this bound admits the cost;
                               TENANT_RETRY_NEVER when it never can */
};

/* What a check says about one budget. */
struct tenant_verdict {
    bool admitted;          /* every bound admits the cost */
    bool never;             /* refused by a bound that can never admit this cost */
    uint32_t count;         /* bounds evaluated (the limit count; 1 for slots) */
    uint32_t bound;         /* refused: the refusing bound with the longest wait (a never-bound
                               wins, first in order on ties); admitted: the tightest bound
                               (least remaining, then latest reset). 0 when count is 0 */
    int64_t eval_ms;        /* max(now_ms, state's last_now_ms): the instant evaluated */
    int64_t retry_after_ms; /* 0 when admitted; else v[bound].retry_after_ms */
    struct tenant_bound v[TENANT_MAX_WINDOWS]; /* v[0..count-1]; the rest unspecified */
};

/* Fixed windows -------------------------------------------------------------------------------- */

/* Counts per limit, in limit order after each charge. Zeroed = fresh. */
struct tenant_window_state {
    int64_t period_ms[TENANT_MAX_WINDOWS]; /* which limit the entry counts for (0 = unused) */
    int64_t window_id[TENANT_MAX_WINDOWS]; /* floor(eval_ms / period_ms) of the last charge */
    int64_t used[TENANT_MAX_WINDOWS];      /* tokens charged in that window */
    int64_t last_now_ms;                   /* high-water mark of the clock */
};

/** Decides whether `cost` fits every window of `ls` at now_ms, without charging: bound i admits
 *  iff used_i + cost <= n_i in window floor(eval_ms / period_i); a refusal waits for that window's
 *  end (never when cost > n_i). Fills *out. TALLY_OK (refused or not) or an error. */
TALLY_MUST_CHECK int tenant_window_check(const struct tenant_limits *ls,
                                         const struct tenant_window_state *st, int64_t now_ms,
                                         int64_t cost, struct tenant_verdict *out /* OUT */);
/** Charges `cost` to every window of `ls` at now_ms, rolling windows over and advancing the
 *  high-water mark, whether or not the cost fits (debt may exceed n, which then refuses until the
 *  window ends). Call after an admitting check with the same arguments to admit. TALLY_OK, or an
 *  error with *st untouched (TALLY_EOVERFLOW if a count would pass INT64_MAX). */
TALLY_MUST_CHECK int tenant_window_charge(const struct tenant_limits *ls,
                                          struct tenant_window_state *st, int64_t now_ms,
                                          int64_t cost);
/** Check, then charge if admitted. */
TALLY_MUST_CHECK int tenant_window_decide(const struct tenant_limits *ls,
                                          struct tenant_window_state *st, int64_t now_ms,
                                          int64_t cost, struct tenant_verdict *out /* OUT */);

/* GCRA ----------------------------------------------------------------------------------------- */

/*
 * Each limit n/period has its own theoretical arrival time (TAT). Emission interval T = period/n
 * and burst b tokens (default b = n, i.e. tolerance tau = (b - 1) * T = period - T: a fresh key may
 * spend n at once, then n per period, evenly). A cost c admits iff max(TAT, t) + c*T - t <= b*T,
 * and then TAT = max(TAT, t) + c*T. Exact: TAT is kept as tat_ms + tat_frac / n ms, so T = period/n
 * is never rounded; only instants handed out (reset_ms, retry) are rounded, up to the next whole
 * ms, which is when the bound first admits. Hence over any interval of length t the admitted cost
 * is at most floor(t / T) + b = floor((t + tau) / T) + 1 tokens. Burst is bounded by
 * b * T <= TENANT_LIMIT_MAX_PERIOD_MS (TALLY_EOVERFLOW above). When a limit's n changes, its TAT
 * is rounded up to the new denominator (stricter by less than one emission interval).
 */
struct tenant_gcra_state {
    int64_t period_ms[TENANT_MAX_WINDOWS]; /* which limit the entry is for (0 = unused) */
    int64_t n[TENANT_MAX_WINDOWS];         /* denominator of tat_frac */
    int64_t tat_ms[TENANT_MAX_WINDOWS];    /* TAT = tat_ms + tat_frac / n milliseconds */
    int64_t tat_frac[TENANT_MAX_WINDOWS];  /* 0..n-1 */
    int64_t last_now_ms;                   /* high-water mark of the clock */
};

/** Decides `cost` against every limit of `ls` without charging. `burst` (borrowed, may be NULL)
 *  holds TENANT_MAX_WINDOWS bursts indexed like ls->v, 0 meaning the default n. Fills *out:
 *  remaining = whole tokens admissible at eval_ms, reset_ms = TAT rounded up, a refusal waits until
 *  the first whole ms that admits (never when cost > b). TALLY_OK (refused or not) or an error. */
TALLY_MUST_CHECK int tenant_gcra_check(const struct tenant_limits *ls, const int64_t *burst,
                                       const struct tenant_gcra_state *st, int64_t now_ms,
                                       int64_t cost, struct tenant_verdict *out /* OUT */);
/** Charges `cost` to every limit (TAT = max(TAT, eval) + cost*T) and advances the high-water
 *  mark, whether or not it fits (debt pushes TAT ahead). Call after an admitting check with the
 *  same arguments to admit. TALLY_OK, or an error with *st untouched. */
TALLY_MUST_CHECK int tenant_gcra_charge(const struct tenant_limits *ls, const int64_t *burst,
                                        struct tenant_gcra_state *st, int64_t now_ms, int64_t cost);
/** Check, then charge if admitted. */
TALLY_MUST_CHECK int tenant_gcra_decide(const struct tenant_limits *ls, const int64_t *burst,
                                        struct tenant_gcra_state *st, int64_t now_ms, int64_t cost,
                                        struct tenant_verdict *out /* OUT */);

/* Concurrency slots ---------------------------------------------------------------------------- */

/* One entry of a slot table; id 0 means free. A held slot frees itself at expires_ms. */
struct tenant_slot {
    int64_t id;
    int64_t expires_ms;
};

/*
 * Slots of one link: a caller-owned array of `capacity` entries sized at setup (at most
 * TENANT_CONCURRENCY_MAX), plus a counter for ids (unique, increasing from 1) and the clock's
 * high-water mark. Expiry is lazy: a slot whose expires_ms <= eval_ms counts as free everywhere
 * and is cleared by the next charge. The limit K is passed per call (plans change); K must be
 * 1..capacity. Cost O(capacity) per call. To persist a table, keep next_id, last_now_ms and v[].
 */
struct tenant_slot_table {
    int64_t next_id;       /* last id handed out */
    int64_t last_now_ms;   /* high-water mark of the clock */
    int64_t capacity;      /* entries in v */
    struct tenant_slot *v; /* borrowed; valid as long as the table is used */
};

/** Sets up `t` over `v` (borrowed, `capacity` entries, zeroed here). TALLY_OK, or TALLY_EINVAL
 *  when v is NULL or capacity is outside 1..TENANT_CONCURRENCY_MAX. */
TALLY_MUST_CHECK int tenant_slot_table_init(struct tenant_slot_table *t, struct tenant_slot *v,
                                            int64_t capacity);
/** Slots held at now_ms (expired ones excluded); -1 on bad arguments. */
int64_t tenant_slot_held(const struct tenant_slot_table *t, int64_t now_ms);
/** Decides whether one more slot fits under `limit` at now_ms, without taking it. A refusal
 *  waits until enough held slots expire to leave room: the earliest expiry, unless K was lowered
 *  below the count held. TALLY_OK (refused or not) or an error. */
TALLY_MUST_CHECK int tenant_slot_check(const struct tenant_slot_table *t, int64_t limit,
                                       int64_t now_ms, struct tenant_verdict *out /* OUT */);
/** Takes a slot until now_ms + ttl_ms (ttl_ms 0 = TENANT_SLOT_TTL_MS_DEFAULT) whatever the limit
 *  (WAL replay may need that), clearing expired slots first. *slot_id gets the new id. TALLY_OK,
 *  or TALLY_EOVERFLOW when every entry is held or the id counter is exhausted. */
TALLY_MUST_CHECK int tenant_slot_charge(struct tenant_slot_table *t, int64_t now_ms, int64_t ttl_ms,
                                        int64_t *slot_id /* OUT */);
/** Check against `limit`, then charge if admitted. *slot_id is 0 when refused. The TTL and the
 *  id counter are validated before the check, so an admitting verdict always comes with a slot. */
TALLY_MUST_CHECK int tenant_slot_acquire(struct tenant_slot_table *t, int64_t limit, int64_t now_ms,
                                         int64_t ttl_ms, int64_t *slot_id /* OUT */,
                                         struct tenant_verdict *out /* OUT */);
/** Frees slot `slot_id`, idempotently. True iff a held, unexpired slot was freed (only its entry
 *  changes); false, with nothing changed, for an unknown, released or expired id, or bad
 *  arguments. */
bool tenant_slot_release(struct tenant_slot_table *t, int64_t slot_id, int64_t now_ms);

/* Path: every budget a request touches, all or nothing ----------------------------------------- */

/* One budget: its limits, algorithm and state. Set up with tenant_budget_init. */
struct tenant_budget {
    enum tenant_scope scope; /* PLAN, LINK, ENDPOINT_TENANT or ENDPOINT_LINK */
    enum tenant_algorithm algorithm;
    struct tenant_limits limits;       /* count 0: the budget admits everything */
    int64_t burst[TENANT_MAX_WINDOWS]; /* GCRA bursts indexed like limits.v; 0 = n */
    union {
        struct tenant_window_state window;
        struct tenant_gcra_state gcra;
    } st;
};

/** Sets `b` to a fresh budget of `ls` (copied) with default bursts. TALLY_OK, or TALLY_EINVAL /
 *  TALLY_EOVERFLOW when the scope, algorithm or limits are invalid. */
TALLY_MUST_CHECK int tenant_budget_init(struct tenant_budget *b, enum tenant_scope scope,
                                        enum tenant_algorithm algorithm,
                                        const struct tenant_limits *ls);

/* The budgets of one request, widest first by convention (plan, link, endpoint...). */
struct tenant_path {
    struct tenant_budget *budgets[TENANT_PATH_MAX_BUDGETS]; /* borrowed, count of them */
    uint32_t count;
    struct tenant_slot_table *slots; /* borrowed; NULL when the endpoint is not expensive */
    int64_t slot_limit;              /* K, 1..slots->capacity, when slots is set */
    int64_t slot_ttl_ms;             /* 0 = TENANT_SLOT_TTL_MS_DEFAULT */
};

/* The answer for one request. */
struct tenant_decision {
    bool admitted;
    bool never;              /* refused by a bound that can never admit this cost */
    enum tenant_scope scope; /* refused: the scope that fired; admitted: the tightest bound's;
                                NONE when no bound applies */
    uint32_t budget_index;   /* index in path->budgets of that bound; path->count for the slot */
    uint32_t bound_index;    /* index of the limit within that budget */
    int64_t retry_after_ms;  /* 0 when admitted; the longest wait among refusing bounds;
                                TENANT_RETRY_NEVER when one of them can never admit */
    int64_t limit;           /* that bound's limit, TENANT_UNBOUNDED when scope is NONE */
    int64_t period_ms;       /* that bound's period (0 for slots and NONE) */
    int64_t remaining;       /* that bound's remaining: admitted, the least remaining over every
                                bound after the charge; TENANT_UNBOUNDED when scope is NONE */
    int64_t reset_ms;        /* that bound's reset instant (0 when scope is NONE) */
    int64_t slot_id;         /* slot acquired, 0 when none */
    struct tenant_verdict budget[TENANT_PATH_MAX_BUDGETS]; /* per budget, as checked */
    struct tenant_verdict slot;                            /* count 0 when no slot table */
};

/** Decides `cost` on every budget of `p` and the slot table at now_ms, all or nothing: if every
 *  bound admits, charges every budget and takes a slot; if any refuses, nothing anywhere changes
 *  (no count, no high-water mark, no slot). TALLY_OK with *out filled, refused or not; errors for
 *  bad arguments only, with nothing changed. No allocation, no clock read. */
TALLY_MUST_CHECK int tenant_path_decide(struct tenant_path *p, int64_t now_ms, int64_t cost,
                                        struct tenant_decision *out /* OUT */);

#endif /* TENANT_COUNT_H */

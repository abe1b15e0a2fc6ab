/*
 * GCRA, the generic cell rate algorithm (docs/DESIGN.md §3, as in redis-cell): each limit n/period
 * keeps a theoretical arrival time TAT; emission interval T = period/n, burst b tokens (default
 * n). A cost c admits iff max(TAT, t) + c*T - t <= b*T, then TAT = max(TAT, t) + c*T.
 *
 * Exactness: T = period/n is a fraction of a millisecond for large n, so the arithmetic runs in
 * ticks of 1/n ms, where T is exactly `period` ticks. An instant in ticks needs up to
 * 53 + 32 bits, so it is held in a 128-bit integer inside a call and stored as
 * tat_ms + tat_frac/n. Nothing is rounded except the instants handed out (reset, retry), which
 * round up to the first whole millisecond at which the condition holds: the admitted cost over
 * any interval of length t is at most floor(t/T) + b, and the announced retry is exact.
 */
#include "count_int.h"

#include <string.h>

#if !defined(__SIZEOF_INT128__)
#error "tenant GCRA needs a 128-bit integer type (gcc or clang on a 64-bit target)"
#endif
__extension__ typedef __int128 i128;

/* Stored TATs stay below this (ms), so a debt can be carried without overflow anywhere. */
#define GCRA_TAT_MAX_MS ((int64_t)1 << 62)

/* One limit at one instant, in ticks of 1/n ms. */
struct gcra_bound {
    int64_t n;
    int64_t period_ms; /* T in ticks */
    int64_t burst;     /* b */
    i128 now_ticks;    /* eval_ms * n */
    i128 tat_ticks;    /* TAT, 0 for a fresh key */
};

/* Smallest whole ms at or after `ticks` (>= 0). */
static int64_t
ticks_to_ms_up(i128 ticks, int64_t n)
{
    return (int64_t)((ticks + n - 1) / n);
}

/* Tokens of 1 admissible at `now_ticks` given `tat`: floor((b*T - max(tat - now, 0)) / T). */
static int64_t
gcra_remaining(const struct gcra_bound *g, i128 tat_ticks)
{
    i128 delay = tat_ticks > g->now_ticks ? tat_ticks - g->now_ticks : 0;
    i128 room = (i128)g->burst * g->period_ms - delay;

    return room > 0 ? (int64_t)(room / g->period_ms) : 0;
}

/* Burst of limit i: 0 means n; b*T may span at most a year. */
static int
gcra_burst(const struct tenant_limit *l, const int64_t *burst, uint32_t i, int64_t *out)
{
    int64_t b = burst == NULL || burst[i] == 0 ? l->n : burst[i];

    if (b < 0)
        return TALLY_EINVAL;
    if (b > TENANT_LIMIT_MAX_N || (i128)b * l->period_ms > (i128)l->n * TENANT__SPAN_MAX_MS)
        return TALLY_EOVERFLOW;
    *out = b;
    return TALLY_OK;
}

/*
 * Fills `g` for limit i of `ls` at eval_ms from the entry of `st` with the same period. A TAT
 * stored under another n is rounded up to the new denominator (never earlier). TALLY_EINVAL for
 * an entry that cannot have been written by a charge.
 */
static int
gcra_load(const struct tenant_limits *ls, const int64_t *burst, const struct tenant_gcra_state *st,
          uint32_t i, int64_t eval_ms, struct gcra_bound *g /* OUT */)
{
    const struct tenant_limit *l = &ls->v[i];
    int rc = gcra_burst(l, burst, i, &g->burst);

    if (rc != TALLY_OK)
        return rc;
    g->n = l->n;
    g->period_ms = l->period_ms;
    g->now_ticks = (i128)eval_ms * l->n;
    g->tat_ticks = 0;
    for (uint32_t j = 0; j < TENANT_MAX_WINDOWS; j++) {
        int64_t n_old = st->n[j], frac = st->tat_frac[j];

        if (st->period_ms[j] != l->period_ms)
            continue;
        if (n_old < 1 || n_old > TENANT_LIMIT_MAX_N || frac < 0 || frac >= n_old ||
            st->tat_ms[j] < 0 || st->tat_ms[j] > GCRA_TAT_MAX_MS)
            return TALLY_EINVAL;
        g->tat_ticks = (i128)st->tat_ms[j] * l->n;
        if (n_old == l->n)
            g->tat_ticks += frac;
        else
            g->tat_ticks += ((i128)frac * l->n + n_old - 1) / n_old;
        break;
    }
    return TALLY_OK;
}

static int
gcra_check_args(const struct tenant_limits *ls, const struct tenant_gcra_state *st, int64_t now_ms,
                int64_t cost)
{
    int rc = tenant__count_check_args(ls, now_ms, cost);

    if (rc == TALLY_OK)
        rc = tenant__count_check_no_month(ls);
    if (rc == TALLY_OK && st == NULL)
        rc = TALLY_EINVAL;
    if (rc == TALLY_OK)
        rc = tenant__count_check_high_water(st->last_now_ms);
    return rc;
}

int
tenant_gcra_check(const struct tenant_limits *ls, const int64_t *burst,
                  const struct tenant_gcra_state *st, int64_t now_ms, int64_t cost,
                  struct tenant_verdict *out)
{
    int rc = gcra_check_args(ls, st, now_ms, cost);
    int64_t eval_ms;

    if (rc == TALLY_OK && out == NULL)
        rc = TALLY_EINVAL;
    if (rc != TALLY_OK)
        return rc;

    eval_ms = tenant__count_eval_ms(now_ms, st->last_now_ms);
    out->count = ls->count;
    out->eval_ms = eval_ms;
    for (uint32_t i = 0; i < ls->count; i++) {
        struct tenant_bound *b = &out->v[i];
        struct gcra_bound g;
        i128 base, inc, limit_ticks;

        rc = gcra_load(ls, burst, st, i, eval_ms, &g);
        if (rc != TALLY_OK)
            return rc;
        base = g.tat_ticks > g.now_ticks ? g.tat_ticks : g.now_ticks;
        inc = (i128)cost * g.period_ms;
        limit_ticks = (i128)g.burst * g.period_ms;
        b->limit = g.n;
        b->period_ms = g.period_ms;
        if (base - g.now_ticks + inc <= limit_ticks) {
            b->remaining = gcra_remaining(&g, base + inc);
            b->reset_ms = ticks_to_ms_up(base + inc, g.n);
            b->retry_after_ms = 0;
        } else {
            b->remaining = gcra_remaining(&g, g.tat_ticks);
            b->reset_ms = ticks_to_ms_up(base, g.n);
            /* Admits from the first ms t with t*n >= TAT - (b - c)*T; that t is > eval_ms. */
            b->retry_after_ms = cost > g.burst
                                    ? TENANT_RETRY_NEVER
                                    : ticks_to_ms_up(base - limit_ticks + inc, g.n) - now_ms;
        }
    }
    tenant__count_verdict_finish(out);
    return TALLY_OK;
}

int
tenant_gcra_charge(const struct tenant_limits *ls, const int64_t *burst,
                   struct tenant_gcra_state *st, int64_t now_ms, int64_t cost)
{
    struct tenant_gcra_state next;
    int rc = gcra_check_args(ls, st, now_ms, cost);
    int64_t eval_ms;

    if (rc != TALLY_OK)
        return rc;

    /* Built aside and copied at the end, so an error leaves *st as it was. */
    memset(&next, 0, sizeof(next));
    eval_ms = tenant__count_eval_ms(now_ms, st->last_now_ms);
    for (uint32_t i = 0; i < ls->count; i++) {
        struct gcra_bound g;
        i128 tat;

        rc = gcra_load(ls, burst, st, i, eval_ms, &g);
        if (rc != TALLY_OK)
            return rc;
        tat = (g.tat_ticks > g.now_ticks ? g.tat_ticks : g.now_ticks) + (i128)cost * g.period_ms;
        if (tat / g.n > GCRA_TAT_MAX_MS)
            return TALLY_EOVERFLOW;
        next.period_ms[i] = g.period_ms;
        next.n[i] = g.n;
        next.tat_ms[i] = (int64_t)(tat / g.n);
        next.tat_frac[i] = (int64_t)(tat % g.n);
    }
    next.last_now_ms = eval_ms;
    *st = next;
    return TALLY_OK;
}

int
tenant_gcra_decide(const struct tenant_limits *ls, const int64_t *burst,
                   struct tenant_gcra_state *st, int64_t now_ms, int64_t cost,
                   struct tenant_verdict *out)
{
    int rc = tenant_gcra_check(ls, burst, st, now_ms, cost, out);

    if (rc == TALLY_OK && out->admitted)
        rc = tenant_gcra_charge(ls, burst, st, now_ms, cost);
    return rc;
}

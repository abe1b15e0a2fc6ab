/*
 * Fixed windows anchored to the wall clock (docs/DESIGN.md §3): limit n/period counts the tokens
 * charged in window floor(eval_ms / period) and admits a cost iff it still fits, in every limit
 * at once. A refusal waits for the end of the window that refused (the longest such wait among
 * refusing limits), and is exact: a retry at that instant is admitted, a millisecond earlier is
 * not. Across a boundary up to 2n fit within one period; a longer limit of the same list still
 * binds. Calendar months (`N/month`) take their ids and ends from count_month.c. The clock runs at
 * max(now, high-water mark), so window ids in the state never go back.
 */
#include "count_int.h"

#include <string.h>

int64_t
tenant_window_id(int64_t now_ms, int64_t period_ms)
{
    if (now_ms < 0 || period_ms < 1)
        return -1;
    if (tenant_period_is_month(period_ms))
        return tenant__month_window_id(now_ms, period_ms - TENANT_MONTH_MS);
    return now_ms / period_ms; /* floor: both are non-negative */
}

int64_t
tenant_window_end_ms(int64_t window_id, int64_t period_ms)
{
    int64_t end_ms;

    if (window_id < 0 || period_ms < 1 || window_id == INT64_MAX)
        return -1;
    if (tenant_period_is_month(period_ms))
        return tenant__month_window_end_ms(window_id, period_ms - TENANT_MONTH_MS);
    if (__builtin_mul_overflow(window_id + 1, period_ms, &end_ms))
        return -1;
    return end_ms;
}

/*
 * Tokens already charged to limit `l` in the window holding eval_ms, from the entry of `st` with
 * the same period (0 when there is none or it belongs to an earlier window). An entry of a month
 * on another billing day moves into the new day's month of its last charge (the state's
 * high-water mark, tenant_window_carry), and counts if that month is still the one at eval_ms.
 * TALLY_EINVAL when the entry contradicts the high-water mark (a window after eval_ms) or has a
 * negative count.
 */
static int
window_used(const struct tenant_window_state *st, const struct tenant_limit *l, int64_t window_id,
            int64_t *used /* OUT */)
{
    *used = 0;
    for (uint32_t j = 0; j < TENANT_MAX_WINDOWS; j++) {
        if (!tenant_periods_match(st->period_ms[j], l->period_ms))
            continue;
        if (st->used[j] < 0)
            return TALLY_EINVAL;
        if (st->period_ms[j] != l->period_ms) {
            if (tenant_window_carry(st->period_ms[j], st->window_id[j], l->period_ms,
                                    st->last_now_ms) == window_id)
                *used = st->used[j];
            return TALLY_OK;
        }
        if (st->window_id[j] > window_id)
            return TALLY_EINVAL;
        if (st->window_id[j] == window_id)
            *used = st->used[j];
        return TALLY_OK;
    }
    return TALLY_OK;
}

int
tenant_window_check(const struct tenant_limits *ls, const struct tenant_window_state *st,
                    int64_t now_ms, int64_t cost, struct tenant_verdict *out)
{
    int rc = tenant__count_check_args(ls, now_ms, cost);
    int64_t eval_ms;

    if (rc == TALLY_OK && (st == NULL || out == NULL))
        rc = TALLY_EINVAL;
    if (rc == TALLY_OK)
        rc = tenant__count_check_high_water(st->last_now_ms);
    if (rc != TALLY_OK)
        return rc;

    eval_ms = tenant__count_eval_ms(now_ms, st->last_now_ms);
    out->count = ls->count;
    out->eval_ms = eval_ms;
    for (uint32_t i = 0; i < ls->count; i++) {
        const struct tenant_limit *l = &ls->v[i];
        struct tenant_bound *b = &out->v[i];
        int64_t window_id = tenant_window_id(eval_ms, l->period_ms);
        int64_t used;

        rc = window_used(st, l, window_id, &used);
        if (rc != TALLY_OK)
            return rc;
        b->limit = l->n;
        b->period_ms = l->period_ms;
        /* eval_ms <= 2^53 and period <= 2^35: the window end cannot overflow. */
        b->reset_ms = tenant_window_end_ms(window_id, l->period_ms);
        if (used <= l->n - cost) {
            b->remaining = l->n - used - cost;
            b->retry_after_ms = 0;
        } else {
            b->remaining = used < l->n ? l->n - used : 0;
            /* A later window starts empty, so anything up to n fits at its start. */
            b->retry_after_ms = cost > l->n ? TENANT_RETRY_NEVER : b->reset_ms - now_ms;
        }
    }
    tenant__count_verdict_finish(out);
    return TALLY_OK;
}

int
tenant_window_charge(const struct tenant_limits *ls, struct tenant_window_state *st, int64_t now_ms,
                     int64_t cost)
{
    struct tenant_window_state next;
    int rc = tenant__count_check_args(ls, now_ms, cost);
    int64_t eval_ms;

    if (rc == TALLY_OK && st == NULL)
        rc = TALLY_EINVAL;
    if (rc == TALLY_OK)
        rc = tenant__count_check_high_water(st->last_now_ms);
    if (rc != TALLY_OK)
        return rc;

    /* Built aside and copied at the end, so an error leaves *st as it was. Entries for limits
     * that are gone are dropped; the rest follow the order of ls. */
    memset(&next, 0, sizeof(next));
    eval_ms = tenant__count_eval_ms(now_ms, st->last_now_ms);
    for (uint32_t i = 0; i < ls->count; i++) {
        const struct tenant_limit *l = &ls->v[i];
        int64_t window_id = tenant_window_id(eval_ms, l->period_ms);
        int64_t used;

        rc = window_used(st, l, window_id, &used);
        if (rc != TALLY_OK)
            return rc;
        if (__builtin_add_overflow(used, cost, &used))
            return TALLY_EOVERFLOW;
        next.period_ms[i] = l->period_ms;
        next.window_id[i] = window_id;
        next.used[i] = used;
    }
    next.last_now_ms = eval_ms;
    *st = next;
    return TALLY_OK;
}

int
tenant_window_decide(const struct tenant_limits *ls, struct tenant_window_state *st, int64_t now_ms,
                     int64_t cost, struct tenant_verdict *out)
{
    int rc = tenant_window_check(ls, st, now_ms, cost, out);

    if (rc == TALLY_OK && out->admitted)
        rc = tenant_window_charge(ls, st, now_ms, cost);
    return rc;
}

/*
 * What every counting algorithm shares: the range checks that keep the arithmetic inside int64
 * (docs/CONVENTIONS.md §3: overflow checked before it happens), the choice of which bound a verdict
 * reports, the small conversions callers print (scope names, Retry-After in seconds), and
 * which periods are calendar months (tenant.h). No state, no clock, no allocation.
 */
#include "count_int.h"

#include <stddef.h>

const char *
tenant_scope_name(enum tenant_scope scope)
{
    switch (scope) {
    case TENANT_SCOPE_NONE:
        return "none";
    case TENANT_SCOPE_PLAN:
        return "plan";
    case TENANT_SCOPE_LINK:
        return "link";
    case TENANT_SCOPE_ENDPOINT_TENANT:
    case TENANT_SCOPE_ENDPOINT_LINK:
        return "endpoint";
    case TENANT_SCOPE_CONCURRENCY:
        return "concurrency";
    case TENANT_SCOPE_CALLER:
        return "caller";
    }
    return "unknown";
}

bool
tenant_period_is_month(int64_t period_ms)
{
    return period_ms > TENANT_MONTH_MS && period_ms <= TENANT_MONTH_MS + TENANT_BILLING_DAY_MAX;
}

int64_t
tenant_month_period(int64_t billing_day)
{
    if (billing_day < 1 || billing_day > TENANT_BILLING_DAY_MAX)
        return -1;
    return TENANT_MONTH_MS + billing_day;
}

bool
tenant_periods_match(int64_t a, int64_t b)
{
    return a == b || (tenant_period_is_month(a) && tenant_period_is_month(b));
}

int64_t
tenant_retry_after_seconds(int64_t retry_after_ms)
{
    if (retry_after_ms < 0)
        return -1;
    /* Written without adding 999 first so INT64_MAX cannot overflow. */
    return retry_after_ms / 1000 + (retry_after_ms % 1000 != 0);
}

int
tenant__count_check_now(int64_t now_ms)
{
    if (now_ms < 0)
        return TALLY_EINVAL;
    if (now_ms > TENANT_TIME_MAX_MS)
        return TALLY_EOVERFLOW;
    return TALLY_OK;
}

int
tenant__count_check_high_water(int64_t last_now_ms)
{
    return last_now_ms >= 0 && last_now_ms <= TENANT_TIME_MAX_MS ? TALLY_OK : TALLY_EINVAL;
}

int
tenant__count_check_cost(int64_t cost)
{
    return cost >= 1 && cost <= TENANT_COST_MAX ? TALLY_OK : TALLY_ECOST;
}

int
tenant__count_check_limits(const struct tenant_limits *ls)
{
    if (ls == NULL || ls->count > TENANT_MAX_WINDOWS)
        return TALLY_EINVAL;
    for (uint32_t i = 0; i < ls->count; i++) {
        const struct tenant_limit *l = &ls->v[i];

        if (l->n < 1 || l->period_ms < 1)
            return TALLY_EINVAL;
        if (l->n > TENANT_LIMIT_MAX_N || l->period_ms > TENANT_LIMIT_MAX_PERIOD_MS)
            return TALLY_EOVERFLOW;
        /* State entries are matched by period: two limits with one period would share one. */
        for (uint32_t j = 0; j < i; j++) {
            if (ls->v[j].period_ms == l->period_ms)
                return TALLY_EINVAL;
        }
    }
    return TALLY_OK;
}

int
tenant__count_check_no_month(const struct tenant_limits *ls)
{
    for (uint32_t i = 0; i < ls->count; i++) {
        if (tenant_period_is_month(ls->v[i].period_ms))
            return TALLY_EINVAL;
    }
    return TALLY_OK;
}

int
tenant__count_check_args(const struct tenant_limits *ls, int64_t now_ms, int64_t cost)
{
    int rc = tenant__count_check_limits(ls);

    if (rc == TALLY_OK)
        rc = tenant__count_check_now(now_ms);
    if (rc == TALLY_OK)
        rc = tenant__count_check_cost(cost);
    return rc;
}

bool
tenant__count_wait_longer(int64_t a, int64_t b)
{
    if (b == TENANT_RETRY_NEVER)
        return false;
    if (a == TENANT_RETRY_NEVER)
        return true;
    return a > b;
}

bool
tenant__count_tighter(const struct tenant_bound *a, const struct tenant_bound *b)
{
    if (a->remaining != b->remaining)
        return a->remaining < b->remaining;
    return a->reset_ms > b->reset_ms;
}

void
tenant__count_verdict_finish(struct tenant_verdict *v)
{
    uint32_t pick = 0;
    bool refused = false;

    /* The longest wait among refusing bounds, else the tightest bound; first wins ties. */
    for (uint32_t i = 0; i < v->count; i++) {
        const struct tenant_bound *b = &v->v[i];

        if (b->retry_after_ms != 0) {
            if (!refused || tenant__count_wait_longer(b->retry_after_ms, v->v[pick].retry_after_ms))
                pick = i;
            refused = true;
        } else if (!refused && tenant__count_tighter(b, &v->v[pick])) {
            pick = i;
        }
    }
    v->admitted = !refused;
    v->bound = pick;
    v->retry_after_ms = refused ? v->v[pick].retry_after_ms : 0;
    v->never = v->retry_after_ms == TENANT_RETRY_NEVER;
}

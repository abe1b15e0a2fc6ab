/*
 * Internals shared by the count_*.c files: argument checks and the choice of the bound a verdict
 * reports. Not installed; include after tenant_count.h.
 */
#ifndef TENANT_COUNT_INT_H
#define TENANT_COUNT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "tenant_count.h"

/* A period, GCRA burst span or slot TTL is at most a year. */
#define TENANT__SPAN_MAX_MS TENANT_LIMIT_MAX_PERIOD_MS

/* max(now_ms, high-water mark): the instant the arithmetic runs at. */
static inline int64_t
tenant__count_eval_ms(int64_t now_ms, int64_t last_now_ms)
{
    return now_ms > last_now_ms ? now_ms : last_now_ms;
}

/** Month window id and end for billing day 1..28 (count_month.c); now_ms >= 0, id >= 0. */
int64_t tenant__month_window_id(int64_t now_ms, int64_t billing_day);
int64_t tenant__month_window_end_ms(int64_t window_id, int64_t billing_day);
/** TALLY_EINVAL when `ls` holds a month limit (GCRA has none). */
int tenant__count_check_no_month(const struct tenant_limits *ls);

/** now_ms within 0..TENANT_TIME_MAX_MS: TALLY_OK, TALLY_EINVAL below, TALLY_EOVERFLOW above. */
int tenant__count_check_now(int64_t now_ms);
/** A stored high-water mark: TALLY_OK or TALLY_EINVAL. */
int tenant__count_check_high_water(int64_t last_now_ms);
/** cost within 1..TENANT_COST_MAX: TALLY_OK or TALLY_ECOST. */
int tenant__count_check_cost(int64_t cost);
/** Every limit n in 1..2^32, period in 1..365 d, periods distinct, count <= TENANT_MAX_WINDOWS. */
int tenant__count_check_limits(const struct tenant_limits *ls);
/** ls, now_ms and cost together, in that order. */
int tenant__count_check_args(const struct tenant_limits *ls, int64_t now_ms, int64_t cost);

/** True iff waiting `a` ms is longer than waiting `b` (TENANT_RETRY_NEVER is longest). */
bool tenant__count_wait_longer(int64_t a, int64_t b);
/** True iff bound `a` is tighter than `b`: less remaining, then a later reset. */
bool tenant__count_tighter(const struct tenant_bound *a, const struct tenant_bound *b);
/** Sets admitted, never, bound and retry_after_ms of `v` from its v[0..count-1]. */
void tenant__count_verdict_finish(struct tenant_verdict *v);

#endif /* TENANT_COUNT_INT_H */

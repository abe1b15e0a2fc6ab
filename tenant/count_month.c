/*
 * Calendar-month windows (`N/month`): a window is the calendar month in UTC that starts at
 * 00:00 on the tenant's billing day D (1..28) and ends at 00:00 on day D of the next month, so
 * windows are 28 to 31 days long and line up with an invoice. The billing day travels inside the
 * limit's period_ms (TENANT_MONTH_MS + D, see tenant.h), so every caller that keys counts by
 * period (the ledger's cells, a lease's cells, a window state) handles months unchanged; only the
 * window id and the window end need the calendar, and both are computed here, purely from the
 * instant passed in (days from the civil date and back, proleptic Gregorian, leap years
 * included). Window id k is the month that starts (k - 1) months after January 1970, so ids grow
 * with time and the window holding 1970-01-01 is 0 whatever the billing day.
 */
#include "count_int.h"

#define DAY_MS ((int64_t)86400000)
/* Month ids past this cannot be reached from TENANT_TIME_MAX_MS (285,000 years). */
#define MONTH_ID_MAX ((int64_t)12 * 400000)

/* Days since 1970-01-01 of the civil date y-m-d (m 1..12). */
static int64_t
days_from_civil(int64_t y, int64_t m, int64_t d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The civil date of day z since 1970-01-01 (z >= 0). */
static void
civil_from_days(int64_t z, int64_t *y, int64_t *m, int64_t *d)
{
    int64_t era, doe, yoe, doy, mp;

    z += 719468;
    era = z / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = yoe + era * 400 + (*m <= 2);
}

int64_t
tenant__month_window_id(int64_t now_ms, int64_t billing_day)
{
    int64_t y, m, d, id;

    civil_from_days(now_ms / DAY_MS, &y, &m, &d);
    id = (y - 1970) * 12 + (m - 1) + 1;
    return d < billing_day ? id - 1 : id;
}

int64_t
tenant__month_window_end_ms(int64_t window_id, int64_t billing_day)
{
    /* Window k ends where month k (counted from January 1970) reaches its billing day. */
    if (window_id > MONTH_ID_MAX)
        return -1;
    return days_from_civil(1970 + window_id / 12, window_id % 12 + 1, billing_day) * DAY_MS;
}

int64_t
tenant_window_carry(int64_t from_period_ms, int64_t window_id, int64_t to_period_ms,
                    int64_t eval_ms)
{
    int64_t current;

    if (!tenant_periods_match(from_period_ms, to_period_ms) || window_id < 0)
        return -1;
    if (from_period_ms == to_period_ms)
        return window_id;
    /* A new billing day: what the month running at eval_ms counted moves into the new day's
     * month running then (never a second allowance); an older month carries nothing. */
    current = tenant_window_id(eval_ms, from_period_ms);
    if (current < 0 || window_id < current)
        return -1;
    return tenant_window_id(eval_ms, to_period_ms);
}

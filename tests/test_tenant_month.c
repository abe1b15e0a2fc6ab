/*
 * Calendar-month windows (`N/month`, tenant_count.h): exact boundaries on chosen dates (month
 * and year ends, February of leap and common years), then seeded property tests. Every window
 * is checked against the C library's calendar (gmtime_r): it starts at 00:00 UTC on the billing
 * day, ends on that day of the next month, and holds the instant it was computed for; ids never
 * go back as time goes on. A schedule with a clock stepping backwards never admits more than N
 * in one calendar window; a new billing day never hands out a second allowance. GCRA refuses
 * months. TALLY_SEED replays a run.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>
#include <time.h>

#include "tenant_count.h"
#include "test_support.h"

#define DAY_MS    ((int64_t)86400000)
#define YEAR_2400 ((int64_t)13569465600000) /* 2400-01-01T00:00:00Z in ms */

static uint64_t seed;

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

/* ms of y-m-d 00:00 UTC, counted day by day from 1970 with gmtime_r as the reference. */
static int64_t
utc_ms(int y, int m, int d)
{
    struct tm tm;
    time_t t;
    /* 365.2425 days a year: start a little early and walk forward to the date. */
    int64_t days = ((int64_t)(y - 1970) * 146097) / 400 + (m - 1) * 28 - 2;

    for (;; days++) {
        t = (time_t)(days * 86400);
        assert_non_null(gmtime_r(&t, &tm));
        if (tm.tm_year + 1900 == y && tm.tm_mon + 1 == m && tm.tm_mday == d)
            return days * DAY_MS;
        assert_true(tm.tm_year + 1900 <= y);
    }
}

static int64_t
end_of(int64_t now_ms, int64_t day)
{
    int64_t p = tenant_month_period(day);

    return tenant_window_end_ms(tenant_window_id(now_ms, p), p);
}

static void
test_month_exact_boundaries(void **state)
{
    (void)state;
    /* Day 1: the calendar month. */
    assert_int_equal(end_of(utc_ms(2026, 11, 30) + DAY_MS - 1, 1), utc_ms(2026, 12, 1));
    assert_int_equal(end_of(utc_ms(2026, 12, 1), 1), utc_ms(2027, 1, 1));
    assert_int_equal(end_of(utc_ms(2026, 12, 31) + DAY_MS - 1, 1), utc_ms(2027, 1, 1));
    /* Day 15 across a year end, and February in a leap year and a common one. */
    assert_int_equal(end_of(utc_ms(2026, 12, 15), 15), utc_ms(2027, 1, 15));
    assert_int_equal(end_of(utc_ms(2026, 12, 14), 15), utc_ms(2026, 12, 15));
    assert_int_equal(end_of(utc_ms(2024, 2, 1), 1), utc_ms(2024, 3, 1));
    assert_int_equal(utc_ms(2024, 3, 1) - utc_ms(2024, 2, 1), 29 * DAY_MS);
    assert_int_equal(end_of(utc_ms(2023, 2, 1), 1), utc_ms(2023, 3, 1));
    assert_int_equal(utc_ms(2023, 3, 1) - utc_ms(2023, 2, 1), 28 * DAY_MS);
    /* Day 28 from January 28 to February 28; 2100 is not a leap year, 2000 was. */
    assert_int_equal(end_of(utc_ms(2100, 1, 28), 28), utc_ms(2100, 2, 28));
    assert_int_equal(end_of(utc_ms(2000, 2, 28), 28), utc_ms(2000, 3, 28));
    assert_int_equal(end_of(utc_ms(2000, 2, 29), 28), utc_ms(2000, 3, 28));
    /* The first instants: 1970-01-01 is in window 0 whatever the day. */
    assert_int_equal(tenant_window_id(0, tenant_month_period(1)), 1);
    assert_int_equal(tenant_window_id(0, tenant_month_period(2)), 0);
    assert_int_equal(tenant_window_end_ms(0, tenant_month_period(2)), utc_ms(1970, 1, 2));
    assert_int_equal(tenant_window_id(TENANT_TIME_MAX_MS, tenant_month_period(28)) > 0, 1);
    assert_true(end_of(TENANT_TIME_MAX_MS, 28) > TENANT_TIME_MAX_MS);
    /* Periods: a month is no N/PERIOD period; billing days outside 1..28 give none. */
    assert_int_equal(tenant_month_period(0), -1);
    assert_int_equal(tenant_month_period(29), -1);
    assert_true(tenant_period_is_month(tenant_month_period(28)));
    assert_false(tenant_period_is_month(TENANT_MONTH_MS));
    assert_false(tenant_period_is_month(TENANT_MONTH_MS + 29));
    assert_true(tenant_periods_match(tenant_month_period(3), tenant_month_period(17)));
    assert_false(tenant_periods_match(tenant_month_period(3), TENANT_MONTH_MS));
}

static void
test_month_parse_and_format(void **state)
{
    struct tenant_limits ls;
    struct tenant_limit l;
    char text[64];
    int64_t day = 0;

    (void)state;
    assert_int_equal(tenant_limit_parse("100000/month", &l), TALLY_OK);
    assert_int_equal(l.n, 100000);
    assert_true(tenant_period_is_month(l.period_ms));
    tenant_limit_format(&l, text, sizeof(text));
    assert_string_equal(text, "100000/month");
    assert_int_equal(tenant_limit_parse("1/months", &l), TALLY_ELIMIT);
    assert_int_equal(tenant_limit_parse("1/2month", &l), TALLY_ELIMIT);
    assert_int_equal(tenant_limits_parse("600/1m,100000/month,1/31d", &ls), TALLY_OK);
    assert_int_equal(ls.count, 3);
    assert_true(tenant_period_is_month(ls.v[2].period_ms)); /* sorts after 31 days */
    tenant_limits_format(&ls, text, sizeof(text));
    assert_string_equal(text, "600/1m,1/31d,100000/month");
    assert_int_equal(tenant_limits_parse("1/month,2/month", &ls), TALLY_ELIMIT);
    assert_int_equal(tenant_limits_parse("600/1m,100000/month", &ls), TALLY_OK);
    tenant_limits_bind_month(&ls, 0); /* not a day: unchanged */
    assert_int_equal(ls.v[1].period_ms, tenant_month_period(1));
    tenant_limits_bind_month(&ls, 15);
    assert_int_equal(ls.v[0].period_ms, 60000);
    assert_int_equal(ls.v[1].period_ms, tenant_month_period(15));
    tenant_limits_format(&ls, text, sizeof(text));
    assert_string_equal(text, "600/1m,100000/month");
    /* Billing days: 1 to 28, digits only. */
    assert_int_equal(tenant_billing_day_parse("1", &day), TALLY_OK);
    assert_int_equal(day, 1);
    assert_int_equal(tenant_billing_day_parse("28", &day), TALLY_OK);
    assert_int_equal(day, 28);
    assert_int_equal(tenant_billing_day_parse("0", &day), TALLY_EINVAL);
    assert_int_equal(tenant_billing_day_parse("29", &day), TALLY_EINVAL);
    assert_int_equal(tenant_billing_day_parse("x", &day), TALLY_EINVAL);
    assert_int_equal(tenant_billing_day_parse("", &day), TALLY_EINVAL);
    assert_int_equal(tenant_billing_day_parse("-1", &day), TALLY_EINVAL);
    assert_int_equal(tenant_billing_day_parse("15x", &day), TALLY_EINVAL);
}

/* Each window against gmtime_r: starts at 00:00 on the billing day, ends on that day of the
 * next month, holds t; ids never go back and step by one exactly at a window end. */
static void
test_month_windows_match_the_calendar(void **state)
{
    uint64_t rng = seed ^ 0x6d6f6e7468ULL;

    (void)state;
    for (int i = 0; i < 20000; i++) {
        int64_t day = test_rand_range(&rng, 1, TENANT_BILLING_DAY_MAX);
        int64_t p = tenant_month_period(day);
        /* Half the instants near a boundary of some month, half anywhere up to 2400. */
        int64_t t = test_rand_range(&rng, 0, YEAR_2400);
        int64_t id, start, end, later;
        time_t ts, te;
        struct tm s, e;

        if (i % 2 == 0) {
            int64_t near = end_of(t, day);
            t = near + test_rand_range(&rng, -2, 1);
            if (t < 0)
                t = 0;
        }
        id = tenant_window_id(t, p);
        end = tenant_window_end_ms(id, p);
        start = id > 0 ? tenant_window_end_ms(id - 1, p) : 0;
        assert_true(id >= 0);
        assert_true(start <= t && t < end);
        assert_int_equal(tenant_window_id(end - 1, p), id);
        assert_int_equal(tenant_window_id(end, p), id + 1);
        assert_int_equal(end % DAY_MS, 0);
        ts = (time_t)(start / 1000);
        te = (time_t)(end / 1000);
        assert_non_null(gmtime_r(&ts, &s));
        assert_non_null(gmtime_r(&te, &e));
        assert_int_equal(e.tm_mday, day);
        assert_int_equal(e.tm_hour + e.tm_min + e.tm_sec, 0);
        if (id > 0) {
            assert_int_equal(e.tm_mon, (s.tm_mon + 1) % 12);
            assert_int_equal(e.tm_year, s.tm_year + (s.tm_mon == 11));
            assert_int_equal(s.tm_mday, day);
            assert_true(end - start >= 28 * DAY_MS && end - start <= 31 * DAY_MS);
        }
        later = t + test_rand_range(&rng, 0, 90 * DAY_MS);
        assert_true(tenant_window_id(later, p) >= id);
    }
}

/* Admissions of one schedule with a clock that jumps around month ends and steps back: per
 * calendar window (from gmtime_r's boundaries, i.e. utc_ms-based end_of), never more than N;
 * a refusal's wait ends exactly at the next billing boundary. */
static void
test_month_backward_clock_opens_nothing(void **state)
{
    uint64_t rng = seed ^ 0xbac4ULL;

    (void)state;
    for (int s = 0; s < 300; s++) {
        int64_t day = test_rand_range(&rng, 1, TENANT_BILLING_DAY_MAX);
        int64_t n = test_rand_range(&rng, 1, 6);
        struct tenant_limits ls = {.count = 1, .v = {{n, tenant_month_period(day)}}};
        struct tenant_window_state st;
        int64_t base = end_of(test_rand_range(&rng, 0, YEAR_2400 - 400 * DAY_MS), day);
        int64_t now = base - 3 * DAY_MS, hw = 0;
        int64_t win_end[64] = {0}, win_used[64] = {0}, last_id = 0;
        int wins = 0;

        memset(&st, 0, sizeof(st));
        for (int step = 0; step < 200; step++) {
            struct tenant_verdict v;
            int64_t eval, e;
            int w;

            now += test_rand_range(&rng, -2 * DAY_MS, 3 * DAY_MS);
            if (now < 0)
                now = 0;
            assert_int_equal(tenant_window_decide(&ls, &st, now, 1, &v), TALLY_OK);
            eval = now > hw ? now : hw;
            assert_int_equal(v.eval_ms, eval);
            e = end_of(eval, day);
            if (!v.admitted) {
                assert_int_equal(v.retry_after_ms, e - now);
                continue;
            }
            hw = eval;
            for (w = 0; w < wins && win_end[w] != e; w++)
                ;
            if (w == wins) {
                assert_true(wins < 64);
                win_end[wins] = e;
                win_used[wins++] = 0;
            }
            assert_true(++win_used[w] <= n);
            assert_int_equal(st.window_id[0], tenant_window_id(eval, ls.v[0].period_ms));
            assert_true(st.window_id[0] >= last_id); /* I8: never back, whatever the clock */
            last_id = st.window_id[0];
        }
    }
}

/* A new billing day: what the running month counted moves into the new day's month, so the
 * quota used before the change is still used after it; a month already over carries nothing. */
static void
test_month_new_billing_day_keeps_the_count(void **state)
{
    struct tenant_limits d1 = {.count = 1, .v = {{3, tenant_month_period(1)}}};
    struct tenant_limits d15 = {.count = 1, .v = {{3, tenant_month_period(15)}}};
    struct tenant_window_state st;
    struct tenant_verdict v;
    int64_t dec2 = utc_ms(2026, 12, 2), dec20 = utc_ms(2026, 12, 20);

    (void)state;
    memset(&st, 0, sizeof(st));
    for (int i = 0; i < 3; i++)
        assert_int_equal(tenant_window_decide(&d1, &st, dec2, 1, &v), TALLY_OK);
    assert_true(v.admitted);
    /* Day 1 -> 15 on Dec 2: the new month runs Nov 15 - Dec 15 and holds the 3 already used. */
    assert_int_equal(tenant_window_decide(&d15, &st, dec2 + 1000, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.retry_after_ms, utc_ms(2026, 12, 15) - dec2 - 1000);
    assert_int_equal(tenant_window_decide(&d15, &st, utc_ms(2026, 12, 15), 1, &v), TALLY_OK);
    assert_true(v.admitted);
    /* And back to day 1 on Dec 20: the Dec 15 month's 1 moves into December. */
    assert_int_equal(tenant_window_decide(&d1, &st, dec20, 2, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(tenant_window_decide(&d1, &st, dec20, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    /* The carry rule itself. */
    assert_int_equal(tenant_window_carry(60000, 7, 60000, dec2), 7);
    assert_int_equal(tenant_window_carry(60000, 7, 1000, dec2), -1);
    assert_int_equal(tenant_window_carry(tenant_month_period(1),
                                         tenant_window_id(dec2, tenant_month_period(1)) - 1,
                                         tenant_month_period(15), dec2),
                     -1);
    assert_int_equal(tenant_window_carry(tenant_month_period(1),
                                         tenant_window_id(dec2, tenant_month_period(1)),
                                         tenant_month_period(15), dec2),
                     tenant_window_id(dec2, tenant_month_period(15)));
}

static void
test_month_refused_by_gcra(void **state)
{
    struct tenant_limits ls = {.count = 1, .v = {{10, tenant_month_period(1)}}};
    struct tenant_gcra_state g;
    struct tenant_budget b;
    struct tenant_verdict v;

    (void)state;
    memset(&g, 0, sizeof(g));
    assert_int_equal(tenant_budget_init(&b, TENANT_SCOPE_ENDPOINT_LINK, TENANT_ALG_GCRA, &ls),
                     TALLY_EINVAL);
    assert_int_equal(tenant_gcra_check(&ls, NULL, &g, 1000, 1, &v), TALLY_EINVAL);
    assert_int_equal(tenant_gcra_charge(&ls, NULL, &g, 1000, 1), TALLY_EINVAL);
    assert_int_equal(tenant_budget_init(&b, TENANT_SCOPE_ENDPOINT_LINK, TENANT_ALG_WINDOW, &ls),
                     TALLY_OK);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_month_exact_boundaries),
        cmocka_unit_test(test_month_parse_and_format),
        cmocka_unit_test(test_month_windows_match_the_calendar),
        cmocka_unit_test(test_month_backward_clock_opens_nothing),
        cmocka_unit_test(test_month_new_billing_day_keeps_the_count),
        cmocka_unit_test(test_month_refused_by_gcra),
    };

    return cmocka_run_group_tests(tests, group_setup, NULL);
}

/*
 * Calendar-month quotas through the real tallyd, its child counters and supervisors: a tenant
 * that has used its plan's 3/month is refused with a Retry-After (and RateLimit t=) that ends
 * exactly at its next billing boundary, 00:00 UTC: tomorrow for a tenant billed tomorrow, the
 * same day next month for one billed today. A new billing day moves the month's count, it does
 * not hand out a second allowance. And the command line refuses what makes no sense (billing
 * days 0, 29 and x, N/month on GCRA), in one line, changing nothing.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "serve_util.h"

#define DAY_MS ((int64_t)86400000)

struct env {
    struct serve_env s;
    char tok_tomorrow[64], tok_today[64], tok_moved[64];
    int day_today, day_tomorrow; /* 0 when past 28: no tenant can be billed then */
};

static int64_t
wall_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static int
mday_of(int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    assert_non_null(gmtime_r(&t, &tm));
    return tm.tm_mday;
}

/* 00:00 UTC of day `mday` in the month after the one of `ms`, walking days with gmtime_r. */
static int64_t
next_month_day(int64_t ms, int mday)
{
    int64_t d = (ms / DAY_MS + 1) * DAY_MS;

    while (mday_of(d) != 1)
        d += DAY_MS;
    return d + (int64_t)(mday - 1) * DAY_MS;
}

static void
add_tenant(struct env *e, const char *id, int day, char *token)
{
    char d[16];

    snprintf(d, sizeof(d), "%d", day);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", id, "--plan", "pro", "--billing-day", d, NULL);
    serve_tally_ok(&e->s, token, 64, "link", "create", id, NULL);
}

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    int64_t now = wall_ms();

    assert_non_null(e);
    *state = e;
    /* Too close to midnight UTC, "today" could change under the test: wait it out. */
    if ((now + 60000) / DAY_MS != now / DAY_MS)
        serve_sleep_ms((int)(DAY_MS - now % DAY_MS) + 1000);
    now = wall_ms();
    e->day_today = mday_of(now) <= 28 ? mday_of(now) : 0;
    e->day_tomorrow = mday_of(now + DAY_MS) <= 28 ? mday_of(now + DAY_MS) : 0;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "3/month", "--limit", "1000/1m",
                   NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "1000/1m", NULL);
    if (e->day_tomorrow != 0)
        add_tenant(e, "tomorrow", e->day_tomorrow, e->tok_tomorrow);
    if (e->day_today != 0)
        add_tenant(e, "today", e->day_today, e->tok_today);
    add_tenant(e, "moved", e->day_today != 0 ? e->day_today : 1, e->tok_moved);
    serve_start(&e->s, NULL, NULL);
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    serve_env_release(&e->s);
    free(e);
    return 0;
}

static void
spend(struct env *e, const char *token, int n)
{
    struct serve_http r;

    for (int i = 0; i < n; i++) {
        serve_check(&e->s, token, "search", &r);
        assert_int_equal(r.status, 200);
    }
}

/* The refusal's Retry-After and RateLimit t= both end at `end_ms` (whole seconds, rounded up,
 * measured from some instant while the request was in flight). */
static void
assert_refused_until(struct env *e, const char *token, int64_t end_ms)
{
    struct serve_http r;
    char v[128], want[64];
    int64_t before = wall_ms(), after, secs;

    serve_check(&e->s, token, "search", &r);
    after = wall_ms();
    assert_int_equal(r.status, 429);
    assert_non_null(strstr(r.body, "\"scope\":\"plan\""));
    assert_true(serve_http_header(&r, "Retry-After", v, sizeof(v)));
    secs = strtoll(v, NULL, 10);
    assert_true(secs >= (end_ms - after + 999) / 1000);
    assert_true(secs <= (end_ms - before + 999) / 1000);
    assert_true(serve_http_header(&r, "RateLimit", v, sizeof(v)));
    snprintf(want, sizeof(want), "t=%lld", (long long)secs);
    assert_non_null(strstr(v, want));
}

static void
test_month_billed_tomorrow_waits_until_midnight(void **state)
{
    struct env *e = *state;
    int64_t now = wall_ms();

    if (e->day_tomorrow == 0) {
        print_message("skipped: tomorrow is past the 28th\n");
        return;
    }
    spend(e, e->tok_tomorrow, 3);
    assert_refused_until(e, e->tok_tomorrow, (now / DAY_MS + 1) * DAY_MS);
}

static void
test_month_billed_today_waits_a_month(void **state)
{
    struct env *e = *state;
    int64_t now = wall_ms();

    if (e->day_today == 0) {
        print_message("skipped: today is past the 28th\n");
        return;
    }
    spend(e, e->tok_today, 3);
    assert_refused_until(e, e->tok_today, next_month_day(now, e->day_today));
}

/* A new billing day takes the month's count along: the tenant stays refused, now until its new
 * day's boundary. The change is in force before `tally tenant set` returns. */
static void
test_month_new_billing_day_is_no_second_allowance(void **state)
{
    struct env *e = *state;
    int day = e->day_today != 0 ? e->day_today : 1;
    int other = day == 28 ? 27 : day + 1;
    int64_t now = wall_ms(), end;
    char d[16];

    spend(e, e->tok_moved, 3);
    snprintf(d, sizeof(d), "%d", other);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "set", "moved", "--billing-day", d, NULL);
    /* The new day's month running now ends on day `other` of this month or of the next. */
    end = (now / DAY_MS) * DAY_MS + (int64_t)(other - mday_of(now)) * DAY_MS;
    if (mday_of(now) >= other || mday_of(now) > 28)
        end = next_month_day(now, other);
    assert_refused_until(e, e->tok_moved, end);
}

static void
assert_usage_error(struct env *e, int want, ...)
{
    struct test_out o;
    char *argv[16] = {0};
    int argc = 0, rc;
    va_list ap;

    va_start(ap, want);
    while ((argv[argc] = va_arg(ap, char *)) != NULL)
        argc++;
    va_end(ap);
    rc = test_tally(e->s.data, &o, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6],
                    argv[7], argc > 8 ? argv[8] : NULL, NULL);
    assert_int_equal(rc, want);
    assert_non_null(strstr(o.err, "tally: "));
    assert_null(strchr(strchr(o.err, '\n') + 1, '\n')); /* one line */
}

static void
test_month_bad_input_changes_nothing(void **state)
{
    struct env *e = *state;
    struct test_out o;

    assert_usage_error(e, 64, "tenant", "add", "t2", "--plan", "pro", "--billing-day", "0", NULL,
                       NULL);
    assert_usage_error(e, 64, "tenant", "add", "t2", "--plan", "pro", "--billing-day", "29", NULL,
                       NULL);
    assert_usage_error(e, 64, "tenant", "add", "t2", "--plan", "pro", "--billing-day", "x", NULL,
                       NULL);
    assert_usage_error(e, 64, "tenant", "set", "moved", "--billing-day", "29", NULL, NULL, NULL,
                       NULL);
    assert_usage_error(e, 64, "endpoint", "set", "smooth", "--algorithm", "gcra", "--limit",
                       "3/month", NULL, NULL);
    assert_usage_error(e, 1, "tenant", "set", "nobody", "--billing-day", "3", NULL, NULL, NULL,
                       NULL);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "t2", NULL), 1);
    assert_int_equal(test_tally(e->s.data, &o, "endpoint", "show", "smooth", NULL), 1);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "nobody", NULL), 1);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "moved", NULL), 0);
    assert_null(strstr(o.out, "billing day: 29"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_month_billed_tomorrow_waits_until_midnight),
        cmocka_unit_test(test_month_billed_today_waits_a_month),
        cmocka_unit_test(test_month_new_billing_day_is_no_second_allowance),
        cmocka_unit_test(test_month_bad_input_changes_nothing),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}

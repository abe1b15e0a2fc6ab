/*
 * Fixed windows (tenant_count.h): exact boundaries and argument checks, then seeded property
 * tests over generated schedules. Each decision is compared with a naive model that keeps every
 * admitted event, and each schedule's admissions are checked against the promises: at most N per
 * window, at most 2N across a boundary, the longer window still binding, Retry-After exact, and
 * a backward clock opening no second allowance. TALLY_SEED replays a run.
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

#include "tenant_count.h"
#include "test_support.h"

#define SCHEDULES 4000
#define STEPS     120

static uint64_t seed;

/* One seed per run, printed by test_seed(); each test derives its own stream from it. */
static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

static struct tenant_limits
limits_of(uint32_t count, const int64_t *n, const int64_t *period_ms)
{
    struct tenant_limits ls;

    memset(&ls, 0, sizeof(ls));
    ls.count = count;
    for (uint32_t i = 0; i < count; i++) {
        ls.v[i].n = n[i];
        ls.v[i].period_ms = period_ms[i];
    }
    return ls;
}

static void
test_window_id_floor_and_end(void **state)
{
    (void)state;
    assert_int_equal(tenant_window_id(0, 1000), 0);
    assert_int_equal(tenant_window_id(999, 1000), 0);
    assert_int_equal(tenant_window_id(1000, 1000), 1);
    assert_int_equal(tenant_window_id(1700000059999, 60000), 28333334);
    assert_int_equal(tenant_window_id(-1, 1000), -1);
    assert_int_equal(tenant_window_id(5, 0), -1);
    assert_int_equal(tenant_window_end_ms(0, 1000), 1000);
    assert_int_equal(tenant_window_end_ms(28333333, 60000), 1700000040000);
    assert_int_equal(tenant_window_end_ms(-1, 1000), -1);
    assert_int_equal(tenant_window_end_ms(INT64_MAX, 1), -1);
    assert_int_equal(tenant_window_end_ms(INT64_MAX / 2, 3), -1);
}

static void
test_window_bad_arguments_are_errors(void **state)
{
    int64_t n[2] = {10, 100}, p[2] = {1000, 60000};
    struct tenant_limits ls = limits_of(2, n, p), bad;
    struct tenant_window_state st, before;
    struct tenant_verdict v;

    (void)state;
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_window_decide(&ls, &st, 5000, 3, &v), TALLY_OK);
    before = st;
    assert_int_equal(tenant_window_check(&ls, &st, 5000, 0, &v), TALLY_ECOST);
    assert_int_equal(tenant_window_charge(&ls, &st, 5000, TENANT_COST_MAX + 1), TALLY_ECOST);
    assert_int_equal(tenant_window_check(&ls, &st, -1, 1, &v), TALLY_EINVAL);
    assert_int_equal(tenant_window_charge(&ls, &st, TENANT_TIME_MAX_MS + 1, 1), TALLY_EOVERFLOW);
    bad = ls;
    bad.v[0].n = 0;
    assert_int_equal(tenant_window_check(&bad, &st, 5000, 1, &v), TALLY_EINVAL);
    bad.v[0].n = TENANT_LIMIT_MAX_N + 1;
    assert_int_equal(tenant_window_charge(&bad, &st, 5000, 1), TALLY_EOVERFLOW);
    bad = ls;
    bad.v[1].period_ms = TENANT_LIMIT_MAX_PERIOD_MS + 1;
    assert_int_equal(tenant_window_check(&bad, &st, 5000, 1, &v), TALLY_EOVERFLOW);
    bad.v[1].period_ms = 1000; /* same period twice */
    assert_int_equal(tenant_window_charge(&bad, &st, 5000, 1), TALLY_EINVAL);
    bad = ls;
    bad.count = TENANT_MAX_WINDOWS + 1;
    assert_int_equal(tenant_window_check(&bad, &st, 5000, 1, &v), TALLY_EINVAL);
    assert_int_equal(tenant_window_check(&ls, NULL, 5000, 1, &v), TALLY_EINVAL);
    assert_int_equal(tenant_window_check(&ls, &st, 5000, 1, NULL), TALLY_EINVAL);
    /* Nothing above touched the state. */
    assert_memory_equal(&st, &before, sizeof(st));
    /* A state that contradicts itself is refused rather than trusted. */
    st.used[0] = -1;
    assert_int_equal(tenant_window_check(&ls, &st, 5000, 1, &v), TALLY_EINVAL);
    st = before;
    st.window_id[1] += 1; /* a window after the high-water mark */
    assert_int_equal(tenant_window_charge(&ls, &st, 5000, 1), TALLY_EINVAL);
    st = before;
    st.last_now_ms = -5;
    assert_int_equal(tenant_window_check(&ls, &st, 5000, 1, &v), TALLY_EINVAL);
}

/* 2^32 tokens per year at 2^53 ms: exact, no overflow; cost above n can never pass. */
static void
test_window_extremes_are_exact(void **state)
{
    int64_t n[2] = {TENANT_LIMIT_MAX_N, TENANT_LIMIT_MAX_N - 1};
    int64_t p[2] = {TENANT_LIMIT_MAX_PERIOD_MS, 1000};
    struct tenant_limits ls = limits_of(1, n, p);
    struct tenant_window_state st;
    struct tenant_verdict v;
    int64_t now_ms = TENANT_TIME_MAX_MS, end_ms;

    (void)state;
    memset(&st, 0, sizeof(st));
    end_ms = tenant_window_end_ms(tenant_window_id(now_ms, p[0]), p[0]);
    assert_true(end_ms > now_ms);
    assert_int_equal(tenant_window_decide(&ls, &st, now_ms, TENANT_COST_MAX, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(v.v[0].remaining, 0);
    assert_int_equal(v.v[0].reset_ms, end_ms);
    assert_int_equal(tenant_window_decide(&ls, &st, now_ms, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.retry_after_ms, end_ms - now_ms);
    /* Debt may pass n, up to INT64_MAX; beyond is an error, not a wrap. */
    for (int i = 0; i < 100; i++)
        assert_int_equal(tenant_window_charge(&ls, &st, now_ms, TENANT_COST_MAX), TALLY_OK);
    st.used[0] = INT64_MAX - 5;
    assert_int_equal(tenant_window_charge(&ls, &st, now_ms, 6), TALLY_EOVERFLOW);
    assert_int_equal(st.used[0], INT64_MAX - 5);

    ls = limits_of(2, n, p);
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_window_check(&ls, &st, 0, TENANT_COST_MAX, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_true(v.never);
    assert_int_equal(v.bound, 1);
    assert_int_equal(v.retry_after_ms, TENANT_RETRY_NEVER);
    assert_int_equal(tenant_retry_after_seconds(v.retry_after_ms), -1);
}

/* The scenario of docs/DESIGN.md §2: 600/1m and 36000/1h together; reports per bound. */
static void
test_window_two_limits_report_each_bound(void **state)
{
    int64_t n[2] = {600, 36000}, p[2] = {60000, 3600000};
    struct tenant_limits ls = limits_of(2, n, p);
    struct tenant_window_state st;
    struct tenant_verdict v;
    int64_t t0 = 1700000000000; /* 20 s into a minute, 2000 s into an hour */

    (void)state;
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_window_decide(&ls, &st, t0, 590, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(v.v[0].remaining, 10);
    assert_int_equal(v.v[1].remaining, 35410);
    assert_int_equal(v.bound, 0);
    assert_int_equal(v.v[0].reset_ms, 1700000040000);
    assert_int_equal(v.v[1].reset_ms, 1700002800000);
    assert_int_equal(tenant_window_decide(&ls, &st, t0 + 1, 11, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.retry_after_ms, 39999);
    assert_int_equal(tenant_retry_after_seconds(v.retry_after_ms), 40);
    assert_int_equal(v.v[0].remaining, 10);
    assert_int_equal(st.used[0], 590); /* refused: not charged */
    assert_int_equal(tenant_window_decide(&ls, &st, t0 + 1, 10, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(v.v[0].remaining, 0);
}

/* A backward step across a boundary stays in the later window. */
static void
test_window_backward_step_stays_in_later_window(void **state)
{
    int64_t n[1] = {5}, p[1] = {60000};
    struct tenant_limits ls = limits_of(1, n, p);
    struct tenant_window_state st;
    struct tenant_verdict v;

    (void)state;
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_window_decide(&ls, &st, 59500, 5, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(tenant_window_decide(&ls, &st, 60500, 5, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(st.window_id[0], 1);
    /* Clock steps back into window 0, which looked half empty: still window 1, still full. */
    assert_int_equal(tenant_window_decide(&ls, &st, 59000, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.eval_ms, 60500);
    assert_int_equal(v.retry_after_ms, 120000 - 59000);
    assert_int_equal(st.window_id[0], 1);
    assert_int_equal(tenant_window_decide(&ls, &st, 119999, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(tenant_window_decide(&ls, &st, 120000, 1, &v), TALLY_OK);
    assert_true(v.admitted);
}

/* Adding a limit keeps the counts of the others (entries follow periods, not positions). */
static void
test_window_policy_change_keeps_counts(void **state)
{
    int64_t n[2] = {10, 100}, p[2] = {1000, 60000};
    struct tenant_limits one = limits_of(1, n + 1, p + 1), two = limits_of(2, n, p);
    struct tenant_window_state st;
    struct tenant_verdict v;

    (void)state;
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_window_decide(&one, &st, 100, 95, &v), TALLY_OK);
    assert_int_equal(tenant_window_decide(&two, &st, 200, 6, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.bound, 1);
    assert_int_equal(v.v[1].remaining, 5);
    assert_int_equal(tenant_window_decide(&two, &st, 200, 5, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(st.period_ms[0], 1000);
    assert_int_equal(st.used[1], 100);
}

/* Generated policy: 1-3 limits, the shortest first, longer ones sometimes tighter than k*n. */
static struct tenant_limits
gen_limits(uint64_t *s)
{
    struct tenant_limits ls;
    int64_t period_ms = test_rand_range(s, 1, 40) * 50;
    int64_t n = test_rand_range(s, 1, 12);

    memset(&ls, 0, sizeof(ls));
    ls.count = (uint32_t)test_rand_range(s, 1, 3);
    for (uint32_t i = 0; i < ls.count; i++) {
        ls.v[i].n = n;
        ls.v[i].period_ms = period_ms;
        period_ms *= test_rand_range(s, 2, 6);
        n = test_rand_range(s, n, n * 4); /* often below k*n: the longer window binds */
    }
    return ls;
}

struct event {
    int64_t eval_ms;
    int64_t cost;
};

/* The model: sum of admitted costs in the window of limit i holding eval_ms. */
static int64_t
model_used(const struct event *ev, int count, const struct tenant_limit *l, int64_t eval_ms)
{
    int64_t used = 0;

    for (int k = 0; k < count; k++) {
        if (ev[k].eval_ms / l->period_ms == eval_ms / l->period_ms)
            used += ev[k].cost;
    }
    return used;
}

/*
 * Runs one generated schedule; `backward` lets the clock step back. Checks every decision against
 * the model and Retry-After exactness, then the schedule's admissions against the promises.
 * Returns how many refusals came from a limit other than the shortest.
 */
static int
run_schedule(uint64_t *s, bool backward)
{
    struct tenant_limits ls = gen_limits(s);
    struct tenant_window_state st;
    struct event ev[STEPS];
    int64_t now_ms = test_rand_range(s, 0, 2000000000000), high_ms = 0;
    int64_t last_id[TENANT_MAX_WINDOWS] = {0};
    int count = 0, longer_refused = 0;

    memset(&st, 0, sizeof(st));
    for (int step = 0; step < STEPS; step++) {
        struct tenant_verdict v, r;
        int64_t cost = test_rand_range(s, 1, ls.v[0].n + (test_rand_range(s, 0, 20) == 0)), eval_ms;
        bool admit = true;
        int64_t retry_ms = 0;

        /* Mostly small steps forward, some jumps, and (when asked) steps back. */
        int64_t step_ms = test_rand_range(s, 0, ls.v[0].period_ms / 3);
        if (test_rand_range(s, 0, 15) == 0)
            step_ms = test_rand_range(s, 0, ls.v[ls.count - 1].period_ms);
        if (backward && test_rand_range(s, 0, 3) == 0)
            step_ms = -test_rand_range(s, 0, ls.v[0].period_ms * 2);
        now_ms = now_ms + step_ms < 0 ? 0 : now_ms + step_ms;

        eval_ms = now_ms > high_ms ? now_ms : high_ms;
        for (uint32_t i = 0; i < ls.count; i++) {
            const struct tenant_limit *l = &ls.v[i];
            int64_t used = model_used(ev, count, l, eval_ms);
            int64_t end_ms = (eval_ms / l->period_ms + 1) * l->period_ms;

            if (used + cost <= l->n)
                continue;
            admit = false;
            if (cost > l->n)
                retry_ms = TENANT_RETRY_NEVER;
            else if (retry_ms != TENANT_RETRY_NEVER && end_ms - now_ms > retry_ms)
                retry_ms = end_ms - now_ms;
        }

        assert_int_equal(tenant_window_check(&ls, &st, now_ms, cost, &v), TALLY_OK);
        assert_int_equal(v.eval_ms, eval_ms);
        assert_int_equal(v.admitted, admit);
        assert_int_equal(v.retry_after_ms, retry_ms);
        assert_int_equal(v.never, retry_ms == TENANT_RETRY_NEVER);
        if (!admit && v.bound > 0)
            longer_refused++;
        if (!admit && retry_ms > 0) {
            /* Exact: admitted at the announced instant, refused a millisecond earlier, and
             * admitted after the whole seconds an HTTP client would wait. */
            int64_t secs = tenant_retry_after_seconds(retry_ms);

            assert_int_equal(tenant_window_check(&ls, &st, now_ms + retry_ms, cost, &r), TALLY_OK);
            assert_true(r.admitted);
            assert_int_equal(tenant_window_check(&ls, &st, now_ms + retry_ms - 1, cost, &r),
                             TALLY_OK);
            assert_false(r.admitted);
            assert_int_equal(tenant_window_check(&ls, &st, now_ms + secs * 1000, cost, &r),
                             TALLY_OK);
            assert_true(r.admitted);
        }
        if (!admit)
            continue;

        assert_int_equal(tenant_window_charge(&ls, &st, now_ms, cost), TALLY_OK);
        for (uint32_t i = 0; i < ls.count; i++) {
            /* Remaining as reported equals the model's after the charge. */
            assert_int_equal(v.v[i].remaining,
                             ls.v[i].n - model_used(ev, count, &ls.v[i], eval_ms) - cost);
            /* Window ids in the state never go backwards. */
            assert_int_equal(st.period_ms[i], ls.v[i].period_ms);
            assert_true(st.window_id[i] >= last_id[i]);
            last_id[i] = st.window_id[i];
        }
        ev[count++] = (struct event){eval_ms, cost};
        high_ms = eval_ms;
    }

    /* The promises, over what was admitted (eval instants are non-decreasing). */
    for (uint32_t i = 0; i < ls.count; i++) {
        const struct tenant_limit *l = &ls.v[i];

        for (int a = 0; a < count; a++) {
            int64_t in_window = 0, in_span = 0;

            assert_true(a == 0 || ev[a].eval_ms >= ev[a - 1].eval_ms);
            for (int b = a; b < count; b++) {
                if (ev[b].eval_ms / l->period_ms == ev[a].eval_ms / l->period_ms)
                    in_window += ev[b].cost;
                if (ev[b].eval_ms - ev[a].eval_ms < l->period_ms)
                    in_span += ev[b].cost;
            }
            /* Never more than N inside one window, for the longer limits too (they bind even
             * where the shorter windows inside them would allow k*n); at most 2N across a
             * boundary. */
            assert_true(in_window <= l->n);
            assert_true(in_span <= 2 * l->n);
        }
    }
    return longer_refused;
}

static void
test_window_schedule_matches_model(void **state)
{
    uint64_t s = seed ^ 0x11;
    int longer_refused = 0;

    (void)state;
    for (int k = 0; k < SCHEDULES; k++)
        longer_refused += run_schedule(&s, false);
    /* The generator must exercise the longer window binding, or the test proves little. */
    assert_true(longer_refused > SCHEDULES / 10);
}

static void
test_window_backward_clock_opens_nothing(void **state)
{
    uint64_t s = seed ^ 0x22;

    (void)state;
    for (int k = 0; k < SCHEDULES; k++)
        (void)run_schedule(&s, true);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_id_floor_and_end),
        cmocka_unit_test(test_window_bad_arguments_are_errors),
        cmocka_unit_test(test_window_extremes_are_exact),
        cmocka_unit_test(test_window_two_limits_report_each_bound),
        cmocka_unit_test(test_window_backward_step_stays_in_later_window),
        cmocka_unit_test(test_window_policy_change_keeps_counts),
        cmocka_unit_test(test_window_schedule_matches_model),
        cmocka_unit_test(test_window_backward_clock_opens_nothing),
    };

    return cmocka_run_group_tests_name("tenant_window", tests, group_setup, NULL);
}

/*
 * GCRA (tenant_count.h): the fresh-key burst, explicit bursts, exactness for n up to 2^32 (a
 * greedy consumer gets exactly floor(t*n/period) + b, no drift), argument checks, and seeded
 * property tests: every decision equals a naive GCRA in ticks, no interval of length t holds more
 * than floor((t + tau)/T) + 1 tokens, Retry-After is exact, and a backward clock opens no second
 * allowance. TALLY_SEED replays a run.
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
one_limit(int64_t n, int64_t period_ms)
{
    struct tenant_limits ls;

    memset(&ls, 0, sizeof(ls));
    ls.count = 1;
    ls.v[0].n = n;
    ls.v[0].period_ms = period_ms;
    return ls;
}

static void
test_gcra_fresh_key_spends_burst_then_rate(void **state)
{
    struct tenant_limits ls = one_limit(10, 1000);
    struct tenant_gcra_state st;
    struct tenant_verdict v;

    (void)state;
    memset(&st, 0, sizeof(st));
    for (int i = 0; i < 10; i++) {
        assert_int_equal(tenant_gcra_decide(&ls, NULL, &st, 5000, 1, &v), TALLY_OK);
        assert_true(v.admitted);
        assert_int_equal(v.v[0].remaining, 9 - i);
        assert_int_equal(v.v[0].reset_ms, 5000 + 100 * (i + 1));
    }
    assert_int_equal(tenant_gcra_decide(&ls, NULL, &st, 5000, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.retry_after_ms, 100);
    assert_int_equal(tenant_gcra_decide(&ls, NULL, &st, 5050, 2, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.retry_after_ms, 150);
    assert_int_equal(tenant_gcra_decide(&ls, NULL, &st, 5100, 1, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(tenant_gcra_decide(&ls, NULL, &st, 5100, 11, &v), TALLY_OK);
    assert_true(v.never);
    assert_int_equal(v.retry_after_ms, TENANT_RETRY_NEVER);
}

static void
test_gcra_explicit_burst_spaces_requests(void **state)
{
    struct tenant_limits ls = one_limit(3, 1000); /* T = 333.33 ms */
    int64_t burst[TENANT_MAX_WINDOWS] = {1, 0, 0, 0};
    struct tenant_gcra_state st;
    struct tenant_verdict v;

    (void)state;
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, 0, 1, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, 0, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.retry_after_ms, 334); /* 333.33 rounds up: the first ms that admits */
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, 333, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, 334, 1, &v), TALLY_OK);
    assert_true(v.admitted);
    /* Admitted at 334, later than due: the next is due at 667.33, so 668. */
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, 667, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(v.retry_after_ms, 1);
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, 668, 1, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, 1000, 2, &v), TALLY_OK);
    assert_true(v.never);
    /* A burst above n is allowed up to a year of emission, not beyond. */
    burst[0] = 100;
    assert_int_equal(tenant_gcra_check(&ls, burst, &st, 1000, 50, &v), TALLY_OK);
    burst[0] = 3LL * 365 * 24 * 3600 + 1;
    assert_int_equal(tenant_gcra_check(&ls, burst, &st, 1000, 1, &v), TALLY_EOVERFLOW);
    burst[0] = -1;
    assert_int_equal(tenant_gcra_check(&ls, burst, &st, 1000, 1, &v), TALLY_EINVAL);
}

/* A greedy consumer takes all it may every step (steps shorter than the period, so the key is
 * never idle): after t ms it must have got exactly floor(t*n/P) + n, with no drift. */
static void
greedy_exact(int64_t n, int64_t period_ms, int64_t step_ms, int steps)
{
    struct tenant_limits ls = one_limit(n, period_ms);
    struct tenant_gcra_state st;
    struct tenant_verdict v;
    int64_t t0 = 1700000000000, taken = 0;

    memset(&st, 0, sizeof(st));
    for (int k = 0; k < steps; k++) {
        int64_t now_ms = t0 + k * step_ms;
        int64_t due = k * step_ms * n / period_ms + n; /* k * step_ms * n < 2^57 */
        int64_t fits;

        assert_int_equal(tenant_gcra_check(&ls, NULL, &st, now_ms, 1, &v), TALLY_OK);
        fits = v.v[0].remaining + (v.admitted ? 1 : 0); /* remaining is after the cost */
        assert_int_equal(taken + fits, due);
        if (fits == 0)
            continue;
        assert_int_equal(tenant_gcra_decide(&ls, NULL, &st, now_ms, fits, &v), TALLY_OK);
        assert_true(v.admitted);
        taken = due;
        assert_int_equal(tenant_gcra_check(&ls, NULL, &st, now_ms, 1, &v), TALLY_OK);
        assert_false(v.admitted);
    }
}

static void
test_gcra_exact_for_huge_n_and_periods(void **state)
{
    (void)state;
    greedy_exact(TENANT_LIMIT_MAX_N, 1000, 1, 3000);
    greedy_exact(TENANT_LIMIT_MAX_N, TENANT_LIMIT_MAX_PERIOD_MS, 7919, 3000);
    greedy_exact(TENANT_LIMIT_MAX_N - 1, 999, 13, 3000);
    greedy_exact(3, 1000, 1, 3000);
    greedy_exact(1, TENANT_LIMIT_MAX_PERIOD_MS, 86400000, 800);
    greedy_exact(36000, 3600000, 37, 3000);
}

static void
test_gcra_extremes_do_not_overflow(void **state)
{
    struct tenant_limits ls = one_limit(1, TENANT_LIMIT_MAX_PERIOD_MS);
    int64_t burst[TENANT_MAX_WINDOWS] = {1, 0, 0, 0};
    struct tenant_gcra_state st, before;
    struct tenant_verdict v;
    int rc = TALLY_OK;
    int i;

    (void)state;
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_gcra_decide(&ls, burst, &st, TENANT_TIME_MAX_MS, 1, &v), TALLY_OK);
    assert_true(v.admitted);
    assert_int_equal(v.v[0].reset_ms, TENANT_TIME_MAX_MS + TENANT_LIMIT_MAX_PERIOD_MS);
    /* Debt pushes the TAT ahead until a cap, then charging is an error, never a wrap. */
    ls = one_limit(1, TENANT_LIMIT_MAX_PERIOD_MS);
    for (i = 0; i < 1000000 && rc == TALLY_OK; i++) {
        before = st;
        rc = tenant_gcra_charge(&ls, NULL, &st, TENANT_TIME_MAX_MS, TENANT_COST_MAX);
    }
    assert_int_equal(rc, TALLY_EOVERFLOW);
    assert_memory_equal(&st, &before, sizeof(st));
    assert_int_equal(tenant_gcra_check(&ls, NULL, &st, TENANT_TIME_MAX_MS, 1, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_true(v.retry_after_ms > 0);
    assert_int_equal(tenant_gcra_check(&ls, NULL, &st, 0, 0, &v), TALLY_ECOST);
    assert_int_equal(tenant_gcra_check(&ls, NULL, &st, -1, 1, &v), TALLY_EINVAL);
    st.tat_frac[0] = st.n[0];
    assert_int_equal(tenant_gcra_check(&ls, NULL, &st, 0, 1, &v), TALLY_EINVAL);
    ls.v[0].n = TENANT_LIMIT_MAX_N + 1;
    assert_int_equal(tenant_gcra_charge(&ls, NULL, &st, 0, 1), TALLY_EOVERFLOW);
}

/* A new n for the same period rounds the TAT up: never earlier, less than 1/n ms later. */
static void
test_gcra_limit_change_never_moves_tat_earlier(void **state)
{
    struct tenant_limits three = one_limit(3, 1000), seven = one_limit(7, 1000);
    struct tenant_gcra_state st;
    struct tenant_verdict v;

    (void)state;
    memset(&st, 0, sizeof(st));
    assert_int_equal(tenant_gcra_decide(&three, NULL, &st, 0, 3, &v), TALLY_OK); /* TAT 1000 */
    assert_int_equal(tenant_gcra_decide(&three, NULL, &st, 0, 2, &v), TALLY_OK);
    assert_false(v.admitted);
    assert_int_equal(tenant_gcra_decide(&three, NULL, &st, 334, 1, &v), TALLY_OK);
    assert_int_equal(st.tat_ms[0], 1333);
    assert_int_equal(st.tat_frac[0], 1); /* 1333 + 1/3 */
    assert_int_equal(tenant_gcra_charge(&seven, NULL, &st, 334, 1), TALLY_OK);
    /* 1333 + ceil(7/3)/7 = 1333 + 3/7, then + 1000/7 = 1476 + 2/7. */
    assert_int_equal(st.tat_ms[0], 1476);
    assert_int_equal(st.tat_frac[0], 2);
    assert_int_equal(st.n[0], 7);
}

/* The model: one limit of a generated policy, with its TAT in ticks of 1/n ms. */
struct model {
    int64_t n, period_ms, burst;
    int64_t tat; /* ticks */
};

struct event {
    int64_t eval_ms;
    int64_t cost;
};

/* Runs one generated schedule against the model; checks retry exactness and the interval
 * bound of every limit over the admitted events. */
static void
run_schedule(uint64_t *s, bool backward)
{
    struct tenant_limits ls;
    int64_t burst[TENANT_MAX_WINDOWS] = {0};
    struct model m[TENANT_MAX_WINDOWS];
    struct tenant_gcra_state st;
    struct event ev[STEPS];
    int64_t now_ms = test_rand_range(s, 0, 2000000000000), high_ms = 0;
    int count = 0;

    memset(&ls, 0, sizeof(ls));
    memset(&st, 0, sizeof(st));
    ls.count = (uint32_t)test_rand_range(s, 1, 2);
    for (uint32_t i = 0; i < ls.count; i++) {
        m[i].n = ls.v[i].n = test_rand_range(s, 1, 40);
        m[i].period_ms = ls.v[i].period_ms =
            i == 0 ? test_rand_range(s, 1, 60) * 50 : m[0].period_ms * test_rand_range(s, 2, 8);
        burst[i] = test_rand_range(s, 0, 1) ? 0 : test_rand_range(s, 1, 2 * m[i].n);
        m[i].burst = burst[i] == 0 ? m[i].n : burst[i];
        m[i].tat = 0;
    }
    for (int step = 0; step < STEPS; step++) {
        struct tenant_verdict v, r;
        int64_t cost = test_rand_range(s, 1, 3 + (test_rand_range(s, 0, 20) == 0) * 80), eval_ms;
        int64_t step_ms = test_rand_range(s, 0, m[0].period_ms / m[0].n + 1), retry_ms = 0;
        bool admit = true;

        if (test_rand_range(s, 0, 20) == 0)
            step_ms = test_rand_range(s, 0, m[ls.count - 1].period_ms);
        if (backward && test_rand_range(s, 0, 3) == 0)
            step_ms = -test_rand_range(s, 0, m[0].period_ms);
        now_ms = now_ms + step_ms < 0 ? 0 : now_ms + step_ms;
        eval_ms = now_ms > high_ms ? now_ms : high_ms;

        for (uint32_t i = 0; i < ls.count; i++) {
            int64_t t = eval_ms * m[i].n, base = m[i].tat > t ? m[i].tat : t;
            int64_t allow, wait_ms;

            if (base - t + cost * m[i].period_ms <= m[i].burst * m[i].period_ms)
                continue;
            admit = false;
            allow = base - (m[i].burst - cost) * m[i].period_ms;
            wait_ms = (allow + m[i].n - 1) / m[i].n - now_ms;
            if (cost > m[i].burst)
                retry_ms = TENANT_RETRY_NEVER;
            else if (retry_ms != TENANT_RETRY_NEVER && wait_ms > retry_ms)
                retry_ms = wait_ms;
        }

        assert_int_equal(tenant_gcra_check(&ls, burst, &st, now_ms, cost, &v), TALLY_OK);
        assert_int_equal(v.eval_ms, eval_ms);
        assert_int_equal(v.admitted, admit);
        assert_int_equal(v.retry_after_ms, retry_ms);
        if (ls.count == 1) {
            /* Remaining is exact: that many tokens fit now (besides this cost when admitted),
             * one more does not. */
            int64_t fits = v.v[0].remaining + (admit ? cost : 0);

            if (fits > 0) {
                assert_int_equal(tenant_gcra_check(&ls, burst, &st, now_ms, fits, &r), TALLY_OK);
                assert_true(r.admitted);
            }
            assert_int_equal(tenant_gcra_check(&ls, burst, &st, now_ms, fits + 1, &r), TALLY_OK);
            assert_false(r.admitted);
        }
        if (!admit && retry_ms > 0) {
            int64_t secs = tenant_retry_after_seconds(retry_ms);

            assert_int_equal(tenant_gcra_check(&ls, burst, &st, now_ms + retry_ms, cost, &r),
                             TALLY_OK);
            assert_true(r.admitted);
            assert_int_equal(tenant_gcra_check(&ls, burst, &st, now_ms + retry_ms - 1, cost, &r),
                             TALLY_OK);
            assert_false(r.admitted);
            assert_int_equal(tenant_gcra_check(&ls, burst, &st, now_ms + secs * 1000, cost, &r),
                             TALLY_OK);
            assert_true(r.admitted);
        }
        if (!admit)
            continue;
        assert_int_equal(tenant_gcra_charge(&ls, burst, &st, now_ms, cost), TALLY_OK);
        for (uint32_t i = 0; i < ls.count; i++) {
            int64_t t = eval_ms * m[i].n;

            m[i].tat = (m[i].tat > t ? m[i].tat : t) + cost * m[i].period_ms;
            assert_int_equal(st.tat_ms[i] * m[i].n + st.tat_frac[i], m[i].tat);
        }
        ev[count++] = (struct event){eval_ms, cost};
        high_ms = eval_ms;
    }

    /* No interval [a, b] holds more than floor((b - a + tau) / T) + 1 = floor((b - a) * n / P)
     * + burst tokens, measured on the clock the counter ran on (which never goes back). */
    for (uint32_t i = 0; i < ls.count; i++) {
        for (int a = 0; a < count; a++) {
            int64_t sum = 0;

            for (int b = a; b < count; b++) {
                sum += ev[b].cost;
                assert_true(ev[b].eval_ms >= ev[a].eval_ms);
                assert_true(sum <=
                            (ev[b].eval_ms - ev[a].eval_ms) * m[i].n / m[i].period_ms + m[i].burst);
            }
        }
    }
}

static void
test_gcra_schedule_matches_model(void **state)
{
    uint64_t s = seed ^ 0x33;

    (void)state;
    for (int k = 0; k < SCHEDULES; k++)
        run_schedule(&s, false);
}

static void
test_gcra_backward_clock_opens_nothing(void **state)
{
    uint64_t s = seed ^ 0x44;

    (void)state;
    for (int k = 0; k < SCHEDULES; k++)
        run_schedule(&s, true);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gcra_fresh_key_spends_burst_then_rate),
        cmocka_unit_test(test_gcra_explicit_burst_spaces_requests),
        cmocka_unit_test(test_gcra_exact_for_huge_n_and_periods),
        cmocka_unit_test(test_gcra_extremes_do_not_overflow),
        cmocka_unit_test(test_gcra_limit_change_never_moves_tat_earlier),
        cmocka_unit_test(test_gcra_schedule_matches_model),
        cmocka_unit_test(test_gcra_backward_clock_opens_nothing),
    };

    return cmocka_run_group_tests_name("tenant_gcra", tests, group_setup, NULL);
}

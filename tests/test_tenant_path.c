/*
 * The path evaluator (tenant_count.h): scope names, Retry-After seconds, the scope that fires,
 * argument checks, no allocation on the hot path, and a seeded property test over generated
 * paths (one to four budgets of either algorithm, with or without slots): a decision equals the
 * budgets checked one by one, a refused path leaves every budget and slot byte as it was, an
 * admitted one charges each exactly as a lone charge would, and Retry-After is exact for the
 * whole path. TALLY_SEED replays a run.
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
#include "test_alloc.h"
#include "test_support.h"

#define SCHEDULES 3000
#define STEPS     100
#define SLOTS_MAX 4

static uint64_t seed;

/* One seed per run, printed by test_seed(); each test derives its own stream from it. */
static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

/* A path with storage for its budgets and slots, so it can be copied whole. */
struct fixture {
    struct tenant_budget b[TENANT_PATH_MAX_BUDGETS];
    struct tenant_slot v[SLOTS_MAX];
    struct tenant_slot_table slots;
    struct tenant_path path;
};

/* Deep copy of `from` into `to`, pointers rewired to `to`'s own storage. */
static void
fixture_copy(struct fixture *to, const struct fixture *from)
{
    *to = *from;
    for (uint32_t i = 0; i < from->path.count; i++)
        to->path.budgets[i] = &to->b[i];
    to->slots.v = to->v;
    if (from->path.slots != NULL)
        to->path.slots = &to->slots;
}

static void
assert_fixture_equal(const struct fixture *a, const struct fixture *b)
{
    assert_memory_equal(a->b, b->b, sizeof(a->b));
    assert_memory_equal(a->v, b->v, sizeof(a->v));
    assert_int_equal(a->slots.next_id, b->slots.next_id);
    assert_int_equal(a->slots.last_now_ms, b->slots.last_now_ms);
}

static struct tenant_limits
limits2(int64_t n0, int64_t p0, int64_t n1, int64_t p1)
{
    struct tenant_limits ls;

    memset(&ls, 0, sizeof(ls));
    ls.count = n1 > 0 ? 2 : 1;
    ls.v[0] = (struct tenant_limit){n0, p0};
    ls.v[1] = (struct tenant_limit){n1, p1};
    return ls;
}

static void
test_path_scope_names_and_seconds(void **state)
{
    (void)state;
    assert_string_equal(tenant_scope_name(TENANT_SCOPE_NONE), "none");
    assert_string_equal(tenant_scope_name(TENANT_SCOPE_PLAN), "plan");
    assert_string_equal(tenant_scope_name(TENANT_SCOPE_LINK), "link");
    assert_string_equal(tenant_scope_name(TENANT_SCOPE_ENDPOINT_TENANT), "endpoint");
    assert_string_equal(tenant_scope_name(TENANT_SCOPE_ENDPOINT_LINK), "endpoint");
    assert_string_equal(tenant_scope_name(TENANT_SCOPE_CONCURRENCY), "concurrency");
    assert_string_equal(tenant_scope_name((enum tenant_scope)77), "unknown");
    assert_int_equal(tenant_retry_after_seconds(0), 0);
    assert_int_equal(tenant_retry_after_seconds(1), 1);
    assert_int_equal(tenant_retry_after_seconds(1000), 1);
    assert_int_equal(tenant_retry_after_seconds(1001), 2);
    assert_int_equal(tenant_retry_after_seconds(59999), 60);
    assert_int_equal(tenant_retry_after_seconds(TENANT_RETRY_NEVER), -1);
    assert_int_equal(tenant_retry_after_seconds(INT64_MAX), INT64_MAX / 1000 + 1);
}

/* The docs/DESIGN.md §2 scenario: a narrow refusal names its scope and drains nothing wider. */
static void
test_path_narrow_refusal_drains_nothing(void **state)
{
    struct fixture f;
    struct tenant_limits plan = limits2(600, 60000, 36000, 3600000);
    struct tenant_limits ep_link = limits2(2, 1000, 0, 0);
    struct tenant_decision d;
    int64_t t0 = 1700000000250;

    (void)state;
    memset(&f, 0, sizeof(f));
    assert_int_equal(tenant_budget_init(&f.b[0], TENANT_SCOPE_PLAN, TENANT_ALG_WINDOW, &plan),
                     TALLY_OK);
    assert_int_equal(
        tenant_budget_init(&f.b[1], TENANT_SCOPE_ENDPOINT_LINK, TENANT_ALG_GCRA, &ep_link),
        TALLY_OK);
    assert_int_equal(tenant_slot_table_init(&f.slots, f.v, 2), TALLY_OK);
    f.path = (struct tenant_path){{&f.b[0], &f.b[1]}, 2, &f.slots, 1, 0};

    assert_int_equal(tenant_path_decide(&f.path, t0, 1, &d), TALLY_OK);
    assert_true(d.admitted);
    assert_int_equal(d.slot_id, 1);
    assert_int_equal(d.scope, TENANT_SCOPE_CONCURRENCY); /* 0 slots left: the tightest */
    assert_int_equal(d.remaining, 0);
    /* The slot is taken: refused by concurrency until it expires, nothing charged. */
    assert_int_equal(tenant_path_decide(&f.path, t0 + 10, 1, &d), TALLY_OK);
    assert_false(d.admitted);
    assert_int_equal(d.scope, TENANT_SCOPE_CONCURRENCY);
    assert_int_equal(d.budget_index, 2);
    assert_int_equal(d.retry_after_ms, TENANT_SLOT_TTL_MS_DEFAULT - 10);
    assert_int_equal(f.b[0].st.window.used[0], 1);
    assert_true(tenant_slot_release(&f.slots, 1, t0 + 20));

    assert_int_equal(tenant_path_decide(&f.path, t0 + 20, 1, &d), TALLY_OK);
    assert_true(d.admitted);
    assert_true(tenant_slot_release(&f.slots, d.slot_id, t0 + 20));
    /* Two tokens per second on the endpoint: the third is refused there, the plan keeps 598. */
    assert_int_equal(tenant_path_decide(&f.path, t0 + 30, 1, &d), TALLY_OK);
    assert_false(d.admitted);
    assert_int_equal(d.scope, TENANT_SCOPE_ENDPOINT_LINK);
    assert_string_equal(tenant_scope_name(d.scope), "endpoint");
    assert_int_equal(d.budget_index, 1);
    assert_int_equal(d.retry_after_ms, 500 - 30); /* T = 500 ms: the next is due at t0+500 */
    assert_int_equal(f.b[0].st.window.used[0], 2);
    assert_int_equal(f.b[0].st.window.used[1], 2);
    assert_int_equal(f.slots.next_id, 2);
    /* A cost above the endpoint's n can never pass; the plan's wait is shorter but loses. */
    assert_int_equal(tenant_path_decide(&f.path, t0 + 30, 3, &d), TALLY_OK);
    assert_true(d.never);
    assert_int_equal(d.retry_after_ms, TENANT_RETRY_NEVER);
    assert_int_equal(d.scope, TENANT_SCOPE_ENDPOINT_LINK);
}

static void
test_path_without_bounds_admits(void **state)
{
    struct tenant_path p;
    struct tenant_decision d;
    struct tenant_budget b;
    struct tenant_limits none = {0, {{0, 0}}};

    (void)state;
    memset(&p, 0, sizeof(p));
    assert_int_equal(tenant_path_decide(&p, 5, 1, &d), TALLY_OK);
    assert_true(d.admitted);
    assert_int_equal(d.scope, TENANT_SCOPE_NONE);
    assert_int_equal(d.limit, TENANT_UNBOUNDED);
    assert_int_equal(d.remaining, TENANT_UNBOUNDED);
    assert_int_equal(tenant_budget_init(&b, TENANT_SCOPE_LINK, TENANT_ALG_WINDOW, &none), TALLY_OK);
    p.budgets[0] = &b;
    p.count = 1;
    assert_int_equal(tenant_path_decide(&p, 5, TENANT_COST_MAX, &d), TALLY_OK);
    assert_true(d.admitted);
    assert_int_equal(d.scope, TENANT_SCOPE_NONE);
    assert_int_equal(tenant_path_decide(&p, 5, 0, &d), TALLY_ECOST);
}

static void
test_path_bad_arguments_change_nothing(void **state)
{
    struct fixture f, before;
    struct tenant_limits ls = limits2(5, 1000, 0, 0);
    struct tenant_decision d;

    (void)state;
    memset(&f, 0, sizeof(f));
    assert_int_equal(tenant_budget_init(&f.b[0], TENANT_SCOPE_NONE, TENANT_ALG_WINDOW, &ls),
                     TALLY_EINVAL);
    assert_int_equal(tenant_budget_init(&f.b[0], TENANT_SCOPE_PLAN, (enum tenant_algorithm)9, &ls),
                     TALLY_EINVAL);
    assert_int_equal(tenant_budget_init(&f.b[0], TENANT_SCOPE_PLAN, TENANT_ALG_WINDOW, &ls),
                     TALLY_OK);
    assert_int_equal(tenant_budget_init(&f.b[1], TENANT_SCOPE_LINK, TENANT_ALG_GCRA, &ls),
                     TALLY_OK);
    assert_int_equal(tenant_slot_table_init(&f.slots, f.v, 2), TALLY_OK);
    f.path = (struct tenant_path){{&f.b[0], &f.b[1]}, 2, &f.slots, 2, 0};
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, &d), TALLY_OK);
    fixture_copy(&before, &f);

    assert_int_equal(tenant_path_decide(&f.path, 1000, 0, &d), TALLY_ECOST);
    assert_int_equal(tenant_path_decide(&f.path, -1, 1, &d), TALLY_EINVAL);
    assert_int_equal(tenant_path_decide(NULL, 1000, 1, &d), TALLY_EINVAL);
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, NULL), TALLY_EINVAL);
    f.path.budgets[1] = &f.b[0]; /* the same budget twice would be charged twice */
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, &d), TALLY_EINVAL);
    f.path.budgets[1] = &f.b[1];
    f.path.count = TENANT_PATH_MAX_BUDGETS + 1;
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, &d), TALLY_EINVAL);
    f.path.count = 2;
    f.path.slot_limit = 3; /* above capacity */
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, &d), TALLY_EINVAL);
    f.path.slot_limit = 2;
    f.path.slot_ttl_ms = -1;
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, &d), TALLY_EINVAL);
    f.path.slot_ttl_ms = 0;
    f.b[1].scope = TENANT_SCOPE_CONCURRENCY;
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, &d), TALLY_EINVAL);
    f.b[1].scope = TENANT_SCOPE_LINK;
    f.b[1].limits.v[0].n = 0; /* the second budget is bad: the first must not be charged */
    assert_int_equal(tenant_path_decide(&f.path, 1000, 1, &d), TALLY_EINVAL);
    f.b[1].limits.v[0].n = 5;
    assert_fixture_equal(&f, &before);
}

/* The hot path allocates nothing: 10,000 decisions (admitted and refused) and releases. */
static void
test_path_decisions_do_not_allocate(void **state)
{
    struct fixture f;
    struct tenant_limits plan = limits2(600, 60000, 36000, 3600000);
    struct tenant_limits link = limits2(100, 1000, 0, 0);
    struct tenant_limits ep = limits2(50, 1000, 2000, 60000);
    struct tenant_decision d;
    uint64_t before;
    int admitted = 0;

    (void)state;
    memset(&f, 0, sizeof(f));
    assert_int_equal(tenant_budget_init(&f.b[0], TENANT_SCOPE_PLAN, TENANT_ALG_WINDOW, &plan),
                     TALLY_OK);
    assert_int_equal(tenant_budget_init(&f.b[1], TENANT_SCOPE_LINK, TENANT_ALG_WINDOW, &link),
                     TALLY_OK);
    assert_int_equal(
        tenant_budget_init(&f.b[2], TENANT_SCOPE_ENDPOINT_TENANT, TENANT_ALG_GCRA, &ep), TALLY_OK);
    assert_int_equal(
        tenant_budget_init(&f.b[3], TENANT_SCOPE_ENDPOINT_LINK, TENANT_ALG_GCRA, &link), TALLY_OK);
    assert_int_equal(tenant_slot_table_init(&f.slots, f.v, SLOTS_MAX), TALLY_OK);
    f.path = (struct tenant_path){{&f.b[0], &f.b[1], &f.b[2], &f.b[3]}, 4, &f.slots, 3, 500};

    before = tally_alloc_count();
    for (int i = 0; i < 10000; i++) {
        assert_int_equal(tenant_path_decide(&f.path, 1700000000000 + i * 7, 1 + i % 3, &d),
                         TALLY_OK);
        admitted += d.admitted;
        if (d.admitted && i % 2 == 0)
            assert_true(tenant_slot_release(&f.slots, d.slot_id, 1700000000000 + i * 7));
    }
    assert_int_equal(tally_alloc_count(), before);
    assert_true(admitted > 100 && admitted < 10000); /* both outcomes were exercised */
}

static void
gen_fixture(uint64_t *s, struct fixture *f)
{
    static const enum tenant_scope scopes[4] = {TENANT_SCOPE_PLAN, TENANT_SCOPE_LINK,
                                                TENANT_SCOPE_ENDPOINT_TENANT,
                                                TENANT_SCOPE_ENDPOINT_LINK};

    memset(f, 0, sizeof(*f));
    f->path.count = (uint32_t)test_rand_range(s, 1, 4);
    for (uint32_t i = 0; i < f->path.count; i++) {
        int64_t p0 = test_rand_range(s, 1, 30) * 100;
        int64_t n0 = test_rand_range(s, 2, 15);
        struct tenant_limits ls =
            test_rand_range(s, 0, 2) == 0
                ? limits2(n0, p0, 0, 0)
                : limits2(n0, p0, test_rand_range(s, n0, n0 * 5), p0 * test_rand_range(s, 2, 10));
        enum tenant_algorithm alg = test_rand_range(s, 0, 1) ? TENANT_ALG_GCRA : TENANT_ALG_WINDOW;

        assert_int_equal(tenant_budget_init(&f->b[i], scopes[i], alg, &ls), TALLY_OK);
        if (alg == TENANT_ALG_GCRA && test_rand_range(s, 0, 2) == 0)
            f->b[i].burst[0] = test_rand_range(s, 1, n0 * 2);
        f->path.budgets[i] = &f->b[i];
    }
    if (test_rand_range(s, 0, 1)) {
        int64_t capacity = test_rand_range(s, 1, SLOTS_MAX);

        assert_int_equal(tenant_slot_table_init(&f->slots, f->v, capacity), TALLY_OK);
        f->path.slots = &f->slots;
        f->path.slot_limit = test_rand_range(s, 1, capacity);
        f->path.slot_ttl_ms = test_rand_range(s, 0, 3) * 1000;
    }
}

/* What the budgets say one by one: the expected admission and Retry-After of the path. */
static void
expect_one_by_one(struct fixture *f, int64_t now_ms, int64_t cost, bool *admit, int64_t *retry_ms)
{
    struct tenant_verdict v;

    *admit = true;
    *retry_ms = 0;
    for (uint32_t i = 0; i <= f->path.count; i++) {
        const struct tenant_budget *b = i < f->path.count ? &f->b[i] : NULL;

        if (b == NULL && f->path.slots == NULL)
            break;
        if (b == NULL)
            assert_int_equal(tenant_slot_check(&f->slots, f->path.slot_limit, now_ms, &v),
                             TALLY_OK);
        else if (b->algorithm == TENANT_ALG_GCRA)
            assert_int_equal(tenant_gcra_check(&b->limits, b->burst, &b->st.gcra, now_ms, cost, &v),
                             TALLY_OK);
        else
            assert_int_equal(tenant_window_check(&b->limits, &b->st.window, now_ms, cost, &v),
                             TALLY_OK);
        if (v.admitted)
            continue;
        if (*admit || (*retry_ms != TENANT_RETRY_NEVER &&
                       (v.retry_after_ms == TENANT_RETRY_NEVER || v.retry_after_ms > *retry_ms)))
            *retry_ms = v.retry_after_ms;
        *admit = false;
    }
}

/* The same charges applied budget by budget, for comparison with the path's. */
static void
charge_one_by_one(struct fixture *f, int64_t now_ms, int64_t cost, int64_t *slot_id)
{
    *slot_id = 0;
    for (uint32_t i = 0; i < f->path.count; i++) {
        struct tenant_budget *b = &f->b[i];

        if (b->algorithm == TENANT_ALG_GCRA)
            assert_int_equal(tenant_gcra_charge(&b->limits, b->burst, &b->st.gcra, now_ms, cost),
                             TALLY_OK);
        else
            assert_int_equal(tenant_window_charge(&b->limits, &b->st.window, now_ms, cost),
                             TALLY_OK);
    }
    if (f->path.slots != NULL)
        assert_int_equal(tenant_slot_charge(&f->slots, now_ms, f->path.slot_ttl_ms, slot_id),
                         TALLY_OK);
}

static void
run_schedule(uint64_t *s, int *refusals)
{
    struct fixture f, before, probe;
    int64_t now_ms = test_rand_range(s, 0, 2000000000000);

    gen_fixture(s, &f);
    for (int step = 0; step < STEPS; step++) {
        struct tenant_decision d;
        int64_t cost = test_rand_range(s, 1, 4), retry_ms, slot_id;
        bool admit;

        now_ms += test_rand_range(s, 0, 8) == 0 ? -test_rand_range(s, 0, 2000)
                                                : test_rand_range(s, 0, 300);
        now_ms = now_ms < 0 ? 0 : now_ms;
        if (f.path.slots != NULL && test_rand_range(s, 0, 3) == 0 && f.slots.next_id > 0)
            (void)tenant_slot_release(&f.slots, test_rand_range(s, 1, f.slots.next_id), now_ms);

        fixture_copy(&before, &f);
        expect_one_by_one(&f, now_ms, cost, &admit, &retry_ms);
        assert_int_equal(tenant_path_decide(&f.path, now_ms, cost, &d), TALLY_OK);
        assert_int_equal(d.admitted, admit);
        assert_int_equal(d.retry_after_ms, retry_ms);
        assert_int_equal(d.never, retry_ms == TENANT_RETRY_NEVER);
        if (admit) {
            /* Charged everywhere, exactly as lone charges would. */
            charge_one_by_one(&before, now_ms, cost, &slot_id);
            assert_int_equal(d.slot_id, slot_id);
            assert_fixture_equal(&f, &before);
            continue;
        }
        /* All or nothing: a refused path leaves every budget and slot exactly as it was. */
        (*refusals)++;
        assert_fixture_equal(&f, &before);
        assert_true(d.scope != TENANT_SCOPE_NONE);
        assert_false(d.budget_index < f.path.count ? d.budget[d.budget_index].admitted
                                                   : d.slot.admitted);
        if (retry_ms == TENANT_RETRY_NEVER)
            continue;
        /* Exact for the whole path: admitted at the announced instant, refused 1 ms before. */
        fixture_copy(&probe, &f);
        assert_int_equal(tenant_path_decide(&probe.path, now_ms + retry_ms, cost, &d), TALLY_OK);
        assert_true(d.admitted);
        fixture_copy(&probe, &f);
        assert_int_equal(tenant_path_decide(&probe.path, now_ms + retry_ms - 1, cost, &d),
                         TALLY_OK);
        assert_false(d.admitted);
    }
}

static void
test_path_schedule_all_or_nothing(void **state)
{
    uint64_t s = seed ^ 0x66;
    int refusals = 0;

    (void)state;
    for (int k = 0; k < SCHEDULES; k++)
        run_schedule(&s, &refusals);
    assert_true(refusals > SCHEDULES * 5); /* refusals were common enough to test anything */
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_scope_names_and_seconds),
        cmocka_unit_test(test_path_narrow_refusal_drains_nothing),
        cmocka_unit_test(test_path_without_bounds_admits),
        cmocka_unit_test(test_path_bad_arguments_change_nothing),
        cmocka_unit_test(test_path_decisions_do_not_allocate),
        cmocka_unit_test(test_path_schedule_all_or_nothing),
    };

    return cmocka_run_group_tests_name("tenant_path", tests, group_setup, NULL);
}

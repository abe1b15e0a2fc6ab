/*
 * Concurrency slots (tenant_count.h): acquire, release, expiry after the TTL, argument checks,
 * and a seeded property test that runs generated operations (acquire, release of live, stale and
 * unknown ids, clock steps both ways, a limit that changes) against a model: never more than K
 * held, an expired slot frees itself, a double release changes nothing, ids increase, and
 * Retry-After is exact. TALLY_SEED replays a run.
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
#define STEPS     150
#define CAP_MAX   12

static uint64_t seed;

/* One seed per run, printed by test_seed(); each test derives its own stream from it. */
static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

static void
test_slot_acquire_release_and_refuse(void **state)
{
    struct tenant_slot v[4], before[4];
    struct tenant_slot_table t, tb;
    struct tenant_verdict d;
    int64_t id1, id2, id3;

    (void)state;
    assert_int_equal(tenant_slot_table_init(&t, v, 4), TALLY_OK);
    assert_int_equal(tenant_slot_acquire(&t, 2, 1000, 0, &id1, &d), TALLY_OK);
    assert_true(d.admitted);
    assert_int_equal(id1, 1);
    assert_int_equal(d.v[0].remaining, 1);
    assert_int_equal(tenant_slot_acquire(&t, 2, 1500, 10000, &id2, &d), TALLY_OK);
    assert_int_equal(id2, 2);
    assert_int_equal(tenant_slot_held(&t, 1500), 2);
    assert_int_equal(tenant_slot_acquire(&t, 2, 2000, 0, &id3, &d), TALLY_OK);
    assert_false(d.admitted);
    assert_int_equal(id3, 0);
    assert_int_equal(d.retry_after_ms, 11500 - 2000); /* the 10 s slot frees first */
    assert_int_equal(d.v[0].reset_ms, 11500);
    assert_true(tenant_slot_release(&t, id1, 2100));
    /* A double release changes nothing, byte for byte. */
    memcpy(before, v, sizeof(v));
    tb = t;
    assert_false(tenant_slot_release(&t, id1, 2200));
    assert_false(tenant_slot_release(&t, 999, 2200));
    assert_false(tenant_slot_release(&t, 0, 2200));
    assert_memory_equal(v, before, sizeof(v));
    assert_memory_equal(&t, &tb, sizeof(t));
    assert_int_equal(tenant_slot_acquire(&t, 2, 2300, 0, &id3, &d), TALLY_OK);
    assert_true(d.admitted);
    assert_int_equal(id3, 3);
}

static void
test_slot_expired_slot_frees_itself(void **state)
{
    struct tenant_slot v[1];
    struct tenant_slot_table t;
    struct tenant_verdict d;
    int64_t id, id2;

    (void)state;
    assert_int_equal(tenant_slot_table_init(&t, v, 1), TALLY_OK);
    assert_int_equal(tenant_slot_acquire(&t, 1, 50000, 0, &id, &d), TALLY_OK);
    assert_int_equal(v[0].expires_ms, 50000 + TENANT_SLOT_TTL_MS_DEFAULT);
    assert_int_equal(tenant_slot_held(&t, 79999), 1);
    assert_int_equal(tenant_slot_acquire(&t, 1, 79999, 0, &id2, &d), TALLY_OK);
    assert_false(d.admitted);
    assert_int_equal(d.retry_after_ms, 1);
    assert_int_equal(tenant_slot_held(&t, 80000), 0);
    /* Releasing after expiry frees nothing: it was already free. */
    assert_false(tenant_slot_release(&t, id, 80000));
    assert_int_equal(tenant_slot_acquire(&t, 1, 80000, 0, &id2, &d), TALLY_OK);
    assert_true(d.admitted);
    /* A clock stepping back does not resurrect the expired slot or free the new one. */
    assert_int_equal(tenant_slot_held(&t, 60000), 1);
    assert_false(tenant_slot_release(&t, id, 60000));
    assert_true(tenant_slot_release(&t, id2, 60000));
}

static void
test_slot_bad_arguments_are_errors(void **state)
{
    struct tenant_slot v[3];
    struct tenant_slot_table t;
    struct tenant_verdict d;
    int64_t id;

    (void)state;
    assert_int_equal(tenant_slot_table_init(&t, v, 0), TALLY_EINVAL);
    assert_int_equal(tenant_slot_table_init(&t, NULL, 3), TALLY_EINVAL);
    assert_int_equal(tenant_slot_table_init(&t, v, TENANT_CONCURRENCY_MAX + 1), TALLY_EINVAL);
    assert_int_equal(tenant_slot_table_init(&t, v, 3), TALLY_OK);
    assert_int_equal(tenant_slot_check(&t, 0, 0, &d), TALLY_EINVAL);
    assert_int_equal(tenant_slot_check(&t, 4, 0, &d), TALLY_EINVAL); /* K above capacity */
    assert_int_equal(tenant_slot_check(&t, 1, -1, &d), TALLY_EINVAL);
    assert_int_equal(tenant_slot_check(&t, 1, TENANT_TIME_MAX_MS + 1, &d), TALLY_EOVERFLOW);
    assert_int_equal(tenant_slot_acquire(&t, 1, 0, -1, &id, &d), TALLY_EINVAL);
    assert_int_equal(tenant_slot_acquire(&t, 1, 0, TENANT_LIMIT_MAX_PERIOD_MS + 1, &id, &d),
                     TALLY_EOVERFLOW);
    assert_int_equal(t.next_id, 0);
    assert_int_equal(tenant_slot_held(&t, 0), 0);
    /* Charge ignores K (WAL replay) but not the capacity. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            tenant_slot_charge(&t, TENANT_TIME_MAX_MS, TENANT_LIMIT_MAX_PERIOD_MS, &id), TALLY_OK);
    assert_int_equal(tenant_slot_charge(&t, 0, 0, &id), TALLY_EOVERFLOW);
    assert_int_equal(tenant_slot_held(&t, 0), 3);
    t.next_id = INT64_MAX;
    assert_true(tenant_slot_release(&t, 3, 0));
    assert_int_equal(tenant_slot_charge(&t, 0, 0, &id), TALLY_EOVERFLOW);
    assert_int_equal(tenant_slot_acquire(&t, 3, 0, 0, &id, &d), TALLY_EOVERFLOW);
    assert_int_equal(id, 0);
}

/* The model: live ids with their expiry. */
struct model {
    int64_t id[CAP_MAX];
    int64_t expires_ms[CAP_MAX];
    int count;
};

static int
model_held(const struct model *m, int64_t eval_ms)
{
    int held = 0;

    for (int i = 0; i < m->count; i++)
        held += m->expires_ms[i] > eval_ms;
    return held;
}

/* The instant by which enough slots have expired to fit one more under `limit`. */
static int64_t
model_free_at(const struct model *m, int64_t eval_ms, int64_t limit)
{
    int64_t at_ms = eval_ms;

    while (model_held(m, at_ms) >= limit) {
        int64_t next_ms = INT64_MAX;

        for (int i = 0; i < m->count; i++) {
            if (m->expires_ms[i] > at_ms && m->expires_ms[i] < next_ms)
                next_ms = m->expires_ms[i];
        }
        at_ms = next_ms;
    }
    return at_ms;
}

static void
run_schedule(uint64_t *s)
{
    struct tenant_slot v[CAP_MAX], before_v[CAP_MAX];
    struct tenant_slot_table t, before_t;
    struct model m = {{0}, {0}, 0};
    int64_t capacity = test_rand_range(s, 1, CAP_MAX), limit = test_rand_range(s, 1, capacity);
    int64_t now_ms = test_rand_range(s, 0, 2000000000000), high_ms = 0, last_id = 0;
    int64_t issued[STEPS];
    int issued_count = 0;

    assert_int_equal(tenant_slot_table_init(&t, v, capacity), TALLY_OK);
    for (int step = 0; step < STEPS; step++) {
        int64_t op = test_rand_range(s, 0, 9), ttl_ms = test_rand_range(s, 1, 5000), eval_ms;

        now_ms += test_rand_range(s, 0, 10) == 0 ? -test_rand_range(s, 0, 3000)
                                                 : test_rand_range(s, 0, 600);
        now_ms = now_ms < 0 ? 0 : now_ms;
        eval_ms = now_ms > high_ms ? now_ms : high_ms;
        if (test_rand_range(s, 0, 30) == 0)
            limit = test_rand_range(s, 1, capacity); /* plans change */

        if (op < 5) {
            struct tenant_verdict d, r;
            int64_t id, held = model_held(&m, eval_ms);

            assert_int_equal(tenant_slot_acquire(&t, limit, now_ms, ttl_ms, &id, &d), TALLY_OK);
            assert_int_equal(d.admitted, held < limit);
            /* Never more than K: an acquire never takes the count past K (a lowered K may
             * find more held, and then only expiry and release bring it down). */
            assert_true(tenant_slot_held(&t, now_ms) <= (held < limit ? limit : held));
            if (!d.admitted) {
                int64_t free_ms = model_free_at(&m, eval_ms, limit);

                assert_int_equal(id, 0);
                assert_int_equal(d.retry_after_ms, free_ms - now_ms);
                assert_int_equal(tenant_slot_check(&t, limit, free_ms, &r), TALLY_OK);
                assert_true(r.admitted);
                assert_int_equal(tenant_slot_check(&t, limit, free_ms - 1, &r), TALLY_OK);
                assert_false(r.admitted);
                continue;
            }
            assert_true(id > last_id); /* unique, increasing */
            last_id = id;
            issued[issued_count++] = id;
            /* The model drops expired entries the way the table clears them. */
            for (int i = 0; i < m.count; i++) {
                if (m.expires_ms[i] <= eval_ms) {
                    m.id[i] = m.id[m.count - 1];
                    m.expires_ms[i] = m.expires_ms[--m.count];
                    i--;
                }
            }
            m.id[m.count] = id;
            m.expires_ms[m.count++] = eval_ms + ttl_ms;
            high_ms = eval_ms;
        } else if (issued_count > 0) {
            /* Release a random id ever issued: live, released, or expired. */
            int64_t id = issued[test_rand_range(s, 0, issued_count - 1)];
            bool live = false;

            for (int i = 0; i < m.count; i++) {
                if (m.id[i] != id)
                    continue;
                live = m.expires_ms[i] > eval_ms;
                if (live) {
                    m.id[i] = m.id[m.count - 1];
                    m.expires_ms[i] = m.expires_ms[--m.count];
                }
                break;
            }
            memcpy(before_v, v, sizeof(v));
            before_t = t;
            assert_int_equal(tenant_slot_release(&t, id, now_ms), live);
            if (!live) {
                assert_memory_equal(v, before_v, sizeof(v));
                assert_memory_equal(&t, &before_t, sizeof(t));
            }
            /* Releasing again changes nothing. */
            memcpy(before_v, v, sizeof(v));
            assert_false(tenant_slot_release(&t, id, now_ms));
            assert_memory_equal(v, before_v, sizeof(v));
        }
        assert_int_equal(tenant_slot_held(&t, now_ms), model_held(&m, eval_ms));
    }
}

static void
test_slot_schedule_matches_model(void **state)
{
    uint64_t s = seed ^ 0x55;

    (void)state;
    for (int k = 0; k < SCHEDULES; k++)
        run_schedule(&s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot_acquire_release_and_refuse),
        cmocka_unit_test(test_slot_expired_slot_frees_itself),
        cmocka_unit_test(test_slot_bad_arguments_are_errors),
        cmocka_unit_test(test_slot_schedule_matches_model),
    };

    return cmocka_run_group_tests_name("tenant_slots", tests, group_setup, NULL);
}

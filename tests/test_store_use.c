/*
 * store_use, the exact use counters in DATA/lease-use.map: a counter written before a "kill"
 * (the handle closed without unbinding, the page cache keeping the stores) is adopted by the
 * next open on the same boot for the same lease, at most at its mark; a file of another boot,
 * a slot of another lease, a count above the mark, a lease past its deadline and a corrupt
 * header are all ignored (the caller keeps the mark). The file is 0600 and its slots are reused.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_use.h"
#include "test_support.h"

static char dir[4096];
static const uint8_t boot_a[STORE_USE_BOOT_ID] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
static const uint8_t boot_b[STORE_USE_BOOT_ID] = {9, 9, 9};
static const uint8_t key1[STORE_USE_KEY] = {'l', 'e', 'a', 's', 'e', '1'};
static const uint8_t key2[STORE_USE_KEY] = {'l', 'e', 'a', 's', 'e', '2'};

static int
setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    test_rmtree(dir);
    return 0;
}

static store_use *
open_at(const uint8_t *boot, int64_t now, enum store_use_start want)
{
    store_use *u = NULL;
    enum store_use_start how;

    assert_int_equal(store_use_open(dir, boot, 1024, now, &u, &how), TALLY_OK);
    assert_int_equal(how, want);
    return u;
}

/* A run that admitted `used` on lease 7 (mark 40, deadline 5000) and was killed. */
static void
run_and_kill(int64_t used)
{
    store_use *u = open_at(boot_a, 100, STORE_USE_CREATED);
    int64_t start = 0, *c = store_use_bind(u, key1, 7, 5000, &start);

    assert_non_null(c);
    assert_int_equal(start, 0);
    for (int64_t i = 1; i <= used; i++)
        store_use_set(c, i);
    store_use_close(u); /* no unbind: what a kill leaves */
}

static void
test_use_same_boot_same_lease_is_exact(void **state)
{
    store_use *u;
    struct store_use_stats st;
    struct stat sb;
    char path[4200];
    int64_t used = 40, *c;

    (void)state;
    run_and_kill(13);
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_USE_FILE);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    u = open_at(boot_a, 200, STORE_USE_RESUMED);
    c = store_use_bind(u, key1, 7, 5000, &used);
    assert_non_null(c);
    assert_int_equal(used, 13);
    store_use_stats(u, &st);
    assert_int_equal(st.adopted, 1);
    assert_int_equal(st.orphans, 0);
    /* It goes on counting in the same slot; a second kill keeps that too. */
    store_use_set(c, 20);
    store_use_close(u);
    u = open_at(boot_a, 300, STORE_USE_RESUMED);
    used = 40;
    assert_non_null(store_use_bind(u, key1, 7, 5000, &used));
    assert_int_equal(used, 20);
    store_use_close(u);
}

static void
test_use_other_boot_is_ignored(void **state)
{
    store_use *u;
    struct store_use_stats st;
    int64_t used = 40;

    (void)state;
    run_and_kill(13);
    u = open_at(boot_b, 200, STORE_USE_OTHER_BOOT);
    assert_non_null(store_use_bind(u, key1, 7, 5000, &used));
    assert_int_equal(used, 40); /* the mark */
    store_use_stats(u, &st);
    assert_int_equal(st.adopted, 0);
    store_use_close(u);
    /* The file now belongs to boot b: boot a's count is gone for good. */
    u = open_at(boot_a, 300, STORE_USE_OTHER_BOOT);
    store_use_close(u);
}

static void
test_use_slot_of_another_lease_is_ignored(void **state)
{
    store_use *u;
    int64_t used = 40;

    (void)state;
    run_and_kill(13);
    u = open_at(boot_a, 200, STORE_USE_RESUMED);
    /* Another name, or the same name with another lease id. */
    assert_non_null(store_use_bind(u, key2, 7, 5000, &used));
    assert_int_equal(used, 40);
    assert_non_null(store_use_bind(u, key1, 8, 5000, &used));
    assert_int_equal(used, 40);
    store_use_close(u);
}

static void
test_use_above_the_mark_is_ignored(void **state)
{
    store_use *u;
    struct store_use_stats st;
    int64_t used = 12, *c; /* a mark below what the slot says */

    (void)state;
    run_and_kill(13);
    u = open_at(boot_a, 200, STORE_USE_RESUMED);
    c = store_use_bind(u, key1, 7, 5000, &used);
    assert_non_null(c);
    assert_int_equal(used, 12);
    assert_int_equal(*c, 12); /* the slot now holds the mark */
    store_use_stats(u, &st);
    assert_int_equal(st.adopted, 0);
    assert_int_equal(st.ignored, 1);
    store_use_close(u);
}

static void
test_use_past_deadline_and_corrupt_are_ignored(void **state)
{
    store_use *u;
    struct store_use_stats st;
    char path[4200];
    int64_t used = 40;
    int fd;

    (void)state;
    run_and_kill(13);
    u = open_at(boot_a, 5000, STORE_USE_RESUMED); /* the lease's deadline has passed */
    store_use_stats(u, &st);
    assert_int_equal(st.orphans, 0);
    assert_non_null(store_use_bind(u, key1, 7, 9000, &used));
    assert_int_equal(used, 40);
    store_use_close(u);
    /* A damaged header: emptied, nothing trusted. */
    snprintf(path, sizeof(path), "%s/%s", dir, STORE_USE_FILE);
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, 20), 1);
    close(fd);
    u = open_at(boot_a, 200, STORE_USE_CORRUPT);
    used = 40;
    assert_non_null(store_use_bind(u, key1, 7, 9000, &used));
    assert_int_equal(used, 40);
    store_use_close(u);
}

static void
test_use_slots_are_reused_and_orphans_swept(void **state)
{
    store_use *u;
    struct store_use_stats st;
    int64_t *c[300];

    (void)state;
    run_and_kill(3);
    u = open_at(boot_a, 200, STORE_USE_RESUMED);
    store_use_stats(u, &st);
    assert_int_equal(st.orphans, 1);
    store_use_sweep(u, 4999);
    store_use_stats(u, &st);
    assert_int_equal(st.orphans, 1);
    store_use_sweep(u, 5000); /* its deadline: nobody adopted it */
    store_use_stats(u, &st);
    assert_int_equal(st.orphans, 0);
    for (int round = 0; round < 3; round++) {
        for (uint64_t i = 0; i < 300; i++) {
            int64_t zero = 0;
            c[i] = store_use_bind(u, key2, i + 1, 9000, &zero);
            assert_non_null(c[i]);
        }
        for (int i = 0; i < 300; i++)
            store_use_unbind(u, c[i]);
    }
    store_use_stats(u, &st);
    assert_int_equal(st.bound, 0);
    assert_int_equal(st.high_water, 300);
    store_use_close(u);
}

static void
test_use_full_refuses_a_bind(void **state)
{
    store_use *u = NULL;
    enum store_use_start how;
    struct store_use_stats st;
    int64_t zero = 0;

    (void)state;
    assert_int_equal(store_use_open(dir, boot_a, 2, 0, &u, &how), TALLY_OK);
    assert_non_null(store_use_bind(u, key1, 1, 9000, &zero));
    assert_non_null(store_use_bind(u, key1, 2, 9000, &zero));
    assert_null(store_use_bind(u, key1, 3, 9000, &zero));
    store_use_stats(u, &st);
    assert_int_equal(st.full, 1);
    store_use_close(u);
}

static void
test_use_boot_id_reads(void **state)
{
    uint8_t id[STORE_USE_BOOT_ID], again[STORE_USE_BOOT_ID];

    (void)state;
    if (access("/proc/sys/kernel/random/boot_id", R_OK) != 0)
        skip();
    assert_int_equal(store_use_boot_id(id), TALLY_OK);
    assert_int_equal(store_use_boot_id(again), TALLY_OK);
    assert_memory_equal(id, again, sizeof(id));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_use_same_boot_same_lease_is_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_use_other_boot_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_use_slot_of_another_lease_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_use_above_the_mark_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_use_past_deadline_and_corrupt_are_ignored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_use_slots_are_reused_and_orphans_swept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_use_full_refuses_a_bind, setup, teardown),
        cmocka_unit_test(test_use_boot_id_reads),
    };

    return cmocka_run_group_tests_name("store_use", tests, NULL, NULL);
}

/*
 * A full disk under steady load (docs/FAILURE-MODES.md §1). The data dir is a
 * small tmpfs mounted by the test; tenant a asks an endpoint that fails open
 * (degraded limit), tenant b one that fails closed, both already serving when
 * a filler file takes the disk's last byte. While the disk is full every
 * answer arrives within the deadline plus a margin, a follows its policy
 * (admitted under the degraded limit, never more), b gets leases or 503, and
 * tallyd does not crash. Once the filler is deleted both heal by themselves,
 * the log says so, and every SQLite file passes PRAGMA integrity_check.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fail_util.h"
#include "serve_util.h"

#define KEEP_SHORT "--keep-lease-ms=5000"

#define WAIT_MS    200
#define MARGIN_MS  800 /* sanitizer builds on a shared 2-core machine */
#define DEGRADED_N 150
#define TMPFS_SIZE "16m"
#define PHASE_MS   250

struct env {
    struct serve_env s;
    bool mounted;
    char token_a[64];
    char token_b[64];
    struct fail_load a, b;
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    *state = e;
    test_tmpdir(e->s.root, sizeof(e->s.root));
    snprintf(e->s.data, sizeof(e->s.data), "%s/data", e->s.root);
    assert_int_equal(mkdir(e->s.data, 0700), 0);
    fail_tmpfs_mount(e->s.data, TMPFS_SIZE);
    e->mounted = true;
    serve_tally_ok(&e->s, NULL, 0, "init", NULL);
    fail_two_tenants(&e->s, DEGRADED_N, e->token_a, sizeof(e->token_a), e->token_b,
                     sizeof(e->token_b));
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    fail_load_stop(&e->a);
    fail_load_stop(&e->b);
    if (e->s.d.pid > 0)
        test_daemon_kill9(&e->s.d);
    /* orphaned supervisors exit when their channel closes; then the mount is free */
    (void)test_wait_supervisors(e->s.data, "a", 0, 5000);
    (void)test_wait_supervisors(e->s.data, "b", 0, 5000);
    if (e->mounted)
        fail_tmpfs_umount(e->s.data);
    fail_keep_log(e->s.d.log);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

static void
test_full_disk_follows_policy_and_heals(void **state)
{
    struct env *e = *state;
    struct fail_counts a = {0}, b = {0}, c;
    char filler[256];
    char wait[32];
    int64_t t0, full_ms, heal_ms;
    char *log;

    snprintf(wait, sizeof(wait), "--wait-ms=%d", WAIT_MS);
    /* Leases that run out within seconds: what follows them is under test. */
    serve_start(&e->s, wait, KEEP_SHORT);
    fail_load_start(&e->a, e->s.d.socket, e->token_a, "open", 5);
    fail_load_start(&e->b, e->s.d.socket, e->token_b, "closed", 5);
    /* warm: both tenants' supervisors and files exist and serve from leases */
    t0 = serve_now_ms();
    while (a.admitted < 50 || b.admitted < 50) {
        c = fail_load_take(&e->a);
        fail_counts_add(&a, &c);
        c = fail_load_take(&e->b);
        fail_counts_add(&b, &c);
        if (serve_now_ms() - t0 > 30000)
            fail_msg("no steady service before the disk fills");
        serve_sleep_ms(PHASE_MS);
    }
    fail_counts_print("a warm", &a);
    fail_counts_print("b warm", &b);
    assert_int_equal(a.degraded + a.unavailable + b.unavailable + a.errors + b.errors, 0);
    (void)fail_load_take(&e->a);
    (void)fail_load_take(&e->b);

    snprintf(filler, sizeof(filler), "%s/filler", e->s.data);
    printf("# filler %lld bytes\n", (long long)fail_fill(filler));
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    t0 = serve_now_ms();
    /* full: at least 3 s, and until each tenant has shown its policy a few times */
    while (serve_now_ms() - t0 < 3000 || a.degraded < 10 || b.unavailable < 10) {
        c = fail_load_take(&e->a);
        fail_counts_add(&a, &c);
        c = fail_load_take(&e->b);
        fail_counts_add(&b, &c);
        assert_int_equal(kill(e->s.d.pid, 0), 0); /* tallyd alive */
        if (serve_now_ms() - t0 > 30000) {
            fail_counts_print("a full", &a);
            fail_counts_print("b full", &b);
            fail_msg("the full disk did not show in the answers within 30 s");
        }
        serve_sleep_ms(PHASE_MS);
    }
    full_ms = serve_now_ms() - t0;
    fail_counts_print("a full", &a);
    fail_counts_print("b full", &b);
    fail_counts_clean("a while full", &a, WAIT_MS + MARGIN_MS);
    fail_counts_clean("b while full", &b, WAIT_MS + MARGIN_MS);
    assert_int_equal(a.unavailable, 0); /* open: never 503 */
    assert_true(a.degraded <= DEGRADED_N);
    assert_int_equal(b.degraded, 0); /* closed: never degraded */

    /* space returns: both heal by themselves */
    assert_int_equal(unlink(filler), 0);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    t0 = serve_now_ms();
    for (;;) {
        struct fail_counts ca = fail_load_take(&e->a), cb = fail_load_take(&e->b);
        fail_counts_add(&a, &ca);
        fail_counts_add(&b, &cb);
        if (ca.admitted > 0 && ca.degraded == 0 && cb.admitted > 0 && cb.unavailable == 0)
            break;
        if (serve_now_ms() - t0 > 30000) {
            fail_counts_print("a heal", &a);
            fail_counts_print("b heal", &b);
            fail_msg("no recovery within 30 s of freeing the disk");
        }
        serve_sleep_ms(PHASE_MS);
    }
    heal_ms = serve_now_ms() - t0;
    fail_counts_print("a heal", &a);
    fail_counts_print("b heal", &b);
    fail_counts_clean("a healing", &a, WAIT_MS + MARGIN_MS);
    fail_counts_clean("b healing", &b, WAIT_MS + MARGIN_MS);
    fail_load_stop(&e->a);
    fail_load_stop(&e->b);
    printf("# full for %lld ms; healed %lld ms after the filler was deleted\n", (long long)full_ms,
           (long long)heal_ms);
    printf("# log: child_write_failed %d, child_write_recovered %d, journal_commit_failed %d, "
           "supervisor_restart %d, endpoint_degraded %d, endpoint_unavailable %d, "
           "endpoint_recovered %d\n",
           serve_log_count(&e->s, "\"child_write_failed\""),
           serve_log_count(&e->s, "\"child_write_recovered\""),
           serve_log_count(&e->s, "\"journal_commit_failed\""),
           serve_log_count(&e->s, "\"supervisor_restart\""),
           serve_log_count(&e->s, "\"endpoint_degraded\""),
           serve_log_count(&e->s, "\"endpoint_unavailable\""),
           serve_log_count(&e->s, "\"endpoint_recovered\""));
    assert_true(serve_log_count(&e->s, "\"child_write_recovered\"") +
                    serve_log_count(&e->s, "\"supervisor_restart\"") >
                0);
    serve_stop(&e->s);
    assert_true(test_wait_supervisors(e->s.data, "a", 0, 5000));
    assert_true(test_wait_supervisors(e->s.data, "b", 0, 5000));
    log = serve_log(&e->s);
    assert_null(strstr(log, "AddressSanitizer"));
    assert_null(strstr(log, "runtime error"));
    free(log);
    /* tally.db, two journals, two child files */
    assert_true(fail_integrity_check(e->s.data) >= 5);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk_follows_policy_and_heals, setup, teardown),
    };

    return cmocka_run_group_tests_name("fail_disk", tests, NULL, NULL);
}

/*
 * First turns through the real tallyd: a tenant with no ledger and no supervisor gets its first
 * leases from tallyd itself (under the tenant's supervisor.lock), and its supervisor, started
 * after, replays them. Each test would see more admitted than the limit if the supervisor did
 * not know what the first turn granted, or if the two ever wrote the ledger at once.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve_util.h"
#include "store_paths.h"

#include "tenants_util.h"

#define TENANTS 12

static void
first_turns_are(const struct env *e, double made, double not_made)
{
    assert_true(metric(e, "tally_first_turns_total") == made);
    assert_true(metric(e, "tally_first_turns_not_made_total") == not_made);
}

/* A new tenant's first request is a first turn and starts no process: on a plentiful endpoint
 * its leases are kept, and nothing needs a supervisor. (A child's retransmission during a slow
 * turn is answered by the turn; a machine slow enough may still send one that needs a
 * supervisor, so the check is that first turns do not start one each.) */
static void
test_first_turn_starts_no_process(void **state)
{
    struct env *e = *state;
    char tokens[TENANTS][TOKEN_BUF];
    double starts;

    add_tenants(e->s.data, "q", TENANTS, tokens);
    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < TENANTS; i++)
        assert_int_equal(check(e->s.http_port, tokens[i], "hot"), 200);
    first_turns_are(e, TENANTS, 0);
    starts = metric(e, "tally_supervisor_events_total{event=\"start\"}");
    print_message("%d first decisions of new tenants: %.0f supervisors started\n", TENANTS, starts);
    assert_true(starts < TENANTS / 2);
    serve_stop(&e->s);
}

/* The supervisor started when more is needed knows what the first turn granted: the link's
 * endpoint limit (10) holds across the handover and across a kill -9. */
static void
test_first_turn_then_supervisor(void **state)
{
    struct env *e = *state;
    char tokens[TENANTS][TOKEN_BUF];

    add_tenants(e->s.data, "n", TENANTS, tokens);
    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < TENANTS; i++)
        assert_int_equal(check(e->s.http_port, tokens[i], "api"), 200);
    first_turns_are(e, TENANTS, 0);
    for (int i = 0; i < TENANTS; i++) {
        int admitted = 1;

        for (int k = 0; k < 12; k++)
            admitted += check(e->s.http_port, tokens[i], "api") == 200;
        assert_int_equal(admitted, 10);
    }
    test_daemon_kill9(&e->s.d);
    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < TENANTS; i++)
        assert_int_equal(check(e->s.http_port, tokens[i], "api"), 429);
    first_turns_are(e, 0, 0); /* every tenant has its ledger now */
    serve_stop(&e->s);
}

/* A new tenant on a small plan (5 for the whole tenant) is asked 24 times at once over three
 * links and two endpoints: the first turn and the supervisor after it admit exactly 5. A kill
 * -9 and a second burst admit nothing more. */
static void
test_first_turn_burst_is_exact(void **state)
{
    struct env *e = *state;
    char tokens[3][TOKEN_BUF];
    const char *eps[2] = {"api", "hot"};
    int fds[24];
    int admitted = 0;
    int others = 0;

    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "tiny", "--limit", "5/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "burst", "--plan", "tiny", NULL);
    for (int l = 0; l < 3; l++)
        serve_tally_ok(&e->s, tokens[l], sizeof(tokens[l]), "link", "create", "burst", NULL);
    serve_start(&e->s, NULL, NULL);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 24; i++)
            fds[i] = check_send(e->s.http_port, tokens[i % 3], eps[i % 2]);
        for (int i = 0; i < 24; i++) {
            int st = check_read(fds[i]);

            admitted += st == 200;
            others += st != 200 && st != 429;
        }
        print_message("round %d: %d admitted in all, %d neither admitted nor refused\n", round,
                      admitted, others);
        assert_int_equal(admitted, 5);
        if (round == 0) {
            assert_true(metric(e, "tally_first_turns_total") == 1);
            test_daemon_kill9(&e->s.d);
            serve_start(&e->s, NULL, NULL);
        }
    }
    assert_int_equal(others, 0);
    serve_stop(&e->s);
}

/* The single writer holds: while another process holds the tenant's supervisor.lock, tallyd
 * writes no ledger (the turn is not made, the supervisor cannot start, the request is not
 * admitted); once the lock is free, the tenant's supervisor answers. */
static void
test_first_turn_yields_to_the_lock(void **state)
{
    struct env *e = *state;
    char token[TOKEN_BUF];
    char path[STORE_PATH_MAX];
    struct stat sb;
    int fd, st, admitted = 0;

    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "held", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, token, sizeof(token), "link", "create", "held", NULL);
    assert_int_equal(store_tenant_dirs(e->s.data, "held"), TALLY_OK);
    assert_int_equal(store_path_tenant(e->s.data, "held", "supervisor.lock", path, sizeof(path)),
                     TALLY_OK);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    serve_start(&e->s, "--wait-ms=300", NULL);
    st = check(e->s.http_port, token, "api");
    print_message("with the lock held elsewhere: %d\n", st);
    assert_int_not_equal(st, 200);
    assert_true(metric(e, "tally_first_turns_not_made_total") >= 1);
    assert_true(metric(e, "tally_first_turns_total") == 0);
    assert_int_equal(store_path_tenant(e->s.data, "held", "ledger.db", path, sizeof(path)),
                     TALLY_OK);
    assert_int_not_equal(stat(path, &sb), 0); /* nobody wrote a ledger */
    close(fd);
    for (int i = 0; i < 100 && admitted == 0; i++) {
        admitted = check(e->s.http_port, token, "api") == 200;
        if (!admitted)
            serve_sleep_ms(50);
    }
    assert_true(admitted);
    assert_int_equal(stat(path, &sb), 0); /* the supervisor's */
    serve_stop(&e->s);
}

/* A bind mount of the tenant's endpoints folder, read-only, when not empty. */
static char ro_dir[300];

static void
unbind(void)
{
    if (ro_dir[0] == '\0')
        return;
    (void)mount(NULL, ro_dir, NULL, MS_REMOUNT | MS_BIND, NULL);
    if (umount2(ro_dir, 0) != 0 && errno == EBUSY)
        (void)umount2(ro_dir, MNT_DETACH);
    ro_dir[0] = '\0';
}

static int
teardown_unbind(void **state)
{
    unbind();
    return teardown(state);
}

/* The child's file cannot be made (its folder read-only: `mount --bind` over itself, remounted
 * read-only) while the first turn can: the child, started before its file, answers 503 and
 * goes, and what the turn granted it is never used twice: once the folder is writable, the
 * tenant-wide 5 is admitted and no more. */
static void
test_first_turn_child_file_fails(void **state)
{
    struct env *e = *state;
    char token[TOKEN_BUF];
    int st, admitted = 0;

    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "tiny", "--limit", "5/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "rofs", "--plan", "tiny", NULL);
    serve_tally_ok(&e->s, token, sizeof(token), "link", "create", "rofs", NULL);
    assert_int_equal(store_tenant_dirs(e->s.data, "rofs"), TALLY_OK);
    snprintf(ro_dir, sizeof(ro_dir), "%s/tenants/rofs/endpoints", e->s.data);
    if (mount(ro_dir, ro_dir, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, ro_dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0)
        fail_msg("cannot bind-mount %s read-only: %s (this suite needs root)", ro_dir,
                 strerror(errno));
    serve_start(&e->s, "--wait-ms=300", NULL);
    st = check(e->s.http_port, token, "api");
    print_message("the child's folder read-only: %d\n", st);
    assert_int_equal(st, 503);
    assert_true(serve_log_count(&e->s, "\"event\":\"child_open_failed\"") >= 1);
    unbind();
    for (int i = 0; i < 12; i++)
        admitted += check(e->s.http_port, token, "api") == 200;
    print_message("writable again: %d admitted of 12, %.0f first turns\n", admitted,
                  metric(e, "tally_first_turns_total"));
    assert_true(admitted >= 1);
    assert_true(admitted <= 5);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_turn_starts_no_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_turn_then_supervisor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_turn_burst_is_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_turn_yields_to_the_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_turn_child_file_fails, setup, teardown_unbind),
    };

    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}

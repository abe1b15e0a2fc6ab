/*
 * Kept leases across an idle close, through the real tallyd and its supervisors:
 *
 *  - A quiet link decides locally: its child parks its kept lease when it closes
 *    while idle, its supervisor hibernates, and the next requests reopen the file
 *    and are answered from the parked lease without starting the supervisor
 *    (tally_supervisor_events_total{event="start"} does not move).
 *  - A clean stop starts no supervisor for a hibernated tenant: its kept lease is
 *    parked and answers the next run, exact over both runs.
 *  - Exact over many closes: bursts separated by idle closes and hibernations
 *    admit exactly the limit, then refuse, and some bursts need no supervisor.
 *  - A window end starts no supervisor for a quiet tenant whose windows all end
 *    there: its kept lease, cut at that end, is worth nothing after it and is not
 *    reported, and the lease its link asked for ahead of the end (NEXT; the
 *    supervisor started then) answers the first request after it. The same
 *    after an idle close: the lease resumed from its row is still the last of its
 *    windows and asks ahead.
 *  - A supervisor that starts again creates no file: its ledger's -wal and -shm
 *    outlive it (the same inodes), so a tenant's restart costs no file creation.
 *  - A limit lowered while the child is closed is in force at its next open: the
 *    parked lease is not used (admitted never exceeds the new limit plus what was
 *    admitted before the change). The same when tallyd was killed (kill -9) with
 *    leases in its files and the limit lowered before it started again.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve_util.h"

struct env {
    struct serve_env s;
    char token[64];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000000/365d", NULL);
    /* 200 a year: plentiful for up to 3 leases outstanding (200 / 16 >= 3 x 4), so its
     * grants are kept (each at most 200 / 16 / P). */
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "quiet", "--limit", "200/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
    serve_ledger_make(&e->s, "acme"); /* served before: its supervisor starts, then hibernates */
    *state = e;
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

static double
metric(const struct env *e, const char *series)
{
    return serve_metric_now(&e->s, series);
}

static int
check(const struct env *e)
{
    struct serve_http h;

    serve_check(&e->s, e->token, "quiet", &h);
    assert_true(h.status == 200 || h.status == 429);
    return h.status;
}

/* Waits (up to 10 s) until the child's file is closed and, if `asleep`, no supervisor runs. */
static void
wait_closed(const struct env *e, bool asleep)
{
    int64_t until = serve_now_ms() + 10000;

    while (metric(e, "tally_child_counters_open") != 0 ||
           (asleep && metric(e, "tally_supervisors_live") != 0)) {
        assert_true(serve_now_ms() < until);
        serve_sleep_ms(50);
    }
}

static const char *const QUIET[] = {"--child-idle-ms=200", "--idle-exit-ms=300"};
#define STARTS "tally_supervisor_events_total{event=\"start\"}"

static void
test_quiet_link_needs_no_supervisor_after_close(void **state)
{
    struct env *e = *state;
    double starts;

    serve_start(&e->s, QUIET[0], QUIET[1]);
    for (int i = 0; i < 3; i++)
        assert_int_equal(check(e), 200);
    wait_closed(e, true);
    assert_true(metric(e, "tally_leases_parked_total") >= 1);
    starts = metric(e, STARTS);
    /* The file opens again, the parked lease answers: no supervisor is started. */
    assert_int_equal(check(e), 200);
    assert_int_equal(check(e), 200);
    assert_true(metric(e, "tally_child_files_total{event=\"open\"}") >= 2);
    assert_true(metric(e, STARTS) == starts);
    serve_stop(&e->s);
}

/* A clean stop starts no supervisor for a hibernated tenant: its child parks the kept lease
 * (it stays loaded, asleep: --child-idle-ms is long), the next run decides on it alone, and
 * the whole stays exact: 200 admitted over both runs, not one more. */
static void
test_stop_parks_a_hibernated_tenants_leases(void **state)
{
    struct env *e = *state;
    int admitted = 0, refused = 0;

    serve_start(&e->s, "--idle-exit-ms=300", NULL);
    for (int i = 0; i < 3; i++)
        admitted += check(e) == 200;
    while (metric(e, "tally_supervisors_live") != 0)
        serve_sleep_ms(50);
    serve_stop(&e->s);
    assert_int_equal(serve_log_count(&e->s, "\"supervisor_start\""), 1);
    serve_start(&e->s, NULL, NULL);
    admitted += check(e) == 200;
    assert_true(metric(e, STARTS) == 0); /* the parked lease answered */
    while (refused == 0) {
        int st = check(e);
        admitted += st == 200;
        refused += st == 429;
    }
    assert_int_equal(admitted, 200);
    serve_stop(&e->s);
}

/* The inode of the tenant's ledger file `suffix` (-wal, -shm); 0 if missing. */
static ino_t
ledger_inode(const struct env *e, const char *suffix)
{
    char path[256];
    struct stat st;

    snprintf(path, sizeof(path), "%s/tenants/acme/ledger.db%s", e->s.data, suffix);
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

static void
test_supervisor_restart_creates_no_file(void **state)
{
    struct env *e = *state;
    ino_t wal, shm;
    double starts;

    serve_start(&e->s, "--idle-exit-ms=300", NULL);
    assert_int_equal(check(e), 200);
    while (metric(e, "tally_supervisors_live") != 0)
        serve_sleep_ms(50);
    wal = ledger_inode(e, "-wal");
    shm = ledger_inode(e, "-shm");
    assert_true(wal != 0 && shm != 0); /* they outlived the supervisor */
    /* Use the kept lease up: the next ask starts the supervisor again. */
    starts = metric(e, STARTS);
    while (metric(e, STARTS) == starts)
        assert_int_equal(check(e), 200);
    while (metric(e, "tally_supervisors_live") != 0)
        serve_sleep_ms(50);
    assert_true(ledger_inode(e, "-wal") == wal);
    assert_true(ledger_inode(e, "-shm") == shm);
    serve_stop(&e->s);
}

static void
test_exact_across_idle_closes(void **state)
{
    struct env *e = *state;
    int admitted = 0, refused = 0, local = 0;

    serve_start(&e->s, QUIET[0], QUIET[1]);
    /* Bursts of 2 and 9 in turn, with an idle close and a hibernation between them. */
    for (int round = 0; refused == 0; round++) {
        double starts = metric(e, STARTS);
        int burst = 0;

        for (int i = 0; i < (round % 2 == 0 ? 9 : 2); i++) {
            int st = check(e);
            admitted += st == 200;
            refused += st == 429;
            burst += st == 200;
        }
        local += burst > 0 && metric(e, STARTS) == starts;
        assert_true(admitted <= 200);
        if (refused == 0)
            wait_closed(e, round % 4 == 3); /* a hibernation now and then */
    }
    assert_int_equal(admitted, 200);
    assert_true(local >= 1); /* at least one burst was served from parked leases alone */
    serve_stop(&e->s);
}

static void
test_limit_lowered_while_closed(void **state)
{
    struct env *e = *state;
    int admitted = 0;

    serve_start(&e->s, QUIET[0], QUIET[1]);
    for (int i = 0; i < 3; i++)
        assert_int_equal(check(e), 200);
    wait_closed(e, true);
    assert_true(metric(e, "tally_leases_parked_total") >= 1);
    /* 3 admitted; the limit drops to 5 while the child is closed: 2 more at most. */
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "quiet", "--limit", "5/365d", NULL);
    for (int i = 0; i < 10; i++)
        admitted += check(e) == 200;
    assert_int_equal(admitted, 2);
    serve_stop(&e->s);
}

static void
test_limit_lowered_while_tallyd_down(void **state)
{
    struct env *e = *state;
    int admitted = 0;

    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "quiet", "--limit", "100000/365d", NULL);
    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < 40; i++)
        assert_int_equal(check(e), 200);
    test_daemon_kill9(&e->s.d); /* leases with rows in the child's file */
    (void)test_wait_supervisors(e->s.data, "acme", 0, 5000);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "quiet", "--limit", "45/365d", NULL);
    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < 20; i++)
        admitted += check(e) == 200;
    print_message("after the restart under the lower limit: %d admitted\n", admitted);
    assert_true(admitted <= 5); /* 40 before, 45 now: the resumed leases were not used */
    serve_stop(&e->s);
}

/* A window end starts no quiet tenant's supervisor: the plan's and the endpoint's windows end
 * together (10 s), so the kept lease, cut at that end, is worth nothing after it and its child
 * does not report it. A link used in those windows asks ahead for the next ones (NEXT) a
 * quarter of its lease's life before their end: its supervisor starts once then, before the
 * boundary, and the first request after it is answered from the lease asked ahead, with no
 * supervisor start and no wait. */
static void
test_window_end_starts_no_supervisor(void **state)
{
    struct env *e = *state;
    int64_t until, end;
    double starts, waits;

    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000/10s", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "quiet", "--limit", "2000/10s", NULL);
    serve_start(&e->s, "--idle-exit-ms=300", NULL);
    while (serve_wall_ms() % 10000 > 2000) /* early in a window: its end is 8 s away or more */
        serve_sleep_ms(20);
    end = serve_wall_ms() / 10000 * 10000 + 10000;
    for (int i = 0; i < 3; i++)
        assert_int_equal(check(e), 200);
    until = serve_now_ms() + 5000;
    while (metric(e, "tally_supervisors_live") != 0) { /* hibernated, the child still open */
        assert_true(serve_now_ms() < until);
        serve_sleep_ms(50);
    }
    assert_true(serve_wall_ms() < end - 3000);
    assert_true(metric(e, "tally_child_counters_open") == 1);
    starts = metric(e, STARTS);
    while (serve_wall_ms() < end - 300)
        serve_sleep_ms(50);
    assert_true(metric(e, STARTS) == starts + 1); /* the ask ahead, before the boundary */
    while (serve_wall_ms() < end + 1500)
        serve_sleep_ms(50);
    until = serve_now_ms() + 5000;
    while (metric(e, "tally_supervisors_live") != 0) { /* hibernated again */
        assert_true(serve_now_ms() < until);
        serve_sleep_ms(50);
    }
    waits = metric(e, "tally_waits_total");
    assert_int_equal(check(e), 200);
    assert_true(metric(e, STARTS) == starts + 1);
    assert_true(metric(e, "tally_waits_total") == waits);
    serve_stop(&e->s);
}

/* The same after an idle close: the kept lease comes back from its row with what its grant said
 * (kept, ending at the window end, the last of its windows). So it is not renewed by age on the
 * way to that end, the link still asks ahead once before it, and the first request after the
 * boundary is answered from the lease asked ahead: the supervisor starts once in all, for the
 * ask, and no request waits for it. A lease resumed as a plain one was renewed by age (a start
 * for nothing), never asked ahead, and the first request after the boundary waited for a start.
 * (No request falls within a second of the boundary: there the old lease has ended and the new
 * one not begun, by the drift bound, and a request asks the supervisor.) */
static void
test_window_end_after_an_idle_close(void **state)
{
    struct env *e = *state;
    int64_t end;
    double starts, waits;

    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000/20s", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "quiet", "--limit", "4000/20s", NULL);
    serve_start(&e->s, "--child-idle-ms=2500", "--idle-exit-ms=300");
    while (serve_wall_ms() % 20000 > 1000) /* early in a window: its end is 19 s away or more */
        serve_sleep_ms(20);
    end = serve_wall_ms() / 20000 * 20000 + 20000;
    for (int i = 0; i < 3; i++)
        assert_int_equal(check(e), 200);
    wait_closed(e, true);
    assert_true(metric(e, "tally_leases_parked_total") >= 1);
    assert_true(serve_wall_ms() < end - 12000);
    starts = metric(e, STARTS);
    /* Reopened from the parked row (the request waits for the file), then in use every
     * 200 ms (the file stays open). */
    assert_int_equal(check(e), 200);
    waits = metric(e, "tally_waits_total");
    while (serve_wall_ms() < end - 1000) {
        assert_int_equal(check(e), 200);
        serve_sleep_ms(200);
    }
    while (serve_wall_ms() < end + 1000)
        serve_sleep_ms(50);
    assert_int_equal(check(e), 200);
    print_message("starts %.0f, waits %.0f after the idle close\n", metric(e, STARTS) - starts,
                  metric(e, "tally_waits_total") - waits);
    assert_true(metric(e, STARTS) == starts + 1); /* the ask ahead, and nothing else */
    assert_true(metric(e, "tally_waits_total") == waits);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_quiet_link_needs_no_supervisor_after_close, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stop_parks_a_hibernated_tenants_leases, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_supervisor_restart_creates_no_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exact_across_idle_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_end_starts_no_supervisor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_end_after_an_idle_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_lowered_while_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_lowered_while_tallyd_down, setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_park", tests, NULL, NULL);
}

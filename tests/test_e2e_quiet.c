/*
 * A quiet supervisor sleeps, through the real tallyd and its supervisor:
 *
 *  - Once it has heard nothing for a second it stops looking at tally.db: over
 *    the next 2 s the process is woken at most twice (/proc/PID/status context
 *    switches), where looking every 250 ms wakes it 8 times.
 *  - Nothing is lost by it: a limit lowered while it sleeps is in force at once.
 *    The limit is plentiful (1,000 a year), so the link holds a kept lease and no
 *    expiry or renewal wakes the supervisor meanwhile.
 *    3 of 10 admitted, the limit lowered to 5, then exactly 2 more of 10 admitted
 *    through the same supervisor (it read the change before its next grant).
 *  - A tenant's other links ride on its supervisor's start: a first request on
 *    one link starts the supervisor, which grants the tenant's other link that
 *    may call the endpoint a kept lease too (not the link restricted to another
 *    endpoint, not the revoked one). Once that supervisor has exited idle, the
 *    second link's first request is decided locally: still one start. Without
 *    the warm-up it starts the supervisor a second time.
 *  - A tenant refused until its window's end keeps its supervisor over that end:
 *    5/4s spent early in a window, the refused link asks nothing until the next
 *    window, yet the same process (same pid, one start) grants its first request
 *    there, and exits idle afterwards. Without the rule it exits idle about a
 *    second after the refusals, long before the window ends, and the next
 *    window's first request starts it again.
 *  - Otherwise the idle exit is as before: a tenant never refused, and one
 *    refused for a year (past the 60 s horizon), exit after --idle-exit-ms.
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
#include <sys/types.h>

#include "serve_util.h"
#include "test_daemon.h"

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
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "api", "--limit", "1000/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
    serve_ledger_make(&e->s, "acme"); /* served before: its first request starts its supervisor */
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

/* Voluntary plus involuntary context switches of pid so far. */
static long long
switches(pid_t pid)
{
    long long v = test_proc_status(pid, "voluntary_ctxt_switches");
    long long n = test_proc_status(pid, "nonvoluntary_ctxt_switches");

    assert_true(v >= 0 && n >= 0);
    return v + n;
}

static int
admitted_of(const struct env *e, int n)
{
    int admitted = 0;

    for (int i = 0; i < n; i++) {
        struct serve_http h;
        serve_check(&e->s, e->token, "api", &h);
        assert_true(h.status == 200 || h.status == 429);
        admitted += h.status == 200;
    }
    return admitted;
}

static void
test_quiet_supervisor_sleeps_and_misses_nothing(void **state)
{
    struct env *e = *state;
    pid_t pid[4];
    long long before, after;

    serve_start(&e->s, "--idle-exit-ms=60000", NULL);
    assert_int_equal(admitted_of(e, 3), 3);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pid, 4), 1);
    serve_sleep_ms(1600); /* its last message a second and more ago */
    before = switches(pid[0]);
    serve_sleep_ms(2000);
    after = switches(pid[0]);
    print_message("supervisor woken %lld times in 2 s of quiet\n", after - before);
    assert_true(after - before <= 2);

    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "api", "--limit", "5/365d", NULL);
    assert_int_equal(admitted_of(e, 10), 2);
    /* The same supervisor answered: it was asleep, not gone. */
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pid + 1, 3), 1);
    assert_int_equal(pid[1], pid[0]);
    serve_stop(&e->s);
}

/* Polls until acme has no supervisor process (up to 5 s). */
static void
wait_no_supervisor(const struct env *e)
{
    pid_t pid[2];

    for (int i = 0; i < 500 && test_supervisor_pids(e->s.data, "acme", pid, 2) > 0; i++)
        serve_sleep_ms(10);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pid, 2), 0);
}

static void
test_other_links_ride_one_start(void **state)
{
    struct env *e = *state;
    char second[64], other[64], revoked[64];
    struct serve_http h;

    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "admin", "--limit", "1000/365d", NULL);
    serve_tally_ok(&e->s, second, sizeof(second), "link", "create", "acme", NULL);
    serve_tally_ok(&e->s, other, sizeof(other), "link", "create", "acme", "--endpoint", "admin",
                   NULL);
    serve_tally_ok(&e->s, revoked, sizeof(revoked), "link", "create", "acme", NULL);
    serve_tally_ok(&e->s, NULL, 0, "link", "revoke", revoked, NULL);
    serve_start(&e->s, "--idle-exit-ms=300", NULL);

    serve_check(&e->s, e->token, "api", &h);
    assert_int_equal(h.status, 200);
    wait_no_supervisor(e);
    assert_int_equal((int)serve_metric_now(&e->s, "tally_leases_warmed_total"), 1);
    assert_int_equal((int)serve_metric_now(&e->s, "tally_supervisor_events_total{event=\"start\"}"),
                     1);

    /* The second link's first request: its lease is already here. */
    serve_check(&e->s, second, "api", &h);
    assert_int_equal(h.status, 200);
    serve_check(&e->s, second, "api", &h);
    assert_int_equal(h.status, 200);
    assert_int_equal((int)serve_metric_now(&e->s, "tally_supervisor_events_total{event=\"start\"}"),
                     1);
    /* The revoked link is refused by auth, before any lease. */
    serve_check(&e->s, revoked, "api", &h);
    assert_int_equal(h.status, 401);
    serve_stop(&e->s);
}

static double
starts(const struct env *e)
{
    return serve_metric_now(&e->s, "tally_supervisor_events_total{event=\"start\"}");
}

/* Idle exits tallyd has counted, once it counted `want` (the process leaves /proc before
 * tallyd reaps it), within 5 s. */
static int
idle_exits(const struct env *e, int want)
{
    static const char series[] = "tally_supervisor_events_total{event=\"idle_exit\"}";

    for (int i = 0; i < 500 && (int)serve_metric_now(&e->s, series) < want; i++)
        serve_sleep_ms(10);
    return (int)serve_metric_now(&e->s, series);
}

#define WINDOW_MS 4000

static void
test_refused_tenant_keeps_its_supervisor_over_the_window_end(void **state)
{
    struct env *e = *state;
    struct serve_http h;
    pid_t pid[4];
    int64_t end;

    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "api", "--limit", "5/4s", NULL);
    serve_start(&e->s, "--idle-exit-ms=1000", NULL);
    /* Early in a window: an idle exit 1 to 1.5 s after the refusals (and the leases' return,
     * 1 s after their last use) would come well before its end. */
    while (serve_wall_ms() % WINDOW_MS > 200)
        serve_sleep_ms(5);
    end = serve_wall_ms() / WINDOW_MS * WINDOW_MS + WINDOW_MS;
    assert_int_equal(admitted_of(e, 8), 5);
    assert_true(serve_wall_ms() < end - 2500);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pid, 4), 1);
    while (serve_wall_ms() < end + 100)
        serve_sleep_ms(20);
    /* The refused link comes back now: its supervisor is still there, the same process. */
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pid + 1, 3), 1);
    assert_int_equal(pid[1], pid[0]);
    serve_check(&e->s, e->token, "api", &h);
    assert_int_equal(h.status, 200);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pid + 2, 2), 1);
    assert_int_equal(pid[2], pid[0]);
    assert_int_equal((int)starts(e), 1);
    assert_int_equal(
        (int)serve_metric_now(&e->s, "tally_supervisor_events_total{event=\"restart\"}"), 0);
    /* Not refused any more: it exits idle as usual. */
    assert_true(test_wait_supervisors(e->s.data, "acme", 0, 10000));
    assert_int_equal(idle_exits(e, 1), 1);
    serve_stop(&e->s);
}

static void
test_supervisor_not_told_to_come_back_soon_exits_idle(void **state)
{
    struct env *e = *state;
    int64_t t0;

    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "tight", "--limit", "2/365d", NULL);
    serve_start(&e->s, "--idle-exit-ms=1000", NULL);
    /* Never refused. */
    assert_int_equal(admitted_of(e, 3), 3);
    t0 = serve_now_ms();
    assert_true(test_wait_supervisors(e->s.data, "acme", 0, 10000));
    print_message("not refused: exited %lld ms after its last request\n",
                  (long long)(serve_now_ms() - t0));
    /* Refused for a year: past the horizon, no reason to stay. */
    for (int i = 0; i < 4; i++) {
        struct serve_http h;
        serve_check(&e->s, e->token, "tight", &h);
        assert_int_equal(h.status, i < 2 ? 200 : 429);
    }
    t0 = serve_now_ms();
    assert_true(test_wait_supervisors(e->s.data, "acme", 0, 10000));
    print_message("refused for a year: exited %lld ms after its last request\n",
                  (long long)(serve_now_ms() - t0));
    assert_int_equal((int)starts(e), 2);
    assert_int_equal(idle_exits(e, 2), 2);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_quiet_supervisor_sleeps_and_misses_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_other_links_ride_one_start, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_refused_tenant_keeps_its_supervisor_over_the_window_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_supervisor_not_told_to_come_back_soon_exits_idle,
                                        setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_quiet", tests, NULL, NULL);
}

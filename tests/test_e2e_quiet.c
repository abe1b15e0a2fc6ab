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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_quiet_supervisor_sleeps_and_misses_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_other_links_ride_one_start, setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_quiet", tests, NULL, NULL);
}

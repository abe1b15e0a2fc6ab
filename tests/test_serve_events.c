/*
 * The event log of the real tallyd: one JSON line per event (start, supervisor start, exit
 * after kill -9, restart, reload, stop), and one line per transition when an endpoint enters
 * degraded (fail-open) or unavailable (fail-closed) mode because its supervisor stopped
 * answering (SIGSTOP), and when it recovers (SIGCONT), whatever the number of requests
 * answered meanwhile. --log-level drops the lines below it; at debug, lease events are logged.
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
#include <unistd.h>

#include "serve_obs_env.h"
#include "tally.h"

/* Every line tallyd itself writes is one JSON object with ts, level, event. */
static void
check_log_lines(const struct env *e)
{
    char *log = serve_log(&e->s);
    char *line = log;
    int ours = 0;

    assert_null(strstr(log, e->token));
    while (line != NULL && *line != '\0') {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        if (strncmp(line, "{\"ts\":\"", 7) == 0) {
            /* 2026-11-29T17:40:01.123Z */
            assert_true(strlen(line) > 40);
            assert_true(line[11] == '-' && line[17] == 'T' && line[26] == '.' && line[30] == 'Z');
            assert_memory_equal(line + 31, "\",\"level\":\"", 11);
            assert_non_null(strstr(line, "\",\"event\":\""));
            assert_int_equal(nl[-1], '}');
            ours++;
        }
        line = nl + 1;
    }
    assert_true(ours >= 4);
    free(log);
}

static void
test_log_lines_for_supervisor_lifecycle(void **state)
{
    struct env *e = *state;
    struct serve_http r, m;
    pid_t pids[4];
    int64_t until;

    /* Kept leases of 5 s: the lease the open endpoint holds is renewed within seconds, and that
     * renewal is what brings the killed supervisor back. */
    serve_start(&e->s, KEEP_SHORT, NULL);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"start\""), 1);
    serve_check(&e->s, e->token, "open", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"supervisor_start\",\"tenant\":\"acme\""),
                     1);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pids, 4), 1);
    kill(pids[0], SIGKILL);
    until = serve_now_ms() + 10000;
    while (serve_log_count(&e->s, "\"event\":\"supervisor_exit\"") == 0 && serve_now_ms() < until)
        serve_sleep_ms(10);
    assert_int_equal(serve_log_count(&e->s, "\"reason\":\"signal\",\"signal\":9"), 1);
    /* the next lease request brings it back, after its backoff */
    until = serve_now_ms() + 20000;
    while (serve_log_count(&e->s, "\"event\":\"supervisor_restart\",\"tenant\":\"acme\"") == 0 &&
           serve_now_ms() < until) {
        serve_check(&e->s, e->token, "open", &r);
        assert_int_equal(r.status, 200);
        serve_sleep_ms(20);
    }
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"supervisor_restart\""), 1);
    get_metrics(e, &m);
    assert_true(serve_metric(m.body, "tally_supervisor_events_total{event=\"crash\"}") == 1);
    assert_true(serve_metric(m.body, "tally_supervisor_events_total{event=\"restart\"}") == 1);
    /* a change made with tally is one reload line */
    serve_tally_ok(&e->s, NULL, 0, "link", "create", "acme", NULL);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"reload\""), 1);
    assert_int_equal(serve_log_count(&e->s, "\"links\":2,\"links_before\":1"), 1);
    serve_stop(&e->s);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"stop\""), 1);
    check_log_lines(e);
}

/* Sends checks to `endpoint` until `done` says the answer is the one awaited
 * (at most 30 s); returns how many it sent. */
static int
until_answer(const struct env *e, const char *endpoint, bool (*done)(const struct serve_http *r))
{
    int64_t until = serve_now_ms() + 30000;
    struct serve_http r;
    int n = 0;

    for (;;) {
        serve_check(&e->s, e->token, endpoint, &r);
        n++;
        if (done(&r))
            return n;
        if (serve_now_ms() > until)
            fail_msg("%s: still %d after %d requests", endpoint, r.status, n);
        serve_sleep_ms(20);
    }
}

static bool
is_degraded(const struct serve_http *r)
{
    char v[8];

    return r->status == 200 && serve_http_header(r, "X-Tally-Degraded", v, sizeof(v));
}

static bool
is_normal(const struct serve_http *r)
{
    char v[8];

    return r->status == 200 && !serve_http_header(r, "X-Tally-Degraded", v, sizeof(v));
}

static bool
is_503(const struct serve_http *r)
{
    return r->status == 503;
}

static void
test_degraded_transitions_are_one_line_each(void **state)
{
    struct env *e = *state;
    struct serve_http r, m;
    pid_t pids[4];
    int i;

    /* short waits and kept leases of 5 s, so a stopped supervisor is noticed within seconds (a
     * kept lease of an hour would answer for it that long) */
    serve_start(&e->s, "--wait-ms=300", KEEP_SHORT);
    serve_check(&e->s, e->token, "open", &r);
    assert_true(is_normal(&r));
    serve_check(&e->s, e->token, "closed", &r);
    assert_true(is_normal(&r));
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pids, 4), 1);
    kill(pids[0], SIGSTOP);
    until_answer(e, "open", is_degraded);
    until_answer(e, "closed", is_503);
    for (i = 0; i < 5; i++) { /* more answers in the same mode: no more lines */
        serve_check(&e->s, e->token, "open", &r);
        assert_true(is_degraded(&r));
        serve_check(&e->s, e->token, "closed", &r);
        assert_int_equal(r.status, 503);
    }
    kill(pids[0], SIGCONT);
    until_answer(e, "open", is_normal);
    until_answer(e, "closed", is_normal);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"endpoint_degraded\",\"tenant\":\"acme\","
                                            "\"endpoint\":\"open\""),
                     1);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"endpoint_unavailable\",\"tenant\":"
                                            "\"acme\",\"endpoint\":\"closed\""),
                     1);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"endpoint_recovered\""), 2);
    get_metrics(e, &m);
    assert_true(serve_metric(m.body, "tally_endpoint_mode_changes_total{to=\"degraded\"}") == 1);
    assert_true(serve_metric(m.body, "tally_endpoint_mode_changes_total{to=\"unavailable\"}") == 1);
    assert_true(serve_metric(m.body, "tally_endpoint_mode_changes_total{to=\"normal\"}") == 2);
    assert_true(serve_metric(m.body, "tally_endpoints_mode{mode=\"degraded\"}") == 0);
    assert_true(serve_metric(m.body, "tally_degraded_total") >= 6);
    assert_true(serve_metric(m.body, "tally_decisions_total{result=\"unavailable\"}") >= 6);
    serve_stop(&e->s);
}

/* --log-level warn keeps the info lines (start, supervisor start, stop) out;
 * an unknown level is a usage error (64) in one line. */
static void
test_log_level(void **state)
{
    struct env *e = *state;
    struct test_out *o = calloc(1, sizeof(*o));
    struct tally_result res;
    tally_client *c = NULL;
    char bin[512];
    char *argv[] = {bin, "--data", e->s.data, "--log-level", "chatty", NULL};

    assert_non_null(o);
    test_bin("tallyd", bin, sizeof(bin));
    assert_int_equal(test_run(argv, NULL, o), 64);
    assert_non_null(strstr(o->err, "tallyd: invalid --log-level 'chatty'"));
    assert_null(strchr(strchr(o->err, '\n') + 1, '\n')); /* one line */
    free(o);
    assert_int_equal(
        test_daemon_start(&e->s.d, e->s.data, "--wait-ms=3000", "--log-level=warn", NULL), 0);
    /* a check starts the tenant's supervisor: an info line, dropped */
    assert_int_equal(tally_client_open(e->s.d.socket, 10000, &c), TALLY_OK);
    assert_int_equal(tally_check(c, e->token, "open", 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_ADMITTED);
    tally_client_close(c);
    serve_stop(&e->s);
    assert_int_equal(serve_log_count(&e->s, "\"event\":"), 0);
}

/* --log-level debug shows the lease traffic as JSON events: the child's ACQUIRE
 * as "lease_sent" and the supervisor's GRANT as "lease_received", tenant named,
 * never a token; at the default level (info) neither appears. */
static void
test_debug_lease_events(void **state)
{
    struct env *e = *state;
    struct tally_result res;
    tally_client *c = NULL;
    char *log;

    serve_start(&e->s, NULL, NULL);
    assert_int_equal(tally_client_open(e->s.d.socket, 10000, &c), TALLY_OK);
    assert_int_equal(tally_check(c, e->token, "open", 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_ADMITTED);
    tally_client_close(c);
    serve_stop(&e->s);
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"lease_"), 0);
    assert_int_equal(
        test_daemon_start(&e->s.d, e->s.data, "--wait-ms=3000", "--log-level=debug", NULL), 0);
    assert_int_equal(tally_client_open(e->s.d.socket, 10000, &c), TALLY_OK);
    assert_int_equal(tally_check(c, e->token, "open", 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_ADMITTED);
    tally_client_close(c);
    serve_stop(&e->s);
    assert_true(serve_log_count(&e->s, "\"event\":\"lease_sent\",\"tenant\":\"acme\"") >= 1);
    assert_true(serve_log_count(&e->s, "\"event\":\"lease_received\"") >= 1);
    assert_true(serve_log_count(&e->s, "\"type\":\"ACQUIRE\"") >= 1);
    log = serve_log(&e->s);
    assert_null(strstr(log, e->token));
    free(log);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_log_lines_for_supervisor_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_degraded_transitions_are_one_line_each, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_log_level, setup, teardown),
        cmocka_unit_test_setup_teardown(test_debug_lease_events, setup, teardown),
    };

    return cmocka_run_group_tests_name("serve_events", tests, NULL, NULL);
}

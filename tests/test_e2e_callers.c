/*
 * Endpoints keyed by caller through the real tally and tallyd: a sign-in
 * endpoint admits 5 attempts per address and refuses the 6th with an exact
 * Retry-After and scope caller while another address is admitted; an account
 * caller stops a guess spread over many addresses, and a refusal charges none
 * of a request's callers; bad callers get 400 and start nothing; a token never
 * keys a caller endpoint; nothing on disk or in the log holds a caller in
 * clear; kill -9 of tallyd and of the authorities keeps every count; a stopped
 * authority (SIGSTOP) makes a fail-closed endpoint answer 503, without charging
 * the caller, until SIGCONT; the binary protocol and libtally share the budgets;
 * /metrics counts caller decisions and entries.
 */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
/* clang-format on */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "serve_util.h"
#include "tally.h"

static int
setup(void **state)
{
    static struct serve_env e;

    serve_env_init(&e);
    serve_tally_ok(&e, NULL, 0, "endpoint", "set", "login", "--key", "caller", "--limit", "5/5m",
                   "--limit", "20/1h", NULL);
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    serve_env_release(*state);
    return 0;
}

/* GET /v1/check on `endpoint` with the callers (NULL-terminated) as X-Tally-Caller. */
static int
check(const struct serve_env *e, const char *endpoint, struct serve_http *out, ...)
{
    char headers[4096];
    size_t at = (size_t)snprintf(headers, sizeof(headers), "X-Tally-Endpoint: %s\r\n", endpoint);
    const char *c;
    va_list ap;

    va_start(ap, out);
    while ((c = va_arg(ap, const char *)) != NULL && at < sizeof(headers))
        at += (size_t)snprintf(headers + at, sizeof(headers) - at, "X-Tally-Caller: %s\r\n", c);
    va_end(ap);
    serve_http_get(e->http_port, "/v1/check", headers, out);
    return out->status;
}

/* Pids of the caller authorities of this data dir. */
static int
authority_pids(const struct serve_env *e, pid_t *pids, int max)
{
    return test_caller_authority_pids(e->data, pids, max);
}

static void
test_callers_signin_per_address(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char v[64];
    int64_t now, want;

    serve_start(e, NULL, NULL);
    for (int i = 0; i < 5; i++)
        assert_int_equal(check(e, "login", &r, "ip:203.0.113.7", NULL), 200);
    now = serve_wall_ms();
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.7", NULL), 429);
    assert_non_null(strstr(r.body, "\"scope\":\"caller\""));
    assert_true(serve_http_header(&r, "Retry-After", v, sizeof(v)));
    want = ((now / 300000 + 1) * 300000 - now + 999) / 1000; /* the 5-minute window's end */
    assert_true(atoll(v) >= want - 1 && atoll(v) <= want + 1);
    assert_true(serve_http_header(&r, "RateLimit-Policy", v, sizeof(v)));
    assert_non_null(strstr(v, "\"caller\";q=5;w=300"));
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.8", NULL), 200);
    /* refusals charge nothing: still exactly 5 for the first address */
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.7", NULL), 429);
    assert_int_equal(check(e, "login", &r, NULL), 400);
    /* counted in /metrics, with no caller in any label */
    serve_http_get(e->http_port, "/metrics", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_true(serve_metric(r.body, "tally_caller_decisions_total{result=\"admitted\"}") == 6);
    assert_true(serve_metric(r.body, "tally_caller_decisions_total{result=\"refused\"}") == 2);
    assert_true(serve_metric(r.body, "tally_caller_decisions_total{result=\"bad_request\"}") == 1);
    assert_true(serve_metric(r.body, "tally_refusals_total{scope=\"caller\"}") == 2);
    assert_true(serve_metric(r.body, "tally_caller_entries") == 2);
    assert_true(serve_metric(r.body, "tally_caller_authorities_live") >= 1);
    assert_null(strstr(r.body, "203.0.113"));
    serve_stop(e);
}

/* Every caller of a request is its own budget, all must admit, and a refusal charges
 * none of them: the account stops a guess spread over addresses. */
static void
test_callers_account_stops_distributed_guess(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char ip[32];

    serve_start(e, NULL, NULL);
    for (int i = 0; i < 5; i++) {
        snprintf(ip, sizeof(ip), "ip:198.51.100.%d", i);
        assert_int_equal(check(e, "login", &r, ip, "account:alice@example.com", NULL), 200);
    }
    for (int i = 5; i < 12; i++) {
        snprintf(ip, sizeof(ip), "ip:198.51.100.%d", i);
        assert_int_equal(check(e, "login", &r, ip, "account:alice@example.com", NULL), 429);
        assert_non_null(strstr(r.body, "\"scope\":\"caller\""));
    }
    /* the refused addresses were not charged: 5 more each with another account */
    for (int k = 0; k < 5; k++)
        assert_int_equal(check(e, "login", &r, "ip:198.51.100.5", "account:bob@example.com", NULL),
                         200);
    assert_int_equal(check(e, "login", &r, "ip:198.51.100.5", "account:carol@example.com", NULL),
                     429);
    serve_stop(e);
}

static void
test_callers_bad_input_creates_nothing(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char long_value[300] = "account:";
    char path[256];
    struct stat st;

    memset(long_value + 8, 'a', 257);
    serve_start(e, NULL, NULL);
    assert_int_equal(check(e, "login", &r, NULL), 400);
    assert_non_null(strstr(r.body, "missing X-Tally-Caller"));
    assert_int_equal(check(e, "login", &r, "ip:1", "ip:2", "ip:3", "ip:4", "ip:5", NULL), 400);
    assert_int_equal(check(e, "login", &r, long_value, NULL), 400);
    assert_non_null(strstr(r.body, "256"));
    assert_int_equal(check(e, "login", &r, "ip:caf\xc3\xa9", NULL), 400);
    assert_int_equal(check(e, "login", &r, "IP:1.2.3.4", NULL), 400);
    assert_int_equal(check(e, "login", &r, "1.2.3.4", NULL), 400);
    assert_int_equal(check(e, "login", &r, "ip:192.0.2.1, ip:192.0.2.2", NULL), 400);
    assert_int_equal(check(e, "nosuch", &r, "ip:1.2.3.4", NULL), 401); /* as without a token */
    /* nothing was started or created for any of them */
    snprintf(path, sizeof(path), "%s/callers", e->data);
    assert_int_not_equal(stat(path, &st), 0);
    assert_int_equal(authority_pids(e, (pid_t[4]){0}, 4), 0);
    serve_stop(e);
}

/* A token sent to a caller endpoint does not key it; a token endpoint still needs one. */
static void
test_callers_token_never_keys(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char tok1[128], tok2[128], headers[512];

    serve_tally_ok(e, NULL, 0, "plan", "set", "free", "--limit", "1000/1m", NULL);
    serve_tally_ok(e, NULL, 0, "endpoint", "set", "search", "--limit", "100/1m", NULL);
    serve_tally_ok(e, NULL, 0, "tenant", "add", "acme", "--plan", "free", NULL);
    serve_tally_ok(e, tok1, sizeof(tok1), "link", "create", "acme", NULL);
    serve_tally_ok(e, tok2, sizeof(tok2), "link", "create", "acme", NULL);
    serve_start(e, NULL, NULL);
    for (int i = 0; i < 5; i++) {
        snprintf(headers, sizeof(headers),
                 "Authorization: Bearer %s\r\nX-Tally-Endpoint: login\r\n"
                 "X-Tally-Caller: ip:192.0.2.1\r\n",
                 i % 2 ? tok1 : tok2);
        serve_http_get(e->http_port, "/v1/check", headers, &r);
        assert_int_equal(r.status, 200);
    }
    assert_int_equal(check(e, "login", &r, "ip:192.0.2.1", NULL), 429); /* one budget */
    serve_check(e, tok1, "login", &r);                                  /* a token and no caller */
    assert_int_equal(r.status, 400);
    assert_int_equal(check(e, "search", &r, "ip:192.0.2.1", NULL), 401);
    serve_check(e, tok1, "search", &r);
    assert_int_equal(r.status, 200);
    serve_stop(e);
}

/* A valid token picks its tenant's plan's policy, never the key. */
static void
test_callers_plan_override(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char tok[128], headers[512];

    serve_tally_ok(e, NULL, 0, "plan", "set", "pro", "--limit", "1000/1m", NULL);
    serve_tally_ok(e, NULL, 0, "endpoint", "set", "login", "--plan", "pro", "--key", "caller",
                   "--limit", "2/5m", NULL);
    serve_tally_ok(e, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(e, tok, sizeof(tok), "link", "create", "acme", NULL);
    serve_start(e, NULL, NULL);
    snprintf(headers, sizeof(headers),
             "Authorization: Bearer %s\r\nX-Tally-Endpoint: login\r\n"
             "X-Tally-Caller: ip:192.0.2.10\r\n",
             tok);
    for (int i = 0; i < 3; i++) {
        serve_http_get(e->http_port, "/v1/check", headers, &r);
        assert_int_equal(r.status, i < 2 ? 200 : 429);
    }
    for (int i = 0; i < 5; i++) /* the default policy without a token: 5 */
        assert_int_equal(check(e, "login", &r, "ip:192.0.2.11", NULL), 200);
    assert_int_equal(check(e, "login", &r, "ip:192.0.2.11", NULL), 429);
    serve_stop(e);
}

/* Past --max-callers: entries stay at the ceiling, the rest is counted in the sketch,
 * and no caller is admitted over its limit. */
static void
test_callers_ceiling_bounded(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char ip[32];
    int admitted = 0;

    serve_tally_ok(e, NULL, 0, "endpoint", "set", "signup", "--key", "caller", "--limit", "2/1h",
                   "--max-callers", "4", NULL);
    serve_start(e, NULL, NULL);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 40; i++) {
            snprintf(ip, sizeof(ip), "ip:198.18.0.%d", i);
            admitted += check(e, "signup", &r, ip, NULL) == 200;
        }
    }
    assert_true(admitted <= 80); /* at most 2 each */
    assert_true(admitted >= 60); /* and the sketch still lets most newcomers in */
    serve_http_get(e->http_port, "/metrics", NULL, &r);
    assert_true(serve_metric(r.body, "tally_caller_entries") <= 4);
    assert_true(serve_metric(r.body, "tally_caller_events_total{event=\"sketch\"}") > 0);
    serve_stop(e);
}

static void
test_callers_kill9_keeps_counts(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    pid_t pids[8];
    int n;

    serve_start(e, NULL, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(check(e, "login", &r, "ip:203.0.113.9", NULL), 200);
    /* the authorities alone: tallyd starts them again and they read their files back */
    n = authority_pids(e, pids, 8);
    assert_true(n >= 1);
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    serve_sleep_ms(100);
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.9", NULL), 200);
    n = authority_pids(e, pids, 8);
    assert_true(n >= 1);
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    test_daemon_kill9(&e->d);
    serve_start(e, NULL, NULL);
    /* the fifth attempt is still the last */
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.9", NULL), 200);
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.9", NULL), 429);
    /* and once more with tallyd alone killed */
    test_daemon_kill9(&e->d);
    serve_start(e, NULL, NULL);
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.9", NULL), 429);
    serve_stop(e);
}

/* An idle authority exits (hibernates) and the next request starts it again with its
 * counts read back from its file. */
static void
test_callers_authority_hibernates(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    pid_t pids[8];
    int64_t until;

    serve_start(e, "--idle-exit-ms=300", NULL);
    for (int i = 0; i < 2; i++)
        assert_int_equal(check(e, "login", &r, "account:hana@example.com", NULL), 200);
    assert_true(authority_pids(e, pids, 8) >= 1);
    until = serve_now_ms() + 10000;
    while (authority_pids(e, pids, 8) > 0 && serve_now_ms() < until)
        serve_sleep_ms(50);
    assert_int_equal(authority_pids(e, pids, 8), 0);
    assert_true(serve_log_count(e, "callers_idle_exit") >= 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(check(e, "login", &r, "account:hana@example.com", NULL), 200);
    assert_int_equal(check(e, "login", &r, "account:hana@example.com", NULL), 429);
    serve_stop(e);
}

/* Batched durability: commits not yet fsynced are in the page cache, so a kill -9 of
 * every process still forgets nothing. */
static void
test_callers_kill9_batched(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    pid_t pids[8];
    int n;

    serve_start(e, "--durability=batched", NULL);
    for (int i = 0; i < 5; i++)
        assert_int_equal(check(e, "login", &r, "account:gina@example.com", NULL), 200);
    n = authority_pids(e, pids, 8);
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    test_daemon_kill9(&e->d);
    serve_start(e, "--durability=batched", NULL);
    assert_int_equal(check(e, "login", &r, "account:gina@example.com", NULL), 429);
    serve_stop(e);
}

static void
test_callers_fail_closed_while_stopped(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char v[32];
    pid_t pids[8];
    int n;

    serve_tally_ok(e, NULL, 0, "endpoint", "set", "otp", "--key", "caller", "--limit", "3/1h",
                   NULL);
    serve_start(e, "--wait-ms=200", NULL);
    assert_int_equal(check(e, "otp", &r, "account:dana@example.com", NULL), 200);
    n = authority_pids(e, pids, 8);
    assert_true(n >= 1);
    for (int i = 0; i < n; i++)
        assert_int_equal(kill(pids[i], SIGSTOP), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(check(e, "otp", &r, "account:dana@example.com", NULL), 503);
        assert_true(serve_http_header(&r, "Retry-After", v, sizeof(v)));
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(kill(pids[i], SIGCONT), 0);
    /* Healed, and the 503s charged nothing: exactly 2 more. The authorities decide the three
     * requests queued while they were stopped, and the front cancels those verdicts as they
     * arrive; until the cancels are in, a check is refused (which charges nothing), so the
     * first admission may take a moment on a busy machine. */
    {
        int status = 0;

        for (int tries = 0; tries < 60 && status != 200; tries++) {
            status = check(e, "otp", &r, "account:dana@example.com", NULL);
            if (status != 200) {
                assert_int_equal(status, 429);
                serve_sleep_ms(50);
            }
        }
        assert_int_equal(status, 200);
    }
    assert_int_equal(check(e, "otp", &r, "account:dana@example.com", NULL), 200);
    assert_int_equal(check(e, "otp", &r, "account:dana@example.com", NULL), 429);
    assert_true(serve_log_count(e, "dana") == 0);
    serve_stop(e);
}

/* The binary protocol and libtally: the same budgets as over HTTP. */
static void
test_callers_binary_protocol(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    struct tally_result res;
    tally_client *c = NULL;
    const char *one[] = {"ip:203.0.113.50"};
    const char *two[] = {"ip:203.0.113.51", "account:frank@example.com"};
    const char *bad[] = {"ip:caf\xc3\xa9"};
    const char *none[] = {NULL};
    char big[300] = "account:";
    const char *toobig[] = {big};

    memset(big + 8, 'b', 280);
    serve_start(e, NULL, NULL);
    assert_int_equal(tally_client_open(e->d.socket, 5000, &c), TALLY_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tally_check_callers(c, "login", one, 1, 0, &res), TALLY_OK);
        assert_int_equal(res.status, TALLY_ADMITTED);
    }
    assert_int_equal(check(e, "login", &r, "ip:203.0.113.50", NULL), 200); /* the 5th, by HTTP */
    assert_int_equal(tally_check_callers(c, "login", one, 1, 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_REFUSED);
    assert_string_equal(res.scope, "caller");
    assert_true(res.retry_after_ms > 0 && res.retry_after_ms <= 300000);
    assert_int_equal(tally_check_callers(c, "login", two, 2, 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_ADMITTED);
    assert_int_equal(tally_check_callers(c, "login", bad, 1, 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_BAD_REQUEST);
    assert_int_equal(tally_check_callers(c, "login", none, 0, 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_BAD_REQUEST);
    assert_int_equal(tally_check_callers(c, "login", toobig, 1, 0, &res), TALLY_EINVAL);
    assert_int_equal(tally_check_callers(c, "nosuch", one, 1, 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_BAD_REQUEST);
    tally_client_close(c);
    serve_stop(e);
}

/* Keyed hashes only: no caller value in clear in any file of the data dir or the log. */
static void
test_callers_nothing_in_clear(void **state)
{
    struct serve_env *e = *state;
    struct serve_http r;
    char *log;

    serve_start(e, "--log-level=debug", NULL);
    for (int i = 0; i < 7; i++)
        (void)check(e, "login", &r, "ip:203.0.113.77", "account:zq7x-erin@example.com", NULL);
    serve_http_get(e->http_port, "/metrics", NULL, &r);
    assert_null(strstr(r.body, "203.0.113.77"));
    assert_null(strstr(r.body, "zq7x"));
    serve_stop(e);
    assert_false(test_dir_contains(e->data, "203.0.113.77"));
    assert_false(test_dir_contains(e->data, "zq7x-erin@example.com"));
    assert_false(test_dir_contains(e->data, "zq7x"));
    log = serve_log(e);
    assert_non_null(log);
    assert_null(strstr(log, "203.0.113.77"));
    assert_null(strstr(log, "zq7x"));
    free(log);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_callers_signin_per_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_account_stops_distributed_guess, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_callers_bad_input_creates_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_token_never_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_plan_override, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_ceiling_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_kill9_keeps_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_kill9_batched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_authority_hibernates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_fail_closed_while_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_nothing_in_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_binary_protocol, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * examples/caddy/Caddyfile against the real servers: tallyd on a fresh data
 * dir (a plan of 3 requests), the real caddy from Debian (`caddy run`, admin
 * off, HOME and XDG dirs in the temp dir) on a loopback port with the example
 * filled in, and curl as the client. Through Caddy: 200 from the app (with
 * tallyd's RateLimit field) while the plan lasts, then tallyd's own 429 with
 * Retry-After >= 1 and its JSON body (forward_auth passes non-2xx answers
 * through as they are), 401 for an unknown token and for none. The sign-in route
 * (endpoint login keyed by caller, the client address as caller): 5 sign-ins
 * admitted, the 6th 429 with Retry-After and scope caller, another address still
 * admitted, and an X-Tally-Caller sent by the client ignored. Caddy is always
 * stopped (teardown); a missing caddy fails the suite (a Makefile Debian package).
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

#include "examples_env.h"
#include "test_support.h"

#define LIMIT 3

static int
setup(void **state)
{
    static struct examples_env e;

    examples_env_init(&e, LIMIT);
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    examples_env_release(*state);
    return 0;
}

/* Fills the example in and runs `caddy run` in the foreground. */
static int
start_caddy(struct examples_env *e)
{
    char dir[300], conf[400], port_s[16], tallyd[32];
    char home[320], data_home[340], config_home[340];
    int port = test_free_port();
    char *argv[] = {"/usr/bin/caddy", "run", "--config", conf, "--adapter", "caddyfile", NULL};
    char *envp[] = {home, data_home, config_home, "PATH=/usr/bin:/bin", NULL};

    snprintf(dir, sizeof(dir), "%.255s/caddy", e->root);
    mkdir(dir, 0700);
    snprintf(conf, sizeof(conf), "%s/Caddyfile", dir);
    snprintf(home, sizeof(home), "HOME=%s", dir);
    snprintf(data_home, sizeof(data_home), "XDG_DATA_HOME=%s/data", dir);
    snprintf(config_home, sizeof(config_home), "XDG_CONFIG_HOME=%s/config", dir);
    snprintf(port_s, sizeof(port_s), "%d", port);
    snprintf(tallyd, sizeof(tallyd), "127.0.0.1:%d", e->http_port);
    examples_fill_template(TALLY_SOURCE_DIR "/examples/caddy/Caddyfile", conf, "LISTEN_PORT",
                           port_s, "TALLYD", tallyd, NULL);
    examples_spawn(e, "caddy", argv, envp);
    examples_wait_port(e, port, 15000);
    return port;
}

static void
test_caddy_admits_then_429_with_retry_after_then_401(void **state)
{
    struct examples_env *e = *state;
    struct examples_answer a;
    int port = start_caddy(e);
    int i;

    for (i = 0; i < LIMIT; i++) {
        examples_curl(port, "/api/hello", e->token, &a);
        if (a.status != 200)
            examples_dump_logs(e);
        assert_int_equal(a.status, 200);
        assert_string_equal(a.body, "hello from the app");
        assert_true(strstr(a.ratelimit, "t=") != NULL); /* tallyd's field, passed along */
        assert_string_equal(a.retry_after, "");
    }
    examples_curl(port, "/api/hello", e->token, &a);
    assert_int_equal(a.status, 429);
    assert_true(atol(a.retry_after) >= 1);
    assert_non_null(strstr(a.body, "\"error\":\"rate_limited\",\"scope\":\"plan\""));
    examples_curl(port, "/api/hello", "tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &a);
    assert_int_equal(a.status, 401);
    assert_string_equal(a.body, "{\"error\":\"unauthorized\"}");
    examples_curl(port, "/api/hello", "", &a);
    assert_int_equal(a.status, 401);
    /* refused requests were not charged, and the limit still holds */
    examples_curl(port, "/api/hello", e->token, &a);
    assert_int_equal(a.status, 429);
}

/* Sign-ins per client address: 127.0.0.1 and 127.0.0.2 are two callers. */
static void
test_caddy_signin_per_address(void **state)
{
    struct examples_env *e = *state;
    struct examples_answer a;
    struct test_out o;
    int port;
    int i;

    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--key", "caller",
                                "--limit", "5/5m", NULL),
                     0);
    port = start_caddy(e);
    for (i = 0; i < 5; i++) {
        examples_curl_from(port, "/signin", "", "127.0.0.2", NULL, &a);
        if (a.status != 200)
            examples_dump_logs(e);
        assert_int_equal(a.status, 200);
        assert_string_equal(a.body, "hello from the app");
    }
    examples_curl_from(port, "/signin", "", "127.0.0.2", "X-Tally-Caller: ip:192.0.2.99", &a);
    assert_int_equal(a.status, 429);
    assert_true(atol(a.retry_after) >= 1 && atol(a.retry_after) <= 300);
    assert_non_null(strstr(a.body, "\"scope\":\"caller\""));
    /* another address is admitted, even when it names the spent one itself */
    examples_curl_from(port, "/signin", "", "127.0.0.1", "X-Tally-Caller: ip:127.0.0.2", &a);
    assert_int_equal(a.status, 200);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caddy_admits_then_429_with_retry_after_then_401),
        cmocka_unit_test(test_caddy_signin_per_address),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("examples_caddy", tests, setup, teardown);
}

/*
 * examples/nginx/nginx.conf against the real servers: tallyd on a fresh data
 * dir (a plan of 3 requests), the real nginx from Debian started on loopback
 * ports with the example filled in, and curl as the client. Through nginx:
 * 200 from the app (with tallyd's RateLimit field) while the plan lasts, then
 * 429 with Retry-After >= 1 (tallyd's 403 mapped by the example), 401 with a
 * JSON body for an unknown token, and 401 for none. The sign-in location
 * (endpoint login keyed by caller, the client address as caller): 5 sign-ins
 * admitted, the 6th 429 with Retry-After, another address still admitted, and
 * an X-Tally-Caller sent by the client ignored. nginx is always stopped (teardown), and a
 * missing nginx fails the suite: it is one of the Makefile's Debian packages.
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

/* Fills the example in and runs nginx in the foreground, its log on stderr. */
static int
start_nginx(struct examples_env *e)
{
    char prefix[300], conf[400], listen[32], tallyd[32], app[32], pid[400];
    char globals[600];
    int port = test_free_port();
    char *argv[] = {"/usr/sbin/nginx", "-p", prefix,  "-c", conf, "-e",
                    "stderr",          "-g", globals, NULL};

    snprintf(prefix, sizeof(prefix), "%.255s/nginx", e->root);
    mkdir(prefix, 0700);
    snprintf(conf, sizeof(conf), "%s/nginx.conf", prefix);
    snprintf(pid, sizeof(pid), "%s/nginx.pid", prefix);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    snprintf(tallyd, sizeof(tallyd), "127.0.0.1:%d", e->http_port);
    snprintf(app, sizeof(app), "127.0.0.1:%d", test_free_port());
    examples_fill_template(TALLY_SOURCE_DIR "/examples/nginx/nginx.conf", conf, "LISTEN", listen,
                           "TALLYD", tallyd, "APP", app, "PREFIX", prefix, NULL);
    /* As root, nginx runs its workers as nobody: they only need the network. */
    snprintf(globals, sizeof(globals), "daemon off; master_process on; pid %s; error_log stderr;",
             pid);
    examples_spawn(e, "nginx", argv, NULL);
    examples_wait_port(e, port, 10000);
    return port;
}

static void
test_nginx_admits_then_429_with_retry_after_then_401(void **state)
{
    struct examples_env *e = *state;
    struct examples_answer a;
    int port = start_nginx(e);
    int i;

    for (i = 0; i < LIMIT; i++) {
        examples_curl(port, "/api/hello", e->token, &a);
        if (a.status != 200)
            examples_dump_logs(e);
        assert_int_equal(a.status, 200);
        assert_string_equal(a.body, "hello from the app\n");
        assert_true(strstr(a.ratelimit, "t=") != NULL); /* tallyd's field, passed along */
        assert_string_equal(a.retry_after, "");
    }
    examples_curl(port, "/api/hello", e->token, &a);
    assert_int_equal(a.status, 429);
    assert_true(atol(a.retry_after) >= 1);
    assert_non_null(strstr(a.body, "\"rate_limited\""));
    examples_curl(port, "/api/hello", "tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &a);
    assert_int_equal(a.status, 401);
    assert_string_equal(a.body, "{\"error\":\"unauthorized\"}\n");
    examples_curl(port, "/api/hello", "", &a);
    assert_int_equal(a.status, 401);
    /* refused requests were not charged, and the limit still holds */
    examples_curl(port, "/api/hello", e->token, &a);
    assert_int_equal(a.status, 429);
}

/* Sign-ins per client address: 127.0.0.1 and 127.0.0.2 are two callers. */
static void
test_nginx_signin_per_address(void **state)
{
    struct examples_env *e = *state;
    struct examples_answer a;
    struct test_out o;
    int port;
    int i;

    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--key", "caller",
                                "--limit", "5/5m", NULL),
                     0);
    port = start_nginx(e);
    for (i = 0; i < 5; i++) {
        examples_curl_from(port, "/signin", "", "127.0.0.2", NULL, &a);
        if (a.status != 200)
            examples_dump_logs(e);
        assert_int_equal(a.status, 200);
        assert_string_equal(a.body, "hello from the app\n");
    }
    examples_curl_from(port, "/signin", "", "127.0.0.2", "X-Tally-Caller: ip:192.0.2.99", &a);
    assert_int_equal(a.status, 429);
    assert_true(atol(a.retry_after) >= 1 && atol(a.retry_after) <= 300);
    /* another address is admitted, even when it names the spent one itself */
    examples_curl_from(port, "/signin", "", "127.0.0.1", "X-Tally-Caller: ip:127.0.0.2", &a);
    assert_int_equal(a.status, 200);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nginx_admits_then_429_with_retry_after_then_401),
        cmocka_unit_test(test_nginx_signin_per_address),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("examples_nginx", tests, setup, teardown);
}

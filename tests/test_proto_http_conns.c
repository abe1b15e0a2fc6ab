/*
 * The HTTP server's connections in-process (the fixture of test_proto_http.c,
 * tests/support/test_http_client.h): the connection cap and its 503, an accept
 * without memory, the idle, request and drain deadlines (tens of milliseconds,
 * never slept: waits run the loop), clients that go away mid-request or with
 * answers queued, and closing the server with connections open. Each test ends
 * with uv_loop_close() == 0, and ASan checks for leaks.
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

#include "proto_http.h"
#include "test_alloc.h"
#include "test_http_client.h"

#define FILL_COUNT 1000 /* pipelined requests for /fill */

#define WAIT(fx, cond) TEST_HTTP_WAIT(&(fx)->env, cond)

static void
test_http_connection_cap(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *a, *b, *over, *d;

    fx->cfg.max_connections = 2;
    test_http_start(fx);
    a = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    b = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, a->n_resps == 1 && b->n_resps == 1);
    /* One more is answered 503 too_many_connections, Retry-After: 1, then closed. */
    over = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, over->done);
    assert_int_equal(over->n_resps, 1);
    assert_int_equal(over->resps[0].status, 503);
    assert_non_null(strstr(over->resps[0].body, "\"error\":\"too_many_connections\""));
    assert_string_equal(over->resps[0].connection, "close");
    WAIT(fx, test_http_stats(fx).connections_active == 2);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_CONN_LIMIT], 1);
    test_http_client_close(a);
    WAIT(fx, test_http_stats(fx).connections_active == 1);
    d = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, d->n_resps == 1);
    assert_int_equal(d->resps[0].status, 200);
}

static void
test_http_accept_without_memory(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *a, *b;

    test_http_start(fx);
    tally_alloc_fail_at(1); /* the connection's block */
    a = test_http_client_open(&fx->env, NULL, false, 0);
    WAIT(fx, a->done);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_NO_MEMORY], 1);
    b = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, b->n_resps == 1);
}

static void
test_http_idle_timeout(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    fx->cfg.idle_timeout_ms = 50;
    test_http_start(fx);
    c = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, c->done);
    assert_int_equal(c->n_resps, 1);
    assert_int_equal(c->read_status, UV_EOF);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_IDLE_TIMEOUT], 1);
    assert_int_equal(test_http_stats(fx).connections_active, 0);
}

/* Slowloris: every byte is progress, but the request must be complete
 * request_timeout_ms after its first byte. */
static void
test_http_slowloris_cut(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;
    uint64_t t0;

    fx->cfg.request_timeout_ms = 100;
    test_http_start(fx);
    c = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n", false, 0);
    t0 = uv_hrtime();
    test_http_trickle(&fx->env, c, "X-Slow-Header-That-Never-Ends-X-Slow-Header-That-Never-Ends",
                      10);
    assert_true(c->done);
    assert_int_equal(c->n_resps, 0);
    assert_true(uv_hrtime() - t0 < 2000000000ULL); /* far below the 10 s idle timeout */
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_REQUEST_TIMEOUT], 1);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_IDLE_TIMEOUT], 0);
}

/* The idle timer is reset by progress: a slow but steady request completes. */
static void
test_http_idle_reset_by_progress(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    fx->cfg.idle_timeout_ms = 60;
    test_http_start(fx);
    c = test_http_client_open(&fx->env, "GET /ping", false, 0);
    test_http_trickle(&fx->env, c, " HTTP/1.1\r\n\r\n", 20); /* 13 bytes over 260 ms */
    assert_int_equal(c->n_resps, 1);
    assert_int_equal(c->resps[0].status, 200);
}

static void
test_http_client_gone_mid_request(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    test_http_start(fx);
    c = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\nHost: t\r\nAuthoriz", false, 0);
    WAIT(fx, test_http_stats(fx).connections_accepted == 1 && !c->writing);
    test_http_client_close(c);
    WAIT(fx, test_http_stats(fx).connections_active == 0);
    assert_int_equal(fx->handled, 0);
}

static void
test_http_client_gone_with_queued_answers(void **state)
{
    struct test_http_fixture *fx = *state;
    char *reqs = malloc(FILL_COUNT * 48), *p = reqs;
    struct test_http_client *c;
    size_t i;

    test_http_start(fx);
    for (i = 0; i < FILL_COUNT; i++)
        p += sprintf(p, "GET /fill?%zu HTTP/1.1\r\n\r\n", i);
    c = test_http_client_open(&fx->env, reqs, true, 4096);
    free(reqs);
    WAIT(fx, test_http_stats(fx).writes_queued >= 1);
    test_http_client_close(c); /* unread data: a reset */
    WAIT(fx, test_http_stats(fx).connections_active == 0);
}

static void
test_http_close_with_open_connections(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *idle, *half;

    test_http_start(fx);
    idle = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    half = test_http_client_open(&fx->env, "GET /ping HTTP/1.1\r\nHo", false, 0);
    WAIT(fx, idle->n_resps == 1 && !half->writing && test_http_stats(fx).connections_accepted == 2);
    proto_http_close(fx->srv, test_http_srv_closed);
    proto_http_close(fx->srv, test_http_srv_closed); /* ignored */
    WAIT(fx, fx->srv_closed && idle->done && half->done);
    fx->srv = NULL;
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, test_http_setup, test_http_teardown)
        T(test_http_connection_cap),
        T(test_http_accept_without_memory),
        T(test_http_idle_timeout),
        T(test_http_slowloris_cut),
        T(test_http_idle_reset_by_progress),
        T(test_http_client_gone_mid_request),
        T(test_http_client_gone_with_queued_answers),
        T(test_http_close_with_open_connections),
#undef T
    };

    signal(SIGPIPE, SIG_IGN); /* a gone peer is UV_EPIPE */
    return cmocka_run_group_tests_name("proto_http_conns", tests, NULL, NULL);
}

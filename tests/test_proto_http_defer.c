/*
 * Deferred answers of the HTTP server: a handler takes the answer over with
 * proto_http_defer() and the test finishes it later from a timer or by hand,
 * the way tallyd answers once a lease arrives. The request's query says what
 * to do: `defer=timer` (finish after 10 ms), `defer=0` (next loop turn),
 * `defer=hold` (the test finishes it), `defer=bad` (finish with a header the
 * builders refuse), `defer=now` (finish inside the handler), `defer=twice`;
 * without `defer` the standard handler answers at once. A deferred answer's
 * body is "late:" and the query, read back at finish from the request, so
 * the request's bytes must still be there. libuv allocates through
 * tally_malloc here (main), so the allocation count covers libuv as well.
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
#include <sys/socket.h>

#include "proto_http.h"
#include "test_alloc.h"
#include "test_http_client.h"

#define DEFER_COUNT 1000 /* deferred requests on one connection */

struct dfx {
    struct test_http_fixture base; /* first: cfg.app_data points to both */
    uv_timer_t timer;              /* finishes `pending` */
    proto_http_deferred *pending;  /* the one deferred answer, or NULL */
    struct proto_http_str query;   /* of the pending request, read at finish */
    bool bad;                      /* finish with a header the builders refuse */
    bool defer_refused;            /* proto_http_defer() returned NULL */
    bool in_finish;                /* inside proto_http_deferred_finish() */
    int cancels;
    int events; /* on_cancel and close callbacks, numbered from 1 */
    int cancel_event, close_event;
    struct proto_http_stats final; /* copied by the close callback */
    uv_shutdown_t shutdown_req;    /* the client's half close */
};

#define WAIT(fx, cond) TEST_HTTP_WAIT(&(fx)->base.env, cond)

static void
finish_pending(struct dfx *fx)
{
    proto_http_deferred *d = fx->pending;
    struct proto_http_response *resp;

    assert_non_null(d); /* not cancelled meanwhile */
    resp = proto_http_deferred_response(d);
    resp->status = 200;
    proto_http_response_printf(resp, "late:%.*s", (int)fx->query.len, fx->query.ptr);
    if (fx->bad)
        proto_http_response_header(resp, "X-Test", "a\r\nInjected: 1");
    fx->bad = false;
    fx->pending = NULL;
    fx->in_finish = true;
    proto_http_deferred_finish(d);
    fx->in_finish = false;
}

static void
on_finish_timer(uv_timer_t *t)
{
    finish_pending(t->data);
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status;
}

static bool
query_is(const struct proto_http_request *req, const char *value)
{
    struct proto_http_str v;

    return proto_http_query_get(req, "defer", &v) == TALLY_OK && v.len == strlen(value) &&
           memcmp(v.ptr, value, v.len) == 0;
}

static void
handler(void *app_data, const struct proto_http_request *req, struct proto_http_response *resp)
{
    struct dfx *fx = app_data;
    struct proto_http_str v;
    proto_http_deferred *d;

    assert_false(fx->in_finish); /* the next request waits for a later loop turn */
    if (proto_http_query_get(req, "defer", &v) != TALLY_OK) {
        test_http_handler(app_data, req, resp);
        return;
    }
    fx->base.handled++;
    assert_null(fx->pending); /* one at a time: the connection parses no further */
    d = proto_http_defer(resp);
    if (d == NULL) {
        fx->defer_refused = true;
        resp->status = 200;
        proto_http_response_write(resp, "sync", 4);
        return;
    }
    fx->pending = d;
    fx->query = req->query;
    fx->bad = query_is(req, "bad");
    if (query_is(req, "twice"))
        assert_null(proto_http_defer(resp));
    if (query_is(req, "now"))
        finish_pending(fx);
    else if (query_is(req, "timer") || query_is(req, "bad"))
        assert_int_equal(uv_timer_start(&fx->timer, on_finish_timer, 10, 0), 0);
    else if (query_is(req, "0") || query_is(req, "twice"))
        assert_int_equal(uv_timer_start(&fx->timer, on_finish_timer, 0, 0), 0);
}

static void
on_cancel(void *app_data, proto_http_deferred *d)
{
    struct dfx *fx = app_data;

    assert_ptr_equal(d, fx->pending);
    fx->pending = NULL;
    fx->cancels++;
    fx->cancel_event = ++fx->events;
}

static void
on_srv_closed(proto_http_server *srv)
{
    struct dfx *fx = proto_http_app_data(srv);

    proto_http_stats(srv, &fx->final);
    fx->close_event = ++fx->events;
    test_http_srv_closed(srv);
}

static int
setup(void **state)
{
    struct dfx *fx = calloc(1, sizeof(*fx));

    assert_non_null(fx);
    test_http_fixture_init(&fx->base);
    fx->base.cfg.handler = handler;
    fx->base.cfg.on_cancel = on_cancel;
    assert_int_equal(uv_timer_init(&fx->base.env.loop, &fx->timer), 0);
    fx->timer.data = fx;
    *state = fx;
    return 0;
}

static int
teardown(void **state)
{
    struct dfx *fx = *state;

    uv_close((uv_handle_t *)&fx->timer, NULL);
    test_http_fixture_release(&fx->base);
    free(fx);
    return 0;
}

static struct proto_http_stats
stats(struct dfx *fx)
{
    return test_http_stats(&fx->base);
}

static struct test_http_client *
client_open(struct dfx *fx, const char *req)
{
    return test_http_client_open(&fx->base.env, req, false, 0);
}

static void
on_wake(uv_timer_t *t)
{
    *(bool *)t->data = true;
}

/* Runs the loop for `ms` of loop time (the client's bytes all arrive, timers
 * that should not fire get their chance). */
static void
run_for(struct dfx *fx, uint64_t ms)
{
    bool woke = false;

    fx->timer.data = &woke;
    assert_int_equal(uv_timer_start(&fx->timer, on_wake, ms, 0), 0);
    WAIT(fx, woke);
    fx->timer.data = fx;
}

/* --- cases ----------------------------------------------------------------- */

static void
test_defer_finish_from_timer(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;
    uint64_t t0;

    test_http_start(&fx->base);
    t0 = uv_hrtime();
    c = client_open(fx, "GET /echo?defer=timer HTTP/1.1\r\nHost: t\r\n\r\n");
    WAIT(fx, c->n_resps == 1);
    /* 10 ms of loop time, which counts whole milliseconds: at least 9 ms of uv_hrtime() */
    assert_true(uv_hrtime() - t0 >= 9000000ULL);
    assert_int_equal(c->resps[0].status, 200);
    assert_string_equal(c->resps[0].body, "late:defer=timer");
    assert_string_equal(c->resps[0].connection, "keep-alive");
    assert_string_equal(c->resps[0].content_type, "application/json");
    assert_true(c->resps[0].has_length);
    /* The connection goes on: the next request is answered at once. */
    test_http_client_send(c, "GET /ping HTTP/1.1\r\n\r\n", 22);
    WAIT(fx, c->n_resps == 2);
    assert_string_equal(c->resps[1].body, "pong");
    assert_int_equal(stats(fx).deferred, 1);
    assert_int_equal(stats(fx).requests, 2);
    assert_int_equal(fx->cancels, 0);
}

/* The first request is deferred: the second is not even parsed until it is
 * finished, and the answers leave in request order. */
static void
test_defer_pipelined_in_order(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=hold&n=1 HTTP/1.1\r\n\r\n"
                        "POST /echo?n=2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                        "GET /echo?defer=hold&n=3 HTTP/1.1\r\nConnection: close\r\n\r\n");
    WAIT(fx, fx->pending != NULL);
    run_for(fx, 20); /* every byte has arrived; nothing is parsed */
    assert_int_equal(fx->base.handled, 1);
    assert_int_equal(c->n_resps, 0);
    finish_pending(fx);
    WAIT(fx, fx->pending != NULL);
    assert_int_equal(fx->base.handled, 3);
    finish_pending(fx);
    WAIT(fx, c->done);
    assert_false(c->parse_error);
    assert_int_equal(c->n_resps, 3);
    assert_string_equal(c->resps[0].body, "late:defer=hold&n=1");
    assert_string_equal(c->resps[1].body, "n=2");
    assert_string_equal(c->resps[2].body, "late:defer=hold&n=3");
    assert_string_equal(c->resps[1].connection, "keep-alive");
    assert_string_equal(c->resps[2].connection, "close");
    assert_int_equal(c->read_status, UV_EOF);
}

/* The client shuts down its side while the answer is deferred: cancelled at
 * once, nothing written, the connection closed. */
static void
test_defer_client_eof_cancels(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=hold HTTP/1.1\r\n\r\n");
    WAIT(fx, fx->pending != NULL && !c->writing);
    assert_int_equal(uv_shutdown(&fx->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown), 0);
    WAIT(fx, c->done);
    assert_int_equal(c->read_status, UV_EOF);
    assert_int_equal(c->n_resps, 0);
    assert_int_equal(fx->cancels, 1);
    assert_null(fx->pending);
    assert_int_equal(stats(fx).deferred_cancelled, 1);
    assert_int_equal(stats(fx).requests, 0);
    assert_int_equal(stats(fx).connections_active, 0);
}

/* The client resets the connection (a read error, not EOF) with a pipelined
 * request buffered behind the deferred answer. */
static void
test_defer_client_reset_cancels(void **state)
{
    struct dfx *fx = *state;
    struct linger reset = {1, 0};
    struct test_http_client *c;
    uv_os_fd_t fd;

    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=hold HTTP/1.1\r\n\r\nGET /ping HTTP/1.1\r\n\r\n");
    WAIT(fx, fx->pending != NULL && !c->writing);
    assert_int_equal(uv_fileno((uv_handle_t *)&c->tcp, &fd), 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)), 0);
    test_http_client_close(c);
    WAIT(fx, stats(fx).connections_active == 0);
    assert_int_equal(fx->cancels, 1);
    assert_int_equal(fx->base.handled, 1);
    run_for(fx, 20);
    assert_int_equal(fx->cancels, 1); /* exactly once */
}

static void
test_defer_server_close_cancels(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=hold HTTP/1.1\r\n\r\n");
    WAIT(fx, fx->pending != NULL);
    proto_http_close(fx->base.srv, on_srv_closed);
    assert_int_equal(fx->cancels, 0); /* never inside proto_http_close() */
    WAIT(fx, fx->base.srv_closed && c->done);
    fx->base.srv = NULL;
    assert_int_equal(fx->cancels, 1);
    assert_int_equal(fx->cancel_event, 1); /* on_cancel, then the close callback */
    assert_int_equal(fx->close_event, 2);
    assert_int_equal(fx->final.deferred_cancelled, 1);
    assert_int_equal(c->n_resps, 0);
    /* teardown: uv_loop_close() == 0 */
}

/* Finished after the close began but before on_cancel: dropped, and the app
 * hears nothing more of it. */
static void
test_defer_finish_while_closing(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=hold HTTP/1.1\r\n\r\n");
    WAIT(fx, fx->pending != NULL);
    proto_http_close(fx->base.srv, on_srv_closed);
    finish_pending(fx);
    WAIT(fx, fx->base.srv_closed && c->done);
    fx->base.srv = NULL;
    assert_int_equal(fx->cancels, 0);
    assert_int_equal(fx->final.deferred_cancelled, 0);
    assert_int_equal(fx->final.requests, 0);
    assert_int_equal(c->n_resps, 0);
}

/* 1000 deferred answers on one keep-alive connection, pipelined (so the read
 * buffer fills while one is deferred): in order, and nothing allocated after
 * the first answers, neither by the server nor by libuv. */
static void
test_defer_many_no_alloc(void **state)
{
    struct dfx *fx = *state;
    char *reqs = malloc(DEFER_COUNT * 48), *p = reqs;
    struct test_http_client *c;
    uint64_t allocs;
    size_t i;

    assert_non_null(reqs);
    test_http_start(&fx->base);
    for (i = 0; i < DEFER_COUNT; i++)
        p += sprintf(p, "GET /echo?defer=0&n=%zu HTTP/1.1\r\n\r\n", i);
    c = client_open(fx, reqs);
    free(reqs);
    WAIT(fx, c->n_resps >= 10);
    allocs = tally_alloc_count();
    WAIT(fx, c->n_resps == DEFER_COUNT);
    assert_int_equal(tally_alloc_count(), allocs);
    assert_false(c->parse_error);
    for (i = 0; i < DEFER_COUNT; i++) {
        char body[64];

        snprintf(body, sizeof(body), "late:defer=0&n=%zu", i);
        assert_string_equal(c->resps[i].body, body);
        assert_string_equal(c->resps[i].connection, "keep-alive");
    }
    assert_int_equal(stats(fx).deferred, DEFER_COUNT);
    assert_int_equal(stats(fx).requests, DEFER_COUNT);
    assert_int_equal(stats(fx).connections_accepted, 1);
}

static void
test_defer_head_no_body(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    test_http_start(&fx->base);
    c = client_open(fx,
                    "HEAD /ping?defer=timer HTTP/1.1\r\n\r\nHEAD /ping?defer=0 HTTP/1.1\r\n\r\n");
    c->head_answers = true;
    WAIT(fx, c->n_resps == 2);
    assert_false(c->parse_error); /* a stray body would break the second answer */
    assert_int_equal(c->resps[0].status, 200);
    assert_true(c->resps[0].has_length);
    assert_int_equal(c->resps[0].body_len, 0);
    assert_int_equal(c->resps[1].body_len, 0);
}

/* A builder that fails on the deferred response latches: 500, as in the handler. */
static void
test_defer_builder_error_is_500(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    test_http_start(&fx->base);
    c = client_open(fx, "GET /ping?defer=bad HTTP/1.1\r\n\r\nGET /ping HTTP/1.1\r\n\r\n");
    WAIT(fx, c->n_resps == 2);
    assert_int_equal(c->resps[0].status, 500);
    assert_string_equal(c->resps[0].body, "{\"error\":\"internal_error\"}");
    assert_string_equal(c->resps[0].x_test, "");
    assert_string_equal(c->resps[1].body, "pong");
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_RESPONSE_ERROR], 1);
}

/* The app's wait is not the client's idleness: no deadline while deferred,
 * and the idle deadline counts again from the answer. */
static void
test_defer_suspends_deadlines(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    fx->base.cfg.idle_timeout_ms = 40;
    fx->base.cfg.request_timeout_ms = 40;
    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=hold HTTP/1.1\r\n\r\n");
    WAIT(fx, fx->pending != NULL);
    run_for(fx, 150);
    assert_false(c->done);
    assert_int_equal(stats(fx).connections_active, 1);
    finish_pending(fx);
    WAIT(fx, c->done);
    assert_int_equal(c->n_resps, 1);
    assert_string_equal(c->resps[0].body, "late:defer=hold");
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_IDLE_TIMEOUT], 1);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_REQUEST_TIMEOUT], 0);
}

/* A small read buffer fills behind the deferred answer: the server stops
 * reading (no 431, no close) and answers everything once it is finished. */
static void
test_defer_backpressure(void **state)
{
    struct dfx *fx = *state;
    char reqs[2048], *p = reqs;
    struct test_http_client *c;
    size_t i;

    fx->base.cfg.read_buffer_bytes = 128;
    test_http_start(&fx->base);
    p += sprintf(p, "GET /echo?defer=hold HTTP/1.1\r\n\r\n");
    for (i = 0; i < 40; i++)
        p += sprintf(p, "GET /echo?n=%zu HTTP/1.1\r\n\r\n", i);
    c = client_open(fx, reqs);
    WAIT(fx, fx->pending != NULL && !c->writing);
    run_for(fx, 20);
    assert_int_equal(stats(fx).connections_active, 1);
    assert_int_equal(fx->base.handled, 1);
    finish_pending(fx);
    WAIT(fx, c->n_resps == 41);
    for (i = 0; i < 40; i++) {
        char body[16];

        snprintf(body, sizeof(body), "n=%zu", i);
        assert_string_equal(c->resps[i + 1].body, body);
    }
}

/* No deferral without on_cancel, none twice; finished inside the handler,
 * the answer goes out as if never deferred. */
static void
test_defer_refused_and_immediate(void **state)
{
    struct dfx *fx = *state;
    struct test_http_client *c;

    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=now HTTP/1.1\r\n\r\nGET /echo?defer=twice HTTP/1.1\r\n\r\n"
                        "GET /ping HTTP/1.1\r\n\r\n");
    WAIT(fx, c->n_resps == 3);
    assert_string_equal(c->resps[0].body, "late:defer=now");
    assert_string_equal(c->resps[1].body, "late:defer=twice");
    assert_string_equal(c->resps[2].body, "pong");
    assert_false(fx->defer_refused);
    proto_http_close(fx->base.srv, test_http_srv_closed);
    WAIT(fx, fx->base.srv_closed);
    fx->base.cfg.on_cancel = NULL;
    fx->base.srv_closed = false;
    test_http_start(&fx->base);
    c = client_open(fx, "GET /echo?defer=timer HTTP/1.1\r\n\r\n");
    WAIT(fx, c->n_resps == 1);
    assert_string_equal(c->resps[0].body, "sync");
    assert_true(fx->defer_refused);
    assert_int_equal(stats(fx).deferred, 0);
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_defer_finish_from_timer),    T(test_defer_pipelined_in_order),
        T(test_defer_client_eof_cancels),   T(test_defer_client_reset_cancels),
        T(test_defer_server_close_cancels), T(test_defer_finish_while_closing),
        T(test_defer_many_no_alloc),        T(test_defer_head_no_body),
        T(test_defer_builder_error_is_500), T(test_defer_suspends_deadlines),
        T(test_defer_backpressure),         T(test_defer_refused_and_immediate),
#undef T
    };

    signal(SIGPIPE, SIG_IGN); /* a gone peer is UV_EPIPE */
    /* libuv's own allocations count too (docs/CONVENTIONS.md §3). */
    if (uv_replace_allocator(tally_malloc, tally_realloc, tally_calloc, tally_free) != 0)
        return 1;
    return cmocka_run_group_tests_name("proto_http_defer", tests, NULL, NULL);
}

/*
 * The HTTP server in-process: a server on a fresh loop at 127.0.0.1:0 with the
 * standard test handler, raw libuv TCP clients on the same loop, and
 * http_parser reading the answers (tests/support/test_http_client.h). Time is
 * never slept: waits run the loop until a condition holds, and the timeout
 * tests configure deadlines of tens of milliseconds. Each test ends with the
 * server closed and uv_loop_close() == 0 (teardown), and ASan checks for leaks.
 * This suite: requests and answers (pipelining, limits, bad requests, routes);
 * connections (caps, deadlines, clients that go away) are test_proto_http_conns.c.
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

/* --- cases ----------------------------------------------------------------- */

static void
test_http_get_simple(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;
    struct proto_http_stats st;

    test_http_start(fx);
    c = test_http_client_open(
        &fx->env,
        "GET /ping?x=1&y=2 HTTP/1.1\r\nHost: t\r\nAuthorization:  Bearer abc \r\n"
        "x-tally-endpoint: search\r\nX-Other: 1\r\n\r\n",
        false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    assert_string_equal(c->resps[0].body, "pong");
    assert_true(c->resps[0].has_length);
    assert_string_equal(c->resps[0].connection, "keep-alive");
    assert_string_equal(c->resps[0].content_type, "application/json");
    assert_int_equal(fx->seen.method, PROTO_HTTP_GET);
    assert_int_equal(fx->seen.http_minor, 1);
    assert_string_equal(fx->seen.path, "/ping");
    assert_string_equal(fx->seen.query, "x=1&y=2");
    assert_string_equal(fx->seen.h[PROTO_HTTP_H_AUTHORIZATION], "Bearer abc");
    assert_string_equal(fx->seen.h[PROTO_HTTP_H_ENDPOINT], "search");
    assert_false(fx->seen.has_h[PROTO_HTTP_H_COST]);
    st = test_http_stats(fx);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.connections_accepted, 1);
    assert_int_equal(st.connections_active, 1);
}

static void
test_http_keepalive_two_requests(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    test_http_start(fx);
    c = test_http_client_open(&fx->env, "GET /echo?n=1 HTTP/1.1\r\nHost: t\r\n\r\n", false, 0);
    WAIT(fx, c->n_resps == 1 && !c->writing);
    test_http_client_send(c, "GET /echo?n=2 HTTP/1.1\r\nHost: t\r\n\r\n", 35);
    WAIT(fx, c->n_resps >= 2);
    assert_int_equal(c->n_resps, 2);
    assert_string_equal(c->resps[0].body, "n=1");
    assert_string_equal(c->resps[1].body, "n=2");
    assert_string_equal(c->resps[1].connection, "keep-alive");
    assert_false(c->done);
    assert_int_equal(test_http_stats(fx).connections_accepted, 1);
    assert_int_equal(test_http_stats(fx).requests, 2);
}

static void
test_http_pipelined_in_order(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    test_http_start(fx);
    c = test_http_client_open(&fx->env,
                              "GET /echo?n=1 HTTP/1.1\r\nHost: t\r\n\r\n"
                              "POST /echo?n=2 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
                              "GET /echo?n=3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                              false, 0);
    WAIT(fx, c->done);
    assert_false(c->parse_error);
    assert_int_equal(c->n_resps, 3);
    assert_string_equal(c->resps[0].body, "n=1");
    assert_string_equal(c->resps[1].body, "n=2");
    assert_string_equal(c->resps[2].body, "n=3");
    assert_string_equal(c->resps[1].connection, "keep-alive");
    assert_string_equal(c->resps[2].connection, "close");
    assert_int_equal(c->read_status, UV_EOF);
}

/* Requests that arrive in one read are answered in one write, in order. */
static void
test_http_pipelined_one_write(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;
    char reqs[40 * 48], *p = reqs;
    uint64_t writes;

    test_http_start(fx);
    for (int i = 0; i < 40; i++)
        p += sprintf(p, "GET /echo?n=%d HTTP/1.1\r\nHost: t\r\n\r\n", i);
    writes = test_http_stats(fx).writes;
    c = test_http_client_open(&fx->env, reqs, false, 0);
    WAIT(fx, c->n_resps == 40);
    assert_false(c->parse_error);
    for (int i = 0; i < 40; i++) {
        char body[16];

        snprintf(body, sizeof(body), "n=%d", i);
        assert_string_equal(c->resps[i].body, body);
    }
    /* one write per read of the server; the 40 requests came in at most a few reads */
    assert_true(test_http_stats(fx).writes - writes <= 4);
    assert_int_equal(test_http_stats(fx).requests, 40);
}

/* A client that does not read: the server queues the answer that does not fit,
 * stops reading and parsing, and later answers every request in order, with
 * no allocation per request. */
static void
test_http_pipelined_backpressure_no_alloc(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;
    char *reqs = malloc(FILL_COUNT * 48), *p = reqs;
    uint64_t allocs;
    size_t i;

    test_http_start(fx);
    for (i = 0; i < FILL_COUNT; i++)
        p += sprintf(p, "GET /fill?%zu HTTP/1.1\r\nHost: t\r\n\r\n", i);
    c = test_http_client_open(&fx->env, reqs, true, 4096);
    free(reqs);
    WAIT(fx, test_http_stats(fx).writes_queued >= 1);
    allocs = tally_alloc_count();
    assert_true(test_http_stats(fx).requests < FILL_COUNT); /* held back, not buffered */
    test_http_client_resume(c);
    WAIT(fx, c->n_resps == FILL_COUNT);
    assert_false(c->parse_error);
    for (i = 0; i < FILL_COUNT; i++) {
        char seq[16];

        snprintf(seq, sizeof(seq), "%zu", i);
        assert_int_equal(c->resps[i].status, 200);
        assert_string_equal(c->resps[i].x_seq, seq);
        assert_int_equal(c->resps[i].body_len, TEST_HTTP_FILL_BYTES);
    }
    assert_int_equal(tally_alloc_count(), allocs);
    assert_int_equal(test_http_stats(fx).requests, FILL_COUNT);
}

static void
test_http_head_exact_limit(void **state)
{
    struct test_http_fixture *fx = *state;
    char *ok = test_http_request_of_size(PROTO_HTTP_DEFAULT_MAX_HEAD_BYTES);
    char *big = test_http_request_of_size(PROTO_HTTP_DEFAULT_MAX_HEAD_BYTES + 1);
    struct test_http_client *c;
    struct test_http_resp *r;

    test_http_start(fx);
    c = test_http_client_open(&fx->env, ok, false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    r = test_http_one_shot(&fx->env, big, 431);
    assert_string_equal(r->body, "{\"error\":\"header_too_large\","
                                 "\"detail\":\"request header section too large\"}");
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_HEAD_TOO_LARGE], 1);
    free(ok);
    free(big);
}

static void
test_http_too_many_headers(void **state)
{
    struct test_http_fixture *fx = *state;
    char req[4096];
    size_t n, i;
    struct test_http_client *c;

    test_http_start(fx);
    n = (size_t)sprintf(req, "GET /ping HTTP/1.1\r\nHost: t\r\n");
    for (i = 1; i < PROTO_HTTP_DEFAULT_MAX_HEADERS; i++) /* Host + 63 = 64 */
        n += (size_t)sprintf(req + n, "X-H%zu: v\r\n", i);
    strcpy(req + n, "\r\n");
    c = test_http_client_open(&fx->env, req, false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    strcpy(req + n, "X-One-More: v\r\n\r\n");
    assert_string_equal(test_http_one_shot(&fx->env, req, 431)->body,
                        "{\"error\":\"too_many_headers\",\"detail\":\"too many header fields\"}");
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_TOO_MANY_HEADERS], 1);
}

static void
test_http_kept_value_too_long(void **state)
{
    struct test_http_fixture *fx = *state;
    char req[2048];
    int n = sprintf(req, "GET /ping HTTP/1.1\r\nAuthorization: Bearer ");

    test_http_start(fx);
    memset(req + n, 't', PROTO_HTTP_DEFAULT_MAX_VALUE_BYTES);
    strcpy(req + n + PROTO_HTTP_DEFAULT_MAX_VALUE_BYTES, "\r\n\r\n");
    test_http_one_shot(&fx->env, req, 431);
}

static void
test_http_body_limits(void **state)
{
    struct test_http_fixture *fx = *state;
    const size_t max = PROTO_HTTP_DEFAULT_MAX_BODY_BYTES;
    char *req = malloc(2 * max);
    struct test_http_client *c;
    int n;

    test_http_start(fx);
    n = sprintf(req, "POST /echo HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", max);
    memset(req + n, 'b', max);
    req[n + (int)max] = '\0';
    c = test_http_client_open(&fx->env, req, false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    assert_int_equal(fx->seen.body_len, max);
    /* Declared too big: refused before the body is read. */
    sprintf(req, "POST /echo HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", max + 1);
    assert_string_equal(test_http_one_shot(&fx->env, req, 413)->body,
                        "{\"error\":\"body_too_large\",\"detail\":\"request body too large\"}");
    /* Chunked: refused as the chunks arrive. */
    n = sprintf(req, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n", max + 1);
    memset(req + n, 'b', max + 1);
    strcpy(req + n + (int)max + 1, "\r\n0\r\n\r\n");
    test_http_one_shot(&fx->env, req, 413);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_BODY_TOO_LARGE], 2);
    assert_int_equal(fx->handled, 1);
    free(req);
}

static void
test_http_url_too_long(void **state)
{
    struct test_http_fixture *fx = *state;
    char req[4096];
    int n = sprintf(req, "GET /ping?");

    test_http_start(fx);
    memset(req + n, 'q', PROTO_HTTP_DEFAULT_MAX_URL_BYTES);
    strcpy(req + n + PROTO_HTTP_DEFAULT_MAX_URL_BYTES, " HTTP/1.1\r\n\r\n");
    test_http_one_shot(&fx->env, req, 414);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_URL_TOO_LONG], 1);
}

static void
test_http_bad_requests(void **state)
{
    static const struct {
        const char *req;
        int status;
        const char *body; /* NULL: only the prefix is checked */
    } cases[] = {
        {"GARBAGE\r\n\r\n", 400, "{\"error\":\"bad_request\",\"detail\":\"invalid HTTP method\"}"},
        {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400,
         "{\"error\":\"bad_request\",\"detail\":\"invalid character in header\"}"},
        {"GET / HTTP/1.1\r\nAuthorization : x\r\n\r\n", 400,
         "{\"error\":\"bad_request\",\"detail\":\"whitespace in header field name\"}"},
        {"GET /ping HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400, NULL},
        {"GET /a b HTTP/1.1\r\n\r\n", 400, NULL},
        {"GET /ping HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n", 400,
         "{\"error\":\"bad_request\",\"detail\":\"duplicate header field\"}"},
        {"GET /ping HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400,
         NULL},
        {"GET /ping HTTP/2.0\r\n\r\n", 505,
         "{\"error\":\"bad_request\",\"detail\":\"unsupported HTTP version\"}"},
    };
    struct test_http_fixture *fx = *state;
    size_t i;

    test_http_start(fx);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct test_http_resp *r = test_http_one_shot(&fx->env, cases[i].req, cases[i].status);

        if (cases[i].body != NULL)
            assert_string_equal(r->body, cases[i].body);
        else
            assert_memory_equal(r->body, "{\"error\":\"bad_request\",\"detail\":\"", 33);
        test_http_client_drop(&fx->env); /* keeps within TEST_HTTP_CLIENTS_MAX */
    }
    assert_int_equal(fx->handled, 0);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_BAD_REQUEST], i);
}

static void
test_http_not_found_and_method(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    test_http_start(fx);
    c = test_http_client_open(
        &fx->env,
        "GET /nope HTTP/1.1\r\n\r\nDELETE /ping HTTP/1.1\r\n\r\n"
        "POST /ping HTTP/1.1\r\nContent-Length: 0\r\n\r\nGET /ping HTTP/1.1\r\n\r\n",
        false, 0);
    WAIT(fx, c->n_resps == 4);
    assert_int_equal(c->resps[0].status, 404);
    assert_string_equal(c->resps[0].body, "{\"error\":\"not_found\"}");
    assert_string_equal(c->resps[0].connection, "keep-alive");
    assert_int_equal(c->resps[1].status, 405);
    assert_string_equal(c->resps[1].allow, "GET, HEAD");
    assert_string_equal(c->resps[1].body, "{\"error\":\"method_not_allowed\"}");
    assert_int_equal(c->resps[2].status, 405);
    assert_int_equal(c->resps[3].status, 200);
    assert_int_equal(fx->handled, 1);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_NOT_FOUND], 1);
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_METHOD], 2);
}

static void
test_http_head_method(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    test_http_start(fx);
    c = test_http_client_open(&fx->env, "HEAD /ping HTTP/1.1\r\n\r\nHEAD /ping HTTP/1.1\r\n\r\n",
                              false, 0);
    c->head_answers = true;
    WAIT(fx, c->n_resps == 2);
    assert_false(c->parse_error); /* a stray body would break the second answer */
    assert_int_equal(c->resps[0].status, 200);
    assert_true(c->resps[0].has_length);
    assert_int_equal(c->resps[0].body_len, 0);
    assert_int_equal(fx->seen.method, PROTO_HTTP_HEAD);
}

static void
test_http_http10(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    test_http_start(fx);
    test_http_one_shot(&fx->env, "GET /ping HTTP/1.0\r\n\r\n", 200);
    assert_int_equal(fx->seen.http_minor, 0);
    c = test_http_client_open(&fx->env,
                              "GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                              "GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                              false, 0);
    WAIT(fx, c->n_resps == 2);
    assert_string_equal(c->resps[1].connection, "keep-alive");
    assert_false(c->done);
    test_http_one_shot(&fx->env, "GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n", 200);
}

static void
test_http_response_errors(void **state)
{
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;
    size_t i;

    test_http_start(fx);
    c = test_http_client_open(&fx->env,
                              "GET /big HTTP/1.1\r\n\r\nGET /badstatus HTTP/1.1\r\n\r\n"
                              "GET /badheader HTTP/1.1\r\n\r\nGET /badtype HTTP/1.1\r\n\r\n"
                              "POST /empty HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
                              "GET /close HTTP/1.1\r\n\r\nGET /ping HTTP/1.1\r\n\r\n",
                              false, 0);
    WAIT(fx, c->done);
    assert_int_equal(c->n_resps, 6); /* nothing after the handler's close */
    for (i = 0; i < 4; i++) {
        assert_int_equal(c->resps[i].status, 500);
        assert_string_equal(c->resps[i].body, "{\"error\":\"internal_error\"}");
    }
    assert_int_equal(c->resps[4].status, 204);
    assert_false(c->resps[4].has_length);
    assert_string_equal(c->resps[4].x_test, "yes");
    assert_int_equal(c->resps[4].body_len, 0);
    assert_int_equal(c->resps[5].status, 200);
    assert_string_equal(c->resps[5].connection, "close");
    assert_int_equal(test_http_stats(fx).rejected[PROTO_HTTP_REJECT_RESPONSE_ERROR], 4);
}

static void
test_http_custom_headers_no_routes(void **state)
{
    static const char *const names[] = {"X-Custom", "Authorization"};
    struct test_http_fixture *fx = *state;
    struct test_http_client *c;

    fx->cfg.routes = NULL;
    fx->cfg.routes_count = 0;
    fx->cfg.headers = names;
    fx->cfg.headers_count = 2;
    test_http_start(fx);
    c = test_http_client_open(&fx->env,
                              "DELETE /any/thing?q HTTP/1.1\r\nx-custom:   val \t\r\n"
                              "AUTHORIZATION:\r\nX-Tally-Cost: 3\r\n\r\n",
                              false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    assert_string_equal(c->resps[0].body, "/any/thing");
    assert_string_equal(fx->seen.query, "q");
    assert_string_equal(fx->seen.h[0], "val");
    assert_true(fx->seen.has_h[1]); /* present, empty */
    assert_string_equal(fx->seen.h[1], "");
    assert_false(fx->seen.has_h[2]);
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, test_http_setup, test_http_teardown)
        T(test_http_get_simple),
        T(test_http_keepalive_two_requests),
        T(test_http_pipelined_in_order),
        T(test_http_pipelined_one_write),
        T(test_http_pipelined_backpressure_no_alloc),
        T(test_http_head_exact_limit),
        T(test_http_too_many_headers),
        T(test_http_kept_value_too_long),
        T(test_http_body_limits),
        T(test_http_url_too_long),
        T(test_http_bad_requests),
        T(test_http_not_found_and_method),
        T(test_http_head_method),
        T(test_http_http10),
        T(test_http_response_errors),
        T(test_http_custom_headers_no_routes),
#undef T
    };

    signal(SIGPIPE, SIG_IGN); /* a gone peer is UV_EPIPE */
    return cmocka_run_group_tests_name("proto_http", tests, NULL, NULL);
}

/*
 * The HTTP server's API without traffic: configs refused at open, listen
 * errors (bad address, twice, address in use), closing a server that never
 * listened, and the helpers a handler uses (query lookup, the RateLimit
 * field values, JSON escaping of error bodies, response building with its latched errors).
 * Table-driven where it can be.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdbool.h>
#include <string.h>

#include "proto_http.h"
#include "test_alloc.h"

static void
nop_handler(void *app_data, const struct proto_http_request *req, struct proto_http_response *resp)
{
    (void)app_data;
    (void)req;
    resp->status = 204;
}

static int closed_count;

static void
on_closed(proto_http_server *srv)
{
    (void)srv;
    closed_count++;
}

/* Closes `srv` and checks that the callback comes from the loop, once. */
static void
close_and_check(uv_loop_t *loop, proto_http_server *srv)
{
    int before = closed_count;

    proto_http_close(srv, on_closed);
    proto_http_close(srv, on_closed);       /* ignored */
    assert_int_equal(closed_count, before); /* never synchronously */
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(closed_count, before + 1);
}

static void
test_http_open_rejects_bad_configs(void **state)
{
    static const char *const too_many[PROTO_HTTP_KEPT_MAX + 1] = {"A", "B", "C", "D", "E", "F", "G",
                                                                  "H", "I", "J", "K", "L", "M"};
    static const char *const bad_name[] = {"X Bad"};
    static const struct proto_http_route no_slash[] = {{"ping", PROTO_HTTP_GET, 1}};
    static const struct proto_http_route no_method[] = {{"/ping", 0, 1}};
    struct proto_http_config base = {.handler = nop_handler};
    struct proto_http_config cfgs[10];
    proto_http_server *srv = (proto_http_server *)&base;
    uv_loop_t loop;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
        cfgs[i] = base;
    cfgs[0].handler = NULL;
    cfgs[1].max_response_bytes = 100; /* an error body must fit */
    cfgs[2].headers = too_many;
    cfgs[2].headers_count = PROTO_HTTP_KEPT_MAX + 1;
    cfgs[3].headers = bad_name;
    cfgs[3].headers_count = 1;
    cfgs[4].routes = no_slash;
    cfgs[4].routes_count = 1;
    cfgs[5].routes = no_method;
    cfgs[5].routes_count = 1;
    cfgs[6].routes_count = 1; /* without a table */
    cfgs[7].max_body_bytes = PROTO_HTTP_LIMIT_BYTES_MAX + 1;
    cfgs[8].idle_timeout_ms = 365ULL * 24 * 3600 * 1000;
    cfgs[9].max_connections = PROTO_HTTP_LIMIT_CONNECTIONS + 1;
    assert_int_equal(uv_loop_init(&loop), 0);
    for (i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
        assert_int_equal(proto_http_open(&loop, &cfgs[i], &srv), TALLY_EINVAL);
        assert_null(srv);
        srv = (proto_http_server *)&base;
    }
    assert_int_equal(proto_http_open(&loop, &base, &srv), TALLY_OK);
    close_and_check(&loop, srv); /* never listened */
    proto_http_close(NULL, on_closed);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void
test_http_open_without_memory(void **state)
{
    struct proto_http_config cfg = {.handler = nop_handler};
    proto_http_server *srv = NULL;
    uv_loop_t loop;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    tally_alloc_fail_at(1);
    assert_int_equal(proto_http_open(&loop, &cfg, &srv), TALLY_ENOMEM);
    tally_alloc_fail_at(0);
    assert_null(srv);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void
test_http_listen_errors(void **state)
{
    struct proto_http_config cfg = {.handler = nop_handler};
    proto_http_server *a = NULL, *b = NULL, *c = NULL;
    uv_loop_t loop;
    int port = -1, before;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(proto_http_open(&loop, &cfg, &a), TALLY_OK);
    assert_int_equal(proto_http_port(a, &port), TALLY_EINVAL); /* not listening */
    assert_int_equal(proto_http_listen(a, "localhost", 0), TALLY_EINVAL);
    assert_int_equal(proto_http_listen(a, "127.0.0.1", 70000), TALLY_EINVAL);
    assert_int_equal(proto_http_listen(a, "127.0.0.1", 0), TALLY_OK);
    assert_int_equal(proto_http_listen(a, "127.0.0.1", 0), TALLY_EINVAL); /* twice */
    assert_int_equal(proto_http_port(a, &port), TALLY_OK);
    assert_true(port > 0);
    assert_int_equal(proto_http_open(&loop, &cfg, &b), TALLY_OK);
    assert_int_equal(proto_http_listen(b, "127.0.0.1", port), TALLY_EINUSE);
    assert_int_equal(proto_http_open(&loop, &cfg, &c), TALLY_OK);
    assert_int_equal(proto_http_listen(c, "203.0.113.7", 0), TALLY_EINVAL); /* not ours */
    before = closed_count;
    proto_http_close(c, on_closed);
    proto_http_close(b, on_closed);
    proto_http_close(a, on_closed);
    uv_run(&loop, UV_RUN_DEFAULT); /* ends once all three are closed */
    assert_int_equal(closed_count, before + 3);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void
test_http_query_get(void **state)
{
    static const struct {
        const char *name;
        int rc;
        const char *value;
    } cases[] = {
        {"endpoint", TALLY_OK, "search"}, {"cost", TALLY_OK, "2"},
        {"flag", TALLY_OK, ""},           {"e", TALLY_OK, ""},
        {"end", TALLY_ENOTFOUND, NULL},   {"x", TALLY_OK, "a=b"},
    };
    const char q[] = "endpoint=search&cost=2&flag&e=&x=a=b";
    struct proto_http_request req;
    struct proto_http_str v;
    size_t i;

    (void)state;
    memset(&req, 0, sizeof(req));
    assert_int_equal(proto_http_query_get(&req, "endpoint", &v), TALLY_ENOTFOUND);
    req.query = (struct proto_http_str){q, sizeof(q) - 1};
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(proto_http_query_get(&req, cases[i].name, &v), cases[i].rc);
        if (cases[i].value != NULL) {
            assert_int_equal(v.len, strlen(cases[i].value));
            assert_memory_equal(v.ptr, cases[i].value, v.len);
        }
    }
}

static void
test_ratelimit_fields(void **state)
{
    static const struct {
        bool policy; /* RateLimit-Policy (q, w), else RateLimit (r, t) */
        const char *name;
        int64_t a, b;
        size_t cap;
        const char *out; /* "" when refused */
    } cases[] = {
        {true, "endpoint", 100, 60, 128, "\"endpoint\";q=100;w=60"},
        {true, "endpoint", 0, 0, 128, "\"endpoint\";q=0;w=0"},
        {true, "e", 999999999999999, 31536000, 128, "\"e\";q=999999999999999;w=31536000"},
        {true, "e", 1000000000000000, 1, 128, ""}, /* 16 digits: not an sf-integer */
        {true, "e", -1, 1, 128, ""},
        {true, "e", 1, -1, 128, ""},
        {false, "endpoint", 7, 42, 128, "\"endpoint\";r=7;t=42"},
        {false, "endpoint", 0, 1, 128, "\"endpoint\";r=0;t=1"},
        {false, "endpoint", 3, -1, 128, "\"endpoint\";r=3"}, /* no t */
        {false, "endpoint", -1, 5, 128, ""},
        {false, "a b", 1, 2, 128, "\"a b\";r=1;t=2"},
        {false, "a\"b", 1, 2, 128, ""},
        {false, "a\\b", 1, 2, 128, ""},
        {false, "a\x7f", 1, 2, 128, ""},
        {false, "a\x1f", 1, 2, 128, ""},
        {false, "caf\xc3\xa9", 1, 2, 128, ""},
        {false, "", 1, 2, 128, "\"\";r=1;t=2"},
        /* exactly fits: 14 bytes and the NUL; one less does not */
        {false, "e", 12, 345, 15, "\"e\";r=12;t=345"},
        {false, "e", 12, 345, 14, ""},
        {false, "e", 12, 345, 1, ""},
    };
    char buf[129]; /* one past the largest cap */
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n;

        memset(buf, 'x', sizeof(buf));
        n = cases[i].policy
                ? proto_ratelimit_policy(buf, cases[i].cap, cases[i].name, cases[i].a, cases[i].b)
                : proto_ratelimit_item(buf, cases[i].cap, cases[i].name, cases[i].a, cases[i].b);
        if (strcmp(buf, cases[i].out) != 0 || n != strlen(cases[i].out))
            fail_msg("case %zu: got \"%s\" (%zu), want \"%s\"", i, buf, n, cases[i].out);
        assert_int_equal(buf[cases[i].cap], 'x'); /* nothing past cap */
    }
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(proto_ratelimit_item(buf, 0, "e", 1, 1), 0);
    assert_int_equal(buf[0], 'x');
}

/* The JSON body of an error is escaped (tally_log_escape, the one escaper). */
static void
test_http_error_escaped(void **state)
{
    char body[64];
    struct proto_http_response resp;

    (void)state;
    memset(&resp, 0, sizeof(resp));
    resp.body = body;
    resp.body_cap = sizeof(body) - 1;
    assert_int_equal(proto_http_response_error(&resp, 400, "bad", "a\"b\n\x01"), TALLY_OK);
    assert_int_equal(resp.body_len, strlen("{\"error\":\"bad\",\"detail\":\"a\\\"b\\n\\u0001\"}"));
    assert_memory_equal(body, "{\"error\":\"bad\",\"detail\":\"a\\\"b\\n\\u0001\"}", resp.body_len);
    /* the escape of '"' does not fit: refused and latched */
    resp.body_len = 0;
    resp.body_cap = 10 + 4;
    assert_int_equal(proto_http_response_error(&resp, 400, "bad\"", NULL), TALLY_ETOOBIG);
}

static void
test_http_response_builders(void **state)
{
    char body[300];
    struct proto_http_response resp;
    int i;

    (void)state;
    memset(&resp, 0, sizeof(resp));
    resp.body = body;
    resp.body_cap = sizeof(body) - 1;
    assert_int_equal(proto_http_response_error(&resp, 400, "bad_request", "say \"hi\""), TALLY_OK);
    assert_int_equal(resp.status, 400);
    assert_int_equal(resp.body_len,
                     strlen("{\"error\":\"bad_request\",\"detail\":\"say \\\"hi\\\"\"}"));
    assert_memory_equal(body, "{\"error\":\"bad_request\",\"detail\":\"say \\\"hi\\\"\"}",
                        resp.body_len);
    assert_int_equal(proto_http_response_header(&resp, "Retry-After", "3"), TALLY_OK);
    assert_string_equal(resp.headers[0], "Retry-After: 3");
    assert_int_equal(resp.error, TALLY_OK);
    /* Refused: the server's own headers, bad names, CR/LF, too many. */
    assert_int_equal(proto_http_response_header(&resp, "content-length", "1"), TALLY_EINVAL);
    assert_int_equal(resp.error, TALLY_EINVAL); /* latched: the answer becomes a 500 */
    resp.error = TALLY_OK;
    assert_int_equal(proto_http_response_header(&resp, "Bad Name", "1"), TALLY_EINVAL);
    assert_int_equal(proto_http_response_header(&resp, "X-A", "1\r\nX-B: 2"), TALLY_EINVAL);
    for (i = 1; i < PROTO_HTTP_RESP_HEADERS_MAX; i++)
        assert_int_equal(proto_http_response_header(&resp, "X-N", "v"), TALLY_OK);
    assert_int_equal(proto_http_response_header(&resp, "X-N", "v"), TALLY_ETOOBIG);
    /* The body is capped; printf reports what does not fit. */
    resp.body_len = 0;
    assert_int_equal(proto_http_response_printf(&resp, "%0*d", 299, 7), TALLY_OK);
    assert_int_equal(proto_http_response_printf(&resp, "%d", 1), TALLY_ETOOBIG);
    assert_int_equal(proto_http_response_write(&resp, "x", 1), TALLY_ETOOBIG);
    assert_int_equal(resp.body_len, 299);
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_open_rejects_bad_configs),
        cmocka_unit_test(test_http_open_without_memory),
        cmocka_unit_test(test_http_listen_errors),
        cmocka_unit_test(test_http_query_get),
        cmocka_unit_test(test_ratelimit_fields),
        cmocka_unit_test(test_http_error_escaped),
        cmocka_unit_test(test_http_response_builders),
    };

    return cmocka_run_group_tests_name("proto_http_api", tests, NULL, NULL);
}

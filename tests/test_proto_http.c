/*
 * The HTTP server in-process: a server on a fresh loop at 127.0.0.1:0 with a
 * test handler, raw libuv TCP clients on the same loop, and http_parser
 * reading the answers. Time is never slept: waits run the loop until a
 * condition holds (a guard timer fails a test that waits too long), and the
 * timeout tests configure deadlines of tens of milliseconds. Every answer read
 * is checked for Cache-Control: no-store. Each test ends with the server
 * closed and uv_loop_close() == 0 (teardown), and ASan checks for leaks.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <http_parser.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_http.h"

#define GUARD_MS    10000 /* a wait longer than this is a failure */
#define MAX_CLIENTS 8
#define FILL_BYTES  8000
#define FILL_COUNT  1000

enum route {
    R_PING = 1,
    R_ECHO,
    R_FILL,
    R_BIG,
    R_CLOSE,
    R_EMPTY,
    R_BADSTATUS,
    R_BADHEADER,
    R_BADTYPE
};

static const struct proto_http_route routes[] = {
    {"/ping", PROTO_HTTP_GET, R_PING},
    {"/echo", PROTO_HTTP_GET | PROTO_HTTP_POST, R_ECHO},
    {"/fill", PROTO_HTTP_GET, R_FILL},
    {"/big", PROTO_HTTP_GET, R_BIG},
    {"/close", PROTO_HTTP_GET, R_CLOSE},
    {"/empty", PROTO_HTTP_POST, R_EMPTY},
    {"/badstatus", PROTO_HTTP_GET, R_BADSTATUS},
    {"/badheader", PROTO_HTTP_GET, R_BADHEADER},
    {"/badtype", PROTO_HTTP_GET, R_BADTYPE},
};

/* What the handler saw last, copied (the request's pointers die with the call). */
struct seen {
    enum proto_http_method method;
    int http_minor;
    char path[128];
    char query[128];
    bool has_query;
    size_t body_len;
    char h[PROTO_HTTP_KEPT_MAX][700];
    bool has_h[PROTO_HTTP_KEPT_MAX];
};

struct resp {
    int status;
    bool no_store;
    bool has_length;
    char connection[32], allow[64], x_seq[16], x_test[16], content_type[64];
    char body[512];
    size_t body_len;
};

struct client {
    struct fixture *fx;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    char *out;
    bool paused;       /* do not read until client_resume() */
    bool head_answers; /* answers are to HEAD: no body */
    bool writing, done, closed, parse_error;
    int read_status; /* UV_EOF or an error once `done` */
    http_parser rp;
    char field[64], value[256];
    size_t field_len, value_len;
    bool in_value;
    struct resp *resps;
    size_t n_resps;
    char rbuf[65536];
};

struct trickle {
    struct client *c;
    const char *bytes;
    size_t pos, len;
};

struct fixture {
    uv_loop_t loop;
    uv_timer_t guard;
    bool timed_out;
    struct proto_http_config cfg;
    proto_http_server *srv;
    int port;
    bool srv_closed;
    int handled;
    struct seen seen;
    struct client *clients[MAX_CLIENTS];
    size_t n_clients;
    uv_timer_t trickle; /* closed by teardown, even after a failed wait */
    struct trickle tr;
};

#define WAIT(fx, cond)                                                                             \
    do {                                                                                           \
        (fx)->timed_out = false;                                                                   \
        uv_timer_start(&(fx)->guard, on_guard, GUARD_MS, 0);                                       \
        while (!(cond) && !(fx)->timed_out)                                                        \
            uv_run(&(fx)->loop, UV_RUN_ONCE);                                                      \
        uv_timer_stop(&(fx)->guard);                                                               \
        assert_false((fx)->timed_out);                                                             \
    } while (0)

static void
on_guard(uv_timer_t *t)
{
    ((struct fixture *)t->data)->timed_out = true;
}

static void
copy_str(char *dst, size_t cap, struct proto_http_str s)
{
    size_t n = s.len < cap - 1 ? s.len : cap - 1;

    memcpy(dst, s.ptr == NULL ? "" : s.ptr, n);
    dst[n] = '\0';
}

static void
handler(void *app_data, const struct proto_http_request *req, struct proto_http_response *resp)
{
    struct fixture *fx = app_data;
    struct seen *s = &fx->seen;
    static char fill[FILL_BYTES];
    int i;

    fx->handled++;
    memset(s, 0, sizeof(*s));
    s->method = req->method;
    s->http_minor = req->http_minor;
    copy_str(s->path, sizeof(s->path), req->path);
    copy_str(s->query, sizeof(s->query), req->query);
    s->has_query = req->query.ptr != NULL;
    s->body_len = req->body.len;
    for (i = 0; i < PROTO_HTTP_KEPT_MAX; i++) {
        s->has_h[i] = req->headers[i].ptr != NULL;
        copy_str(s->h[i], sizeof(s->h[i]), req->headers[i]);
    }
    resp->status = 200;
    switch (req->route_id) {
    case R_PING:
        proto_http_response_write(resp, "pong", 4);
        break;
    case R_ECHO:
        proto_http_response_printf(resp, "%s", s->has_query ? s->query : "-");
        break;
    case R_FILL:
        memset(fill, 'f', sizeof(fill));
        proto_http_response_header(resp, "X-Seq", s->query);
        proto_http_response_write(resp, fill, sizeof(fill));
        break;
    case R_BIG:
        for (i = 0; i < 10; i++) /* 10 x 1000 > the 8192 bytes allowed */
            proto_http_response_write(resp, fill, 1000);
        break;
    case R_CLOSE:
        proto_http_response_write(resp, "bye", 3);
        resp->close = true;
        break;
    case R_EMPTY:
        resp->status = 204;
        proto_http_response_header(resp, "X-Test", "yes");
        proto_http_response_write(resp, "dropped", 7);
        break;
    case R_BADSTATUS:
        resp->status = 0;
        break;
    case R_BADHEADER:
        proto_http_response_header(resp, "X-Test", "a\r\nInjected: 1");
        break;
    case R_BADTYPE:
        resp->content_type = "text/plain\r\nInjected: 1";
        proto_http_response_write(resp, "x", 1);
        break;
    default: /* no route table */
        proto_http_response_printf(resp, "%s", s->path);
    }
}

/* --- the client ---------------------------------------------------------- */

static struct client *
client_of(http_parser *p)
{
    return p->data;
}

static void
header_end(struct client *c)
{
    struct resp *r = &c->resps[c->n_resps];
    static const struct {
        const char *name;
        size_t off, cap;
    } keep[] = {
        {"connection", offsetof(struct resp, connection), sizeof(r->connection)},
        {"allow", offsetof(struct resp, allow), sizeof(r->allow)},
        {"x-seq", offsetof(struct resp, x_seq), sizeof(r->x_seq)},
        {"x-test", offsetof(struct resp, x_test), sizeof(r->x_test)},
        {"content-type", offsetof(struct resp, content_type), sizeof(r->content_type)},
    };
    size_t i;

    if (!c->in_value)
        return;
    c->field[c->field_len] = '\0';
    c->value[c->value_len] = '\0';
    for (i = 0; c->field[i] != '\0'; i++)
        c->field[i] =
            (char)(c->field[i] >= 'A' && c->field[i] <= 'Z' ? c->field[i] + 32 : c->field[i]);
    if (strcmp(c->field, "cache-control") == 0)
        r->no_store = strcmp(c->value, "no-store") == 0;
    if (strcmp(c->field, "content-length") == 0)
        r->has_length = true;
    for (i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        if (strcmp(c->field, keep[i].name) == 0)
            snprintf((char *)r + keep[i].off, keep[i].cap, "%s", c->value);
    }
    c->field_len = c->value_len = 0;
    c->in_value = false;
}

static int
rp_begin(http_parser *p)
{
    struct client *c = client_of(p);

    memset(&c->resps[c->n_resps], 0, sizeof(c->resps[0]));
    return 0;
}

static void
append(char *buf, size_t cap, size_t *len, const char *at, size_t n)
{
    if (n > cap - 1 - *len)
        n = cap - 1 - *len;
    memcpy(buf + *len, at, n);
    *len += n;
}

static int
rp_field(http_parser *p, const char *at, size_t n)
{
    struct client *c = client_of(p);

    header_end(c);
    append(c->field, sizeof(c->field), &c->field_len, at, n);
    return 0;
}

static int
rp_value(http_parser *p, const char *at, size_t n)
{
    struct client *c = client_of(p);

    c->in_value = true;
    append(c->value, sizeof(c->value), &c->value_len, at, n);
    return 0;
}

static int
rp_headers_done(http_parser *p)
{
    struct client *c = client_of(p);

    header_end(c);
    c->resps[c->n_resps].status = (int)p->status_code;
    return c->head_answers ? 1 : 0;
}

static int
rp_body(http_parser *p, const char *at, size_t n)
{
    struct resp *r = &client_of(p)->resps[client_of(p)->n_resps];
    size_t have = r->body_len < sizeof(r->body) - 1 ? r->body_len : sizeof(r->body) - 1;

    append(r->body, sizeof(r->body), &have, at, n);
    r->body_len += n;
    return 0;
}

static int
rp_complete(http_parser *p)
{
    struct client *c = client_of(p);

    assert_true(c->resps[c->n_resps].no_store); /* on every answer */
    c->n_resps++;
    return c->n_resps == FILL_COUNT + 8 ? -1 : 0;
}

static const http_parser_settings rp_settings = {
    .on_message_begin = rp_begin,
    .on_header_field = rp_field,
    .on_header_value = rp_value,
    .on_headers_complete = rp_headers_done,
    .on_body = rp_body,
    .on_message_complete = rp_complete,
};

static void
client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct client *c = h->data;

    (void)suggested;
    *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void
client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct client *c = s->data;

    if (nread < 0) {
        c->done = true;
        c->read_status = (int)nread;
        uv_read_stop(s);
        return;
    }
    if (http_parser_execute(&c->rp, &rp_settings, buf->base, (size_t)nread) != (size_t)nread)
        c->parse_error = true;
}

static void
client_resume(struct client *c)
{
    c->paused = false;
    assert_int_equal(uv_read_start((uv_stream_t *)&c->tcp, client_alloc, client_read), 0);
}

static void
client_written(uv_write_t *req, int status)
{
    struct client *c = req->handle->data;

    (void)status; /* a refused client may see EPIPE or ECONNRESET */
    c->writing = false;
}

static void
client_send(struct client *c, const char *data, size_t len)
{
    uv_buf_t b;

    assert_false(c->writing);
    free(c->out);
    c->out = malloc(len);
    assert_non_null(c->out);
    memcpy(c->out, data, len);
    b = uv_buf_init(c->out, (unsigned)len);
    c->writing = true;
    assert_int_equal(uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, client_written), 0);
}

static void
client_connected(uv_connect_t *req, int status)
{
    struct client *c = req->handle->data;

    assert_int_equal(status, 0);
    if (c->out != NULL) {
        uv_buf_t b = uv_buf_init(c->out, (unsigned)strlen(c->out));

        c->writing = true;
        assert_int_equal(uv_write(&c->write_req, req->handle, &b, 1, client_written), 0);
    }
    if (!c->paused)
        client_resume(c);
}

/* Connects a client that sends `req` (NUL-terminated; NULL: nothing) at once.
 * `rcvbuf` > 0 shrinks its receive buffer so a server's writes back up. */
static struct client *
client_open(struct fixture *fx, const char *req, bool paused, int rcvbuf)
{
    struct client *c = calloc(1, sizeof(*c));
    struct sockaddr_in sa;

    assert_non_null(c);
    assert_true(fx->n_clients < MAX_CLIENTS);
    fx->clients[fx->n_clients++] = c;
    c->fx = fx;
    c->paused = paused;
    c->resps = calloc(FILL_COUNT + 8, sizeof(*c->resps));
    assert_non_null(c->resps);
    http_parser_init(&c->rp, HTTP_RESPONSE);
    c->rp.data = c;
    if (req != NULL) {
        c->out = strdup(req);
        assert_non_null(c->out);
    }
    assert_int_equal(uv_tcp_init_ex(&fx->loop, &c->tcp, AF_INET), 0);
    c->tcp.data = c;
    if (rcvbuf > 0)
        assert_int_equal(uv_recv_buffer_size((uv_handle_t *)&c->tcp, &rcvbuf), 0);
    assert_int_equal(uv_ip4_addr("127.0.0.1", fx->port, &sa), 0);
    assert_int_equal(
        uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&sa, client_connected),
        0);
    return c;
}

static void
client_closed(uv_handle_t *h)
{
    ((struct client *)h->data)->closed = true;
}

static void
client_close(struct client *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, client_closed);
}

/* --- fixture --------------------------------------------------------------- */

static int
setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));

    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    assert_int_equal(uv_timer_init(&fx->loop, &fx->guard), 0);
    assert_int_equal(uv_timer_init(&fx->loop, &fx->trickle), 0);
    fx->guard.data = fx;
    fx->cfg.handler = handler;
    fx->cfg.app_data = fx;
    fx->cfg.routes = routes;
    fx->cfg.routes_count = sizeof(routes) / sizeof(routes[0]);
    *state = fx;
    return 0;
}

static void
start(struct fixture *fx)
{
    assert_int_equal(proto_http_open(&fx->loop, &fx->cfg, &fx->srv), TALLY_OK);
    assert_int_equal(proto_http_listen(fx->srv, "127.0.0.1", 0), TALLY_OK);
    assert_int_equal(proto_http_port(fx->srv, &fx->port), TALLY_OK);
    assert_true(fx->port > 0);
}

static void
srv_closed(proto_http_server *srv)
{
    struct fixture *fx = proto_http_app_data(srv);

    fx->srv_closed = true;
}

static int
teardown(void **state)
{
    struct fixture *fx = *state;
    size_t i;

    for (i = 0; i < fx->n_clients; i++)
        client_close(fx->clients[i]);
    if (fx->srv != NULL)
        proto_http_close(fx->srv, srv_closed);
    uv_close((uv_handle_t *)&fx->guard, NULL);
    uv_close((uv_handle_t *)&fx->trickle, NULL);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_true(fx->srv == NULL || fx->srv_closed);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    for (i = 0; i < fx->n_clients; i++) {
        free(fx->clients[i]->out);
        free(fx->clients[i]->resps);
        free(fx->clients[i]);
    }
    free(fx);
    tally_alloc_fail_at(0);
    return 0;
}

static struct proto_http_stats
stats(struct fixture *fx)
{
    struct proto_http_stats st;

    proto_http_stats(fx->srv, &st);
    return st;
}

/* Sends `req` on a new connection and waits for one answer and the close. */
static struct resp *
one_shot(struct fixture *fx, const char *req, int status)
{
    struct client *c = client_open(fx, req, false, 0);

    WAIT(fx, c->done);
    assert_false(c->parse_error);
    assert_int_equal(c->n_resps, 1);
    assert_int_equal(c->resps[0].status, status);
    assert_string_equal(c->resps[0].connection, "close");
    assert_int_equal(c->read_status, UV_EOF); /* the answer, then a clean close */
    return &c->resps[0];
}

/* A request for /ping whose head is exactly `size` bytes. */
static char *
request_of_size(size_t size)
{
    static const char pre[] = "GET /ping HTTP/1.1\r\nHost: t\r\nX-Pad: ";
    size_t fixed = sizeof(pre) - 1 + 4;
    char *r = malloc(size + 1);

    assert_true(size > fixed);
    memcpy(r, pre, sizeof(pre) - 1);
    memset(r + sizeof(pre) - 1, 'p', size - fixed);
    memcpy(r + size - 4, "\r\n\r\n", 5);
    return r;
}

/* --- cases ----------------------------------------------------------------- */

static void
test_http_get_simple(void **state)
{
    struct fixture *fx = *state;
    struct client *c;
    struct proto_http_stats st;

    start(fx);
    c = client_open(fx,
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
    st = stats(fx);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.connections_accepted, 1);
    assert_int_equal(st.connections_active, 1);
}

static void
test_http_keepalive_two_requests(void **state)
{
    struct fixture *fx = *state;
    struct client *c;

    start(fx);
    c = client_open(fx, "GET /echo?n=1 HTTP/1.1\r\nHost: t\r\n\r\n", false, 0);
    WAIT(fx, c->n_resps == 1 && !c->writing);
    client_send(c, "GET /echo?n=2 HTTP/1.1\r\nHost: t\r\n\r\n", 35);
    WAIT(fx, c->n_resps >= 2);
    assert_int_equal(c->n_resps, 2);
    assert_string_equal(c->resps[0].body, "n=1");
    assert_string_equal(c->resps[1].body, "n=2");
    assert_string_equal(c->resps[1].connection, "keep-alive");
    assert_false(c->done);
    assert_int_equal(stats(fx).connections_accepted, 1);
    assert_int_equal(stats(fx).requests, 2);
}

static void
test_http_pipelined_in_order(void **state)
{
    struct fixture *fx = *state;
    struct client *c;

    start(fx);
    c = client_open(fx,
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

/* A client that does not read: the server queues the answer that does not fit,
 * stops reading and parsing, and later answers every request in order, with
 * no allocation per request. */
static void
test_http_pipelined_backpressure_no_alloc(void **state)
{
    struct fixture *fx = *state;
    struct client *c;
    char *reqs = malloc(FILL_COUNT * 48), *p = reqs;
    uint64_t allocs;
    size_t i;

    start(fx);
    for (i = 0; i < FILL_COUNT; i++)
        p += sprintf(p, "GET /fill?%zu HTTP/1.1\r\nHost: t\r\n\r\n", i);
    c = client_open(fx, reqs, true, 4096);
    free(reqs);
    WAIT(fx, stats(fx).writes_queued >= 1);
    allocs = tally_alloc_count();
    assert_true(stats(fx).requests < FILL_COUNT); /* held back, not buffered */
    client_resume(c);
    WAIT(fx, c->n_resps == FILL_COUNT);
    assert_false(c->parse_error);
    for (i = 0; i < FILL_COUNT; i++) {
        char seq[16];

        snprintf(seq, sizeof(seq), "%zu", i);
        assert_int_equal(c->resps[i].status, 200);
        assert_string_equal(c->resps[i].x_seq, seq);
        assert_int_equal(c->resps[i].body_len, FILL_BYTES);
    }
    assert_int_equal(tally_alloc_count(), allocs);
    assert_int_equal(stats(fx).requests, FILL_COUNT);
}

static void
test_http_head_exact_limit(void **state)
{
    struct fixture *fx = *state;
    char *ok = request_of_size(PROTO_HTTP_DEFAULT_MAX_HEAD_BYTES);
    char *big = request_of_size(PROTO_HTTP_DEFAULT_MAX_HEAD_BYTES + 1);
    struct client *c;
    struct resp *r;

    start(fx);
    c = client_open(fx, ok, false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    r = one_shot(fx, big, 431);
    assert_string_equal(r->body, "{\"error\":\"header_too_large\","
                                 "\"detail\":\"request header section too large\"}");
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_HEAD_TOO_LARGE], 1);
    free(ok);
    free(big);
}

static void
test_http_too_many_headers(void **state)
{
    struct fixture *fx = *state;
    char req[4096];
    size_t n, i;
    struct client *c;

    start(fx);
    n = (size_t)sprintf(req, "GET /ping HTTP/1.1\r\nHost: t\r\n");
    for (i = 1; i < PROTO_HTTP_DEFAULT_MAX_HEADERS; i++) /* Host + 63 = 64 */
        n += (size_t)sprintf(req + n, "X-H%zu: v\r\n", i);
    strcpy(req + n, "\r\n");
    c = client_open(fx, req, false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    strcpy(req + n, "X-One-More: v\r\n\r\n");
    assert_string_equal(one_shot(fx, req, 431)->body,
                        "{\"error\":\"too_many_headers\",\"detail\":\"too many header fields\"}");
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_TOO_MANY_HEADERS], 1);
}

static void
test_http_kept_value_too_long(void **state)
{
    struct fixture *fx = *state;
    char req[2048];
    int n = sprintf(req, "GET /ping HTTP/1.1\r\nAuthorization: Bearer ");

    start(fx);
    memset(req + n, 't', PROTO_HTTP_DEFAULT_MAX_VALUE_BYTES);
    strcpy(req + n + PROTO_HTTP_DEFAULT_MAX_VALUE_BYTES, "\r\n\r\n");
    one_shot(fx, req, 431);
}

static void
test_http_body_limits(void **state)
{
    struct fixture *fx = *state;
    const size_t max = PROTO_HTTP_DEFAULT_MAX_BODY_BYTES;
    char *req = malloc(2 * max);
    struct client *c;
    int n;

    start(fx);
    n = sprintf(req, "POST /echo HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", max);
    memset(req + n, 'b', max);
    req[n + (int)max] = '\0';
    c = client_open(fx, req, false, 0);
    WAIT(fx, c->n_resps == 1);
    assert_int_equal(c->resps[0].status, 200);
    assert_int_equal(fx->seen.body_len, max);
    /* Declared too big: refused before the body is read. */
    sprintf(req, "POST /echo HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", max + 1);
    assert_string_equal(one_shot(fx, req, 413)->body,
                        "{\"error\":\"body_too_large\",\"detail\":\"request body too large\"}");
    /* Chunked: refused as the chunks arrive. */
    n = sprintf(req, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n", max + 1);
    memset(req + n, 'b', max + 1);
    strcpy(req + n + (int)max + 1, "\r\n0\r\n\r\n");
    one_shot(fx, req, 413);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_BODY_TOO_LARGE], 2);
    assert_int_equal(fx->handled, 1);
    free(req);
}

static void
test_http_url_too_long(void **state)
{
    struct fixture *fx = *state;
    char req[4096];
    int n = sprintf(req, "GET /ping?");

    start(fx);
    memset(req + n, 'q', PROTO_HTTP_DEFAULT_MAX_URL_BYTES);
    strcpy(req + n + PROTO_HTTP_DEFAULT_MAX_URL_BYTES, " HTTP/1.1\r\n\r\n");
    one_shot(fx, req, 414);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_URL_TOO_LONG], 1);
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
    struct fixture *fx = *state;
    size_t i;

    start(fx);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct resp *r = one_shot(fx, cases[i].req, cases[i].status);

        if (cases[i].body != NULL)
            assert_string_equal(r->body, cases[i].body);
        else
            assert_memory_equal(r->body, "{\"error\":\"bad_request\",\"detail\":\"", 33);
        client_close(fx->clients[fx->n_clients - 1]); /* keeps within MAX_CLIENTS */
        WAIT(fx, fx->clients[fx->n_clients - 1]->closed);
        free(fx->clients[fx->n_clients - 1]->out);
        free(fx->clients[fx->n_clients - 1]->resps);
        free(fx->clients[--fx->n_clients]);
    }
    assert_int_equal(fx->handled, 0);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_BAD_REQUEST], i);
}

static void
test_http_not_found_and_method(void **state)
{
    struct fixture *fx = *state;
    struct client *c;

    start(fx);
    c = client_open(fx,
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
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_NOT_FOUND], 1);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_METHOD], 2);
}

static void
test_http_head_method(void **state)
{
    struct fixture *fx = *state;
    struct client *c;

    start(fx);
    c = client_open(fx, "HEAD /ping HTTP/1.1\r\n\r\nHEAD /ping HTTP/1.1\r\n\r\n", false, 0);
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
    struct fixture *fx = *state;
    struct client *c;

    start(fx);
    one_shot(fx, "GET /ping HTTP/1.0\r\n\r\n", 200);
    assert_int_equal(fx->seen.http_minor, 0);
    c = client_open(fx,
                    "GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                    "GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                    false, 0);
    WAIT(fx, c->n_resps == 2);
    assert_string_equal(c->resps[1].connection, "keep-alive");
    assert_false(c->done);
    one_shot(fx, "GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n", 200);
}

static void
test_http_response_errors(void **state)
{
    struct fixture *fx = *state;
    struct client *c;
    size_t i;

    start(fx);
    c = client_open(fx,
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
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_RESPONSE_ERROR], 4);
}

static void
test_http_custom_headers_no_routes(void **state)
{
    static const char *const names[] = {"X-Custom", "Authorization"};
    struct fixture *fx = *state;
    struct client *c;

    fx->cfg.routes = NULL;
    fx->cfg.routes_count = 0;
    fx->cfg.headers = names;
    fx->cfg.headers_count = 2;
    start(fx);
    c = client_open(fx,
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

static void
test_http_connection_cap(void **state)
{
    struct fixture *fx = *state;
    struct client *a, *b, *over, *d;

    fx->cfg.max_connections = 2;
    start(fx);
    a = client_open(fx, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    b = client_open(fx, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, a->n_resps == 1 && b->n_resps == 1);
    over = client_open(fx, NULL, false, 0);
    WAIT(fx, over->done);
    assert_int_equal(over->n_resps, 0);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_CONN_LIMIT], 1);
    assert_int_equal(stats(fx).connections_active, 2);
    client_close(a);
    WAIT(fx, stats(fx).connections_active == 1);
    d = client_open(fx, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, d->n_resps == 1);
    assert_int_equal(d->resps[0].status, 200);
}

static void
test_http_accept_without_memory(void **state)
{
    struct fixture *fx = *state;
    struct client *a, *b;

    start(fx);
    tally_alloc_fail_at(1); /* the connection's block */
    a = client_open(fx, NULL, false, 0);
    WAIT(fx, a->done);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_NO_MEMORY], 1);
    b = client_open(fx, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, b->n_resps == 1);
}

static void
test_http_idle_timeout(void **state)
{
    struct fixture *fx = *state;
    struct client *c;

    fx->cfg.idle_timeout_ms = 50;
    start(fx);
    c = client_open(fx, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    WAIT(fx, c->done);
    assert_int_equal(c->n_resps, 1);
    assert_int_equal(c->read_status, UV_EOF);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_IDLE_TIMEOUT], 1);
    assert_int_equal(stats(fx).connections_active, 0);
}

static void
on_trickle(uv_timer_t *t)
{
    struct trickle *tr = t->data;
    uv_buf_t b = uv_buf_init((char *)tr->bytes + tr->pos, 1);

    if (tr->c->done || tr->pos == tr->len) {
        uv_timer_stop(t);
        return;
    }
    if (uv_try_write((uv_stream_t *)&tr->c->tcp, &b, 1) == 1)
        tr->pos++;
}

/* Sends `bytes` one per `every_ms` after connecting, until an answer or the end. */
static void
trickle_run(struct fixture *fx, struct client *c, const char *bytes, uint64_t every_ms)
{
    fx->tr = (struct trickle){c, bytes, 0, strlen(bytes)};
    fx->trickle.data = &fx->tr;
    uv_timer_start(&fx->trickle, on_trickle, every_ms, every_ms);
    WAIT(fx, c->done || c->n_resps > 0);
    uv_timer_stop(&fx->trickle);
}

/* Slowloris: every byte is progress, but the request must be complete
 * request_timeout_ms after its first byte. */
static void
test_http_slowloris_cut(void **state)
{
    struct fixture *fx = *state;
    struct client *c;
    uint64_t t0;

    fx->cfg.request_timeout_ms = 100;
    start(fx);
    c = client_open(fx, "GET /ping HTTP/1.1\r\n", false, 0);
    t0 = uv_hrtime();
    trickle_run(fx, c, "X-Slow-Header-That-Never-Ends-X-Slow-Header-That-Never-Ends", 10);
    assert_true(c->done);
    assert_int_equal(c->n_resps, 0);
    assert_true(uv_hrtime() - t0 < 2000000000ULL); /* far below the 10 s idle timeout */
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_REQUEST_TIMEOUT], 1);
    assert_int_equal(stats(fx).rejected[PROTO_HTTP_REJECT_IDLE_TIMEOUT], 0);
}

/* The idle timer is reset by progress: a slow but steady request completes. */
static void
test_http_idle_reset_by_progress(void **state)
{
    struct fixture *fx = *state;
    struct client *c;

    fx->cfg.idle_timeout_ms = 60;
    start(fx);
    c = client_open(fx, "GET /ping", false, 0);
    trickle_run(fx, c, " HTTP/1.1\r\n\r\n", 20); /* 13 bytes over 260 ms */
    assert_int_equal(c->n_resps, 1);
    assert_int_equal(c->resps[0].status, 200);
}

static void
test_http_client_gone_mid_request(void **state)
{
    struct fixture *fx = *state;
    struct client *c;

    start(fx);
    c = client_open(fx, "GET /ping HTTP/1.1\r\nHost: t\r\nAuthoriz", false, 0);
    WAIT(fx, stats(fx).connections_accepted == 1 && !c->writing);
    client_close(c);
    WAIT(fx, stats(fx).connections_active == 0);
    assert_int_equal(fx->handled, 0);
}

static void
test_http_client_gone_with_queued_answers(void **state)
{
    struct fixture *fx = *state;
    char *reqs = malloc(FILL_COUNT * 48), *p = reqs;
    struct client *c;
    size_t i;

    start(fx);
    for (i = 0; i < FILL_COUNT; i++)
        p += sprintf(p, "GET /fill?%zu HTTP/1.1\r\n\r\n", i);
    c = client_open(fx, reqs, true, 4096);
    free(reqs);
    WAIT(fx, stats(fx).writes_queued >= 1);
    client_close(c); /* unread data: a reset */
    WAIT(fx, stats(fx).connections_active == 0);
}

static void
test_http_close_with_open_connections(void **state)
{
    struct fixture *fx = *state;
    struct client *idle, *half;

    start(fx);
    idle = client_open(fx, "GET /ping HTTP/1.1\r\n\r\n", false, 0);
    half = client_open(fx, "GET /ping HTTP/1.1\r\nHo", false, 0);
    WAIT(fx, idle->n_resps == 1 && !half->writing && stats(fx).connections_accepted == 2);
    proto_http_close(fx->srv, srv_closed);
    proto_http_close(fx->srv, srv_closed); /* ignored */
    WAIT(fx, fx->srv_closed && idle->done && half->done);
    fx->srv = NULL;
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_http_get_simple),
        T(test_http_keepalive_two_requests),
        T(test_http_pipelined_in_order),
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
    return cmocka_run_group_tests_name("proto_http", tests, NULL, NULL);
}

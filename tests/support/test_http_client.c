/*
 * The raw HTTP client of the HTTP server's suites. A client is one libuv TCP
 * handle on the test's loop: it writes the test's bytes verbatim (so requests
 * can be malformed, pipelined or cut) and feeds what it reads to http_parser
 * in response mode, copying the few headers the suites check. Clients are
 * malloc'd, not tally_malloc'd, so they never count in the server's
 * allocation tests.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "test_http_client.h"
#include "test_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct test_http_client *
client_of(http_parser *p)
{
    return p->data;
}

/* A header field and its value are complete: keep it if the suites check it. */
static void
header_end(struct test_http_client *c)
{
    struct test_http_resp *r = &c->resps[c->n_resps];
    static const struct {
        const char *name;
        size_t off, cap;
    } keep[] = {
        {"connection", offsetof(struct test_http_resp, connection), sizeof(r->connection)},
        {"allow", offsetof(struct test_http_resp, allow), sizeof(r->allow)},
        {"x-seq", offsetof(struct test_http_resp, x_seq), sizeof(r->x_seq)},
        {"x-test", offsetof(struct test_http_resp, x_test), sizeof(r->x_test)},
        {"content-type", offsetof(struct test_http_resp, content_type), sizeof(r->content_type)},
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
    struct test_http_client *c = client_of(p);

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
    struct test_http_client *c = client_of(p);

    header_end(c);
    append(c->field, sizeof(c->field), &c->field_len, at, n);
    return 0;
}

static int
rp_value(http_parser *p, const char *at, size_t n)
{
    struct test_http_client *c = client_of(p);

    c->in_value = true;
    append(c->value, sizeof(c->value), &c->value_len, at, n);
    return 0;
}

static int
rp_headers_done(http_parser *p)
{
    struct test_http_client *c = client_of(p);

    header_end(c);
    c->resps[c->n_resps].status = (int)p->status_code;
    return c->head_answers ? 1 : 0; /* 1: no body follows */
}

static int
rp_body(http_parser *p, const char *at, size_t n)
{
    struct test_http_resp *r = &client_of(p)->resps[client_of(p)->n_resps];
    size_t have = r->body_len < sizeof(r->body) - 1 ? r->body_len : sizeof(r->body) - 1;

    append(r->body, sizeof(r->body), &have, at, n);
    r->body_len += n;
    return 0;
}

static int
rp_complete(http_parser *p)
{
    struct test_http_client *c = client_of(p);

    assert_true(c->resps[c->n_resps].no_store); /* on every answer */
    c->n_resps++;
    return c->n_resps == TEST_HTTP_RESPS_MAX ? -1 : 0; /* the table is full */
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
    struct test_http_client *c = h->data;

    (void)suggested;
    *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void
client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct test_http_client *c = s->data;

    if (nread < 0) {
        c->done = true;
        c->read_status = (int)nread;
        uv_read_stop(s);
        return;
    }
    if (http_parser_execute(&c->rp, &rp_settings, buf->base, (size_t)nread) != (size_t)nread)
        c->parse_error = true;
}

void
test_http_client_resume(struct test_http_client *c)
{
    c->paused = false;
    assert_int_equal(uv_read_start((uv_stream_t *)&c->tcp, client_alloc, client_read), 0);
}

static void
client_written(uv_write_t *req, int status)
{
    struct test_http_client *c = req->handle->data;

    (void)status; /* a refused client may see EPIPE or ECONNRESET */
    c->writing = false;
}

void
test_http_client_send(struct test_http_client *c, const char *data, size_t len)
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
    struct test_http_client *c = req->handle->data;

    assert_int_equal(status, 0);
    if (c->out != NULL) {
        uv_buf_t b = uv_buf_init(c->out, (unsigned)strlen(c->out));

        c->writing = true;
        assert_int_equal(uv_write(&c->write_req, req->handle, &b, 1, client_written), 0);
    }
    if (!c->paused)
        test_http_client_resume(c);
}

struct test_http_client *
test_http_client_open(struct test_http_env *env, const char *req, bool paused, int rcvbuf)
{
    struct test_http_client *c = calloc(1, sizeof(*c));
    struct sockaddr_in sa;

    assert_non_null(c);
    assert_true(env->n_clients < TEST_HTTP_CLIENTS_MAX);
    env->clients[env->n_clients++] = c;
    c->env = env;
    c->paused = paused;
    c->resps = calloc(TEST_HTTP_RESPS_MAX, sizeof(*c->resps));
    assert_non_null(c->resps);
    http_parser_init(&c->rp, HTTP_RESPONSE);
    c->rp.data = c;
    if (req != NULL) {
        c->out = strdup(req);
        assert_non_null(c->out);
    }
    assert_int_equal(uv_tcp_init_ex(&env->loop, &c->tcp, AF_INET), 0);
    c->tcp.data = c;
    if (rcvbuf > 0)
        assert_int_equal(uv_recv_buffer_size((uv_handle_t *)&c->tcp, &rcvbuf), 0);
    assert_int_equal(uv_ip4_addr("127.0.0.1", env->port, &sa), 0);
    assert_int_equal(
        uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&sa, client_connected),
        0);
    return c;
}

static void
client_closed(uv_handle_t *h)
{
    ((struct test_http_client *)h->data)->closed = true;
}

void
test_http_client_close(struct test_http_client *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, client_closed);
}

static void
client_free(struct test_http_client *c)
{
    free(c->out);
    free(c->resps);
    free(c);
}

void
test_http_client_drop(struct test_http_env *env)
{
    struct test_http_client *c;

    assert_true(env->n_clients > 0);
    c = env->clients[env->n_clients - 1];
    test_http_client_close(c);
    TEST_HTTP_WAIT(env, c->closed);
    env->n_clients--;
    client_free(c);
}

static void
on_guard(uv_timer_t *t)
{
    ((struct test_http_env *)t->data)->timed_out = true;
}

void
test_http_wait_begin(struct test_http_env *env)
{
    env->timed_out = false;
    assert_int_equal(uv_timer_start(&env->guard, on_guard, TEST_HTTP_GUARD_MS, 0), 0);
}

void
test_http_wait_end(struct test_http_env *env)
{
    uv_timer_stop(&env->guard);
    assert_false(env->timed_out);
}

void
test_http_env_init(struct test_http_env *env)
{
    memset(env, 0, sizeof(*env));
    assert_int_equal(uv_loop_init(&env->loop), 0);
    assert_int_equal(uv_timer_init(&env->loop, &env->guard), 0);
    assert_int_equal(uv_timer_init(&env->loop, &env->trickle), 0);
    env->guard.data = env;
}

void
test_http_env_release(struct test_http_env *env)
{
    size_t i;

    for (i = 0; i < env->n_clients; i++)
        test_http_client_close(env->clients[i]);
    uv_close((uv_handle_t *)&env->guard, NULL);
    uv_close((uv_handle_t *)&env->trickle, NULL);
    uv_run(&env->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&env->loop), 0);
    for (i = 0; i < env->n_clients; i++)
        client_free(env->clients[i]);
    env->n_clients = 0;
}

struct test_http_resp *
test_http_one_shot(struct test_http_env *env, const char *req, int status)
{
    struct test_http_client *c = test_http_client_open(env, req, false, 0);

    TEST_HTTP_WAIT(env, c->done);
    assert_false(c->parse_error);
    assert_int_equal(c->n_resps, 1);
    assert_int_equal(c->resps[0].status, status);
    assert_string_equal(c->resps[0].connection, "close");
    assert_int_equal(c->read_status, UV_EOF); /* the answer, then a clean close */
    return &c->resps[0];
}

static void
on_trickle(uv_timer_t *t)
{
    struct test_http_trickle *tr = t->data;
    uv_buf_t b = uv_buf_init((char *)tr->bytes + tr->pos, 1);

    if (tr->c->done || tr->pos == tr->len) {
        uv_timer_stop(t);
        return;
    }
    if (uv_try_write((uv_stream_t *)&tr->c->tcp, &b, 1) == 1)
        tr->pos++;
}

void
test_http_trickle(struct test_http_env *env, struct test_http_client *c, const char *bytes,
                  uint64_t every_ms)
{
    env->tr = (struct test_http_trickle){c, bytes, 0, strlen(bytes)};
    env->trickle.data = &env->tr;
    assert_int_equal(uv_timer_start(&env->trickle, on_trickle, every_ms, every_ms), 0);
    TEST_HTTP_WAIT(env, c->done || c->n_resps > 0);
    uv_timer_stop(&env->trickle);
}

char *
test_http_request_of_size(size_t size)
{
    static const char pre[] = "GET /ping HTTP/1.1\r\nHost: t\r\nX-Pad: ";
    size_t fixed = sizeof(pre) - 1 + 4;
    char *r = malloc(size + 1);

    assert_non_null(r);
    assert_true(size > fixed);
    memcpy(r, pre, sizeof(pre) - 1);
    memset(r + sizeof(pre) - 1, 'p', size - fixed);
    memcpy(r + size - 4, "\r\n\r\n", 5);
    return r;
}

/* --- the suites' server ------------------------------------------------------ */

static const struct proto_http_route routes[] = {
    {"/ping", PROTO_HTTP_GET, TEST_HTTP_R_PING},
    {"/echo", PROTO_HTTP_GET | PROTO_HTTP_POST, TEST_HTTP_R_ECHO},
    {"/fill", PROTO_HTTP_GET, TEST_HTTP_R_FILL},
    {"/big", PROTO_HTTP_GET, TEST_HTTP_R_BIG},
    {"/close", PROTO_HTTP_GET, TEST_HTTP_R_CLOSE},
    {"/empty", PROTO_HTTP_POST, TEST_HTTP_R_EMPTY},
    {"/badstatus", PROTO_HTTP_GET, TEST_HTTP_R_BADSTATUS},
    {"/badheader", PROTO_HTTP_GET, TEST_HTTP_R_BADHEADER},
    {"/badtype", PROTO_HTTP_GET, TEST_HTTP_R_BADTYPE},
};

static void
copy_str(char *dst, size_t cap, struct proto_http_str s)
{
    size_t n = s.len < cap - 1 ? s.len : cap - 1;

    memcpy(dst, s.ptr == NULL ? "" : s.ptr, n);
    dst[n] = '\0';
}

void
test_http_handler(void *app_data, const struct proto_http_request *req,
                  struct proto_http_response *resp)
{
    struct test_http_fixture *fx = app_data;
    struct test_http_seen *s = &fx->seen;
    static char fill[TEST_HTTP_FILL_BYTES];
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
    case TEST_HTTP_R_PING:
        proto_http_response_write(resp, "pong", 4);
        break;
    case TEST_HTTP_R_ECHO:
        proto_http_response_printf(resp, "%s", s->has_query ? s->query : "-");
        break;
    case TEST_HTTP_R_FILL:
        memset(fill, 'f', sizeof(fill));
        proto_http_response_header(resp, "X-Seq", s->query);
        proto_http_response_write(resp, fill, sizeof(fill));
        break;
    case TEST_HTTP_R_BIG:
        for (i = 0; i < 10; i++) /* 10 x 1000 > the 8192 bytes allowed */
            proto_http_response_write(resp, fill, 1000);
        break;
    case TEST_HTTP_R_CLOSE:
        proto_http_response_write(resp, "bye", 3);
        resp->close = true;
        break;
    case TEST_HTTP_R_EMPTY:
        resp->status = 204;
        proto_http_response_header(resp, "X-Test", "yes");
        proto_http_response_write(resp, "dropped", 7);
        break;
    case TEST_HTTP_R_BADSTATUS:
        resp->status = 0;
        break;
    case TEST_HTTP_R_BADHEADER:
        proto_http_response_header(resp, "X-Test", "a\r\nInjected: 1");
        break;
    case TEST_HTTP_R_BADTYPE:
        resp->content_type = "text/plain\r\nInjected: 1";
        proto_http_response_write(resp, "x", 1);
        break;
    default: /* no route table */
        proto_http_response_printf(resp, "%s", s->path);
    }
}

void
test_http_fixture_init(struct test_http_fixture *fx)
{
    memset(fx, 0, sizeof(*fx));
    test_http_env_init(&fx->env);
    fx->cfg.handler = test_http_handler;
    fx->cfg.app_data = fx;
    fx->cfg.routes = routes;
    fx->cfg.routes_count = sizeof(routes) / sizeof(routes[0]);
}

void
test_http_srv_closed(proto_http_server *srv)
{
    struct test_http_fixture *fx = proto_http_app_data(srv);

    fx->srv_closed = true;
}

void
test_http_fixture_release(struct test_http_fixture *fx)
{
    if (fx->srv != NULL)
        proto_http_close(fx->srv, test_http_srv_closed);
    test_http_env_release(&fx->env);
    assert_true(fx->srv == NULL || fx->srv_closed);
    tally_alloc_fail_at(0);
}

int
test_http_setup(void **state)
{
    struct test_http_fixture *fx = malloc(sizeof(*fx));

    assert_non_null(fx);
    test_http_fixture_init(fx);
    *state = fx;
    return 0;
}

int
test_http_teardown(void **state)
{
    struct test_http_fixture *fx = *state;

    test_http_fixture_release(fx);
    free(fx);
    return 0;
}

void
test_http_start(struct test_http_fixture *fx)
{
    assert_int_equal(proto_http_open(&fx->env.loop, &fx->cfg, &fx->srv), TALLY_OK);
    assert_int_equal(proto_http_listen(fx->srv, "127.0.0.1", 0), TALLY_OK);
    assert_int_equal(proto_http_port(fx->srv, &fx->env.port), TALLY_OK);
    assert_true(fx->env.port > 0);
}

struct proto_http_stats
test_http_stats(struct test_http_fixture *fx)
{
    struct proto_http_stats st;

    proto_http_stats(fx->srv, &st);
    return st;
}

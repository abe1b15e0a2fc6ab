/*
 * The bad-input suites' fixture (badinput_env.h): a real tallyd on a fresh
 * data dir and raw blocking clients with receive deadlines, so a daemon that
 * hangs fails the test instead of the test hanging.
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "badinput_env.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto_client.h"
#include "test_support.h"

static struct test_out o;

/* The port of the "http" field of tallyd's JSON start line. */
static int
http_port(const struct bi_env *e)
{
    const char *key = "\"http\":\"127.0.0.1:";
    int i;

    for (i = 0; i < 500; i++) {
        size_t len = 0;
        char *log = test_read_file(e->d.log, &len);
        const char *p = log != NULL ? strstr(log, key) : NULL;
        int port = p != NULL ? atoi(p + strlen(key)) : 0;

        free(log);
        if (port > 0)
            return port;
        usleep(10000);
    }
    return 0;
}

void
bi_env_up(struct bi_env *e)
{
    memset(e, 0, sizeof(*e));
    test_tmpdir(e->root, sizeof(e->root));
    snprintf(e->data, sizeof(e->data), "%s/data", e->root);
    assert_int_equal(test_tally(e->data, &o, "init", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "plan", "set", "free", "--limit", "100/1m",
                                "--concurrency", "1", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "search", "--limit", "5/1m", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "wide", "--limit", "1000/1m", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "export", "--limit", "100/1m",
                                "--expensive", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "acme", "--plan", "free", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", NULL), 0);
    snprintf(e->token, sizeof(e->token), "%.36s", o.out);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", NULL), 0);
    snprintf(e->token2, sizeof(e->token2), "%.36s", o.out);
    /* counts, not latency: a sanitizer build on a busy machine may need a while */
    assert_int_equal(test_daemon_start(&e->d, e->data, "--wait-ms=3000", NULL), 0);
    e->port = http_port(e);
    assert_true(e->port > 0);
}

void
bi_env_down(struct bi_env *e)
{
    int code = test_daemon_stop(&e->d);

    if (code != 0) {
        size_t len = 0;
        char *log = test_read_file(e->d.log, &len);

        print_error("tallyd exited %d; its log:\n%s\n", code, log != NULL ? log : "(none)");
        free(log);
    }
    assert_int_equal(code, 0);
    test_rmtree(e->root);
    unlink(e->d.log);
}

static void
deadline(int fd)
{
    struct timeval tv = {BI_WAIT_MS / 1000, (BI_WAIT_MS % 1000) * 1000};

    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
}

/* Raw connections (no HELLO) through libtally's dialler, with the deadlines. */
int
bi_unix_connect(const struct bi_env *e)
{
    int fd = -1;

    assert_int_equal(proto_client_dial(e->d.socket, &fd), TALLY_OK);
    deadline(fd);
    return fd;
}

int
bi_tcp_connect(const struct bi_env *e)
{
    char where[64];
    int fd = -1;

    snprintf(where, sizeof(where), "tcp:127.0.0.1:%d", e->port);
    assert_int_equal(proto_client_dial(where, &fd), TALLY_OK);
    deadline(fd);
    return fd;
}

void
bi_send(int fd, const void *p, size_t n)
{
    const char *b = p;

    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the peer closed: the answer (or the close) tells */
        b += w;
        n -= (size_t)w;
    }
}

size_t
bi_recv(int fd, void *buf, size_t want, bool *eof)
{
    size_t got = 0;

    *eof = false;
    while (got < want) {
        ssize_t r = recv(fd, (char *)buf + got, want - got, 0);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail_msg("tallyd sent nothing for %d ms", BI_WAIT_MS);
        if (r <= 0) {
            *eof = true; /* EOF, or a reset after a final answer */
            break;
        }
        got += (size_t)r;
    }
    return got;
}

bool
bi_closed_silently(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    char b;

    if (poll(&p, 1, ms) != 1)
        return false;
    return recv(fd, &b, 1, 0) <= 0;
}

bool
bi_frame(int fd, uint8_t *buf, struct proto_frame *f)
{
    struct proto_frame_reader r;
    bool eof;
    uint32_t len;

    if (bi_recv(fd, buf, 4, &eof) < 4)
        return false;
    len = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
    assert_true(len >= 8 && len <= PROTO_CLIENT_MSG_MAX - 4);
    assert_int_equal(bi_recv(fd, buf + 4, len, &eof), len);
    proto_frame_reader_init(&r, buf, PROTO_CLIENT_MSG_MAX);
    proto_frame_reader_commit(&r, 4 + len);
    assert_int_equal(proto_frame_next(&r, f), TALLY_OK);
    return true;
}

void
bi_hello(int fd)
{
    struct proto_hello h = {1, 1};
    struct proto_hello_reply hr;
    uint8_t buf[PROTO_CLIENT_MSG_MAX];
    struct proto_frame f;

    size_t len = proto_hello_encode(buf, 1, &h);

    bi_send(fd, buf, len);
    assert_true(bi_frame(fd, buf, &f));
    assert_int_equal(proto_hello_reply_decode(&f, &hr), TALLY_OK);
    assert_int_equal(hr.version, 1);
}

const char *
bi_expect_error(int fd, int32_t code)
{
    static char msg[128];
    uint8_t buf[PROTO_CLIENT_MSG_MAX];
    struct proto_frame f;
    int32_t got = 0;

    assert_true(bi_frame(fd, buf, &f));
    assert_int_equal(f.type, PROTO_C_ERROR);
    assert_int_equal(proto_error_decode(&f, &got, msg, sizeof(msg)), TALLY_OK);
    assert_int_equal(got, code);
    assert_true(bi_closed_silently(fd, BI_WAIT_MS)); /* then the connection closes */
    return msg;
}

int
bi_check(const struct bi_env *e, const char *token, const char *endpoint, int64_t cost)
{
    struct proto_check m;
    struct proto_check_reply r;
    uint8_t buf[PROTO_CLIENT_MSG_MAX];
    struct proto_frame f;
    int fd = bi_unix_connect(e);

    memset(&m, 0, sizeof(m));
    snprintf(m.token, sizeof(m.token), "%s", token);
    snprintf(m.endpoint, sizeof(m.endpoint), "%s", endpoint);
    m.cost = cost;
    bi_hello(fd);
    {
        size_t len_ = proto_check_encode(buf, 7, &m);

        bi_send(fd, buf, len_);
    }
    assert_true(bi_frame(fd, buf, &f));
    assert_int_equal(f.request_id, 7);
    assert_int_equal(proto_check_reply_decode(&f, &r), TALLY_OK);
    close(fd);
    return r.status;
}

bool
bi_http_read(int fd, struct bi_http *r)
{
    size_t n = 0, len = 0;
    const char *cl;
    bool eof = false;

    memset(r, 0, sizeof(*r));
    while (n + 1 < sizeof(r->head)) { /* byte by byte: pipelined answers stay on the socket */
        if (bi_recv(fd, r->head + n, 1, &eof) != 1)
            return false;
        n++;
        if (n >= 4 && memcmp(r->head + n - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    r->head[n] = '\0';
    assert_memory_equal(r->head, "HTTP/1.1 ", 9);
    r->status = atoi(r->head + 9);
    assert_non_null(strstr(r->head, "Cache-Control: no-store\r\n"));
    if (r->status == 204) /* no body, no Content-Length */
        return true;
    cl = strstr(r->head, "Content-Length: ");
    assert_non_null(cl);
    len = (size_t)atol(cl + 16);
    assert_true(len < sizeof(r->body));
    assert_int_equal(bi_recv(fd, r->body, len, &eof), len);
    r->body[len] = '\0';
    return true;
}

void
bi_http(const struct bi_env *e, const char *req, struct bi_http *r)
{
    int fd = bi_tcp_connect(e);

    bi_send(fd, req, strlen(req));
    if (!bi_http_read(fd, r))
        fail_msg("no answer to: %.200s", req);
    close(fd);
}

void
bi_http_check(const struct bi_env *e, const char *token, const char *endpoint, const char *cost,
              struct bi_http *r)
{
    char req[2048];
    int n = snprintf(req, sizeof(req), "GET /v1/check HTTP/1.1\r\nHost: t\r\n");

    if (token != NULL)
        n += snprintf(req + n, sizeof(req) - (size_t)n, "Authorization: Bearer %s\r\n", token);
    if (endpoint != NULL)
        n += snprintf(req + n, sizeof(req) - (size_t)n, "X-Tally-Endpoint: %s\r\n", endpoint);
    if (cost != NULL)
        n += snprintf(req + n, sizeof(req) - (size_t)n, "X-Tally-Cost: %s\r\n", cost);
    snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
    bi_http(e, req, r);
}

int
bi_admit_all(const struct bi_env *e, const char *token, const char *endpoint)
{
    struct bi_http r;
    int n = 0, unavailable = 0;

    for (;;) {
        bi_http_check(e, token, endpoint, NULL, &r);
        /* 503: the tenant's supervisor did not answer within --wait-ms (a cold start on a
         * machine loaded by other suites); nothing was admitted, so ask again. */
        if (r.status == 503 && ++unavailable <= 20)
            continue;
        if (r.status != 200)
            break;
        n++;
        assert_true(n <= 1000);
    }
    assert_int_equal(r.status, 429);
    return n;
}

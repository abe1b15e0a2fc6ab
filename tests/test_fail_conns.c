/*
 * The connection caps (docs/FAILURE-MODES.md §2) through
 * the real tallyd, with --max-connections 3:
 *
 * - one more binary-protocol connection (Unix or TCP) gets ERROR -18 "too
 *   many connections" in answer to its HELLO, one more HTTP connection 503
 *   too_many_connections with Retry-After: 1, then each is closed; the open
 *   ones are served on, and a slot freed is taken again;
 * - beyond the connections waiting for that answer (64 binary, 16 HTTP) one
 *   more is closed at accept, unanswered.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fail_util.h"
#include "proto_client.h"
#include "serve_util.h"
#include "sup_sock.h"
#include "tally.h"

#define MAX_CONNS   3
#define CLIENT_WAIT 15000 /* ms: a cold start of an ASan supervisor on a busy machine */

/* Raw connections (no HELLO) through libtally's dialler. */
static int
unix_connect(const char *path)
{
    int fd = -1;

    assert_int_equal(proto_client_dial(path, &fd), TALLY_OK);
    return fd;
}

static int
tcp_connect(int port)
{
    char where[64];
    int fd = -1;

    snprintf(where, sizeof(where), "tcp:127.0.0.1:%d", port);
    assert_int_equal(proto_client_dial(where, &fd), TALLY_OK);
    return fd;
}

/* Reads until EOF (or a reset) or `cap` bytes, at most 5 s; returns the bytes
 * read and sets *eof when the peer closed. */
static size_t
read_all(int fd, char *buf, size_t cap, bool *eof)
{
    size_t len = 0;
    int64_t until = serve_now_ms() + 5000;

    *eof = false;
    while (len < cap && serve_now_ms() < until) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        if (poll(&p, 1, 100) <= 0)
            continue;
        n = read(fd, buf + len, cap - len);
        if (n <= 0) {
            *eof = n == 0 || errno == ECONNRESET;
            break;
        }
        len += (size_t)n;
    }
    return len;
}

static bool
contains(const char *buf, size_t len, const char *needle)
{
    size_t n = strlen(needle);

    for (size_t i = 0; i + n <= len; i++) {
        if (memcmp(buf + i, needle, n) == 0)
            return true;
    }
    return false;
}

/* A raw HELLO on an over-cap binary connection: ERROR with the HELLO's id, code
 * TALLY_EUNAVAIL, "too many connections", then the connection closes. */
static void
expect_binary_refusal(int fd)
{
    struct proto_hello hello = {PROTO_VERSION, PROTO_VERSION};
    uint8_t out[64];
    char in[512];
    size_t len = proto_hello_encode(out, 77, &hello);
    bool eof = false;
    size_t got;
    uint32_t id;
    int32_t code;

    assert_int_equal(write(fd, out, len), (ssize_t)len);
    got = read_all(fd, in, sizeof(in), &eof);
    assert_true(got >= 17);
    assert_int_equal((uint8_t)in[5], PROTO_C_ERROR);
    memcpy(&id, in + 8, 4);
    memcpy(&code, in + 12, 4);
    assert_int_equal(ntohl(id), 77);
    assert_int_equal((int32_t)ntohl((uint32_t)code), TALLY_EUNAVAIL);
    assert_true(contains(in, got, "too many connections"));
    assert_true(eof);
    close(fd);
}

static void
check_admitted(tally_client *c, const char *token)
{
    struct tally_result r;

    assert_int_equal(tally_check(c, token, "api", 0, &r), TALLY_OK);
    assert_true(r.status == TALLY_ADMITTED || r.status == TALLY_REFUSED);
}

/* Opens a client, retrying for up to 3 s while a freed slot is not yet seen free. */
static tally_client *
open_eventually(const char *where)
{
    tally_client *c = NULL;
    int64_t until = serve_now_ms() + 3000;
    int rc;

    while ((rc = tally_client_open(where, CLIENT_WAIT, &c)) != TALLY_OK && serve_now_ms() < until)
        serve_sleep_ms(20);
    assert_int_equal(rc, TALLY_OK);
    return c;
}

static void
test_max_connections_binary(void **state)
{
    struct fail_caps_env *e = *state;
    tally_client *a = NULL, *b = NULL, *t = NULL, *over = NULL, *d;
    char tcp[64];
    struct serve_http h;

    serve_start(&e->s, "--max-connections=3", "--tcp=127.0.0.1:0");
    assert_true(e->s.tcp_port > 0);
    snprintf(tcp, sizeof(tcp), "tcp:127.0.0.1:%d", e->s.tcp_port);
    /* Unix and TCP share the cap. */
    a = open_eventually(e->s.d.socket); /* the start's probe may still hold a place */
    b = open_eventually(e->s.d.socket);
    t = open_eventually(tcp);
    check_admitted(a, e->tokens[0]);
    assert_int_equal(tally_client_open(e->s.d.socket, CLIENT_WAIT, &over), TALLY_EUNAVAIL);
    assert_int_equal(tally_client_open(tcp, CLIENT_WAIT, &over), TALLY_EUNAVAIL);
    expect_binary_refusal(unix_connect(e->s.d.socket));
    expect_binary_refusal(tcp_connect(e->s.tcp_port));
    /* the open ones are served on */
    check_admitted(a, e->tokens[0]);
    check_admitted(b, e->tokens[1]);
    check_admitted(t, e->tokens[2]);
    /* a slot freed is taken again */
    tally_client_close(b);
    d = open_eventually(e->s.d.socket);
    check_admitted(d, e->tokens[1]);
    assert_int_equal(tally_client_open(tcp, CLIENT_WAIT, &over), TALLY_EUNAVAIL);
    serve_http_get(e->s.http_port, "/metrics", NULL, &h);
    assert_int_equal(h.status, 200);
    assert_true(serve_metric(h.body, "tally_connections_refused_total{listener=\"socket\"}") >= 5);
    tally_client_close(a);
    tally_client_close(t);
    tally_client_close(d);
    serve_stop(&e->s);
}

/* One request on an open keep-alive connection; returns the status and the head. */
static int
http_ask(int fd, const char *path, char *head, size_t cap, bool *eof)
{
    char req[256], buf[4096];
    size_t len = 0;
    int status = 0;
    int64_t until = serve_now_ms() + 5000;
    const char *end = NULL, *cl;

    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    *eof = false;
    /* the head, then Content-Length bytes of body */
    while (serve_now_ms() < until) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            cl = strstr(buf, "Content-Length:");
            if (cl != NULL && cl < end && (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15) <= len)
                break;
        }
        if (poll(&p, 1, 100) <= 0)
            continue;
        n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0) {
            *eof = true;
            break;
        }
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (sscanf(buf, "HTTP/1.1 %d", &status) != 1)
        status = 0;
    snprintf(head, cap, "%s", buf);
    return status;
}

static void
test_max_connections_http(void **state)
{
    struct fail_caps_env *e = *state;
    int fds[MAX_CONNS], over, again;
    char head[4096], rest[64];
    bool eof = false;
    struct serve_http h;

    serve_start(&e->s, "--max-connections=3", NULL);
    for (int i = 0; i < MAX_CONNS; i++) {
        fds[i] = tcp_connect(e->s.http_port);
        assert_int_equal(http_ask(fds[i], "/healthz", head, sizeof(head), &eof), 200);
    }
    over = tcp_connect(e->s.http_port);
    assert_int_equal(http_ask(over, "/healthz", head, sizeof(head), &eof), 503);
    assert_non_null(strstr(head, "\"error\":\"too_many_connections\""));
    assert_non_null(strstr(head, "\r\nRetry-After: 1\r\n"));
    assert_non_null(strstr(head, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(head, "\r\nCache-Control: no-store\r\n"));
    read_all(over, rest, sizeof(rest), &eof);
    assert_true(eof);
    close(over);
    /* the open ones are served on, keep-alive */
    for (int i = 0; i < MAX_CONNS; i++)
        assert_int_equal(http_ask(fds[i], "/healthz", head, sizeof(head), &eof), 200);
    /* a slot freed is taken again */
    close(fds[0]);
    for (int64_t until = serve_now_ms() + 3000;; serve_sleep_ms(20)) {
        int st;
        again = tcp_connect(e->s.http_port);
        st = http_ask(again, "/healthz", head, sizeof(head), &eof);
        if (st == 200)
            break;
        close(again);
        assert_true(st == 503 && serve_now_ms() < until);
    }
    fds[0] = again;
    close(fds[1]); /* room for the metrics request */
    for (int64_t until = serve_now_ms() + 3000;; serve_sleep_ms(20)) {
        serve_http_get(e->s.http_port, "/metrics", NULL, &h);
        if (h.status == 200)
            break;
        assert_true(serve_now_ms() < until);
    }
    assert_true(serve_metric(h.body, "tally_connections_refused_total{listener=\"http\"}") >= 1);
    assert_true(serve_metric(h.body, "tally_http_rejected_total{reason=\"connection_limit\"}") >=
                1);
    close(fds[0]);
    close(fds[2]);
    serve_stop(&e->s);
}

/* True when the peer closes fd within 3 s without sending a byte. */
static bool
closed_unanswered(int fd)
{
    char buf[64];
    bool eof = false;

    return read_all(fd, buf, sizeof(buf), &eof) == 0 && eof;
}

/* Connections over the cap that send nothing hold their refusal slot (64 binary,
 * 16 HTTP, until their first frame or the HTTP idle timeout); beyond them a
 * connection is closed at accept, unanswered, and the served one goes on. */
static void
test_beyond_refusals_closed_at_once(void **state)
{
    struct fail_caps_env *e = *state;
    int idle_bin[SUP_SOCK_REFUSALS_MAX], idle_http[16];
    char head[4096];
    bool eof = false;
    tally_client *a = NULL;
    int served, fd;

    serve_start(&e->s, "--max-connections=1", NULL);
    /* the start's own probe may still hold the one place for a moment */
    a = open_eventually(e->s.d.socket);
    for (int i = 0; i < SUP_SOCK_REFUSALS_MAX; i++)
        idle_bin[i] = unix_connect(e->s.d.socket);
    serve_sleep_ms(300); /* accepted, each waiting for its first frame */
    fd = unix_connect(e->s.d.socket);
    assert_true(closed_unanswered(fd));
    close(fd);
    check_admitted(a, e->tokens[0]);
    /* a waiting one still gets its answer */
    expect_binary_refusal(idle_bin[0]);
    for (int i = 1; i < SUP_SOCK_REFUSALS_MAX; i++)
        close(idle_bin[i]);
    tally_client_close(a);

    served = tcp_connect(e->s.http_port);
    assert_int_equal(http_ask(served, "/healthz", head, sizeof(head), &eof), 200);
    for (int i = 0; i < 16; i++)
        idle_http[i] = tcp_connect(e->s.http_port);
    serve_sleep_ms(300);
    fd = tcp_connect(e->s.http_port);
    assert_true(closed_unanswered(fd));
    close(fd);
    assert_int_equal(http_ask(served, "/healthz", head, sizeof(head), &eof), 200);
    assert_int_equal(http_ask(idle_http[0], "/healthz", head, sizeof(head), &eof), 503);
    for (int i = 0; i < 16; i++)
        close(idle_http[i]);
    close(served);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_max_connections_binary, fail_caps_setup,
                                        fail_caps_teardown),
        cmocka_unit_test_setup_teardown(test_max_connections_http, fail_caps_setup,
                                        fail_caps_teardown),
        cmocka_unit_test_setup_teardown(test_beyond_refusals_closed_at_once, fail_caps_setup,
                                        fail_caps_teardown),
    };

    if (getenv("TALLY_TEST_FILTER") != NULL) /* one test: TALLY_TEST_FILTER=test_max_conn* */
        cmocka_set_test_filter(getenv("TALLY_TEST_FILTER"));
    return cmocka_run_group_tests_name("fail_conns", tests, NULL, NULL);
}

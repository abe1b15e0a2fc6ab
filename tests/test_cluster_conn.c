/*
 * The host channel over real TCP on a libuv loop (cluster/conn.c): a member
 * dials a listener on 127.0.0.1 and hundreds of messages of every size cross
 * both ways intact and in order, and a close is seen by the peer as a finish;
 * a key that is not a member is refused and logged with its fingerprint;
 * a connection that says nothing is cut at its handshake deadline; bytes of
 * another protocol are a protocol error; a dial to a closed port fails. Every
 * test ends with uv_loop_close() == 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "cluster_conn.h"
#include "tally_log.h"
#include "test_support.h"

#define MSGS 300

struct end {
    cluster_conn *c;
    bool ready;
    bool closed;
    int close_rc;
    size_t got;
    bool intact;
    size_t sent;
    bool close_when_done; /* closes once `expect` messages came */
    size_t expect;
};

struct fixture {
    uv_loop_t loop;
    uv_tcp_t server;
    struct sockaddr_in addr;
    struct end listener, dialer;
    struct cluster_hostkey key_l, key_d, key_x;
    const uint8_t *member; /* the one key the listener lets in */
    uint32_t handshake_ms;
    int log_fd;
    char log_path[256];
};

static struct fixture fx;

static size_t
msg_len(size_t i)
{
    static const size_t lens[] = {0, 1, 7, 100, 4096, 65536, 200000};

    return lens[i % 7];
}

static uint8_t
pattern(size_t msg, size_t i)
{
    return (uint8_t)(msg * 131u + i * 7u + (i >> 9));
}

static void
send_one(struct end *e)
{
    size_t len = msg_len(e->sent);
    uint8_t *b = malloc(len + 1);

    assert_non_null(b);
    for (size_t i = 0; i < len; i++)
        b[i] = pattern(e->sent, i);
    assert_int_equal(cluster_conn_send(e->c, b, len), TALLY_OK);
    e->sent++;
    free(b);
}

static void
on_ready(cluster_conn *c, void *data)
{
    struct end *e = data;

    (void)c;
    e->ready = true;
    for (size_t i = 0; i < MSGS; i++)
        send_one(e);
}

static void
on_msg(cluster_conn *c, const uint8_t *msg, size_t len, void *data)
{
    struct end *e = data;

    if (len != msg_len(e->got))
        e->intact = false;
    for (size_t i = 0; i < len && e->intact; i++)
        e->intact = msg[i] == pattern(e->got, i);
    e->got++;
    if (e->close_when_done && e->got == e->expect)
        cluster_conn_close(c);
}

static void
on_close(cluster_conn *c, int rc, void *data)
{
    struct end *e = data;

    (void)c;
    e->closed = true;
    e->close_rc = rc;
    e->c = NULL;
}

static const struct cluster_conn_cbs cbs = {on_ready, on_msg, on_close, NULL};

static int
peer_ok(void *ctx, const uint8_t pk[CLUSTER_KEY_BYTES])
{
    (void)ctx;
    return fx.member != NULL && memcmp(pk, fx.member, CLUSTER_KEY_BYTES) == 0 ? TALLY_OK
                                                                              : TALLY_EUNAUTH;
}

static void
on_connection(uv_stream_t *server, int status)
{
    struct cluster_conn_opts o = {&fx.key_l, fx.handshake_ms, &cbs, &fx.listener};

    assert_int_equal(status, 0);
    assert_null(fx.listener.c);
    assert_int_equal(cluster_conn_accept(server, peer_ok, NULL, &o, &fx.listener.c), TALLY_OK);
}

/* The log goes to path from now on (the suite reads it back). */
static int
open_log(const char *path)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);

    assert_true(fd >= 0);
    tally_log_set_fd(fd);
    return fd;
}

static int
setup(void **state)
{
    int len = sizeof(fx.addr);

    (void)state;
    memset(&fx.listener, 0, sizeof(fx.listener));
    memset(&fx.dialer, 0, sizeof(fx.dialer));
    fx.listener.intact = fx.dialer.intact = true;
    fx.member = fx.key_d.pk;
    fx.handshake_ms = 5000;
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    assert_int_equal(uv_tcp_init(&fx.loop, &fx.server), 0);
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &fx.addr), 0);
    assert_int_equal(uv_tcp_bind(&fx.server, (const struct sockaddr *)&fx.addr, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&fx.server, 8, on_connection), 0);
    assert_int_equal(uv_tcp_getsockname(&fx.server, (struct sockaddr *)&fx.addr, &len), 0);
    snprintf(fx.log_path, sizeof(fx.log_path), "/tmp/tally-cluster-conn-%d.log", (int)getpid());
    fx.log_fd = open_log(fx.log_path);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    uv_close((uv_handle_t *)&fx.server, NULL);
    assert_int_equal(uv_run(&fx.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx.loop), 0);
    tally_log_set_fd(2);
    close(fx.log_fd);
    unlink(fx.log_path);
    return 0;
}

/* Runs the loop until cond holds (or 10 s pass: a failure). */
#define RUN_UNTIL(cond)                                                                            \
    do {                                                                                           \
        uint64_t t0_ = uv_hrtime();                                                                \
        while (!(cond)) {                                                                          \
            uv_run(&fx.loop, UV_RUN_ONCE);                                                         \
            if (uv_hrtime() - t0_ > 10000000000ull)                                                \
                fail_msg("timed out waiting for %s", #cond);                                       \
        }                                                                                          \
    } while (0)

static void
dial(const struct cluster_hostkey *self, const uint8_t *pinned)
{
    struct cluster_conn_opts o = {self, 5000, &cbs, &fx.dialer};

    assert_int_equal(
        cluster_conn_dial(&fx.loop, (const struct sockaddr *)&fx.addr, pinned, &o, &fx.dialer.c),
        TALLY_OK);
}

static void
test_conn_messages_cross_and_close_is_a_finish(void **state)
{
    (void)state;
    fx.dialer.close_when_done = true; /* the dialer closes once it has all of them */
    fx.dialer.expect = MSGS;
    dial(&fx.key_d, fx.key_l.pk);
    RUN_UNTIL(fx.dialer.closed && fx.listener.closed);
    assert_true(fx.dialer.ready && fx.listener.ready);
    assert_int_equal(fx.dialer.got, MSGS);
    assert_true(fx.dialer.intact);
    assert_true(fx.listener.got <= MSGS); /* the close may cut what was still in flight */
    assert_true(fx.listener.intact);
    assert_int_equal(fx.dialer.close_rc, TALLY_OK);
    assert_int_equal(fx.listener.close_rc, TALLY_OK); /* a finish, not a cut */
}

static void
test_conn_unknown_key_is_refused_and_logged(void **state)
{
    char hex[65], *log;
    size_t log_len = 0;

    (void)state;
    dial(&fx.key_x, fx.key_l.pk);
    RUN_UNTIL(fx.dialer.closed && fx.listener.closed);
    assert_false(fx.listener.ready);
    assert_false(fx.dialer.ready);
    assert_int_equal(fx.listener.got + fx.dialer.got, 0);
    assert_int_equal(fx.listener.close_rc, TALLY_EUNAUTH);
    assert_int_equal(fx.dialer.close_rc, TALLY_EIO); /* cut by the listener */
    log = test_read_file(fx.log_path, &log_len);
    assert_non_null(log);
    cluster_key_hex(fx.key_x.pk, hex);
    hex[16] = '\0';
    assert_non_null(strstr(log, "\"event\":\"cluster_peer_refused\""));
    assert_non_null(strstr(log, hex));
    assert_non_null(strstr(log, "127.0.0.1:"));
    free(log);
}

/* A revoked member: its key is known but no longer let in. */
static void
test_conn_revoked_member_is_refused(void **state)
{
    (void)state;
    fx.member = NULL;
    dial(&fx.key_d, fx.key_l.pk);
    RUN_UNTIL(fx.dialer.closed && fx.listener.closed);
    assert_int_equal(fx.listener.close_rc, TALLY_EUNAUTH);
    assert_int_equal(fx.listener.got + fx.dialer.got, 0);
}

/* The listener is not the host the dialer pinned. */
static void
test_conn_wrong_listener_is_refused(void **state)
{
    (void)state;
    dial(&fx.key_d, fx.key_x.pk);
    RUN_UNTIL(fx.dialer.closed && fx.listener.closed);
    assert_false(fx.dialer.ready);
    assert_int_equal(fx.listener.close_rc, TALLY_EUNAUTH);
    assert_int_equal(fx.listener.got + fx.dialer.got, 0);
}

/* ---- raw TCP clients ---- */

struct raw {
    uv_tcp_t tcp;
    uv_connect_t req;
    uv_write_t w;
    const char *bytes;
    bool closed;
};

static void
raw_closed(uv_handle_t *h)
{
    ((struct raw *)h->data)->closed = true;
}

static void
raw_alloc(uv_handle_t *h, size_t n, uv_buf_t *b)
{
    static char buf[256];

    (void)h;
    (void)n;
    *b = uv_buf_init(buf, sizeof(buf));
}

static void
raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n < 0)
        uv_close((uv_handle_t *)s, raw_closed);
}

static void
raw_connected(uv_connect_t *req, int status)
{
    struct raw *r = req->data;
    uv_buf_t b;

    assert_int_equal(status, 0);
    uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_read);
    if (r->bytes != NULL) {
        b = uv_buf_init((char *)r->bytes, (unsigned)strlen(r->bytes));
        assert_int_equal(uv_write(&r->w, (uv_stream_t *)&r->tcp, &b, 1, NULL), 0);
    }
}

static void
raw_dial(struct raw *r, const char *bytes)
{
    memset(r, 0, sizeof(*r));
    r->bytes = bytes;
    r->tcp.data = r;
    r->req.data = r;
    assert_int_equal(uv_tcp_init(&fx.loop, &r->tcp), 0);
    assert_int_equal(
        uv_tcp_connect(&r->req, &r->tcp, (const struct sockaddr *)&fx.addr, raw_connected), 0);
}

static void
test_conn_silent_peer_is_cut_at_the_deadline(void **state)
{
    struct raw r;
    uint64_t t0 = uv_hrtime();

    (void)state;
    fx.handshake_ms = 200;
    raw_dial(&r, NULL);
    RUN_UNTIL(fx.listener.closed && r.closed);
    assert_int_equal(fx.listener.close_rc, TALLY_ETIMEDOUT);
    assert_true(uv_hrtime() - t0 >= 190 * 1000000ull);
}

static void
test_conn_other_protocol_is_an_error(void **state)
{
    struct raw r;
    static const char http[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
                               "0123456789012345678901234567890123456789012345678901234567890123";

    (void)state;
    raw_dial(&r, http);
    RUN_UNTIL(fx.listener.closed && r.closed);
    assert_int_equal(fx.listener.close_rc, TALLY_EPROTO);
}

static void
test_conn_dial_to_a_closed_port_fails(void **state)
{
    struct sockaddr_in closed = fx.addr;
    struct cluster_conn_opts o = {&fx.key_d, 5000, &cbs, &fx.dialer};
    uv_tcp_t probe;
    int len = sizeof(closed);

    (void)state;
    /* A port that was just free: bound, read back and closed again. */
    assert_int_equal(uv_tcp_init(&fx.loop, &probe), 0);
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &closed), 0);
    assert_int_equal(uv_tcp_bind(&probe, (const struct sockaddr *)&closed, 0), 0);
    assert_int_equal(uv_tcp_getsockname(&probe, (struct sockaddr *)&closed, &len), 0);
    uv_close((uv_handle_t *)&probe, NULL);
    assert_int_equal(cluster_conn_dial(&fx.loop, (const struct sockaddr *)&closed, fx.key_l.pk, &o,
                                       &fx.dialer.c),
                     TALLY_OK);
    RUN_UNTIL(fx.dialer.closed);
    assert_int_equal(fx.dialer.close_rc, TALLY_EUNAVAIL);
    assert_false(fx.dialer.ready);
}

static int
group_setup(void **state)
{
    (void)state;
    if (sodium_init() < 0)
        return -1;
    cluster_hostkey_generate(&fx.key_l);
    cluster_hostkey_generate(&fx.key_d);
    cluster_hostkey_generate(&fx.key_x);
    return 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conn_messages_cross_and_close_is_a_finish, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_conn_unknown_key_is_refused_and_logged, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_conn_revoked_member_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conn_wrong_listener_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conn_silent_peer_is_cut_at_the_deadline, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_conn_other_protocol_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conn_dial_to_a_closed_port_fails, setup, teardown),
    };

    return cmocka_run_group_tests_name("cluster_conn", tests, group_setup, NULL);
}

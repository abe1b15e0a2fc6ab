/*
 * Framed connections over a real socketpair and a libuv loop: the read buffer
 * starts small and grows, so frames of every size up to the largest taken come
 * out whole and in order, whether they arrive in one write, glued to others or
 * a few bytes at a time; a frame longer than the largest taken ends the
 * connection as a protocol error; frames sent while corked leave together at
 * the last uncork.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "proto_stream.h"
#include "test_support.h"

#define N_MAX 64

struct seen {
    size_t n;
    size_t len[N_MAX];
    uint32_t id[N_MAX];
    bool intact[N_MAX];
    bool closed;
    int reason;
};

/* Payload byte i of frame `id`: a pattern that shows a byte moved or lost. */
static uint8_t
pattern(uint32_t id, size_t i)
{
    return (uint8_t)(id * 31u + i * 7u + (i >> 8));
}

static size_t
make_frame(uint8_t *out, uint32_t id, size_t payload_len)
{
    proto_frame_header(out, 1, 0, id, payload_len);
    for (size_t i = 0; i < payload_len; i++)
        out[PROTO_FRAME_HEADER + i] = pattern(id, i);
    return PROTO_FRAME_HEADER + payload_len;
}

static void
on_frame(proto_conn *c, const struct proto_frame *f, void *data)
{
    struct seen *s = data;
    bool ok = true;

    (void)c;
    for (size_t i = 0; i < f->payload_len && ok; i++)
        ok = f->payload[i] == pattern(f->request_id, i);
    if (s->n < N_MAX) {
        s->len[s->n] = f->payload_len;
        s->id[s->n] = f->request_id;
        s->intact[s->n] = ok;
        s->n++;
    }
}

static void
on_close(proto_conn *c, int reason, void *data)
{
    struct seen *s = data;

    (void)c;
    s->closed = true;
    s->reason = reason;
}

struct fixture {
    uv_loop_t loop;
    proto_conn *conn;
    int peer;
    struct seen seen;
};

static void
open_pair(struct fixture *fx)
{
    int sv[2];
    struct proto_conn_cbs cbs = {on_frame, on_close};

    memset(fx, 0, sizeof(*fx));
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fx->peer = sv[1];
    assert_int_equal(proto_conn_open_fd(&fx->loop, sv[0], &cbs, &fx->seen, &fx->conn), TALLY_OK);
}

static void
close_pair(struct fixture *fx)
{
    proto_conn_close(fx->conn);
    proto_conn_unref(fx->conn);
    close(fx->peer);
    assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
}

/* Writes all of `p` from the peer's end, running the loop whenever the socket is full. */
static void
peer_write(struct fixture *fx, const uint8_t *p, size_t len)
{
    for (int stalls = 0; len > 0; stalls++) {
        ssize_t n = send(fx->peer, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);

        assert_false(fx->seen.closed); /* the reader gave up on a frame it should take */
        assert_true(stalls < 100000);
        if (n < 0) {
            assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
            uv_run(&fx->loop, UV_RUN_NOWAIT);
            continue;
        }
        p += n;
        len -= (size_t)n;
    }
}

static void
run_until(struct fixture *fx, size_t frames)
{
    for (int i = 0; i < 10000 && fx->seen.n < frames && !fx->seen.closed; i++)
        uv_run(&fx->loop, UV_RUN_NOWAIT);
}

static uint8_t wire[8 * PROTO_FRAME_MAX];

static const size_t sizes[] = {
    0, 1, 100, 4000, 4085, 4096, 5000, 20000, PROTO_PAYLOAD_MAX - 1, PROTO_PAYLOAD_MAX, 3, 9000};

/* The connection is open and handed out every frame of `sizes`, ids from `first_id` on, in
 * order and intact. */
static void
expect_sizes(const struct fixture *fx, uint32_t first_id)
{
    size_t n = sizeof(sizes) / sizeof(sizes[0]);

    assert_false(fx->seen.closed);
    assert_int_equal(fx->seen.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(fx->seen.id[i], first_id + i);
        assert_int_equal(fx->seen.len[i], sizes[i]);
        assert_true(fx->seen.intact[i]);
    }
}

static void
test_frames_of_every_size_whole_and_in_order(void **state)
{
    struct fixture fx;
    size_t n = sizeof(sizes) / sizeof(sizes[0]);

    (void)state;
    open_pair(&fx);
    for (size_t i = 0; i < n; i++) {
        size_t len = make_frame(wire, (uint32_t)i + 1, sizes[i]);

        peer_write(&fx, wire, len);
        run_until(&fx, i + 1);
    }
    expect_sizes(&fx, 1);
    close_pair(&fx);
}

static void
test_glued_and_trickled_frames(void **state)
{
    struct fixture fx;
    size_t n = sizeof(sizes) / sizeof(sizes[0]), len = 0;

    (void)state;
    open_pair(&fx);
    /* All glued in one stream, written in pieces of 7 bytes with the loop run between. */
    for (size_t i = 0; i < n; i++)
        len += make_frame(wire + len, (uint32_t)i + 100, sizes[i]);
    for (size_t off = 0; off < len; off += 7) {
        peer_write(&fx, wire + off, len - off < 7 ? len - off : 7);
        if (off % (7 * 64) == 0)
            uv_run(&fx.loop, UV_RUN_NOWAIT);
    }
    run_until(&fx, n);
    expect_sizes(&fx, 100);
    close_pair(&fx);
}

static void
test_frame_over_the_largest_is_a_protocol_error(void **state)
{
    struct fixture fx;
    uint8_t head[PROTO_FRAME_HEADER];

    (void)state;
    open_pair(&fx);
    peer_write(&fx, wire, make_frame(wire, 5, 10));
    run_until(&fx, 1);
    assert_int_equal(fx.seen.n, 1);
    /* A header announcing one byte more than the largest frame. */
    proto_frame_header(head, 1, 0, 6, PROTO_PAYLOAD_MAX + 1);
    peer_write(&fx, head, sizeof(head));
    for (int i = 0; i < 10000 && !fx.seen.closed; i++)
        uv_run(&fx.loop, UV_RUN_NOWAIT);
    assert_true(fx.seen.closed);
    assert_int_equal(fx.seen.reason, TALLY_EPROTO);
    assert_int_equal(fx.seen.n, 1);
    proto_conn_unref(fx.conn);
    close(fx.peer);
    assert_int_equal(uv_run(&fx.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx.loop), 0);
}

/* Frames sent while corked (twice: the calls nest) reach the peer only at the last uncork,
 * all in one write, whole and in order. */
static void
test_corked_frames_leave_together(void **state)
{
    struct fixture fx;
    uint8_t got[4096];
    size_t want = 0;
    ssize_t n;

    (void)state;
    open_pair(&fx);
    proto_conn_cork(fx.conn);
    proto_conn_cork(fx.conn);
    for (uint32_t id = 1; id <= 3; id++) {
        size_t len = make_frame(wire, id, 10 * id);

        assert_int_equal(proto_conn_send(fx.conn, wire, len), TALLY_OK);
        want += len;
    }
    uv_run(&fx.loop, UV_RUN_NOWAIT);
    assert_true(recv(fx.peer, got, sizeof(got), MSG_DONTWAIT) < 0);
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    proto_conn_uncork(fx.conn);
    uv_run(&fx.loop, UV_RUN_NOWAIT);
    assert_true(recv(fx.peer, got, sizeof(got), MSG_DONTWAIT) < 0); /* still held */
    proto_conn_uncork(fx.conn);
    n = recv(fx.peer, got, sizeof(got), MSG_DONTWAIT);
    assert_int_equal(n, (ssize_t)want);
    for (uint32_t id = 1, off = 0; id <= 3; id++) {
        size_t len = make_frame(wire, id, 10 * id);

        assert_memory_equal(got + off, wire, len);
        off += (uint32_t)len;
    }
    /* Uncorked: the next frame goes at once. */
    assert_int_equal(proto_conn_send(fx.conn, wire, make_frame(wire, 4, 5)), TALLY_OK);
    assert_int_equal(recv(fx.peer, got, sizeof(got), MSG_DONTWAIT),
                     (ssize_t)(PROTO_FRAME_HEADER + 5));
    close_pair(&fx);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames_of_every_size_whole_and_in_order),
        cmocka_unit_test(test_glued_and_trickled_frames),
        cmocka_unit_test(test_frame_over_the_largest_is_a_protocol_error),
        cmocka_unit_test(test_corked_frames_leave_together),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

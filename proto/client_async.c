/*
 * libtally's asynchronous pipelined client: one non-blocking socket driven by
 * the caller's event loop. Requests take a slot of a fixed window (the
 * server's in-flight limit, at most TALLY_ASYNC_WINDOW); the request id names
 * the slot in its low bits and a sequence number above them, so an answer is
 * matched to its request in O(1) whatever order answers come in, and a stale
 * or forged id is a protocol error. Requests beyond the window wait, already
 * encoded, in a ring sized at open. Nothing is allocated after open.
 *
 * Invariants: a request's callback runs exactly once (answer, connection
 * error, or close); once the connection failed (`err` set) no request is
 * accepted and none is pending. Bytes that held a token are wiped once sent.
 */
#include "tally.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_int.h"
#include "proto_client.h"

#define TALLY_ASYNC_WINDOW     128 /* the protocol's in-flight limit (PROTOCOL.md) */
#define TALLY_ASYNC_SLOT_BITS  7   /* 2^7 == TALLY_ASYNC_WINDOW */
#define TALLY_ASYNC_QUEUE_DEF  1024
#define TALLY_ASYNC_QUEUE_MAX  65536u
#define TALLY_ASYNC_READ_BYTES 16384

/* memset through a volatile pointer: a wipe of token bytes the compiler cannot
 * drop as a dead store (libtally links libc only, so not sodium_memzero). */
static void *(*const volatile wipe_fn)(void *, int, size_t) = memset;

_Static_assert((1u << TALLY_ASYNC_SLOT_BITS) == TALLY_ASYNC_WINDOW, "a request id's slot bits");

struct slot {
    tally_async_cb cb; /* NULL when the slot is free */
    void *user;
    uint32_t id;
};

struct queued {
    tally_async_cb cb;
    void *user;
    size_t len;
    uint8_t frame[PROTO_CLIENT_MSG_MAX]; /* request id patched in when it enters the window */
};

struct tally_async {
    int fd;
    int err;         /* TALLY_OK until the connection fails; then every call returns it */
    uint32_t window; /* requests in flight at most */
    uint32_t seq;    /* upper bits of the next request id */
    uint32_t inflight;
    uint32_t n_free;
    uint8_t free_slots[TALLY_ASYNC_WINDOW]; /* stack of free slot indexes */
    struct slot slots[TALLY_ASYNC_WINDOW];
    struct queued *queue; /* ring of q_cap */
    unsigned q_head, q_len, q_cap;
    size_t out_off, out_len; /* out[out_off, out_len) is still to be written */
    uint8_t out[(TALLY_ASYNC_WINDOW + 1) * PROTO_CLIENT_MSG_MAX];
    struct proto_frame_reader reader;
    uint8_t rbuf[TALLY_ASYNC_READ_BYTES];
};

/* Runs every pending callback with `rc` and leaves the handle failed with it. */
static void
fail_all(tally_async *a, int rc)
{
    struct tally_result none;
    uint32_t i;

    if (a->err == TALLY_OK)
        a->err = rc;
    memset(&none, 0, sizeof(none));
    for (i = 0; i < TALLY_ASYNC_WINDOW; i++) {
        struct slot s = a->slots[i];
        if (s.cb == NULL)
            continue;
        memset(&a->slots[i], 0, sizeof(a->slots[i]));
        a->free_slots[a->n_free++] = (uint8_t)i;
        a->inflight--;
        s.cb(s.user, rc, &none);
    }
    while (a->q_len > 0) {
        struct queued *q = &a->queue[a->q_head];
        tally_async_cb cb = q->cb;
        void *user = q->user;
        wipe_fn(q, 0, sizeof(*q)); /* the token */
        a->q_head = (a->q_head + 1) % a->q_cap;
        a->q_len--;
        cb(user, rc, &none);
    }
    wipe_fn(a->out, 0, sizeof(a->out));
    a->out_off = a->out_len = 0;
}

/* Room for one more frame at the end of out; sent bytes are wiped as they go. */
static uint8_t *
out_room(tally_async *a)
{
    if (a->out_off == a->out_len) {
        wipe_fn(a->out, 0, a->out_len);
        a->out_off = a->out_len = 0;
    } else if (sizeof(a->out) - a->out_len < PROTO_CLIENT_MSG_MAX) {
        size_t left = a->out_len - a->out_off;
        memmove(a->out, a->out + a->out_off, left);
        wipe_fn(a->out + left, 0, a->out_len - left);
        a->out_off = 0;
        a->out_len = left;
    }
    /* At most `window` frames are unsent, each well under PROTO_CLIENT_MSG_MAX. */
    assert(sizeof(a->out) - a->out_len >= PROTO_CLIENT_MSG_MAX);
    return a->out + a->out_len;
}

/* Writes `id` into the request id field of an encoded frame (big-endian). */
static void
set_request_id(uint8_t *frame, uint32_t id)
{
    frame[8] = (uint8_t)(id >> 24);
    frame[9] = (uint8_t)(id >> 16);
    frame[10] = (uint8_t)(id >> 8);
    frame[11] = (uint8_t)id;
}

/* Takes a free slot for (cb, user) and returns the request id naming it. */
static uint32_t
slot_take(tally_async *a, tally_async_cb cb, void *user)
{
    uint8_t i = a->free_slots[--a->n_free];
    uint32_t id;

    a->seq = (a->seq + 1) & (UINT32_MAX >> TALLY_ASYNC_SLOT_BITS);
    id = (a->seq << TALLY_ASYNC_SLOT_BITS) | i;
    a->slots[i].cb = cb;
    a->slots[i].user = user;
    a->slots[i].id = id;
    a->inflight++;
    return id;
}

/* Moves queued requests into free window slots, their frames into out. */
static void
promote(tally_async *a)
{
    while (a->q_len > 0 && a->inflight < a->window) {
        struct queued *q = &a->queue[a->q_head];
        uint8_t *dst = out_room(a);
        uint32_t id = slot_take(a, q->cb, q->user);

        memcpy(dst, q->frame, q->len);
        set_request_id(dst, id);
        a->out_len += q->len;
        wipe_fn(q, 0, sizeof(*q)); /* the token */
        a->q_head = (a->q_head + 1) % a->q_cap;
        a->q_len--;
    }
}

int
tally_async_open(const char *where, int timeout_ms, unsigned queue_max, tally_async **out)
{
    tally_client *c = NULL;
    tally_async *a = NULL;
    uint32_t server_window = 0;
    uint32_t i;
    int fd = -1;
    int rc;

    *out = NULL;
    if (queue_max == 0)
        queue_max = TALLY_ASYNC_QUEUE_DEF;
    if (queue_max > TALLY_ASYNC_QUEUE_MAX)
        return TALLY_EINVAL;
    rc = TALLY_ENOMEM;
    a = tally_calloc(1, sizeof(*a));
    if (a == NULL)
        goto out;
    a->fd = -1;
    a->queue = tally_calloc(queue_max, sizeof(*a->queue));
    if (a->queue == NULL)
        goto out;
    a->q_cap = queue_max;
    rc = tally_client_open(where, timeout_ms, &c);
    if (rc != TALLY_OK)
        goto out;
    tally__client_detach(c, &fd, &server_window);
    a->fd = fd;
    rc = TALLY_EIO;
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        goto out;
    a->window = server_window < TALLY_ASYNC_WINDOW ? server_window : TALLY_ASYNC_WINDOW;
    for (i = 0; i < TALLY_ASYNC_WINDOW; i++)
        a->free_slots[i] = (uint8_t)(TALLY_ASYNC_WINDOW - 1 - i);
    a->n_free = TALLY_ASYNC_WINDOW;
    proto_frame_reader_init(&a->reader, a->rbuf, sizeof(a->rbuf));
    rc = TALLY_OK;
    *out = a;
    a = NULL; /* ownership moved to the caller */
out:
    tally_client_close(c);
    tally_async_close(a);
    return rc;
}

void
tally_async_close(tally_async *a)
{
    if (a == NULL)
        return;
    fail_all(a, TALLY_ECANCELED);
    if (a->fd >= 0)
        close(a->fd);
    tally_free(a->queue);
    tally_free(a);
}

int
tally_async_fd(const tally_async *a)
{
    return a->fd;
}

bool
tally_async_wants_write(const tally_async *a)
{
    return a->out_off < a->out_len;
}

unsigned
tally_async_pending(const tally_async *a)
{
    return a->inflight + a->q_len;
}

int
tally_async_check(tally_async *a, const char *token, const char *endpoint, int64_t cost,
                  tally_async_cb cb, void *user)
{
    struct proto_check m;
    uint32_t id;
    int rc;

    if (a->err != TALLY_OK)
        return a->err;
    if (cb == NULL)
        return TALLY_EINVAL;
    rc = tally__check_prepare(&m, token, endpoint, cost);
    if (rc != TALLY_OK)
        goto out;
    if (a->q_len == 0 && a->inflight < a->window) {
        uint8_t *dst = out_room(a);
        size_t len = proto_check_encode(dst, 0, &m);
        if (len == 0) {
            rc = TALLY_EINVAL;
            goto out;
        }
        a->out_len += len;
        /* The slot is taken once encoding cannot fail any more. */
        id = slot_take(a, cb, user);
        set_request_id(dst, id);
    } else if (a->q_len < a->q_cap) {
        struct queued *q = &a->queue[(a->q_head + a->q_len) % a->q_cap];
        q->len = proto_check_encode(q->frame, 0, &m);
        if (q->len == 0) {
            rc = TALLY_EINVAL;
            goto out;
        }
        q->cb = cb;
        q->user = user;
        a->q_len++;
    } else {
        rc = TALLY_ETOOBIG; /* window and queue full: process answers first */
    }
out:
    wipe_fn(&m, 0, sizeof(m)); /* the token */
    return rc;
}

int
tally_async_flush(tally_async *a)
{
    while (a->err == TALLY_OK && a->out_off < a->out_len) {
        ssize_t n =
            send(a->fd, a->out + a->out_off, a->out_len - a->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            fail_all(a, TALLY_EUNAVAIL);
            break;
        }
        a->out_off += (size_t)n;
    }
    if (a->out_off > 0 && a->out_off == a->out_len) { /* all sent: no token bytes left */
        wipe_fn(a->out, 0, a->out_len);
        a->out_off = a->out_len = 0;
    }
    return a->err;
}

/* Runs the callback of one answer. TALLY_OK, or the error that fails the connection. */
static int
dispatch(tally_async *a, const struct proto_frame *f)
{
    struct proto_check_reply r;
    struct tally_result res;
    struct slot s;
    uint32_t i = f->request_id & (TALLY_ASYNC_WINDOW - 1);

    if (f->type == PROTO_C_ERROR) {
        int32_t code = 0;
        char msg[128];
        if (proto_error_decode(f, &code, msg, sizeof(msg)) == TALLY_OK && code < 0)
            return code;
        return TALLY_EPROTO;
    }
    if (f->type != PROTO_C_CHECK_REPLY || a->slots[i].cb == NULL ||
        a->slots[i].id != f->request_id || proto_check_reply_decode(f, &r) != TALLY_OK)
        return TALLY_EPROTO;
    s = a->slots[i];
    memset(&a->slots[i], 0, sizeof(a->slots[i]));
    a->free_slots[a->n_free++] = (uint8_t)i;
    a->inflight--;
    promote(a);
    tally__result_from_reply(&r, &res);
    s.cb(s.user, TALLY_OK, &res);
    return TALLY_OK;
}

/* Reads once into the frame reader: bytes read (> 0), 0 when nothing is there, or
 * an error (the peer closed or the socket failed). */
static int
read_some(tally_async *a)
{
    uint8_t *space = NULL;
    size_t room = proto_frame_reader_space(&a->reader, &space);
    ssize_t n;

    if (room == 0)
        return TALLY_EPROTO; /* cannot happen: frames are taken out as they complete */
    do {
        n = recv(a->fd, space, room, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n <= 0)
        return TALLY_EUNAVAIL;
    proto_frame_reader_commit(&a->reader, (size_t)n);
    return (int)n;
}

int
tally_async_process(tally_async *a)
{
    struct proto_frame f;
    int ran = 0;
    int rc;

    if (a->err != TALLY_OK)
        return a->err;
    for (;;) {
        int got = read_some(a);
        /* Answers that arrived before a close still count: dispatch them first. */
        while ((rc = proto_frame_next(&a->reader, &f)) == TALLY_OK) {
            rc = dispatch(a, &f);
            if (rc != TALLY_OK) {
                fail_all(a, rc);
                return rc;
            }
            ran++;
        }
        if (rc != TALLY_ENOTFOUND) {
            fail_all(a, TALLY_EPROTO);
            return TALLY_EPROTO;
        }
        if (got < 0) {
            fail_all(a, got);
            return got;
        }
        if (got == 0)
            break;
    }
    rc = tally_async_flush(a);
    return rc != TALLY_OK ? rc : ran;
}

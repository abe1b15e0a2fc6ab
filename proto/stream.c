/*
 * Framed connections over libuv streams (proto_stream.h), and accepting one
 * into a connection; the listeners are listener.c.
 * Reads land in a frame buffer that starts at 4 KiB and doubles, up to the
 * largest frame taken (64 KiB), when a frame or a burst needs more: a peer
 * makes us allocate at most that by talking, and the many quiet channels to
 * supervisors stay small; writes try uv_try_write first and otherwise go through
 * two buffers (one in flight, one filling), capped so a peer that stops
 * reading is cut instead of growing our memory. The handle lives inside the
 * connection; the memory goes when the handle is closed and the last
 * reference is dropped (docs/CONVENTIONS.md §4).
 */
#define _GNU_SOURCE /* struct ucred */
#include "proto_stream_int.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct proto_conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    uv_write_t wreq;
    struct proto_conn_cbs cbs;
    void *data;
    int refs; /* callers' references + 1 while the handle is open */
    bool initialised;
    bool closing;
    bool writing;
    bool close_after_flush;
    unsigned corked; /* on_read, proto_conn_cork: frames gather in out, one write at the end */
    int reason;
    struct proto_frame_reader reader;
    uint8_t *out; /* filling while a write is in flight */
    size_t out_len;
    size_t out_cap;
    uint8_t *flight; /* handed to uv_write */
    size_t flight_len;
    size_t flight_cap;
    bool rbuf_filled; /* the last read filled the read buffer (reader.buf): more may wait */
};

#define RBUF_FIRST 4096 /* a connection's first read buffer */

static void conn_free(proto_conn *c);

static proto_conn *
conn_new(const struct proto_conn_cbs *cbs, void *data, size_t max_frame)
{
    proto_conn *c;
    uint8_t *rbuf;
    size_t first;

    if (max_frame < PROTO_FRAME_HEADER || max_frame > PROTO_FRAME_MAX)
        max_frame = PROTO_FRAME_MAX;
    first = max_frame < RBUF_FIRST ? max_frame : RBUF_FIRST;
    rbuf = tally_malloc(first);
    c = rbuf != NULL ? tally_calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        tally_free(rbuf);
        return NULL;
    }
    c->cbs = *cbs;
    c->data = data;
    c->refs = 2; /* the caller's, and the open handle's */
    c->h.handle.data = c;
    proto_frame_reader_init(&c->reader, rbuf, first);
    proto_frame_reader_grow_to(&c->reader, max_frame);
    return c;
}

static void
conn_free(proto_conn *c)
{
    tally_free(c->out);
    tally_free(c->flight);
    sodium_memzero(c->reader.buf, c->reader.cap); /* frames held tokens */
    tally_free(c->reader.buf);
    tally_free(c);
}

void
proto_conn_ref(proto_conn *c)
{
    c->refs++;
}

void
proto_conn_unref(proto_conn *c)
{
    if (c == NULL)
        return;
    if (ALWAYS(c->refs > 0) && --c->refs == 0)
        conn_free(c);
}

void *
proto_conn_data(const proto_conn *c)
{
    return c->data;
}

void
proto_conn_set_data(proto_conn *c, void *data)
{
    c->data = data;
}

bool
proto_conn_is_closing(const proto_conn *c)
{
    return c->closing;
}

static void
on_handle_closed(uv_handle_t *h)
{
    proto_conn *c = h->data;

    if (c->cbs.on_close != NULL)
        c->cbs.on_close(c, c->reason, c->data);
    c->cbs.on_frame = NULL;
    c->cbs.on_close = NULL;
    proto_conn_unref(c); /* the handle's reference */
}

static void
conn_close_reason(proto_conn *c, int reason)
{
    if (c->closing)
        return;
    c->closing = true;
    c->reason = reason;
    if (!c->initialised) {
        c->initialised = true; /* nothing to close: behave as if closed */
        on_handle_closed(&c->h.handle);
        return;
    }
    if (!uv_is_closing(&c->h.handle))
        uv_close(&c->h.handle, on_handle_closed);
}

void
proto_conn_close(proto_conn *c)
{
    conn_close_reason(c, TALLY_OK);
}

void
proto_conn_close_after_flush(proto_conn *c)
{
    if (!c->writing && c->out_len == 0)
        proto_conn_close(c);
    else
        c->close_after_flush = true;
}

/* Doubles the read buffer (up to the largest frame taken) when the frame arriving does not fit
 * or the last read filled it; a failed allocation keeps the old one (a frame that cannot fit
 * then ends the connection as UV_ENOBUFS). */
static void
rbuf_grow(proto_conn *c)
{
    struct proto_frame_reader *r = &c->reader;
    size_t need = proto_frame_reader_need(r), cap = r->cap;
    uint8_t *old = r->buf, *nb;

    if (cap >= r->max || (need <= cap && !c->rbuf_filled))
        return;
    while (cap < need || cap == r->cap)
        cap *= 2;
    if (cap > r->max)
        cap = r->max;
    nb = tally_malloc(cap);
    if (nb == NULL)
        return;
    proto_frame_reader_move(r, nb, cap);
    tally_free(old);
}

static void
on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    proto_conn *c = h->data;
    uint8_t *p = NULL;
    size_t n;

    (void)hint;
    rbuf_grow(c);
    n = proto_frame_reader_space(&c->reader, &p);
    *buf = uv_buf_init((char *)p, (unsigned)n); /* 0 bytes -> UV_ENOBUFS in on_read */
}

static void uncork(proto_conn *c);

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    proto_conn *c = s->data;
    struct proto_frame f;
    int rc = TALLY_OK;

    (void)buf;
    if (nread < 0) {
        conn_close_reason(c, nread == UV_EOF ? TALLY_OK : TALLY_EIO);
        return;
    }
    proto_frame_reader_commit(&c->reader, (size_t)nread);
    /* on_alloc offered all the room there was: a read that took it all filled the buffer */
    c->rbuf_filled = c->reader.len == c->reader.cap;
    proto_conn_ref(c); /* on_frame may close and drop the owner's reference */
    /* The answers to the frames of one read leave in one write: a pipelining
     * client gets them together, and the loop pays one syscall, not one each. */
    c->corked++;
    while (!c->closing && (rc = proto_frame_next(&c->reader, &f)) == TALLY_OK) {
        if (c->cbs.on_frame != NULL)
            c->cbs.on_frame(c, &f, c->data);
    }
    uncork(c);
    if (!c->closing && rc == TALLY_EPROTO)
        conn_close_reason(c, TALLY_EPROTO);
    if (!c->closing) {
        uint8_t *p;

        (void)proto_frame_reader_space(&c->reader, &p); /* wipes the frames handed out */
    }
    proto_conn_unref(c);
}

static int
start_reading(proto_conn *c)
{
    return uv_read_start(&c->h.stream, on_alloc, on_read) == 0 ? TALLY_OK : TALLY_EIO;
}

int
proto_conn_open_fd(uv_loop_t *loop, int fd, const struct proto_conn_cbs *cbs, void *data,
                   proto_conn **out)
{
    proto_conn *c = conn_new(cbs, data, PROTO_FRAME_MAX);

    *out = NULL;
    if (c == NULL)
        return TALLY_ENOMEM;
    if (uv_pipe_init(loop, &c->h.pipe, 0) != 0) {
        conn_free(c);
        return TALLY_EIO;
    }
    c->initialised = true;
    c->h.handle.data = c;
    if (uv_pipe_open(&c->h.pipe, fd) != 0 || start_reading(c) != TALLY_OK) {
        proto_conn_close(c);
        proto_conn_unref(c);
        return TALLY_EIO;
    }
    *out = c;
    return TALLY_OK;
}

int
proto_conn_pipe_new(uv_loop_t *loop, const struct proto_conn_cbs *cbs, void *data, proto_conn **out)
{
    proto_conn *c = conn_new(cbs, data, PROTO_FRAME_MAX);

    *out = NULL;
    if (c == NULL)
        return TALLY_ENOMEM;
    if (uv_pipe_init(loop, &c->h.pipe, 0) != 0) {
        conn_free(c);
        return TALLY_EIO;
    }
    c->initialised = true;
    c->h.handle.data = c;
    *out = c;
    return TALLY_OK;
}

uv_pipe_t *
proto_conn_pipe(proto_conn *c)
{
    return &c->h.pipe;
}

int
proto_conn_start(proto_conn *c)
{
    return start_reading(c);
}

int
proto_conn_peer_uid(const proto_conn *c, uint32_t *uid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    if (c->h.handle.type != UV_NAMED_PIPE || uv_fileno(&c->h.handle, &fd) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return TALLY_ENOTFOUND;
    *uid = cred.uid;
    return TALLY_OK;
}

/* ---- writing ---- */

static int
buf_append(uint8_t **buf, size_t *len, size_t *cap, const void *p, size_t n)
{
    if (n > PROTO_CONN_OUT_MAX - *len)
        return TALLY_ETOOBIG;
    if (*len + n > *cap) {
        size_t want = *cap == 0 ? 4096 : *cap;
        uint8_t *nb;
        while (want < *len + n)
            want *= 2;
        nb = tally_realloc(*buf, want);
        if (nb == NULL)
            return TALLY_ENOMEM;
        *buf = nb;
        *cap = want;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return TALLY_OK;
}

static void on_write(uv_write_t *req, int status);

static int
write_flight(proto_conn *c)
{
    uv_buf_t b = uv_buf_init((char *)c->flight, (unsigned)c->flight_len);

    c->writing = true;
    if (uv_write(&c->wreq, &c->h.stream, &b, 1, on_write) != 0) {
        c->writing = false;
        conn_close_reason(c, TALLY_EIO);
        return TALLY_EIO;
    }
    return TALLY_OK;
}

static void
on_write(uv_write_t *req, int status)
{
    proto_conn *c = req->handle->data;
    uint8_t *t;
    size_t cap;

    c->writing = false;
    c->flight_len = 0;
    if (status < 0) {
        conn_close_reason(c, TALLY_EIO);
        return;
    }
    if (c->closing)
        return;
    if (c->out_len > 0) {
        t = c->flight;
        cap = c->flight_cap;
        c->flight = c->out;
        c->flight_cap = c->out_cap;
        c->flight_len = c->out_len;
        c->out = t;
        c->out_cap = cap;
        c->out_len = 0;
        (void)write_flight(c);
    } else if (c->close_after_flush) {
        proto_conn_close(c);
    }
}

/* Sends what gathered in out while corked. */
static void
uncork(proto_conn *c)
{
    uv_buf_t b;
    int n;

    if (c->corked > 0 && --c->corked > 0)
        return;
    if (c->closing || c->writing || c->out_len == 0)
        return;
    b = uv_buf_init((char *)c->out, (unsigned)c->out_len);
    n = uv_try_write(&c->h.stream, &b, 1);
    if (n < 0 && n != UV_EAGAIN) {
        conn_close_reason(c, TALLY_EIO);
        return;
    }
    if (n < 0)
        n = 0;
    if ((size_t)n == c->out_len) {
        c->out_len = 0;
        if (c->close_after_flush)
            proto_conn_close(c);
        return;
    }
    if (buf_append(&c->flight, &c->flight_len, &c->flight_cap, c->out + n,
                   c->out_len - (size_t)n) != TALLY_OK) {
        conn_close_reason(c, TALLY_ENOMEM);
        return;
    }
    c->out_len = 0;
    (void)write_flight(c);
}

long
proto_send_with_fd(int sock, const void *buf, size_t len, int fd, int flags)
{
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctrl;
    struct iovec iov = {(void *)buf, len};
    struct msghdr msg;
    struct cmsghdr *c;
    ssize_t n;

    memset(&msg, 0, sizeof(msg));
    memset(&ctrl, 0, sizeof(ctrl));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.space;
    msg.msg_controllen = sizeof(ctrl.space);
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    do {
        n = sendmsg(sock, &msg, flags);
    } while (n < 0 && errno == EINTR);
    return (long)n;
}

void
proto_conn_cork(proto_conn *c)
{
    c->corked++;
}

void
proto_conn_uncork(proto_conn *c)
{
    uncork(c);
}

int
proto_conn_send(proto_conn *c, const void *frame, size_t len)
{
    const uint8_t *p = frame;
    int rc;

    if (c->closing)
        return TALLY_EIO;
    if (c->writing || c->corked) {
        rc = buf_append(&c->out, &c->out_len, &c->out_cap, p, len);
        if (rc != TALLY_OK)
            conn_close_reason(c, rc);
        return rc;
    }
    {
        uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n == (int)len)
            return TALLY_OK;
        if (n < 0 && n != UV_EAGAIN) {
            conn_close_reason(c, TALLY_EIO);
            return TALLY_EIO;
        }
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        }
    }
    rc = buf_append(&c->flight, &c->flight_len, &c->flight_cap, p, len);
    if (rc != TALLY_OK) {
        conn_close_reason(c, rc);
        return rc;
    }
    return write_flight(c);
}

/* ---- accepting (the listeners are listener.c) ---- */

void
proto__stream_on_connection(uv_stream_t *server, int status)
{
    proto_listener *l = server->data;
    struct proto_conn_cbs cbs = {NULL, NULL};
    void *conn_data = NULL;
    proto_conn *c;
    int rc;

    if (status < 0)
        return;
    c = conn_new(&cbs, NULL, l->max_frame);
    if (c == NULL)
        return; /* the pending connection stays in the backlog; retried next time */
    rc = l->is_unix ? uv_pipe_init(server->loop, &c->h.pipe, 0)
                    : uv_tcp_init(server->loop, &c->h.tcp);
    if (rc != 0) {
        conn_free(c);
        return;
    }
    c->initialised = true;
    c->h.handle.data = c;
    if (uv_accept(server, &c->h.stream) != 0 ||
        !l->cbs.on_accept(l, l->data, &c->cbs, &conn_data)) {
        c->cbs.on_close = NULL;
        proto_conn_close(c);
        proto_conn_unref(c);
        return;
    }
    c->data = conn_data;
    if (!l->is_unix)
        uv_tcp_nodelay(&c->h.tcp, 1);
    if (start_reading(c) != TALLY_OK) {
        proto_conn_close(c);
        l->cbs.on_conn(l, c, l->data); /* the owner still gets its on_close */
        return;
    }
    l->cbs.on_conn(l, c, l->data);
}

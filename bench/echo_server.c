/*
 * tally-bench-echo: the physical limit of tally's transport. A bare libuv
 * server on a Unix socket (or TCP) that speaks tally's framing (12-byte header,
 * proto_frame.h) and answers every CHECK with a CHECK_REPLY of exactly the size
 * tallyd sends for an admission, without deciding anything: no token hashing,
 * no lookup, no counting. HELLO gets a HELLO_REPLY, so tally-bench drives it
 * unchanged. Replies to the frames of one read are written with one
 * uv_try_write (what a tuned server would do); --write-each writes one reply
 * per call instead, as tallyd's proto_conn_send does, to price that choice.
 *
 * Usage: tally-bench-echo (--socket PATH | --tcp HOST:PORT) [--write-each]
 * Runs until SIGINT or SIGTERM; prints nothing on success.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "proto_client.h"

#define OUT_MAX    (256u * 1024u) /* replies of one read batched into one write */
#define QUEUED_MAX (4u << 20)     /* output queued behind a slow reader before it is cut */

struct econn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    struct proto_frame_reader r;
    uv_write_t wreq;
    bool writing;
    uint8_t *pending; /* bytes uv_try_write did not take, owned while writing */
    uint8_t *queued;  /* replies made while a write was in flight */
    size_t queued_len;
    uint8_t out[OUT_MAX];
    size_t out_len;
    uint8_t rbuf[PROTO_CLIENT_MSG_MAX * 64];
};

static uint8_t check_reply[PROTO_CLIENT_MSG_MAX]; /* an admission, request id 0 */
static size_t check_reply_len;
static uint8_t hello_reply[PROTO_CLIENT_MSG_MAX];
static size_t hello_reply_len;
static bool write_each;

static void
on_closed(uv_handle_t *h)
{
    struct econn *c = h->data;

    free(c->pending);
    free(c->queued);
    free(c);
}

static void
conn_close(struct econn *c)
{
    if (!uv_is_closing(&c->h.handle))
        uv_close(&c->h.handle, on_closed);
}

static void start_write(struct econn *c, uint8_t *owned, size_t n);

static void
on_write(uv_write_t *req, int status)
{
    struct econn *c = req->data;
    uint8_t *q = c->queued;

    c->writing = false;
    free(c->pending);
    c->pending = NULL;
    if (status < 0 || uv_is_closing(&c->h.handle)) {
        conn_close(c);
        return;
    }
    if (q != NULL) {
        c->queued = NULL;
        start_write(c, q, c->queued_len);
        c->queued_len = 0;
    }
}

/* Queues `owned` (malloc'd, n bytes) as the one write in flight. */
static void
start_write(struct econn *c, uint8_t *owned, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)owned, (unsigned)n);

    c->pending = owned;
    c->wreq.data = c;
    c->writing = true;
    if (uv_write(&c->wreq, &c->h.stream, &b, 1, on_write) != 0) {
        c->writing = false;
        conn_close(c);
    }
}

/* Writes p[0..n): uv_try_write first, the rest through one queued uv_write. */
static void
send_bytes(struct econn *c, const uint8_t *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int w = 0;

    if (uv_is_closing(&c->h.handle))
        return;
    if (!c->writing) {
        w = uv_try_write(&c->h.stream, &b, 1);
        if (w == (int)n)
            return;
        if (w < 0 && w != UV_EAGAIN) {
            conn_close(c);
            return;
        }
        if (w < 0)
            w = 0;
    }
    if (c->writing) {
        /* Behind a write in flight: queue, and cut a peer that does not read. */
        uint8_t *q = c->queued_len + n > QUEUED_MAX ? NULL : realloc(c->queued, c->queued_len + n);
        if (q == NULL) {
            conn_close(c);
            return;
        }
        memcpy(q + c->queued_len, p, n);
        c->queued = q;
        c->queued_len += n;
        return;
    }
    {
        uint8_t *rest = malloc(n - (size_t)w);
        if (rest == NULL) {
            conn_close(c);
            return;
        }
        memcpy(rest, p + w, n - (size_t)w);
        start_write(c, rest, n - (size_t)w);
    }
}

static void
flush(struct econn *c)
{
    if (c->out_len > 0)
        send_bytes(c, c->out, c->out_len);
    c->out_len = 0;
}

/* Appends a canned reply with the request's id, flushing first when full. */
static void
answer(struct econn *c, const uint8_t *canned, size_t len, uint32_t id)
{
    uint8_t *p;

    if (write_each || c->out_len + len > sizeof(c->out))
        flush(c);
    p = c->out + c->out_len;
    memcpy(p, canned, len);
    p[8] = (uint8_t)(id >> 24);
    p[9] = (uint8_t)(id >> 16);
    p[10] = (uint8_t)(id >> 8);
    p[11] = (uint8_t)id;
    c->out_len += len;
    if (write_each)
        flush(c);
}

static void
on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct econn *c = h->data;
    uint8_t *p = NULL;
    size_t n = proto_frame_reader_space(&c->r, &p);

    (void)hint;
    *buf = uv_buf_init((char *)p, (unsigned)n);
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct econn *c = s->data;
    struct proto_frame f;
    int rc;

    (void)buf;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    proto_frame_reader_commit(&c->r, (size_t)nread);
    while ((rc = proto_frame_next(&c->r, &f)) == TALLY_OK) {
        if (f.type == PROTO_C_CHECK)
            answer(c, check_reply, check_reply_len, f.request_id);
        else if (f.type == PROTO_C_HELLO)
            answer(c, hello_reply, hello_reply_len, f.request_id);
    }
    flush(c);
    if (rc == TALLY_EPROTO)
        conn_close(c);
}

static void
on_connection(uv_stream_t *server, int status)
{
    struct econn *c;
    int rc;

    if (status < 0)
        return;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    rc = server->type == UV_NAMED_PIPE ? uv_pipe_init(server->loop, &c->h.pipe, 0)
                                       : uv_tcp_init(server->loop, &c->h.tcp);
    if (rc != 0) {
        free(c);
        return;
    }
    c->h.handle.data = c;
    proto_frame_reader_init(&c->r, c->rbuf, sizeof(c->rbuf));
    if (uv_accept(server, &c->h.stream) != 0 ||
        uv_read_start(&c->h.stream, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    if (server->type == UV_TCP)
        uv_tcp_nodelay(&c->h.tcp, 1);
}

/* Closes every handle; a connection frees itself in on_closed. */
static void
close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, h->data != NULL ? on_closed : NULL);
}

static void
on_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    uv_walk(s->loop, close_walk, NULL);
}

static void
canned_replies(void)
{
    struct proto_check_reply r;
    struct proto_hello_reply h = {PROTO_VERSION, PROTO_FRAME_MAX, 128};

    /* What tallyd answers for an admission: the link's first window, remaining
     * unknown (leases decide locally), no slot, no detail. */
    memset(&r, 0, sizeof(r));
    r.status = PROTO_ADMITTED;
    r.scope = 0;
    r.retry_after_ms = 0;
    r.limit = 1000000;
    r.period_ms = 3600000;
    r.remaining = -1;
    r.reset_ms = 1800000;
    check_reply_len = proto_check_reply_encode(check_reply, 0, &r);
    hello_reply_len = proto_hello_reply_encode(hello_reply, 0, &h);
}

union listener {
    uv_pipe_t pipe;
    uv_tcp_t tcp;
};

static int
listen_on(uv_loop_t *loop, const char *sock, const char *tcp, union listener *srv)
{
    if (sock != NULL) {
        unlink(sock);
        if (uv_pipe_init(loop, &srv->pipe, 0) != 0 || uv_pipe_bind(&srv->pipe, sock) != 0)
            return -1;
        return uv_listen((uv_stream_t *)&srv->pipe, 1024, on_connection);
    } else {
        char host[256];
        const char *colon = strrchr(tcp, ':');
        struct sockaddr_storage sa;
        if (colon == NULL)
            return -1;
        snprintf(host, sizeof(host), "%.*s", (int)(colon - tcp), tcp);
        if (uv_ip4_addr(host, atoi(colon + 1), (struct sockaddr_in *)&sa) != 0 &&
            uv_ip6_addr(host, atoi(colon + 1), (struct sockaddr_in6 *)&sa) != 0)
            return -1;
        if (uv_tcp_init(loop, &srv->tcp) != 0 ||
            uv_tcp_bind(&srv->tcp, (struct sockaddr *)&sa, 0) != 0)
            return -1;
        return uv_listen((uv_stream_t *)&srv->tcp, 1024, on_connection);
    }
}

int
main(int argc, char **argv)
{
    const char *sock = NULL, *tcp = NULL;
    uv_loop_t *loop = uv_default_loop();
    uv_signal_t sigint, sigterm;
    union listener srv;
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            sock = argv[++i];
        else if (strcmp(argv[i], "--tcp") == 0 && i + 1 < argc)
            tcp = argv[++i];
        else if (strcmp(argv[i], "--write-each") == 0)
            write_each = true;
        else
            break;
    }
    if (i < argc || (sock == NULL) == (tcp == NULL)) {
        fprintf(stderr, "usage: tally-bench-echo (--socket PATH | --tcp HOST:PORT) "
                        "[--write-each]\n");
        return 64;
    }
    signal(SIGPIPE, SIG_IGN);
    canned_replies();
    if (check_reply_len == 0 || hello_reply_len == 0 || listen_on(loop, sock, tcp, &srv) != 0) {
        fprintf(stderr, "tally-bench-echo: cannot listen on %s\n", sock != NULL ? sock : tcp);
        return 69;
    }
    srv.pipe.data = NULL; /* same offset in both members: not a connection */
    uv_signal_init(loop, &sigint);
    uv_signal_init(loop, &sigterm);
    sigint.data = NULL;
    sigterm.data = NULL;
    uv_signal_start(&sigint, on_signal, SIGINT);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_run(loop, UV_RUN_DEFAULT);
    if (sock != NULL)
        unlink(sock);
    return uv_loop_close(loop) == 0 ? 0 : 70;
}

/*
 * A host channel over TCP (cluster_conn.h). The connection owns a TCP handle, a
 * handshake timer and the channel; bytes read go into the channel, the
 * channel's output goes out one uv_write at a time (what piles up meanwhile
 * waits in the channel, bounded by CLUSTER_CHAN_OUT_MAX). The connection is
 * freed after both handles closed, right after on_close.
 */
#include "cluster_conn.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "tally_log.h"

#define READ_CHUNK 65536
#define DRAIN_MS   1000 /* a closing connection's queued bytes get this long to leave */
/* Loss recovery on the cluster's connections (Linux 6.15 and later; older kernels refuse the
 * options and keep their defaults). A lease grant crosses the network twice (the request, the
 * commit) with one frame in flight, so a lost segment is found by a timer, not by duplicate
 * acks: Linux's minimum retransmission timeout (200 ms) and its tail loss probe, which waits
 * for a delayed ack of up to 200 ms, would each add that much to a grant. The timeout is
 * still the smoothed round trip plus at least the minimum (20 ms here), and the peer, a tallyd
 * too, acks within 10 ms, so a timer does not fire before an ack could have come. */
#ifndef TCP_RTO_MIN_US
#define TCP_RTO_MIN_US 45
#endif
#ifndef TCP_DELACK_MAX_US
#define TCP_DELACK_MAX_US 46
#endif
#define RTO_MIN_US    20000
#define DELACK_MAX_US 10000

enum conn_state {
    CONN_CONNECTING, /* a dial waits for TCP */
    CONN_HANDSHAKE,  /* the peer has not proved its key yet */
    CONN_READY,      /* messages flow */
    CONN_CLOSING,    /* handles closing; on_close comes from the last one */
};

struct cluster_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect;
    uv_write_t wreq;
    enum conn_state state;
    int pending;   /* handles not closed yet */
    int close_rc;  /* for on_close */
    bool writing;  /* wreq in flight, its bytes in wbuf */
    bool quiet;    /* an accept that failed: no on_close (the caller got an error) */
    bool draining; /* closing: what is queued (the final message last) goes out first */
    cluster_chan *chan;
    struct cluster_hostkey self;
    const struct cluster_conn_cbs *cbs;
    void *data;
    cluster_chan_peer_fn peer_ok;
    void *peer_ctx;
    char addr[64]; /* the peer's address, for the log */
    uint8_t *wbuf;
    size_t wcap, wlen; /* wlen: the bytes of the write in flight */
    uint8_t rbuf[READ_CHUNK];
    bool rbuf_busy;
};

static void conn_fail(cluster_conn *c, int rc);

static void
log_peer(const cluster_conn *c, enum tally_log_level level, const char *event, int rc)
{
    struct tally_log l;
    const uint8_t *pk = c->chan != NULL ? cluster_chan_peer(c->chan) : NULL;
    char hex[2 * CLUSTER_KEY_BYTES + 1];

    if (!tally_log_begin(&l, level, event))
        return;
    tally_log_str(&l, "peer", c->addr);
    if (pk != NULL) {
        cluster_key_hex(pk, hex);
        hex[16] = '\0'; /* a fingerprint: the key's first 8 bytes */
        tally_log_str(&l, "key", hex);
    }
    if (rc != TALLY_OK)
        tally_log_str(&l, "error", tally_strerror(rc));
    tally_log_end(&l);
}

static void
on_handle_closed(uv_handle_t *h)
{
    cluster_conn *c = h->data;

    if (--c->pending > 0)
        return;
    if (!c->quiet && c->cbs->on_close != NULL)
        c->cbs->on_close(c, c->close_rc, c->data);
    cluster_chan_close(c->chan);
    cluster_hostkey_wipe(&c->self);
    tally_free(c->wbuf);
    tally_free(c);
}

static void
close_handles(cluster_conn *c, int rc)
{
    if (c->state == CONN_CLOSING)
        return;
    c->state = CONN_CLOSING;
    c->close_rc = rc;
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

/* ---- output ---- */

static void flush(cluster_conn *c);

/* A draining connection closes once nothing waits any more. */
static void
drained(cluster_conn *c)
{
    const uint8_t *p;
    size_t n;

    if (!c->draining || c->writing || c->state == CONN_CLOSING)
        return;
    cluster_chan_output(c->chan, &p, &n);
    if (n == 0)
        close_handles(c, TALLY_OK);
}

static void
on_write(uv_write_t *w, int status)
{
    cluster_conn *c = w->data;

    c->writing = false;
    if (c->state == CONN_CLOSING)
        return;
    if (status != 0) {
        conn_fail(c, TALLY_EIO);
        return;
    }
    flush(c);
    drained(c);
    if (c->state == CONN_READY && !c->draining && !c->writing && cluster_conn_queued(c) == 0 &&
        c->cbs->on_drained != NULL)
        c->cbs->on_drained(c, c->data);
}

/* Moves what the channel holds into one write (after a try_write of it). */
static void
flush(cluster_conn *c)
{
    const uint8_t *p;
    size_t n;
    uv_buf_t b;
    int k;

    if (c->writing || c->state == CONN_CONNECTING || c->state == CONN_CLOSING)
        return;
    cluster_chan_output(c->chan, &p, &n);
    if (n == 0)
        return;
    b = uv_buf_init((char *)p, (unsigned)n);
    k = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (k > 0) {
        cluster_chan_output_done(c->chan, (size_t)k);
        cluster_chan_output(c->chan, &p, &n);
        if (n == 0)
            return;
    } else if (k != UV_EAGAIN) {
        conn_fail(c, TALLY_EIO);
        return;
    }
    if (n > c->wcap) {
        uint8_t *w = tally_realloc(c->wbuf, n);
        if (w == NULL) {
            conn_fail(c, TALLY_ENOMEM);
            return;
        }
        c->wbuf = w;
        c->wcap = n;
    }
    memcpy(c->wbuf, p, n);
    c->wlen = n;
    cluster_chan_output_done(c->chan, n);
    b = uv_buf_init((char *)c->wbuf, (unsigned)n);
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        conn_fail(c, TALLY_EIO);
        return;
    }
    c->writing = true;
}

/* ---- input ---- */

/* The peer proved its key: the deadline goes, on_ready comes (once). */
static void
became_ready(cluster_conn *c)
{
    c->state = CONN_READY;
    uv_timer_stop(&c->timer);
    log_peer(c, TALLY_LOG_DEBUG, "cluster_peer_ready", TALLY_OK);
    if (c->cbs->on_ready != NULL)
        c->cbs->on_ready(c, c->data);
}

static void
on_chan_msg(void *ctx, const uint8_t *msg, size_t len)
{
    cluster_conn *c = ctx;

    if (c->state == CONN_HANDSHAKE) /* the proof and a first message came in one read */
        became_ready(c);
    if (c->state == CONN_READY && !c->draining) /* nothing after a close asked */
        c->cbs->on_msg(c, msg, len, c->data);
}

static void
conn_fail(cluster_conn *c, int rc)
{
    if (c->state == CONN_CLOSING)
        return;
    log_peer(c, rc == TALLY_EUNAUTH ? TALLY_LOG_WARN : TALLY_LOG_INFO,
             rc == TALLY_EUNAUTH ? "cluster_peer_refused" : "cluster_peer_lost", rc);
    close_handles(c, rc);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    cluster_conn *c = h->data;

    (void)suggested;
    if (c->rbuf_busy) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    c->rbuf_busy = true;
    *buf = uv_buf_init((char *)c->rbuf, sizeof(c->rbuf));
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    cluster_conn *c = s->data;
    int rc;

    if (buf->base == (char *)c->rbuf)
        c->rbuf_busy = false;
    if (c->state == CONN_CLOSING || nread == 0)
        return;
    if (nread < 0) {
        if (nread == UV_EOF && cluster_chan_peer_finished(c->chan))
            close_handles(c, TALLY_OK);
        else
            conn_fail(c, TALLY_EIO);
        return;
    }
    rc = cluster_chan_input(c->chan, (const uint8_t *)buf->base, (size_t)nread);
    if (c->state == CONN_CLOSING)
        return; /* a callback closed it */
    if (rc != TALLY_OK) {
        conn_fail(c, rc);
        return;
    }
    if (c->state == CONN_HANDSHAKE && cluster_chan_established(c->chan)) {
        became_ready(c);
        if (c->state == CONN_CLOSING)
            return;
    }
    if (cluster_chan_peer_finished(c->chan)) { /* it sends nothing more: we are done too */
        cluster_conn_close(c);
        return;
    }
    flush(c);
}

static void
on_timeout(uv_timer_t *t)
{
    cluster_conn *c = t->data;

    if (c->draining) /* the peer does not read what is left: cut */
        close_handles(c, TALLY_OK);
    else
        conn_fail(c, TALLY_ETIMEDOUT);
}

static void
start_reading(cluster_conn *c)
{
    c->state = CONN_HANDSHAKE;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_fail(c, TALLY_EIO);
        return;
    }
    flush(c);
}

/* ---- opening ---- */

static int
conn_new(uv_loop_t *loop, const struct cluster_conn_opts *o, cluster_conn **out)
{
    cluster_conn *c;

    *out = NULL;
    if (o == NULL || o->self == NULL || o->cbs == NULL || o->cbs->on_msg == NULL)
        return TALLY_EINVAL;
    c = tally_calloc(1, sizeof(*c));
    if (c == NULL)
        return TALLY_ENOMEM;
    c->self = *o->self;
    c->cbs = o->cbs;
    c->data = o->data;
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->pending = 2;
    uv_timer_start(&c->timer, on_timeout, o->handshake_ms, 0);
    *out = c;
    return TALLY_OK;
}

/* No Nagle (frames are small and each is awaited), and the loss recovery above. */
static void
tune(cluster_conn *c)
{
    uv_os_fd_t fd;
    int rto = RTO_MIN_US, delack = DELACK_MAX_US;

    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_RTO_MIN_US, &rto, sizeof(rto));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_DELACK_MAX_US, &delack, sizeof(delack));
}

static void
on_connect(uv_connect_t *req, int status)
{
    cluster_conn *c = req->data;

    if (c->state == CONN_CLOSING) /* cancelled: libuv calls this before the close callbacks */
        return;
    if (status != 0) {
        conn_fail(c, TALLY_EUNAVAIL); /* nobody listens there, or unreachable */
        return;
    }
    tune(c);
    start_reading(c);
}

static void
addr_name(const struct sockaddr *sa, char *out, size_t cap)
{
    char host[48] = "?";
    int port = 0;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        uv_ip4_name(in, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(in6, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    snprintf(out, cap, sa->sa_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
}

static int accept_peer_ok(void *ctx, const uint8_t pk[CLUSTER_KEY_BYTES]);

/* The connection's channel: a dialer pins peer_pk, a listener asks c->peer_ok. */
static int
open_chan(cluster_conn *c, enum cluster_chan_role role, const uint8_t *peer_pk)
{
    struct cluster_chan_cfg cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.role = role;
    cfg.self = &c->self;
    cfg.peer_pk = peer_pk;
    cfg.peer_ok = role == CLUSTER_CHAN_LISTENER ? accept_peer_ok : NULL;
    cfg.on_msg = on_chan_msg;
    cfg.ctx = c;
    return cluster_chan_open(&cfg, &c->chan);
}

int
cluster_conn_dial(uv_loop_t *loop, const struct sockaddr *addr,
                  const uint8_t peer_pk[CLUSTER_KEY_BYTES], const struct cluster_conn_opts *o,
                  cluster_conn **out)
{
    cluster_conn *c = NULL;
    int rc;

    *out = NULL;
    if (addr == NULL || peer_pk == NULL)
        return TALLY_EINVAL;
    rc = conn_new(loop, o, &c);
    if (rc != TALLY_OK)
        return rc;
    addr_name(addr, c->addr, sizeof(c->addr));
    rc = open_chan(c, CLUSTER_CHAN_DIALER, peer_pk);
    c->state = CONN_CONNECTING;
    c->connect.data = c;
    if (rc != TALLY_OK || uv_tcp_connect(&c->connect, &c->tcp, addr, on_connect) != 0)
        close_handles(c, rc == TALLY_OK ? TALLY_EIO : rc); /* on_close tells */
    *out = c;
    return TALLY_OK;
}

static int
accept_peer_ok(void *ctx, const uint8_t pk[CLUSTER_KEY_BYTES])
{
    cluster_conn *c = ctx;

    return c->peer_ok(c->peer_ctx, pk);
}

int
cluster_conn_accept(uv_stream_t *server, cluster_chan_peer_fn peer_ok, void *peer_ctx,
                    const struct cluster_conn_opts *o, cluster_conn **out)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    cluster_conn *c = NULL;
    int rc;

    *out = NULL;
    if (peer_ok == NULL)
        return TALLY_EINVAL;
    rc = conn_new(server->loop, o, &c);
    if (rc != TALLY_OK)
        return rc;
    c->peer_ok = peer_ok;
    c->peer_ctx = peer_ctx;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        c->quiet = true;
        close_handles(c, TALLY_EIO);
        return TALLY_EIO;
    }
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
        addr_name((struct sockaddr *)&ss, c->addr, sizeof(c->addr));
    rc = open_chan(c, CLUSTER_CHAN_LISTENER, NULL);
    if (rc != TALLY_OK) {
        close_handles(c, rc);
        *out = c;
        return TALLY_OK;
    }
    tune(c);
    start_reading(c);
    *out = c;
    return TALLY_OK;
}

int
cluster_conn_send(cluster_conn *c, const uint8_t *msg, size_t len)
{
    int rc;

    if (c->state != CONN_READY)
        return TALLY_EUNAVAIL;
    rc = cluster_chan_send(c->chan, msg, len);
    if (rc == TALLY_OK)
        flush(c);
    return rc;
}

void
cluster_conn_close(cluster_conn *c)
{
    if (c->state == CONN_CLOSING || c->draining)
        return;
    if (c->state == CONN_READY && cluster_chan_finish(c->chan) == TALLY_OK) {
        c->draining = true;
        uv_timer_start(&c->timer, on_timeout, DRAIN_MS, 0);
        flush(c);
        drained(c);
        return;
    }
    close_handles(c, TALLY_OK);
}

size_t
cluster_conn_queued(const cluster_conn *c)
{
    const uint8_t *p;
    size_t n = 0;

    if (c->chan != NULL)
        cluster_chan_output(c->chan, &p, &n);
    return n + (c->writing ? c->wlen : 0);
}

const uint8_t *
cluster_conn_peer(const cluster_conn *c)
{
    return c->chan != NULL ? cluster_chan_peer(c->chan) : NULL;
}

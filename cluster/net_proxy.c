/*
 * One raft connection over a host channel (cluster_net_int.h): a cluster_conn to
 * or from a member, and a socketpair whose one end is the libuv stream libraft
 * owns and whose other end is ours. Bytes libraft writes are read from our end
 * and sent as channel messages (with flow control: past FLOW_HIGH queued for the
 * peer, our end is not read); channel messages are written into our end. Either
 * side going away closes the other: libraft sees an end of stream and reconnects
 * as it does over plain TCP.
 */
#define _GNU_SOURCE /* SOCK_CLOEXEC */
#include "cluster_net_int.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tally_log.h"

/* ---- a proxy's life ---- */

void
cluster__proxy_maybe_free(struct proxy *p)
{
    struct transport *t = p->t;

    if (p->conn != NULL || p->local_open)
        return;
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        t->proxies = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    tally_free(p);
    cluster__transport_maybe_closed(t);
}

static void
on_local_closed(uv_handle_t *h)
{
    struct proxy *p = h->data;

    p->local_open = p->local_closing = false;
    cluster__proxy_maybe_free(p);
}

void
cluster__proxy_close_local(struct proxy *p)
{
    if (p->local_open && !p->local_closing) {
        p->local_closing = true;
        uv_close((uv_handle_t *)&p->local, on_local_closed);
    }
}

/* A dial libraft waits for ends without a stream. */
static void
fail_dial(struct proxy *p)
{
    struct raft_uv_connect *req = p->req;

    if (req == NULL)
        return;
    p->req = NULL;
    req->cb(req, NULL, p->t->closing ? RAFT_CANCELED : RAFT_NOCONNECTION);
}

static void
on_local_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct proxy *p = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)p->t->rbuf, sizeof(p->t->rbuf));
}

/* libraft wrote: off to the peer. libraft closing its end closes the connection. */
static void
on_local_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct proxy *p = s->data;

    if (nread == 0)
        return;
    if (nread < 0) {
        cluster__proxy_close_local(p);
        if (p->conn != NULL)
            cluster_conn_close(p->conn);
        return;
    }
    if (p->conn == NULL)
        return;
    if (cluster_conn_send(p->conn, (const uint8_t *)buf->base, (size_t)nread) != TALLY_OK) {
        /* Gone, or out of memory: libraft reconnects. */
        cluster__proxy_close_local(p);
        cluster_conn_close(p->conn);
        return;
    }
    /* Flow control: past FLOW_HIGH bytes waiting for the peer (a snapshot, a long catch-up),
     * libraft's end is not read until they are written; libraft then waits on its own
     * socket. The channel's own cap is never reached. */
    if (cluster_conn_queued(p->conn) > FLOW_HIGH && uv_read_stop(s) == 0)
        p->paused = true;
}

static void
on_local_written(uv_write_t *w, int status)
{
    (void)status; /* a failed write: the local end is closing, libraft reconnects */
    tally_free(w);
}

/* The socketpair: one end to libraft (*out, from raft_malloc: libraft frees it), one ours. */
static int
proxy_pair(struct proxy *p, uv_stream_t **out)
{
    int fds[2];
    uv_pipe_t *rs;

    *out = NULL;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return TALLY_EIO;
    rs = raft_malloc(sizeof(*rs));
    if (rs == NULL) {
        close(fds[0]);
        close(fds[1]);
        return TALLY_ENOMEM;
    }
    uv_pipe_init(p->t->loop, rs, 0);
    uv_pipe_init(p->t->loop, &p->local, 0);
    p->local.data = p;
    p->local_open = true;
    if (uv_pipe_open(rs, fds[0]) != 0 || uv_pipe_open(&p->local, fds[1]) != 0 ||
        uv_read_start((uv_stream_t *)&p->local, on_local_alloc, on_local_read) != 0) {
        uv_close((uv_handle_t *)rs, (uv_close_cb)raft_free);
        cluster__proxy_close_local(p);
        return TALLY_EIO;
    }
    *out = (uv_stream_t *)rs;
    return TALLY_OK;
}

/* ---- the channel's callbacks ---- */

static int
send_hello(struct proxy *p)
{
    struct transport *t = p->t;
    uint8_t b[HELLO_MIN + CLUSTER_ADDR_MAX];
    size_t al = strlen(t->address);

    b[0] = CLUSTER_HELLO_RAFT;
    for (int i = 0; i < 8; i++)
        b[1 + i] = (uint8_t)(t->id >> (56 - 8 * i));
    b[9] = (uint8_t)al;
    memcpy(b + HELLO_MIN, t->address, al);
    return cluster_conn_send(p->conn, b, HELLO_MIN + al);
}

static void
on_ready(cluster_conn *c, void *data)
{
    struct proxy *p = data;
    uv_stream_t *rs = NULL;
    struct raft_uv_connect *req = p->req;

    if (!p->dialer)
        return; /* its first message says what it is */
    if (send_hello(p) != TALLY_OK || proxy_pair(p, &rs) != TALLY_OK) {
        fail_dial(p);
        cluster_conn_close(c);
        return;
    }
    p->req = NULL;
    p->handed = true;
    req->cb(req, rs, 0);
}

/* A listener's first message: the dialer's raft id and address, which must be those of the
 * member whose key it proved. */
static int
on_hello(struct proxy *p, const uint8_t *msg, size_t len)
{
    struct transport *t = p->t;
    const struct cluster_member *m = cluster__member_by_key(t, cluster_conn_peer(p->conn));
    uv_stream_t *rs = NULL;
    uint64_t id = 0;
    char address[CLUSTER_ADDR_MAX];
    int rc;

    if (len >= 1 && msg[0] == CLUSTER_HELLO_ADMIN) { /* members only */
        if (t->hooks == NULL || t->hooks->on_admin == NULL || t->closing || m == NULL)
            return TALLY_EUNAUTH;
        p->join_token = ++t->next_token;
        return t->hooks->on_admin(t->hooks->ctx, p->join_token, cluster_conn_peer(p->conn), msg + 1,
                                  len - 1);
    }
    if (len == 1 && msg[0] == CLUSTER_HELLO_LEASE) { /* members only */
        if (t->hooks == NULL || t->hooks->on_lease_open == NULL || t->closing || m == NULL)
            return TALLY_EUNAUTH;
        p->lease_token = ++t->next_token;
        p->id = m->id;
        return t->hooks->on_lease_open(t->hooks->ctx, p->lease_token, m->id);
    }
    if (len >= 1 && msg[0] == CLUSTER_HELLO_JOIN) {
        if (t->hooks == NULL || t->hooks->on_join == NULL || t->closing)
            return TALLY_EUNAUTH;
        p->join_token = ++t->next_token;
        return t->hooks->on_join(t->hooks->ctx, p->join_token, cluster_conn_peer(p->conn), msg + 1,
                                 len - 1);
    }
    if (len < HELLO_MIN || msg[0] != CLUSTER_HELLO_RAFT || msg[9] >= CLUSTER_ADDR_MAX ||
        len != HELLO_MIN + (size_t)msg[9])
        return TALLY_EPROTO;
    for (int i = 0; i < 8; i++)
        id = id << 8 | msg[1 + i];
    memcpy(address, msg + HELLO_MIN, msg[9]);
    address[msg[9]] = '\0';
    if (m == NULL || m->id != id || strcmp(m->address, address) != 0)
        return TALLY_EUNAUTH;
    rc = proxy_pair(p, &rs);
    if (rc != TALLY_OK)
        return rc;
    p->id = id;
    p->handed = true;
    t->accept_cb(t->t, id, address, rs);
    return TALLY_OK;
}

static void
on_msg(cluster_conn *c, const uint8_t *msg, size_t len, void *data)
{
    struct proxy *p = data;
    struct local_write *w;
    uv_buf_t b;
    int rc;

    if (p->join_token != 0) { /* a JOIN or an ADMIN connection says one thing only */
        cluster_conn_close(c);
        return;
    }
    if (p->lease_token != 0) {
        p->t->hooks->on_lease_msg(p->t->hooks->ctx, p->lease_token, msg, len);
        return;
    }
    if (!p->handed) {
        rc = on_hello(p, msg, len);
        if (rc != TALLY_OK) {
            struct tally_log l;
            if (tally_log_begin(&l, TALLY_LOG_WARN, "cluster_hello_refused")) {
                tally_log_str(&l, "error", tally_strerror(rc));
                tally_log_end(&l);
            }
            cluster_conn_close(c);
        }
        return;
    }
    if (!p->local_open || p->local_closing || len == 0)
        return;
    w = tally_malloc(sizeof(*w) + len);
    if (w == NULL) {
        cluster_conn_close(c);
        return;
    }
    memcpy(w->bytes, msg, len);
    b = uv_buf_init((char *)w->bytes, (unsigned)len);
    if (uv_write(&w->w, (uv_stream_t *)&p->local, &b, 1, on_local_written) != 0) {
        tally_free(w);
        cluster_conn_close(c);
    }
}

static void
on_conn_close(cluster_conn *c, int rc, void *data)
{
    struct proxy *p = data;

    (void)c;
    (void)rc; /* logged by the connection */
    p->conn = NULL;
    if (p->lease_token != 0) {
        uint64_t token = p->lease_token;
        p->lease_token = 0;
        p->t->hooks->on_lease_close(p->t->hooks->ctx, token);
    }
    fail_dial(p);
    cluster__proxy_close_local(p); /* libraft sees its stream end */
    cluster__proxy_maybe_free(p);
}

/* The peer read what was queued: libraft's bytes flow again. */
static void
on_drained(cluster_conn *c, void *data)
{
    struct proxy *p = data;

    (void)c;
    if (p->paused && p->local_open && !p->local_closing &&
        uv_read_start((uv_stream_t *)&p->local, on_local_alloc, on_local_read) == 0)
        p->paused = false;
}

const struct cluster_conn_cbs cluster__proxy_cbs = {on_ready, on_msg, on_conn_close, on_drained};

struct proxy *
cluster__proxy_new(struct transport *t, bool dialer)
{
    struct proxy *p = tally_calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->t = t;
    p->dialer = dialer;
    p->next = t->proxies;
    if (t->proxies != NULL)
        t->proxies->prev = p;
    t->proxies = p;
    return p;
}

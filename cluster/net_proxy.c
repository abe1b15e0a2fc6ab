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

#include <sodium.h>
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
    *buf = uv_buf_init((char *)p->t->rbuf + SEQ_BYTES, READ_CHUNK);
}

static void
put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t
get_u64(const uint8_t *b)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

/* A copy of a message for p's twin, if it has one up that is keeping up. A copy not sent
 * costs nothing but the head start: the primary carries every message. */
static void
copy_to_twin(struct proxy *p, const uint8_t *msg, size_t len)
{
    struct proxy *tw = p->twin;

    if (tw == NULL || tw->conn == NULL || !tw->twin_up || len > SEQ_BYTES + TWIN_MAX ||
        cluster_conn_queued(tw->conn) > TWIN_QUEUE)
        return;
    if (cluster_conn_send(tw->conn, msg, len) != TALLY_OK)
        cluster_conn_close(tw->conn); /* the stream goes on without it */
}

/* libraft wrote: off to the peer. libraft closing its end closes the connection. */
static void
on_local_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct proxy *p = s->data;
    uint8_t *m;

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
    m = (uint8_t *)buf->base - SEQ_BYTES; /* on_local_alloc left room for the seq */
    put_u64(m, p->tx_seq++);
    if (cluster_conn_send(p->conn, m, SEQ_BYTES + (size_t)nread) != TALLY_OK) {
        /* Gone, or out of memory: libraft reconnects. */
        cluster__proxy_close_local(p);
        cluster_conn_close(p->conn);
        return;
    }
    copy_to_twin(p, m, SEQ_BYTES + (size_t)nread);
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
    uint8_t b[HELLO_MIN + CLUSTER_ADDR_MAX + 8];
    size_t al = strlen(t->address);

    b[0] = CLUSTER_HELLO_RAFT;
    put_u64(b + 1, t->id);
    b[9] = (uint8_t)al;
    memcpy(b + HELLO_MIN, t->address, al);
    put_u64(b + HELLO_MIN + al, p->nonce);
    return cluster_conn_send(p->conn, b, HELLO_MIN + al + 8);
}

static int
send_twin_hello(struct proxy *tw)
{
    uint8_t b[TWIN_HELLO];

    b[0] = CLUSTER_HELLO_TWIN;
    put_u64(b + 1, tw->t->id);
    put_u64(b + 9, tw->nonce);
    return cluster_conn_send(tw->conn, b, sizeof(b));
}

/* A dialer's primary is up: its twin is dialed to the same member. Failing that, the
 * stream has one connection. */
static void
dial_twin(struct proxy *p)
{
    struct transport *t = p->t;
    const struct cluster_member *m = cluster__member_by_id(t, p->id);
    struct cluster_conn_opts o = {&t->self, t->handshake_ms, &cluster__proxy_cbs, NULL};
    struct sockaddr_storage ss;
    struct proxy *tw;

    if (m == NULL || t->closing || cluster_addr_parse(p->address, &ss) != TALLY_OK)
        return;
    tw = cluster__proxy_new(t, true);
    if (tw == NULL)
        return;
    tw->is_twin = true;
    tw->primary = p;
    tw->id = p->id;
    tw->nonce = p->nonce;
    o.data = tw;
    if (cluster_conn_dial(t->loop, (const struct sockaddr *)&ss, m->pk, &o, &tw->conn) !=
        TALLY_OK) {
        tw->conn = NULL;
        tw->primary = NULL;
        cluster__proxy_maybe_free(tw);
        return;
    }
    p->twin = tw;
}

/* Pairs twin tw with primary p (both accepted, the same member and nonce). */
static void
pair(struct proxy *p, struct proxy *tw)
{
    p->twin = tw;
    tw->primary = p;
    tw->handed = tw->twin_up = true;
    p->t->stats.twins++;
}

/* The accepted proxy of the other half of a stream: the primary for a twin's nonce, or a
 * twin that came first (its hello overtook the primary's) for a primary's. */
static struct proxy *
accepted_half(struct transport *t, uint64_t id, uint64_t nonce, bool want_twin)
{
    for (struct proxy *q = t->proxies; q != NULL; q = q->next) {
        if (q->dialer || q->conn == NULL || q->id != id || q->nonce != nonce ||
            q->is_twin != want_twin)
            continue;
        if (want_twin ? q->primary == NULL && !q->handed : q->handed && q->twin == NULL)
            return q;
    }
    return NULL;
}

static void
on_ready(cluster_conn *c, void *data)
{
    struct proxy *p = data;
    uv_stream_t *rs = NULL;
    struct raft_uv_connect *req = p->req;

    if (!p->dialer)
        return; /* its first message says what it is */
    if (p->is_twin) {
        if (p->primary == NULL || send_twin_hello(p) != TALLY_OK) {
            cluster_conn_close(c);
            return;
        }
        p->handed = p->twin_up = true;
        return;
    }
    randombytes_buf(&p->nonce, sizeof(p->nonce));
    if (send_hello(p) != TALLY_OK || proxy_pair(p, &rs) != TALLY_OK) {
        fail_dial(p);
        cluster_conn_close(c);
        return;
    }
    p->req = NULL;
    p->handed = true;
    req->cb(req, rs, 0);
    dial_twin(p);
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
    if (len >= 1 && msg[0] == CLUSTER_HELLO_TWIN) {
        struct proxy *primary;
        if (len != TWIN_HELLO)
            return TALLY_EPROTO;
        id = get_u64(msg + 1);
        if (m == NULL || m->id != id)
            return TALLY_EUNAUTH;
        p->is_twin = true;
        p->id = id;
        p->nonce = get_u64(msg + 9);
        primary = accepted_half(t, id, p->nonce, false);
        if (primary != NULL)
            pair(primary, p);
        return TALLY_OK; /* else it waits for its primary's hello */
    }
    if (len < HELLO_MIN || msg[0] != CLUSTER_HELLO_RAFT || msg[9] >= CLUSTER_ADDR_MAX ||
        len != HELLO_MIN + (size_t)msg[9] + 8)
        return TALLY_EPROTO;
    id = get_u64(msg + 1);
    memcpy(address, msg + HELLO_MIN, msg[9]);
    address[msg[9]] = '\0';
    if (m == NULL || m->id != id || strcmp(m->address, address) != 0)
        return TALLY_EUNAUTH;
    rc = proxy_pair(p, &rs);
    if (rc != TALLY_OK)
        return rc;
    p->id = id;
    p->nonce = get_u64(msg + HELLO_MIN + msg[9]);
    p->handed = true;
    {
        struct proxy *tw = accepted_half(t, id, p->nonce, true);
        if (tw != NULL)
            pair(p, tw);
    }
    t->accept_cb(t->t, id, address, rs);
    return TALLY_OK;
}

/* One message of a raft stream, from its primary or its twin: the first copy in sequence
 * is written to libraft's end, a copy the other connection brought is dropped. A twin's
 * message ahead of the next in sequence is one it was not given the one before: the
 * primary brings both. */
static void
take(struct proxy *p, bool by_twin, const uint8_t *msg, size_t len)
{
    struct transport *t = p->t;
    struct local_write *w;
    uv_buf_t b;
    uint64_t seq;

    if (len <= SEQ_BYTES || !p->local_open || p->local_closing)
        return;
    seq = get_u64(msg);
    if (seq != p->rx_next) {
        t->stats.duplicates += seq < p->rx_next;
        return;
    }
    p->rx_next++;
    if (by_twin)
        t->stats.by_twin++;
    else
        t->stats.by_primary++;
    w = tally_malloc(sizeof(*w) + len - SEQ_BYTES);
    if (w == NULL) {
        cluster_conn_close(p->conn); /* libraft reconnects */
        return;
    }
    memcpy(w->bytes, msg + SEQ_BYTES, len - SEQ_BYTES);
    b = uv_buf_init((char *)w->bytes, (unsigned)(len - SEQ_BYTES));
    if (uv_write(&w->w, (uv_stream_t *)&p->local, &b, 1, on_local_written) != 0) {
        tally_free(w);
        cluster_conn_close(p->conn);
    }
}

static void
on_msg(cluster_conn *c, const uint8_t *msg, size_t len, void *data)
{
    struct proxy *p = data;
    int rc;

    if (p->join_token != 0) { /* a JOIN or an ADMIN connection says one thing only */
        cluster_conn_close(c);
        return;
    }
    if (p->lease_token != 0) {
        p->t->hooks->on_lease_msg(p->t->hooks->ctx, p->lease_token, msg, len);
        return;
    }
    if (p->is_twin) { /* a copy, once paired (the primary takes it from its socketpair) */
        if (p->primary != NULL && p->primary->conn != NULL)
            take(p->primary, true, msg, len);
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
    take(p, false, msg, len);
}

static void
on_conn_close(cluster_conn *c, int rc, void *data)
{
    struct proxy *p = data;

    (void)c;
    (void)rc; /* logged by the connection */
    p->conn = NULL;
    if (p->primary != NULL) { /* a twin: the stream goes on on its primary */
        p->primary->twin = NULL;
        p->primary = NULL;
    }
    if (p->twin != NULL) { /* a primary: its twin goes with it */
        struct proxy *tw = p->twin;
        p->twin = NULL;
        tw->primary = NULL;
        if (tw->conn != NULL)
            cluster_conn_close(tw->conn);
    }
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

/*
 * libraft's transport over host channels (cluster_net.h). One proxy per raft
 * connection: a cluster_conn to or from a member, and a socketpair whose one
 * end is the libuv stream libraft owns and whose other end is ours. Bytes
 * libraft writes are read from our end and sent as channel messages; channel
 * messages are written into our end. A dialer's first message names its raft
 * id and address, which must be those of the member whose key it proved.
 * Either side going away closes the other: libraft sees an end of stream and
 * reconnects as it does over plain TCP.
 */
#define _GNU_SOURCE /* SOCK_CLOEXEC */
#include "cluster_net.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tally_log.h"

#define HELLO_MIN  10 /* CLUSTER_CLUSTER_HELLO_RAFT: kind | id (8, big-endian) | len | address */
#define READ_CHUNK 65536
#define FLOW_HIGH  (1u << 20) /* queued for a peer beyond this, libraft's end is not read */

struct transport;

struct proxy {
    struct transport *t;
    struct proxy *prev, *next;
    cluster_conn *conn; /* NULL once its on_close came */
    uv_pipe_t local;    /* our end of the socketpair */
    bool local_open, local_closing;
    bool dialer;
    bool handed;                 /* libraft has its end */
    uint64_t join_token;         /* a JOIN or ADMIN waits for its answer (0: none) */
    bool paused;                 /* libraft's end is not read: the peer is behind */
    struct raft_uv_connect *req; /* a dial libraft waits for */
    uint64_t id;                 /* the member at the other end */
    char address[CLUSTER_ADDR_MAX];
};

struct transport {
    struct raft_uv_transport *t;
    uv_loop_t *loop;
    struct cluster_hostkey self;
    struct cluster_member *members;
    size_t n_members;
    uint32_t handshake_ms;
    uint64_t id; /* ours, from init */
    char address[CLUSTER_ADDR_MAX];
    uv_tcp_t listener;
    bool listening, listener_closing;
    raft_uv_accept_cb accept_cb;
    struct proxy *proxies;
    const struct cluster_net_hooks *hooks;
    uint64_t next_token;
    bool closing;
    raft_uv_transport_close_cb close_cb;
    uint8_t rbuf[READ_CHUNK]; /* one read at a time on this loop */
};

struct local_write {
    uv_write_t w;
    uint8_t bytes[];
};

int
cluster_addr_parse(const char *s, struct sockaddr_storage *out)
{
    char host[CLUSTER_ADDR_MAX];
    const char *colon;
    char *end = NULL;
    long port;
    size_t hl;

    memset(out, 0, sizeof(*out));
    if (s == NULL || strlen(s) >= CLUSTER_ADDR_MAX)
        return TALLY_EINVAL;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return TALLY_EINVAL;
        hl = (size_t)(close - s - 1);
        memcpy(host, s + 1, hl);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL)
            return TALLY_EINVAL;
        hl = (size_t)(colon - s);
        memcpy(host, s, hl);
    }
    host[hl] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535)
        return TALLY_EINVAL;
    if (s[0] == '[')
        return uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)out) == 0 ? TALLY_OK
                                                                             : TALLY_EINVAL;
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)out) == 0 ? TALLY_OK : TALLY_EINVAL;
}

static const struct cluster_member *
member_by_id(const struct transport *t, uint64_t id)
{
    for (size_t i = 0; i < t->n_members; i++)
        if (t->members[i].id == id)
            return &t->members[i];
    return NULL;
}

static const struct cluster_member *
member_by_key(const struct transport *t, const uint8_t *pk)
{
    for (size_t i = 0; i < t->n_members && pk != NULL; i++)
        if (sodium_memcmp(t->members[i].pk, pk, CLUSTER_KEY_BYTES) == 0)
            return &t->members[i];
    return NULL;
}

static void maybe_closed(struct transport *t);

/* ---- a proxy's life ---- */

static void
proxy_maybe_free(struct proxy *p)
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
    maybe_closed(t);
}

static void
on_local_closed(uv_handle_t *h)
{
    struct proxy *p = h->data;

    p->local_open = p->local_closing = false;
    proxy_maybe_free(p);
}

static void
close_local(struct proxy *p)
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
        close_local(p);
        if (p->conn != NULL)
            cluster_conn_close(p->conn);
        return;
    }
    if (p->conn == NULL)
        return;
    if (cluster_conn_send(p->conn, (const uint8_t *)buf->base, (size_t)nread) != TALLY_OK) {
        /* Gone, or out of memory: libraft reconnects. */
        close_local(p);
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
        close_local(p);
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
    const struct cluster_member *m = member_by_key(t, cluster_conn_peer(p->conn));
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
    fail_dial(p);
    close_local(p); /* libraft sees its stream end */
    proxy_maybe_free(p);
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

static const struct cluster_conn_cbs proxy_cbs = {on_ready, on_msg, on_conn_close, on_drained};

static struct proxy *
proxy_new(struct transport *t, bool dialer)
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

/* ---- raft_uv_transport ---- */

static int
tr_init(struct raft_uv_transport *rt, raft_id id, const char *address)
{
    struct transport *t = rt->impl;

    if (strlen(address) >= sizeof(t->address)) {
        snprintf(rt->errmsg, sizeof(rt->errmsg), "address too long");
        return RAFT_INVALID;
    }
    t->id = id;
    snprintf(t->address, sizeof(t->address), "%s", address);
    return 0;
}

/* Members, and strangers while someone may join (they can only say JOIN: on_hello). */
static int
peer_ok(void *ctx, const uint8_t pk[CLUSTER_KEY_BYTES])
{
    struct transport *t = ctx;

    if (member_by_key(t, pk) != NULL)
        return TALLY_OK;
    if (t->hooks != NULL && t->hooks->strangers_welcome != NULL &&
        t->hooks->strangers_welcome(t->hooks->ctx))
        return TALLY_OK;
    return TALLY_EUNAUTH;
}

static void
on_connection(uv_stream_t *server, int status)
{
    struct transport *t = server->data;
    struct cluster_conn_opts o = {&t->self, t->handshake_ms, &proxy_cbs, NULL};
    struct proxy *p;

    if (status != 0 || t->closing)
        return;
    p = proxy_new(t, false);
    if (p == NULL)
        return; /* the connection waits in the backlog: the dialer times out */
    o.data = p;
    if (cluster_conn_accept(server, peer_ok, t, &o, &p->conn) != TALLY_OK) {
        p->conn = NULL;
        proxy_maybe_free(p);
    }
}

static int
tr_listen(struct raft_uv_transport *rt, raft_uv_accept_cb cb)
{
    struct transport *t = rt->impl;
    struct sockaddr_storage ss;
    int rc;

    if (cluster_addr_parse(t->address, &ss) != TALLY_OK) {
        snprintf(rt->errmsg, sizeof(rt->errmsg), "invalid address %s", t->address);
        return RAFT_INVALID;
    }
    t->accept_cb = cb;
    uv_tcp_init(t->loop, &t->listener);
    t->listener.data = t;
    t->listening = true;
    rc = uv_tcp_bind(&t->listener, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&t->listener, 64, on_connection);
    if (rc != 0) {
        snprintf(rt->errmsg, sizeof(rt->errmsg), "listen on %s: %s", t->address, uv_strerror(rc));
        return RAFT_IOERR;
    }
    return 0;
}

static int
tr_connect(struct raft_uv_transport *rt, struct raft_uv_connect *req, raft_id id,
           const char *address, raft_uv_connect_cb cb)
{
    struct transport *t = rt->impl;
    const struct cluster_member *m = member_by_id(t, id);
    struct cluster_conn_opts o = {&t->self, t->handshake_ms, &proxy_cbs, NULL};
    struct sockaddr_storage ss;
    struct proxy *p;

    if (m == NULL || strcmp(m->address, address) != 0 ||
        cluster_addr_parse(address, &ss) != TALLY_OK)
        return RAFT_NOCONNECTION; /* not a member we know at that address */
    p = proxy_new(t, true);
    if (p == NULL)
        return RAFT_NOMEM;
    p->id = id;
    snprintf(p->address, sizeof(p->address), "%s", address);
    req->cb = cb;
    p->req = req;
    o.data = p;
    if (cluster_conn_dial(t->loop, (const struct sockaddr *)&ss, m->pk, &o, &p->conn) != TALLY_OK) {
        p->req = NULL;
        p->conn = NULL;
        proxy_maybe_free(p);
        return RAFT_NOMEM;
    }
    return 0;
}

static void
on_listener_closed(uv_handle_t *h)
{
    struct transport *t = h->data;

    t->listening = t->listener_closing = false;
    maybe_closed(t);
}

static void
maybe_closed(struct transport *t)
{
    raft_uv_transport_close_cb cb = t->close_cb;

    if (!t->closing || t->listening || t->proxies != NULL || cb == NULL)
        return;
    t->close_cb = NULL;
    cb(t->t);
}

static void
tr_close(struct raft_uv_transport *rt, raft_uv_transport_close_cb cb)
{
    struct transport *t = rt->impl;
    struct proxy *p, *next;

    t->closing = true;
    t->close_cb = cb;
    if (t->listening && !t->listener_closing) {
        t->listener_closing = true;
        uv_close((uv_handle_t *)&t->listener, on_listener_closed);
    }
    for (p = t->proxies; p != NULL; p = next) {
        next = p->next;
        if (p->conn != NULL)
            cluster_conn_close(p->conn); /* its on_close ends the dial and the local end */
        else
            close_local(p);
    }
    maybe_closed(t);
}

int
cluster_transport_init(struct raft_uv_transport *rt, const struct cluster_net_cfg *cfg)
{
    struct transport *t;

    if (cfg == NULL || cfg->loop == NULL || cfg->self == NULL || cfg->n_members == 0)
        return TALLY_EINVAL;
    t = tally_calloc(1, sizeof(*t));
    if (t == NULL)
        return TALLY_ENOMEM;
    t->members = tally_calloc(cfg->n_members, sizeof(*t->members));
    if (t->members == NULL) {
        tally_free(t);
        return TALLY_ENOMEM;
    }
    memcpy(t->members, cfg->members, cfg->n_members * sizeof(*t->members));
    t->n_members = cfg->n_members;
    t->loop = cfg->loop;
    t->self = *cfg->self;
    t->handshake_ms = cfg->handshake_ms;
    t->hooks = cfg->hooks;
    t->t = rt;
    rt->impl = t;
    rt->init = tr_init;
    rt->listen = tr_listen;
    rt->connect = tr_connect;
    rt->close = tr_close;
    return TALLY_OK;
}

int
cluster_transport_set_members(struct raft_uv_transport *rt, const struct cluster_member *m,
                              size_t n)
{
    struct transport *t = rt->impl;
    struct cluster_member *copy = tally_calloc(n > 0 ? n : 1, sizeof(*copy));

    if (copy == NULL)
        return TALLY_ENOMEM;
    memcpy(copy, m, n * sizeof(*copy));
    tally_free(t->members);
    t->members = copy;
    t->n_members = n;
    return TALLY_OK;
}

int
cluster_transport_join_answer(struct raft_uv_transport *rt, uint64_t token, const uint8_t *msg,
                              size_t len)
{
    struct transport *t = rt->impl;
    struct proxy *p;
    int rc;

    for (p = t->proxies; p != NULL; p = p->next) {
        if (p->join_token != token || p->conn == NULL)
            continue;
        rc = cluster_conn_send(p->conn, msg, len);
        cluster_conn_close(p->conn); /* after the answer is out */
        return rc;
    }
    return TALLY_ENOTFOUND;
}

void
cluster_transport_release(struct raft_uv_transport *rt)
{
    struct transport *t = rt->impl;

    if (t == NULL)
        return;
    cluster_hostkey_wipe(&t->self);
    tally_free(t->members);
    tally_free(t);
    rt->impl = NULL;
}

/*
 * libraft's transport over host channels (cluster_net.h): the raft_uv_transport
 * itself (listening on this host's port, dialing members, closing), the member
 * table it trusts, and answers to strangers' JOINs and members' requests. Each
 * raft connection is a proxy (net_proxy.c). A dialer's first message names its
 * raft id and address, which must be those of the member whose key it proved.
 */
#define _GNU_SOURCE /* SOCK_CLOEXEC */
#include "cluster_net_int.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tally_log.h"

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

const struct cluster_member *
cluster__member_by_id(const struct transport *t, uint64_t id)
{
    for (size_t i = 0; i < t->n_members; i++)
        if (t->members[i].id == id)
            return &t->members[i];
    return NULL;
}

const struct cluster_member *
cluster__member_by_key(const struct transport *t, const uint8_t *pk)
{
    for (size_t i = 0; i < t->n_members && pk != NULL; i++)
        if (sodium_memcmp(t->members[i].pk, pk, CLUSTER_KEY_BYTES) == 0)
            return &t->members[i];
    return NULL;
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

    if (cluster__member_by_key(t, pk) != NULL)
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
    struct cluster_conn_opts o = {&t->self, t->handshake_ms, &cluster__proxy_cbs, NULL};
    struct proxy *p;

    if (status != 0 || t->closing)
        return;
    p = cluster__proxy_new(t, false);
    if (p == NULL)
        return; /* the connection waits in the backlog: the dialer times out */
    o.data = p;
    if (cluster_conn_accept(server, peer_ok, t, &o, &p->conn) != TALLY_OK) {
        p->conn = NULL;
        cluster__proxy_maybe_free(p);
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
    const struct cluster_member *m = cluster__member_by_id(t, id);
    struct cluster_conn_opts o = {&t->self, t->handshake_ms, &cluster__proxy_cbs, NULL};
    struct sockaddr_storage ss;
    struct proxy *p;

    if (m == NULL || strcmp(m->address, address) != 0 ||
        cluster_addr_parse(address, &ss) != TALLY_OK)
        return RAFT_NOCONNECTION; /* not a member we know at that address */
    p = cluster__proxy_new(t, true);
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
        cluster__proxy_maybe_free(p);
        return RAFT_NOMEM;
    }
    return 0;
}

static void
on_listener_closed(uv_handle_t *h)
{
    struct transport *t = h->data;

    t->listening = t->listener_closing = false;
    cluster__transport_maybe_closed(t);
}

void
cluster__transport_maybe_closed(struct transport *t)
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
            cluster__proxy_close_local(p);
    }
    cluster__transport_maybe_closed(t);
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

static struct proxy *
lease_proxy(struct transport *t, uint64_t token)
{
    for (struct proxy *p = t->proxies; p != NULL; p = p->next) {
        if (p->lease_token == token && p->conn != NULL)
            return p;
    }
    return NULL;
}

int
cluster_transport_lease_send(struct raft_uv_transport *rt, uint64_t token, const uint8_t *msg,
                             size_t len)
{
    struct proxy *p = token != 0 ? lease_proxy(rt->impl, token) : NULL;

    return p != NULL ? cluster_conn_send(p->conn, msg, len) : TALLY_ENOTFOUND;
}

void
cluster_transport_lease_close(struct raft_uv_transport *rt, uint64_t token)
{
    struct proxy *p = token != 0 ? lease_proxy(rt->impl, token) : NULL;

    if (p != NULL)
        cluster_conn_close(p->conn);
}

void
cluster_transport_stats(const struct raft_uv_transport *rt, struct cluster_transport_stats *out)
{
    const struct transport *t = rt->impl;

    memset(out, 0, sizeof(*out));
    if (t != NULL)
        *out = t->stats;
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

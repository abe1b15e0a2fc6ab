/*
 * The binary protocol server of tallyd (sup_sock.h): frames in, sup_front
 * requests out, answers back with the request's id. Request slots are
 * allocated with the connection (no allocation per request); a connection
 * that closes cancels its requests, so no answer is ever written to a gone
 * peer. A token read from the wire is wiped as soon as it has been hashed.
 * Beyond the connection cap a connection gets no slots: a small fixed record
 * answers its first frame with ERROR "too many connections" and closes it.
 */
#include "sup_sock.h"

#include "proto_cluster.h"

#include <sodium.h>
#include <string.h>

#include "proto_stream.h"

struct sock_conn;

struct sock_req {
    struct sup_front_req r;
    struct sock_conn *sc;
    uint32_t id;
    bool busy;
};

/* Both kinds of connection data start with this flag. */
struct sock_kind {
    bool refusal;
};

/* A connection over the cap, until its ERROR is written. */
struct sock_refusal {
    struct sock_kind kind; /* refusal = true */
    sup_sock *s;
    proto_conn *c;
    bool busy;
    bool answered;
};

struct sock_conn {
    struct sock_kind kind; /* refusal = false */
    sup_sock *s;
    proto_conn *c;
    bool hello;
    bool closed;
    uint32_t inflight;
    struct sock_conn *next, *prev;
    struct sock_req reqs[SUP_SOCK_MAX_INFLIGHT];
    uint8_t out[PROTO_CLIENT_MSG_MAX];
};

struct sup_sock {
    uv_loop_t *loop;
    sup_front *front;
    proto_listener *unix_l;
    proto_listener *tcp_l;
    struct sock_conn *conns;
    struct sup_sock_stats stats;
    uint32_t max_connections;
    struct sock_refusal refusals[SUP_SOCK_REFUSALS_MAX];
    sup_sock_cluster_fn cluster_fn; /* NULL: not in a cluster */
    void *cluster_ctx;
    int pending;
    bool closing;
    void (*close_cb)(void *data);
    void *close_data;
};

static void
send_frame(struct sock_conn *sc, size_t len)
{
    if (len > 0 && !sc->closed)
        (void)proto_conn_send(sc->c, sc->out, len);
}

static void
protocol_error(struct sock_conn *sc, uint32_t id, int code, const char *msg)
{
    sc->s->stats.protocol_errors++;
    send_frame(sc, proto_error_encode(sc->out, id, code, msg));
    proto_conn_close_after_flush(sc->c);
}

static void
on_done(struct sup_front_req *r, const struct proto_check_reply *reply)
{
    struct sock_req *q = (struct sock_req *)r;
    struct sock_conn *sc = q->sc;

    send_frame(sc, proto_check_reply_encode(sc->out, q->id, reply));
    q->busy = false;
    sc->inflight--;
}

static struct sock_req *
free_slot(struct sock_conn *sc)
{
    size_t i;

    for (i = 0; i < SUP_SOCK_MAX_INFLIGHT; i++) {
        if (!sc->reqs[i].busy)
            return &sc->reqs[i];
    }
    return NULL;
}

static void
handle_check(struct sock_conn *sc, const struct proto_frame *f)
{
    struct proto_check m;
    struct sock_req *q;

    if (proto_check_decode(f, &m) != TALLY_OK) {
        sodium_memzero(&m, sizeof(m));
        protocol_error(sc, f->request_id, TALLY_EPROTO, "malformed CHECK");
        return;
    }
    q = free_slot(sc);
    if (q == NULL) {
        sodium_memzero(&m, sizeof(m));
        protocol_error(sc, f->request_id, TALLY_ETOOBIG, "too many requests in flight");
        return;
    }
    q->busy = true;
    q->sc = sc;
    q->id = f->request_id;
    q->r.done = on_done;
    q->r.data = q;
    sc->inflight++;
    sc->s->stats.requests++;
    sup_front_check(sc->s->front, &q->r, m.token, m.endpoint, m.cost);
    sodium_memzero(&m, sizeof(m));
}

static void
handle_check_callers(struct sock_conn *sc, const struct proto_frame *f)
{
    struct proto_check_callers m;
    const char *callers[PROTO_CALLERS_WIRE_MAX];
    size_t lens[PROTO_CALLERS_WIRE_MAX];
    struct sock_req *q;

    if (proto_check_callers_decode(f, &m) != TALLY_OK) {
        sodium_memzero(&m, sizeof(m));
        protocol_error(sc, f->request_id, TALLY_EPROTO, "malformed CHECK_CALLERS");
        return;
    }
    q = free_slot(sc);
    if (q == NULL) {
        sodium_memzero(&m, sizeof(m));
        protocol_error(sc, f->request_id, TALLY_ETOOBIG, "too many requests in flight");
        return;
    }
    for (uint32_t i = 0; i < m.n; i++) {
        callers[i] = m.caller[i];
        lens[i] = m.len[i];
    }
    q->busy = true;
    q->sc = sc;
    q->id = f->request_id;
    q->r.done = on_done;
    q->r.data = q;
    sc->inflight++;
    sc->s->stats.requests++;
    sup_front_check_callers(sc->s->front, &q->r, NULL, m.endpoint, callers, lens, m.n, m.cost);
    sodium_memzero(&m, sizeof(m)); /* the callers, in clear */
}

/* An admin request: answered at once from the counters, in a buffer of its own
 * (larger than a check's answer, allocated per request: STATS is rare). */
static void
handle_stats(struct sock_conn *sc, const struct proto_frame *f)
{
    char tenant[TENANT_NAME_MAX + 1];
    struct proto_stats_reply *m = NULL;
    uint8_t *out = NULL;
    size_t len = 0;

    if (proto_stats_decode(f, tenant) != TALLY_OK) {
        protocol_error(sc, f->request_id, TALLY_EPROTO, "malformed STATS");
        return;
    }
    m = tally_malloc(sizeof(*m));
    out = tally_malloc(PROTO_STATS_REPLY_MAX);
    if (m != NULL && out != NULL) {
        sup_front_stats_reply(sc->s->front, tenant, m);
        len = proto_stats_reply_encode(out, PROTO_STATS_REPLY_MAX, f->request_id, m);
    }
    if (len > 0 && !sc->closed)
        (void)proto_conn_send(sc->c, out, len);
    else
        protocol_error(sc, f->request_id, TALLY_ENOMEM, "cannot answer STATS");
    tally_free(out);
    tally_free(m);
}

/* CLUSTER: how this host sees its cluster (in_cluster 0 when it is in none). */
static void
handle_cluster(struct sock_conn *sc, const struct proto_frame *f)
{
    struct proto_cluster_status *st = NULL;
    uint8_t *out = NULL;
    size_t len = 0;

    if (proto_cluster_decode(f) != TALLY_OK) {
        protocol_error(sc, f->request_id, TALLY_EPROTO, "malformed CLUSTER");
        return;
    }
    st = tally_calloc(1, sizeof(*st));
    out = tally_malloc(PROTO_CLUSTER_REPLY_MAX);
    if (st != NULL && out != NULL) {
        if (sc->s->cluster_fn != NULL)
            sc->s->cluster_fn(sc->s->cluster_ctx, st);
        len = proto_cluster_reply_encode(out, PROTO_CLUSTER_REPLY_MAX, f->request_id, st);
    }
    if (len > 0 && !sc->closed)
        (void)proto_conn_send(sc->c, out, len);
    else
        protocol_error(sc, f->request_id, TALLY_ENOMEM, "cannot answer CLUSTER");
    tally_free(out);
    tally_free(st);
}

void
sup_sock_set_cluster(sup_sock *s, sup_sock_cluster_fn fn, void *ctx)
{
    s->cluster_fn = fn;
    s->cluster_ctx = ctx;
}

static void
on_frame(proto_conn *c, const struct proto_frame *f, void *data)
{
    struct sock_conn *sc = data;

    (void)c;
    if (!sc->hello) {
        struct proto_hello h;
        struct proto_hello_reply hr = {PROTO_VERSION, PROTO_FRAME_MAX, SUP_SOCK_MAX_INFLIGHT};
        if (f->type != PROTO_C_HELLO || proto_hello_decode(f, &h) != TALLY_OK) {
            protocol_error(sc, f->request_id, TALLY_EPROTO, "HELLO first");
            return;
        }
        if (h.min_version > PROTO_VERSION || h.max_version < PROTO_VERSION) {
            protocol_error(sc, f->request_id, TALLY_EPROTO, "no common protocol version");
            return;
        }
        sc->hello = true;
        send_frame(sc, proto_hello_reply_encode(sc->out, f->request_id, &hr));
        return;
    }
    switch (f->type) {
    case PROTO_C_CHECK:
        handle_check(sc, f);
        return;
    case PROTO_C_CHECK_CALLERS:
        handle_check_callers(sc, f);
        return;
    case PROTO_C_RELEASE: {
        struct proto_release m;
        int st;
        if (proto_release_decode(f, &m) != TALLY_OK) {
            sodium_memzero(&m, sizeof(m));
            protocol_error(sc, f->request_id, TALLY_EPROTO, "malformed RELEASE");
            return;
        }
        st = sup_front_release(sc->s->front, m.token, m.slot_id);
        sodium_memzero(&m, sizeof(m));
        send_frame(sc,
                   proto_status_encode(sc->out, PROTO_C_RELEASE_REPLY, f->request_id, (uint8_t)st));
        return;
    }
    case PROTO_C_RELOAD: {
        int rc = f->payload_len == 0 ? sup_front_reload(sc->s->front, true) : TALLY_EPROTO;
        send_frame(sc, proto_status_encode(sc->out, PROTO_C_RELOAD_REPLY, f->request_id,
                                           rc == TALLY_OK ? 0 : 1));
        return;
    }
    case PROTO_C_STATS:
        handle_stats(sc, f);
        return;
    case PROTO_C_CLUSTER:
        handle_cluster(sc, f);
        return;
    case PROTO_C_FLUSH: {
        char tenant[TENANT_NAME_MAX + 1];
        if (proto_flush_decode(f, tenant) != TALLY_OK) {
            protocol_error(sc, f->request_id, TALLY_EPROTO, "malformed FLUSH");
            return;
        }
        send_frame(sc,
                   proto_status_encode(sc->out, PROTO_C_FLUSH_REPLY, f->request_id,
                                       sup_front_flush(sc->s->front, tenant) == TALLY_OK ? 0 : 1));
        return;
    }
    default:
        protocol_error(sc, f->request_id, TALLY_EPROTO, "unknown message type");
        return;
    }
}

static bool
refusals_busy(const sup_sock *s)
{
    for (size_t i = 0; i < SUP_SOCK_REFUSALS_MAX; i++) {
        if (s->refusals[i].busy)
            return true;
    }
    return false;
}

static void
maybe_done(sup_sock *s)
{
    if (s->closing && s->pending == 0 && s->conns == NULL && !refusals_busy(s)) {
        void (*cb)(void *) = s->close_cb;
        void *data = s->close_data;
        tally_free(s);
        if (cb != NULL)
            cb(data);
    }
}

static void
on_close(proto_conn *c, int reason, void *data)
{
    struct sock_conn *sc = data;
    sup_sock *s = sc->s;
    size_t i;

    (void)reason;
    sc->closed = true;
    for (i = 0; i < SUP_SOCK_MAX_INFLIGHT; i++) {
        if (sc->reqs[i].busy) {
            sup_front_cancel(s->front, &sc->reqs[i].r);
            sc->reqs[i].busy = false;
        }
    }
    if (sc->prev != NULL)
        sc->prev->next = sc->next;
    else
        s->conns = sc->next;
    if (sc->next != NULL)
        sc->next->prev = sc->prev;
    s->stats.active--;
    proto_conn_unref(c);
    tally_free(sc);
    maybe_done(s);
}

/* The first frame of a connection over the cap, whatever it is: the answer. */
static void
on_refusal_frame(proto_conn *c, const struct proto_frame *f, void *data)
{
    struct sock_refusal *r = data;
    uint8_t out[PROTO_CLIENT_MSG_MAX];
    size_t len;

    if (r->answered)
        return;
    r->answered = true;
    len = proto_error_encode(out, f->request_id, TALLY_EUNAVAIL, "too many connections");
    if (len > 0)
        (void)proto_conn_send(c, out, len);
    proto_conn_close_after_flush(c);
}

static void
on_refusal_close(proto_conn *c, int reason, void *data)
{
    struct sock_refusal *r = data;

    (void)reason;
    r->busy = false;
    r->c = NULL;
    proto_conn_unref(c);
    maybe_done(r->s);
}

/* A connection over the cap gets a refusal record, or none (closed at once). */
static bool
accept_refusal(sup_sock *s, struct proto_conn_cbs *cbs, void **conn_data)
{
    s->stats.refused++;
    for (size_t i = 0; i < SUP_SOCK_REFUSALS_MAX; i++) {
        struct sock_refusal *r = &s->refusals[i];
        if (!r->busy) {
            memset(r, 0, sizeof(*r));
            r->kind.refusal = true;
            r->s = s;
            r->busy = true;
            cbs->on_frame = on_refusal_frame;
            cbs->on_close = on_refusal_close;
            *conn_data = r;
            return true;
        }
    }
    return false;
}

static bool
on_accept(proto_listener *l, void *data, struct proto_conn_cbs *cbs, void **conn_data)
{
    sup_sock *s = data;
    struct sock_conn *sc;

    (void)l;
    if (s->closing)
        return false;
    if (s->stats.active >=
        (s->max_connections > 0 ? s->max_connections : SUP_SOCK_DEFAULT_MAX_CONNECTIONS))
        return accept_refusal(s, cbs, conn_data);
    sc = tally_calloc(1, sizeof(*sc));
    if (sc == NULL)
        return false;
    sc->s = s;
    cbs->on_frame = on_frame;
    cbs->on_close = on_close;
    *conn_data = sc;
    return true;
}

static void
on_conn(proto_listener *l, proto_conn *c, void *data)
{
    sup_sock *s = data;
    struct sock_conn *sc = proto_conn_data(c);

    (void)l;
    if (((struct sock_kind *)proto_conn_data(c))->refusal) {
        ((struct sock_refusal *)proto_conn_data(c))->c = c;
        return;
    }
    sc->c = c;
    sc->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = sc;
    s->conns = sc;
    s->stats.connections++;
    s->stats.active++;
}

int
sup_sock_open(uv_loop_t *loop, sup_front *front, const char *path, int mode, const char *tcp_host,
              int tcp_port, sup_sock **out)
{
    static const struct proto_listener_cbs cbs = {on_accept, PROTO_CLIENT_MSG_MAX, on_conn};
    sup_sock *s = tally_calloc(1, sizeof(*s));
    int rc;

    *out = NULL;
    if (s == NULL)
        return TALLY_ENOMEM;
    s->loop = loop;
    s->front = front;
    rc = proto_listener_unix(loop, path, mode, &cbs, s, &s->unix_l);
    if (rc == TALLY_OK && tcp_host != NULL)
        rc = proto_listener_tcp(loop, tcp_host, tcp_port, &cbs, s, &s->tcp_l);
    if (rc != TALLY_OK) {
        s->closing = true;
        if (s->unix_l != NULL) {
            s->pending++;
            proto_listener_close(s->unix_l, NULL, NULL);
        }
        tally_free(s); /* listener close callbacks do not touch s */
        return rc;
    }
    *out = s;
    return TALLY_OK;
}

int
sup_sock_listen_tcp(sup_sock *s, const char *host, int port)
{
    static const struct proto_listener_cbs cbs = {on_accept, PROTO_CLIENT_MSG_MAX, on_conn};

    if (s->tcp_l != NULL)
        return TALLY_EEXIST;
    return proto_listener_tcp(s->loop, host, port, &cbs, s, &s->tcp_l);
}

void
sup_sock_set_max_connections(sup_sock *s, uint32_t max)
{
    s->max_connections = max;
}

int
sup_sock_tcp_port(const sup_sock *s)
{
    return s->tcp_l != NULL ? proto_listener_port(s->tcp_l) : -1;
}

void
sup_sock_stats(const sup_sock *s, struct sup_sock_stats *out)
{
    *out = s->stats;
}

static void
on_listener_closed(void *data)
{
    sup_sock *s = data;

    s->pending--;
    maybe_done(s);
}

void
sup_sock_close(sup_sock *s, void (*cb)(void *data), void *data)
{
    struct sock_conn *sc;

    if (s == NULL || s->closing)
        return;
    s->closing = true;
    s->close_cb = cb;
    s->close_data = data;
    if (s->unix_l != NULL) {
        s->pending++;
        proto_listener_close(s->unix_l, on_listener_closed, s);
    }
    if (s->tcp_l != NULL) {
        s->pending++;
        proto_listener_close(s->tcp_l, on_listener_closed, s);
    }
    for (sc = s->conns; sc != NULL; sc = sc->next)
        proto_conn_close(sc->c);
    for (size_t i = 0; i < SUP_SOCK_REFUSALS_MAX; i++) {
        if (s->refusals[i].busy && s->refusals[i].c != NULL)
            proto_conn_close(s->refusals[i].c);
    }
    maybe_done(s);
}

/*
 * The HTTP server's listener (proto_http.h): binding, accepting within
 * max_connections (a few more read and answered 503, beyond them a pool of
 * handles that accept and close at once, so an over-cap accept allocates
 * nothing), closing, and the server's handle count. The connections
 * themselves are http_server.c's.
 */
#include "proto_http_int.h"

#include <arpa/inet.h>
#include <string.h>

static void accept_one(proto_http_server *srv);

static int
uv_rc(int err)
{
    switch (err) {
    case 0:
        return TALLY_OK;
    case UV_EADDRINUSE:
        return TALLY_EINUSE;
    case UV_EACCES:
    case UV_EPERM:
        return TALLY_EPERM;
    case UV_EINVAL:
    case UV_EADDRNOTAVAIL:
    case UV_EAFNOSUPPORT:
        return TALLY_EINVAL;
    case UV_ENOMEM:
    case UV_ENOBUFS:
        return TALLY_ENOMEM;
    default:
        return TALLY_EIO;
    }
}

/* A handle of the server (listener, connection, reject) is gone for good. */
void
proto__http_handle_gone(proto_http_server *srv)
{
    assert(srv->pending > 0);
    srv->pending--;
    if (srv->closing) {
        if (srv->pending == 0) {
            if (srv->close_cb != NULL)
                srv->close_cb(srv);
            tally_free(srv);
        }
        return;
    }
    if (srv->accept_waiting)
        accept_one(srv);
}

static void
on_listener_closed(uv_handle_t *h)
{
    proto__http_handle_gone(h->data);
}

static void
on_reject_closed(uv_handle_t *h)
{
    proto_http_server *srv = h->data;

    srv->reject_busy[(uv_tcp_t *)h - srv->reject] = false;
    proto__http_handle_gone(srv);
}

/* Accepts the waiting connection into a pooled handle and closes it at once. */
static void
reject_one(proto_http_server *srv, enum proto_http_reject reason)
{
    uv_tcp_t *h = NULL;
    size_t i;

    for (i = 0; i < HTTP_REJECT_POOL && h == NULL; i++) {
        if (!srv->reject_busy[i])
            h = &srv->reject[i];
    }
    if (h == NULL) {
        srv->accept_waiting = true; /* libuv holds the socket; retried when a handle is free */
        return;
    }
    srv->stats.rejected[reason]++;
    if (uv_tcp_init(srv->loop, h) != 0)
        return; /* cannot happen on Unix: AF_UNSPEC creates no socket */
    srv->reject_busy[h - srv->reject] = true;
    srv->pending++;
    h->data = srv;
    (void)uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)h);
    uv_close((uv_handle_t *)h, on_reject_closed);
}

/* At max_connections, a few more connections are read and their request is
 * answered 503 too_many_connections with Retry-After: 1, then closed (counted
 * when answered); beyond those, accepted and closed at once (counted here). */
static void
accept_one(proto_http_server *srv)
{
    bool over = srv->stats.connections_active - srv->over_cap >= srv->lim.max_connections;

    srv->accept_waiting = false;
    if (over && srv->over_cap >= HTTP_OVER_CAP_MAX) {
        reject_one(srv, PROTO_HTTP_REJECT_CONN_LIMIT);
        return;
    }
    if (!proto__http_conn_accept(srv, over))
        reject_one(srv, PROTO_HTTP_REJECT_NO_MEMORY);
}

static void
on_connection(uv_stream_t *listener, int status)
{
    proto_http_server *srv = listener->data;

    if (status < 0) {
        srv->stats.rejected[PROTO_HTTP_REJECT_ACCEPT_ERROR]++;
        return;
    }
    accept_one(srv);
}

int
proto_http_listen(proto_http_server *srv, const char *host, int port)
{
    struct sockaddr_storage ss;
    int err;

    if (srv == NULL || host == NULL || srv->listening || srv->closing || port < 0 || port > 65535)
        return TALLY_EINVAL;
    if (strchr(host, ':') != NULL)
        err = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
    else
        err = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
    if (err != 0)
        return TALLY_EINVAL;
    err = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&ss, 0);
    if (err == 0)
        err = uv_listen((uv_stream_t *)&srv->listener, srv->lim.backlog, on_connection);
    if (err != 0)
        return uv_rc(err);
    srv->listening = true;
    return TALLY_OK;
}

int
proto_http_port(const proto_http_server *srv, int *port)
{
    struct sockaddr_storage ss;
    int len = (int)sizeof(ss);

    *port = 0;
    if (srv == NULL || !srv->listening ||
        uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &len) != 0)
        return TALLY_EINVAL;
    if (ss.ss_family == AF_INET6)
        *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else
        *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return TALLY_OK;
}

void
proto_http_close(proto_http_server *srv, proto_http_close_cb cb)
{
    if (srv == NULL || srv->closing)
        return;
    srv->closing = true;
    srv->close_cb = cb;
    srv->accept_waiting = false; /* closing the listener closes the socket libuv held */
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    proto__http_conns_close(srv);
}

void
proto_http_stats(const proto_http_server *srv, struct proto_http_stats *out)
{
    *out = srv->stats;
}

void *
proto_http_app_data(const proto_http_server *srv)
{
    return srv->app_data;
}

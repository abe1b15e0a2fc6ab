/*
 * tallyd: the daemon's thin main. It parses the command line (tallyd_args.c),
 * checks that the data dir was initialised, and on one libuv loop serves the
 * decision service (sup_front) over HTTP (tallyd_http.c), the binary protocol
 * on its Unix socket and, with --tcp, on TCP (sup_sock). With --supervise it
 * is instead a tenant's supervisor process, spawned by itself. It stops
 * cleanly on SIGINT or SIGTERM: HTTP, then the socket, then the front (leases
 * returned), then whatever is left; the loop runs dry and uv_loop_close() must
 * return 0. It logs one JSON line at start (with the ports actually bound, so
 * --http 127.0.0.1:0 can be discovered) and one at stop (tally_log.h), never
 * one per request. Usage errors are one plain line on stderr.
 */
#include "proto_http.h"
#include "store.h"
#include "sup_front.h"
#include "sup_paths.h"
#include "sup_process.h"
#include "sup_sock.h"
#include "tally_log.h"
#include "tallyd_args.h"
#include "tallyd_http.h"
#include "tenant.h"

#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct tallyd {
    uv_loop_t loop;
    uv_signal_t sig_int, sig_term;
    proto_http_server *http;
    sup_front *front;
    sup_sock *sock;
    struct tallyd_http *routes;
    char socket_path[STORE_PATH_MAX];
    int lock_fd;
    const char *data;
    const struct tallyd_opts *o;
    int stop_signal;
    struct proto_http_stats stats; /* final, copied while the server closes */
};

static void
log_start(const struct tallyd *d, int port)
{
    struct tally_log l;
    char addr[96];

    if (!tally_log_begin(&l, TALLY_LOG_INFO, "start"))
        return;
    snprintf(addr, sizeof(addr), "%s%s%s:%d", d->o->ipv6 ? "[" : "", d->o->host,
             d->o->ipv6 ? "]" : "", port);
    tally_log_str(&l, "http", addr);
    tally_log_str(&l, "socket", d->socket_path);
    if (d->o->tcp != NULL) {
        snprintf(addr, sizeof(addr), "%s%s%s:%d", d->o->tcp_ipv6 ? "[" : "", d->o->tcp_host,
                 d->o->tcp_ipv6 ? "]" : "", sup_sock_tcp_port(d->sock));
        tally_log_str(&l, "tcp", addr);
    }
    tally_log_str(&l, "data", d->data);
    tally_log_str(&l, "durability", d->o->durability);
    tally_log_int(&l, "wait_ms", d->o->wait);
    tally_log_int(&l, "idle_exit_ms", d->o->idle_exit);
    tally_log_int(&l, "max_supervisors", d->o->max_sups);
    tally_log_int(&l, "max_connections", d->o->max_conns);
    tally_log_str(&l, "version", TALLY_VERSION);
    tally_log_int(&l, "pid", (int64_t)getpid());
    tally_log_end(&l);
}

static void
log_stop(const struct tallyd *d)
{
    struct tally_log l;

    if (!tally_log_begin(&l, TALLY_LOG_INFO, "stop"))
        return;
    tally_log_str(&l, "signal", d->stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    tally_log_int(&l, "requests", (int64_t)d->stats.requests);
    tally_log_int(&l, "connections", (int64_t)d->stats.connections_accepted);
    tally_log_end(&l);
}

static void
on_request(void *app_data, const struct proto_http_request *req, struct proto_http_response *resp)
{
    struct tallyd *d = app_data;

    if (d->routes == NULL) { /* starting or stopping */
        proto_http_response_header(resp, "Retry-After", "1");
        proto_http_response_error(resp, 503, "unavailable", "starting");
        return;
    }
    tallyd_http_handle(d->routes, req, resp);
}

static void
on_cancel(void *app_data, proto_http_deferred *def)
{
    struct tallyd *d = app_data;

    if (d->routes != NULL)
        tallyd_http_cancel(d->routes, def);
}

static void
close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Shutdown runs as a chain: HTTP, then the socket, then the front (leases are
 * returned to the supervisors, which commit and exit), then whatever is left. */
static void
stop_rest(struct tallyd *d)
{
    uv_walk(&d->loop, close_walk, NULL);
}

static void
on_front_closed(void *data)
{
    struct tallyd *d = data;

    d->front = NULL;
    stop_rest(d);
}

static void
stop_front(struct tallyd *d)
{
    if (d->front != NULL)
        sup_front_close(d->front, on_front_closed, d);
    else
        stop_rest(d);
}

static void
on_sock_closed(void *data)
{
    struct tallyd *d = data;

    d->sock = NULL;
    if (d->routes != NULL)
        tallyd_http_set_sources(d->routes, NULL, NULL);
    stop_front(d);
}

static void
stop_sock(struct tallyd *d)
{
    if (d->sock != NULL)
        sup_sock_close(d->sock, on_sock_closed, d);
    else
        stop_front(d);
}

static void
on_http_closed(proto_http_server *srv)
{
    struct tallyd *d = proto_http_app_data(srv);

    proto_http_stats(srv, &d->stats);
    d->http = NULL;
    if (d->routes != NULL)
        tallyd_http_set_sources(d->routes, NULL, d->sock);
    stop_sock(d);
}

/* Closes everything; the loop then runs dry. */
static void
stop(struct tallyd *d)
{
    if (!uv_is_closing((uv_handle_t *)&d->sig_int))
        uv_close((uv_handle_t *)&d->sig_int, NULL);
    if (!uv_is_closing((uv_handle_t *)&d->sig_term))
        uv_close((uv_handle_t *)&d->sig_term, NULL);
    if (d->http != NULL)
        proto_http_close(d->http, on_http_closed);
    else
        stop_sock(d);
}

static const char *
listen_error(int rc)
{
    switch (rc) {
    case TALLY_EINUSE:
        return "address already in use";
    case TALLY_EPERM:
        return "permission denied";
    case TALLY_EINVAL:
        return "address not available";
    default:
        return tally_strerror(rc);
    }
}

/* The decision service and its binary protocol socket. */
static int
start_front(struct tallyd *d)
{
    struct sup_front_config fc;
    char exe[STORE_PATH_MAX];
    size_t exe_len = sizeof(exe);
    int rc;

    if (uv_exepath(exe, &exe_len) != 0)
        return tallyd_fail(TALLYD_EXIT_FAIL, "cannot find the tallyd executable");
    memset(&fc, 0, sizeof(fc));
    fc.data = d->data;
    fc.exe = exe;
    fc.strict = strcmp(d->o->durability, "strict") == 0;
    fc.wait_ms = d->o->wait;
    fc.idle_exit_ms = d->o->idle_exit;
    fc.max_supervisors = (uint32_t)d->o->max_sups;
    rc = sup_front_open(&d->loop, &fc, &d->front);
    if (rc != TALLY_OK)
        return tallyd_fail(rc == TALLY_ENOKEY || rc == TALLY_EKEYMODE || rc == TALLY_ESCHEMA
                               ? TALLYD_EXIT_CONFIG
                               : TALLYD_EXIT_FAIL,
                           "cannot load %s: %s", d->data, tally_strerror(rc));
    if (d->o->socket != NULL)
        snprintf(d->socket_path, sizeof(d->socket_path), "%s", d->o->socket);
    else if ((size_t)snprintf(d->socket_path, sizeof(d->socket_path), "%s/tally.sock", d->data) >=
             sizeof(((struct sockaddr_un *)0)->sun_path))
        return tallyd_fail(TALLYD_EXIT_USAGE, "socket path %s/tally.sock is too long: use --socket",
                           d->data);
    if (store_socket_dir_check(d->socket_path) == TALLY_EPERM)
        return tallyd_fail(
            TALLYD_EXIT_CONFIG,
            "the directory of %s is writable by others: put the socket in a private one",
            d->socket_path);
    rc = sup_sock_open(&d->loop, d->front, d->socket_path, 0660, NULL, 0, &d->sock);
    if (rc != TALLY_OK)
        return tallyd_fail(TALLYD_EXIT_FAIL, "cannot listen on %s: %s", d->socket_path,
                           rc == TALLY_EINUSE ? "another process listens there"
                                              : tally_strerror(rc));
    if (d->o->tcp != NULL &&
        (rc = sup_sock_listen_tcp(d->sock, d->o->tcp_host, d->o->tcp_port)) != TALLY_OK)
        return tallyd_fail(TALLYD_EXIT_FAIL, "cannot listen on --tcp %s: %s", d->o->tcp,
                           listen_error(rc));
    sup_sock_set_max_connections(d->sock, (uint32_t)d->o->max_conns);
    d->routes = tallyd_http_new(d->front, (uint32_t)d->o->max_conns);
    if (d->routes == NULL)
        return tallyd_fail(TALLYD_EXIT_FAIL, "out of memory");
    tallyd_http_set_sources(d->routes, d->http, d->sock);
    return TALLYD_EXIT_OK;
}

static void
on_signal(uv_signal_t *s, int signum)
{
    struct tallyd *d = s->data;

    if (d->stop_signal != 0)
        return;
    d->stop_signal = signum;
    stop(d);
}

static int
serve(struct tallyd *d)
{
    static const struct proto_http_route routes[] = {
        {"/healthz", PROTO_HTTP_GET, ROUTE_HEALTHZ},
        {"/v1/check", PROTO_HTTP_GET | PROTO_HTTP_POST, ROUTE_CHECK},
        {"/v1/release", PROTO_HTTP_POST, ROUTE_RELEASE},
        {"/metrics", PROTO_HTTP_GET, ROUTE_METRICS},
    };
    struct proto_http_config cfg = {
        .handler = on_request,
        .app_data = d,
        .on_cancel = on_cancel,
        .routes = routes,
        .routes_count = sizeof(routes) / sizeof(routes[0]),
        .max_connections = (uint32_t)d->o->max_conns,
    };
    int code = TALLYD_EXIT_FAIL;
    int rc, port = 0;

    if (uv_loop_init(&d->loop) != 0)
        return tallyd_fail(TALLYD_EXIT_FAIL, "cannot create the event loop");
    uv_signal_init(&d->loop, &d->sig_int);
    uv_signal_init(&d->loop, &d->sig_term);
    d->sig_int.data = d;
    d->sig_term.data = d;
    rc = proto_http_open(&d->loop, &cfg, &d->http);
    if (rc != TALLY_OK) {
        tallyd_fail(TALLYD_EXIT_FAIL, "cannot start the HTTP server: %s", tally_strerror(rc));
        goto out;
    }
    rc = proto_http_listen(d->http, d->o->host, d->o->port);
    if (rc == TALLY_OK)
        rc = proto_http_port(d->http, &port);
    if (rc != TALLY_OK) {
        tallyd_fail(TALLYD_EXIT_FAIL, "cannot listen on %s: %s", d->o->http, listen_error(rc));
        goto out;
    }
    /* Signals first: once the socket answers, a SIGTERM must find its handler. */
    if (uv_signal_start(&d->sig_int, on_signal, SIGINT) != 0 ||
        uv_signal_start(&d->sig_term, on_signal, SIGTERM) != 0) {
        tallyd_fail(TALLYD_EXIT_FAIL, "cannot watch SIGINT and SIGTERM");
        goto out;
    }
    code = start_front(d); /* its exit code: 78 for a bad key or socket directory */
    if (code != TALLYD_EXIT_OK)
        goto out;
    log_start(d, port);
    code = TALLYD_EXIT_OK;
out:
    if (code != TALLYD_EXIT_OK)
        stop(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    tallyd_http_free(d->routes);
    d->routes = NULL;
    if (uv_loop_close(&d->loop) != 0)
        return tallyd_fail(TALLYD_EXIT_FAIL, "event loop still busy at exit");
    if (code == TALLYD_EXIT_OK)
        log_stop(d);
    return code;
}

int
main(int argc, char **argv)
{
    struct sigaction sa;
    struct tallyd_opts o;
    struct tallyd d;
    int code;

    memset(&o, 0, sizeof(o));
    memset(&d, 0, sizeof(d));
    code = tallyd_parse_args(argc, argv, &o);
    if (code >= 0)
        return code;
    d.o = &o;
    d.data = store_datadir_pick(o.data, TALLY_DEFAULT_DATA_DIR);
    if (store_datadir_check(d.data) != TALLY_OK)
        return tallyd_fail(TALLYD_EXIT_CONFIG,
                           "data directory %s is not initialised: run 'tally init --data %s'",
                           d.data, d.data);
    /* A peer that went away is UV_EPIPE on the write, not a signal. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
    if (sodium_init() < 0)
        return tallyd_fail(TALLYD_EXIT_FAIL, "cannot initialise libsodium");
    /* Secrets: files private whatever the caller's umask; no core file and no
     * ptrace by others (TALLY_DUMPABLE=1 keeps them, for debugging). */
    umask(077);
    (void)store_process_private();
    if (o.supervise != NULL) {
        struct sup_process_opts so = {d.data, o.supervise, strcmp(o.durability, "strict") == 0,
                                      o.idle_exit, 3};
        return sup_process_run(&so);
    }
    {
        char lock[STORE_PATH_MAX];
        int rc;
        snprintf(lock, sizeof(lock), "%s/tallyd.lock", d.data);
        rc = sup_lock_take(lock, &d.lock_fd);
        if (rc == TALLY_ELOCKED)
            return tallyd_fail(TALLYD_EXIT_FAIL, "another tallyd is running on %s", d.data);
        if (rc != TALLY_OK)
            return tallyd_fail(TALLYD_EXIT_FAIL, "cannot lock %s: %s", lock, tally_strerror(rc));
    }
    code = serve(&d);
    close(d.lock_fd);
    return code;
}

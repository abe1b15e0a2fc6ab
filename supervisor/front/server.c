/*
 * tallyd's server: on one libuv loop, the decision service (sup_front) over HTTP
 * (http_routes.c), the binary protocol on its Unix socket and, with --tcp, on TCP
 * (sup_sock). It stops cleanly on SIGINT or SIGTERM: HTTP, then the socket, then the
 * front (leases returned), then whatever is left; the loop runs dry and
 * uv_loop_close() must return 0. It logs one JSON line at start (with the ports
 * actually bound, so --http 127.0.0.1:0 can be discovered) and one at stop
 * (tally_log.h), never one per request. Errors are one plain line on stderr.
 */
#include "cluster_node.h"
#include "front_http.h"
#include "proto_http.h"
#include "store.h"
#include "store_paths.h"
#include "sup_front_service.h"
#include "sup_sock.h"
#include "tally_log.h"
#include "tenant.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define fail(code, ...) tally_fail("tallyd", (code), __VA_ARGS__)

struct server {
    uv_loop_t loop;
    uv_signal_t sig_int, sig_term;
    proto_http_server *http;
    sup_front *front;
    sup_sock *sock;
    cluster_node *cluster;    /* in a cluster only */
    uv_timer_t cluster_watch; /* not in a cluster: `tally cluster init` is taken up by itself */
    struct sup_http *routes;
    char socket_path[STORE_PATH_MAX];
    const struct sup_server_opts *o;
    int stop_signal;
    struct proto_http_stats stats; /* final, copied while the server closes */
};

static void
log_start(const struct server *d, int port)
{
    struct tally_log l;
    char addr[96];
    int64_t kept = 0;

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
    tally_log_str(&l, "data", d->o->data);
    tally_log_str(&l, "durability", (d->o->strict ? "strict" : "batched"));
    tally_log_int(&l, "wait_ms", d->o->wait_ms);
    tally_log_int(&l, "idle_exit_ms", d->o->idle_exit_ms);
    tally_log_int(&l, "max_supervisors", d->o->max_supervisors);
    tally_log_int(&l, "max_connections", d->o->max_connections);
    tally_log_int(&l, "child_idle_ms",
                  d->o->child_idle_ms > 0 ? d->o->child_idle_ms : SUP_FRONT_CHILD_IDLE_MS_DEFAULT);
    tally_log_int(&l, "max_open_children",
                  d->o->max_open_children > 0 ? d->o->max_open_children
                                              : SUP_FRONT_MAX_OPEN_CHILDREN_DEFAULT);
    tally_log_str(&l, "lease_use", sup_front_use_state(d->front, &kept));
    tally_log_int(&l, "leases_kept", kept);
    tally_log_str(&l, "version", TALLY_VERSION);
    tally_log_int(&l, "pid", (int64_t)getpid());
    tally_log_end(&l);
}

static void
log_stop(const struct server *d)
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
    struct server *d = app_data;

    if (d->routes == NULL) { /* starting or stopping */
        proto_http_response_header(resp, "Retry-After", "1");
        proto_http_response_error(resp, 503, "unavailable", "starting");
        return;
    }
    sup_http_handle(d->routes, req, resp);
}

static void
on_cancel(void *app_data, proto_http_deferred *def)
{
    struct server *d = app_data;

    if (d->routes != NULL)
        sup_http_cancel(d->routes, def);
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
stop_rest(struct server *d)
{
    uv_walk(&d->loop, close_walk, NULL);
}

static void
on_cluster_closed(void *data)
{
    struct server *d = data;

    d->cluster = NULL;
    stop_rest(d);
}

/* The cluster goes last but for the rest: its log is closed by libraft, not by a walk. */
static void
stop_cluster(struct server *d)
{
    if (d->cluster != NULL)
        cluster_node_close(d->cluster, on_cluster_closed, d);
    else
        stop_rest(d);
}

static void
on_front_closed(void *data)
{
    struct server *d = data;
    static const struct cluster_lease_cbs none;

    d->front = NULL;
    if (d->cluster != NULL)
        cluster_node_set_lease(d->cluster, &none);
    stop_cluster(d);
}

static void
stop_front(struct server *d)
{
    if (d->front != NULL)
        sup_front_close(d->front, on_front_closed, d);
    else
        stop_cluster(d);
}

static void
on_sock_closed(void *data)
{
    struct server *d = data;

    d->sock = NULL;
    if (d->routes != NULL)
        sup_http_set_sources(d->routes, NULL, NULL);
    stop_front(d);
}

static void
stop_sock(struct server *d)
{
    if (d->sock != NULL)
        sup_sock_close(d->sock, on_sock_closed, d);
    else
        stop_front(d);
}

static void
on_http_closed(proto_http_server *srv)
{
    struct server *d = proto_http_app_data(srv);

    proto_http_stats(srv, &d->stats);
    d->http = NULL;
    if (d->routes != NULL)
        sup_http_set_sources(d->routes, NULL, d->sock);
    stop_sock(d);
}

/* Closes everything; the loop then runs dry. */
static void
stop(struct server *d)
{
    if (uv_is_active((uv_handle_t *)&d->cluster_watch) &&
        !uv_is_closing((uv_handle_t *)&d->cluster_watch))
        uv_close((uv_handle_t *)&d->cluster_watch, NULL);
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
start_front(struct server *d)
{
    struct sup_front_config fc;
    char exe[STORE_PATH_MAX];
    size_t exe_len = sizeof(exe);
    int rc;

    if (uv_exepath(exe, &exe_len) != 0)
        return fail(SUP_SERVER_FAIL, "cannot find the tallyd executable");
    memset(&fc, 0, sizeof(fc));
    fc.data = d->o->data;
    fc.exe = exe;
    fc.strict = d->o->strict;
    fc.wait_ms = d->o->wait_ms;
    fc.idle_exit_ms = d->o->idle_exit_ms;
    fc.max_supervisors = d->o->max_supervisors;
    fc.batch_sync_ms = d->o->batch_sync_ms;
    fc.keep_lease_ms = d->o->keep_lease_ms;
    fc.journal_compact_rows = d->o->journal_compact_rows;
    fc.child_idle_ms = d->o->child_idle_ms;
    fc.max_open_children = d->o->max_open_children;
    rc = sup_front_open(&d->loop, &fc, &d->front);
    if (rc != TALLY_OK)
        return fail(rc == TALLY_ENOKEY || rc == TALLY_EKEYMODE || rc == TALLY_ESCHEMA
                        ? SUP_SERVER_CONFIG
                        : SUP_SERVER_FAIL,
                    "cannot load %s: %s", d->o->data, tally_strerror(rc));
    if (d->o->socket != NULL)
        snprintf(d->socket_path, sizeof(d->socket_path), "%s", d->o->socket);
    else if ((size_t)snprintf(d->socket_path, sizeof(d->socket_path), "%s/tally.sock",
                              d->o->data) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return fail(SUP_SERVER_USAGE, "socket path %s/tally.sock is too long: use --socket",
                    d->o->data);
    if (store_socket_dir_check(d->socket_path) == TALLY_EPERM)
        return fail(SUP_SERVER_CONFIG,
                    "the directory of %s is writable by others: put the socket in a private one",
                    d->socket_path);
    rc = sup_sock_open(&d->loop, d->front, d->socket_path, 0660, NULL, 0, &d->sock);
    if (rc != TALLY_OK)
        return fail(SUP_SERVER_FAIL, "cannot listen on %s: %s", d->socket_path,
                    rc == TALLY_EINUSE ? "another process listens there" : tally_strerror(rc));
    if (d->o->tcp != NULL &&
        (rc = sup_sock_listen_tcp(d->sock, d->o->tcp_host, d->o->tcp_port)) != TALLY_OK)
        return fail(SUP_SERVER_FAIL, "cannot listen on --tcp %s: %s", d->o->tcp, listen_error(rc));
    sup_sock_set_max_connections(d->sock, d->o->max_connections);
    d->routes = sup_http_new(d->front, d->o->max_connections);
    if (d->routes == NULL)
        return fail(SUP_SERVER_FAIL, "out of memory");
    sup_http_set_sources(d->routes, d->http, d->sock);
    return SUP_SERVER_OK;
}

static void
cluster_status(void *ctx, struct proto_cluster_status *out)
{
    struct server *d = ctx;

    if (d->cluster != NULL)
        cluster_node_status(d->cluster, out);
}

/* In a cluster (DATA/cluster/members): the replicated log on this loop, listening on the
 * host's cluster port. */
static int
start_cluster(struct server *d)
{
    int rc;

    if (!cluster_state_exists(d->o->data))
        return SUP_SERVER_OK;
    rc = cluster_node_open(&d->loop, d->o->data, d->o->election_ms, d->o->snapshot_every,
                           &d->cluster);
    if (rc == TALLY_EKEYMODE)
        return fail(SUP_SERVER_CONFIG, "%s/cluster/host.key is readable by others: chmod 600 it",
                    d->o->data);
    if (rc == TALLY_ECORRUPT)
        return fail(SUP_SERVER_CONFIG, "the cluster files in %s/cluster do not parse", d->o->data);
    if (rc != TALLY_OK)
        return fail(SUP_SERVER_FAIL, "cannot join the cluster of %s: %s (see the log)", d->o->data,
                    tally_strerror(rc));
    return SUP_SERVER_OK;
}

/* ---- leases across the cluster: the node carries the front's lease frames ---- */

static int
lease_send(void *ctx, uint64_t member, const char *tenant, const void *frame, size_t len)
{
    struct server *d = ctx;

    return d->cluster != NULL ? cluster_node_lease_send(d->cluster, member, tenant, frame, len)
                              : TALLY_EUNAVAIL;
}

static void
lease_down(void *ctx, const char *tenant)
{
    struct server *d = ctx;

    if (d->cluster != NULL)
        cluster_node_lease_down(d->cluster, tenant);
}

static void
on_lease_frame(void *ctx, uint64_t member, const char *tenant, const uint8_t *frame, size_t len)
{
    struct server *d = ctx;

    if (d->front != NULL)
        sup_front_cluster_frame(d->front, member, tenant, frame, len);
}

static void
on_lease_down(void *ctx, const char *tenant)
{
    struct server *d = ctx;

    if (d->front != NULL)
        sup_front_cluster_down(d->front, tenant);
}

static void
on_lease_role(void *ctx, bool leading, bool link_up)
{
    struct server *d = ctx;

    if (d->front != NULL)
        sup_front_cluster_role(d->front, leading, link_up);
}

/* A supervisor's journal record (or barrier) on its way to the log. */
struct journal_req {
    struct server *d;
    uint64_t id;
    bool sync;
    char tenant[TENANT_NAME_MAX + 1];
};

static void
on_journal_done(void *req_data, int rc)
{
    struct journal_req *q = req_data;

    if (q->d->front != NULL)
        sup_front_cluster_journal_done(q->d->front, q->tenant, q->id, q->sync, rc);
    tally_free(q);
}

static int
lease_journal(void *ctx, const char *tenant, uint64_t id, bool sync, uint8_t op,
              const uint8_t *body, size_t len)
{
    struct server *d = ctx;
    struct journal_req *q;
    int rc;

    if (d->cluster == NULL)
        return TALLY_EUNAVAIL;
    q = tally_calloc(1, sizeof(*q));
    if (q == NULL)
        return TALLY_ENOMEM;
    q->d = d;
    q->id = id;
    q->sync = sync;
    snprintf(q->tenant, sizeof(q->tenant), "%s", tenant);
    rc = cluster_node_ledger_append(d->cluster, tenant, sync ? 0 : op, body, len, on_journal_done,
                                    q);
    if (rc != TALLY_OK)
        tally_free(q);
    return rc;
}

/* The front's children lease from the cluster's leader from now on. */
static void
link_cluster(struct server *d)
{
    struct sup_front_cluster fc = {.self = cluster_node_self(d->cluster),
                                   .send = lease_send,
                                   .down = lease_down,
                                   .journal = lease_journal,
                                   .ctx = d};
    struct cluster_lease_cbs cbs = {on_lease_frame, on_lease_down, on_lease_role, d};

    sup_front_cluster_set(d->front, &fc);
    cluster_node_set_lease(d->cluster, &cbs);
}

/* Once a second while not in a cluster: a `tally cluster init` made meanwhile is served at
 * once (a wrong file is logged, and waits for a restart). */
static void
on_cluster_watch(uv_timer_t *t)
{
    struct server *d = t->data;
    struct tally_log l;
    int rc;

    if (d->stop_signal != 0 || d->cluster != NULL || !cluster_state_exists(d->o->data))
        return;
    uv_close((uv_handle_t *)t, NULL); /* once, whatever comes of it */
    rc = cluster_node_open(&d->loop, d->o->data, d->o->election_ms, d->o->snapshot_every,
                           &d->cluster);
    if (rc == TALLY_OK && d->front != NULL)
        link_cluster(d);
    if (tally_log_begin(&l, rc == TALLY_OK ? TALLY_LOG_INFO : TALLY_LOG_ERROR,
                        rc == TALLY_OK ? "cluster_started" : "cluster_start_failed")) {
        if (rc != TALLY_OK) {
            tally_log_str(&l, "error", tally_strerror(rc));
            tally_log_str(&l, "hint", "fix the files in DATA/cluster, then restart tallyd");
        }
        tally_log_end(&l);
    }
}

static void
on_signal(uv_signal_t *s, int signum)
{
    struct server *d = s->data;

    if (d->stop_signal != 0)
        return;
    d->stop_signal = signum;
    stop(d);
}

/* Descriptors: 3 per open child file counted (the file and its WAL, and room to
 * spare), one per supervisor channel, one per connection (HTTP and binary), 16 for the
 * pool's files kept open (front_pool.c: 4 child files and 4 ledgers, a file and a WAL
 * each), and some to spare. The soft limit is raised towards the hard one to fit them all; when
 * even the child files and supervisors cannot fit, one line says so at start. */
static void
fit_descriptors(const struct sup_server_opts *o)
{
    uint64_t children =
        o->max_open_children > 0 ? o->max_open_children : SUP_FRONT_MAX_OPEN_CHILDREN_DEFAULT;
    uint64_t sups = o->max_supervisors > 0 ? o->max_supervisors : 1024;
    uint64_t core = 3 * children + sups + 16 + 64;
    uint64_t want = core + 2 * (uint64_t)o->max_connections;
    struct rlimit rl;
    struct tally_log l;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < core &&
        tally_log_begin(&l, TALLY_LOG_WARN, "descriptors_low")) {
        tally_log_int(&l, "limit", (int64_t)rl.rlim_cur);
        tally_log_int(&l, "needed", (int64_t)core);
        tally_log_str(&l, "hint", "raise ulimit -n or lower --max-open-children");
        tally_log_end(&l);
    }
}

int
sup_server_run(const struct sup_server_opts *o)
{
    struct server server;
    struct server *d = &server;
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
        .max_connections = o->max_connections,
        /* /metrics is the longest answer (about 8 KiB with no traffic, more as counters
         * grow); a connection's block holds this much room for an answer. */
        .max_response_bytes = 16384,
    };
    int code = SUP_SERVER_FAIL;
    int rc, port = 0;

    memset(d, 0, sizeof(*d));
    d->o = o;
    fit_descriptors(o);

    if (uv_loop_init(&d->loop) != 0)
        return fail(SUP_SERVER_FAIL, "cannot create the event loop");
    uv_signal_init(&d->loop, &d->sig_int);
    uv_signal_init(&d->loop, &d->sig_term);
    d->sig_int.data = d;
    d->sig_term.data = d;
    rc = proto_http_open(&d->loop, &cfg, &d->http);
    if (rc != TALLY_OK) {
        fail(SUP_SERVER_FAIL, "cannot start the HTTP server: %s", tally_strerror(rc));
        goto out;
    }
    rc = proto_http_listen(d->http, d->o->host, d->o->port);
    if (rc == TALLY_OK)
        rc = proto_http_port(d->http, &port);
    if (rc != TALLY_OK) {
        fail(SUP_SERVER_FAIL, "cannot listen on %s: %s", d->o->http, listen_error(rc));
        goto out;
    }
    /* Signals first: once the socket answers, a SIGTERM must find its handler. */
    if (uv_signal_start(&d->sig_int, on_signal, SIGINT) != 0 ||
        uv_signal_start(&d->sig_term, on_signal, SIGTERM) != 0) {
        fail(SUP_SERVER_FAIL, "cannot watch SIGINT and SIGTERM");
        goto out;
    }
    /* The cluster first: a host whose cluster files are wrong never answers on its socket. */
    code = start_cluster(d);
    if (code == SUP_SERVER_OK)
        code = start_front(d); /* its exit code: 78 for a bad key or socket directory */
    if (code != SUP_SERVER_OK)
        goto out;
    sup_sock_set_cluster(d->sock, cluster_status, d);
    if (d->cluster != NULL)
        link_cluster(d);
    if (d->cluster == NULL) {
        uv_timer_init(&d->loop, &d->cluster_watch);
        d->cluster_watch.data = d;
        uv_timer_start(&d->cluster_watch, on_cluster_watch, 1000, 1000);
    }
    log_start(d, port);
    code = SUP_SERVER_OK;
out:
    if (code != SUP_SERVER_OK)
        stop(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    sup_http_free(d->routes);
    d->routes = NULL;
    if (uv_loop_close(&d->loop) != 0)
        return fail(SUP_SERVER_FAIL, "event loop still busy at exit");
    if (code == SUP_SERVER_OK)
        log_stop(d);
    return code;
}

/*
 * tallyd: the daemon's thin main. It parses the command line (DESIGN.md §5),
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

enum tallyd_exit {
    TALLYD_EXIT_OK = 0,
    TALLYD_EXIT_FAIL = 1,
    TALLYD_EXIT_USAGE = 64,
    TALLYD_EXIT_CONFIG = 78
};

static const char usage_text[] =
    "usage: tallyd [--data DIR] [--http ADDR:PORT] [--socket PATH]\n"
    "              [--durability strict|batched] [--wait-ms MS] [--idle-exit-ms MS]\n"
    "              [--tcp ADDR:PORT] [--log-level debug|info|warn|error]\n"
    "              [--max-supervisors N] [--max-connections N]\n"
    "              [--help] [--version]\n"
    "\n"
    "Runs the tally daemon in the foreground until SIGINT or SIGTERM.\n"
    "\n"
    "  --data DIR         data dir, initialised by 'tally init' (else $TALLY_DATA,\n"
    "                     else " TALLY_DEFAULT_DATA_DIR ")\n"
    "  --http ADDR:PORT   HTTP listener, default 127.0.0.1:8080; IPv6 as [::1]:8080;\n"
    "                     port 0 picks a free port, reported in the start line\n"
    "  --socket PATH      binary protocol socket (mode 0660), default DATA/tally.sock\n"
    "  --tcp ADDR:PORT    also serve the binary protocol on TCP (off by default; no\n"
    "                     auth beyond the token: bind to loopback or a private net)\n"
    "  --durability MODE  strict (default): every grant and lease mark is fsynced\n"
    "                     before use; batched: grants fsynced every 100 ms, no lease\n"
    "                     marks (safe from kill -9; an OS crash or power loss may\n"
    "                     forget the grants of the last 100 ms: see README)\n"
    "  --wait-ms MS       longest wait of a request for its tenant's supervisor\n"
    "                     (default 50)\n"
    "  --idle-exit-ms MS  a supervisor with no message for this long exits; the\n"
    "                     next request brings it back (default 60000)\n"
    "  --max-supervisors N  supervisor processes running at once (default 1024,\n"
    "                     1 to 100000); at the ceiling the least recently used\n"
    "                     hibernates and the tenant that needs one waits for it\n"
    "  --max-connections N  open connections per protocol (default 10000, 1 to\n"
    "                     1000000): HTTP, and the binary protocol (Unix + TCP); one\n"
    "                     more gets 503 too_many_connections (HTTP) or ERROR -18\n"
    "                     \"too many connections\" (binary), then is closed\n"
    "\n"
    "  --log-level LEVEL  lowest level logged: debug, info (default), warn, error\n"
    "\n"
    "HTTP: /v1/check, /v1/release, /healthz, /metrics (Prometheus text).\n"
    "Binary protocol: proto/PROTOCOL.md. Every HTTP answer carries Cache-Control: no-store.\n"
    "Logs: one JSON line on stderr per event (start, reload, supervisor start/exit,\n"
    "endpoint degraded/recovered, stop), none per request, never a token.\n"
    "\n"
    "exit codes:\n"
    "  0 stopped by SIGINT or SIGTERM    1 runtime failure (address in use, another\n"
    "                                    tallyd on this data dir, ...)\n"
    "  64 usage error                    78 data dir not initialised\n";

struct opts {
    const char *data;
    const char *http;
    const char *socket;
    const char *durability;
    const char *wait_ms;
    const char *idle_exit_ms;
    const char *supervise; /* internal: run as the supervisor of this tenant */
    const char *tcp;
    const char *log_level;
    const char *max_supervisors;
    const char *max_connections;
    int64_t wait;
    int64_t idle_exit;
    int64_t max_sups;
    int64_t max_conns;
    char host[64]; /* from --http, without brackets */
    int port;
    bool ipv6;
    char tcp_host[64]; /* from --tcp */
    int tcp_port;
    bool tcp_ipv6;
};

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
    const struct opts *o;
    int stop_signal;
    struct proto_http_stats stats; /* final, copied while the server closes */
};

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
fail(int code, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "tallyd: %s\n", line);
    return code;
}

/* "1.2.3.4:80" or "[::1]:80" into host (64 bytes), *port, *ipv6. */
static bool
parse_addr(const char *s, char *out_host, int *out_port, bool *out_ipv6)
{
    const char *port_s, *host_end;
    const char *host = s;
    unsigned char probe[16];
    size_t len, i;
    long port = 0;

    if (s[0] == '[') {
        host = s + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL || host_end[1] != ':')
            return false;
        port_s = host_end + 2;
        *out_ipv6 = true;
    } else {
        host_end = strrchr(s, ':');
        if (host_end == NULL)
            return false;
        port_s = host_end + 1;
        *out_ipv6 = false;
    }
    len = (size_t)(host_end - host);
    if (len == 0 || len >= 64)
        return false;
    memcpy(out_host, host, len);
    out_host[len] = '\0';
    if (uv_inet_pton(*out_ipv6 ? AF_INET6 : AF_INET, out_host, probe) != 0)
        return false;
    len = strlen(port_s);
    if (len == 0 || len > 5)
        return false;
    for (i = 0; i < len; i++) {
        if (port_s[i] < '0' || port_s[i] > '9')
            return false;
        port = port * 10 + (port_s[i] - '0');
    }
    if (port > 65535)
        return false;
    *out_port = (int)port;
    return true;
}

/* A whole number (milliseconds, or a count) in [min, max]; absent gives dflt. */
static bool
parse_ms(const char *s, int64_t min, int64_t max, int64_t dflt, int64_t *out)
{
    int64_t v = 0;
    const char *p;

    if (s == NULL) {
        *out = dflt;
        return true;
    }
    for (p = s; *p >= '0' && *p <= '9' && v <= max; p++)
        v = v * 10 + (*p - '0');
    if (p == s || *p != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Returns -1 to go on, else the exit code (after --help, --version or an error). */
static int
parse_args(int argc, char **argv, struct opts *o)
{
    static const char *const names[] = {
        "--data",           "--http",      "--socket", "--durability", "--wait-ms",
        "--idle-exit-ms",   "--supervise", "--tcp",    "--log-level",  "--max-supervisors",
        "--max-connections"};
    const char **slots[] = {
        &o->data,           &o->http,      &o->socket, &o->durability, &o->wait_ms,
        &o->idle_exit_ms,   &o->supervise, &o->tcp,    &o->log_level,  &o->max_supervisors,
        &o->max_connections};
    enum tally_log_level level;
    struct sockaddr_un sun;
    int i;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL, *eq;
        size_t k, name_len;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage_text, stdout);
            return TALLYD_EXIT_OK;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("tallyd %s\n", TALLY_VERSION);
            return TALLYD_EXIT_OK;
        }
        eq = strchr(arg, '=');
        name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (strlen(names[k]) == name_len && strncmp(arg, names[k], name_len) == 0)
                break;
        }
        if (k == sizeof(names) / sizeof(names[0]))
            return fail(TALLYD_EXIT_USAGE, "%s '%s'; see 'tallyd --help'",
                        arg[0] == '-' ? "unknown option" : "unexpected argument", arg);
        if (eq != NULL)
            value = eq + 1;
        else if (i + 1 < argc)
            value = argv[++i];
        if (value == NULL || value[0] == '\0')
            return fail(TALLYD_EXIT_USAGE, "option %s needs a value; see 'tallyd --help'",
                        names[k]);
        *slots[k] = value;
    }
    if (o->http == NULL)
        o->http = "127.0.0.1:8080";
    if (!parse_addr(o->http, o->host, &o->port, &o->ipv6))
        return fail(TALLYD_EXIT_USAGE,
                    "invalid --http '%s': use IPV4:PORT or [IPV6]:PORT, port 0-65535", o->http);
    if (o->tcp != NULL && !parse_addr(o->tcp, o->tcp_host, &o->tcp_port, &o->tcp_ipv6))
        return fail(TALLYD_EXIT_USAGE,
                    "invalid --tcp '%s': use IPV4:PORT or [IPV6]:PORT, port 0-65535", o->tcp);
    if (o->log_level != NULL) {
        if (tally_log_level_parse(o->log_level, &level) != TALLY_OK)
            return fail(TALLYD_EXIT_USAGE,
                        "invalid --log-level '%s': use debug, info, warn or error", o->log_level);
        tally_log_set_level(level);
    }
    if (o->durability == NULL)
        o->durability = "strict";
    if (strcmp(o->durability, "strict") != 0 && strcmp(o->durability, "batched") != 0)
        return fail(TALLYD_EXIT_USAGE, "invalid --durability '%s': use strict or batched",
                    o->durability);
    if (!parse_ms(o->wait_ms, 1, 60000, 50, &o->wait))
        return fail(TALLYD_EXIT_USAGE, "invalid --wait-ms '%s': 1 to 60000", o->wait_ms);
    if (!parse_ms(o->idle_exit_ms, 1, 86400000, 60000, &o->idle_exit))
        return fail(TALLYD_EXIT_USAGE, "invalid --idle-exit-ms '%s': 1 to 86400000",
                    o->idle_exit_ms);
    if (!parse_ms(o->max_supervisors, 1, 100000, 1024, &o->max_sups))
        return fail(TALLYD_EXIT_USAGE, "invalid --max-supervisors '%s': 1 to 100000",
                    o->max_supervisors);
    if (!parse_ms(o->max_connections, 1, PROTO_HTTP_LIMIT_CONNECTIONS,
                  PROTO_HTTP_DEFAULT_MAX_CONNECTIONS, &o->max_conns))
        return fail(TALLYD_EXIT_USAGE, "invalid --max-connections '%s': 1 to %d",
                    o->max_connections, PROTO_HTTP_LIMIT_CONNECTIONS);
    if (o->supervise != NULL && !tenant_name_valid(o->supervise))
        return fail(TALLYD_EXIT_USAGE, "invalid tenant name for --supervise");
    if (o->socket != NULL && strlen(o->socket) >= sizeof(sun.sun_path))
        return fail(TALLYD_EXIT_USAGE, "--socket path is longer than %zu bytes",
                    sizeof(sun.sun_path) - 1);
    return -1;
}

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
        return fail(TALLYD_EXIT_FAIL, "cannot find the tallyd executable");
    memset(&fc, 0, sizeof(fc));
    fc.data = d->data;
    fc.exe = exe;
    fc.strict = strcmp(d->o->durability, "strict") == 0;
    fc.wait_ms = d->o->wait;
    fc.idle_exit_ms = d->o->idle_exit;
    fc.max_supervisors = (uint32_t)d->o->max_sups;
    rc = sup_front_open(&d->loop, &fc, &d->front);
    if (rc != TALLY_OK)
        return fail(rc == TALLY_ENOKEY || rc == TALLY_EKEYMODE || rc == TALLY_ESCHEMA
                        ? TALLYD_EXIT_CONFIG
                        : TALLYD_EXIT_FAIL,
                    "cannot load %s: %s", d->data, tally_strerror(rc));
    if (d->o->socket != NULL)
        snprintf(d->socket_path, sizeof(d->socket_path), "%s", d->o->socket);
    else if ((size_t)snprintf(d->socket_path, sizeof(d->socket_path), "%s/tally.sock", d->data) >=
             sizeof(((struct sockaddr_un *)0)->sun_path))
        return fail(TALLYD_EXIT_USAGE, "socket path %s/tally.sock is too long: use --socket",
                    d->data);
    if (store_socket_dir_check(d->socket_path) == TALLY_EPERM)
        return fail(TALLYD_EXIT_CONFIG,
                    "the directory of %s is writable by others: put the socket in a private one",
                    d->socket_path);
    rc = sup_sock_open(&d->loop, d->front, d->socket_path, 0660, NULL, 0, &d->sock);
    if (rc != TALLY_OK)
        return fail(TALLYD_EXIT_FAIL, "cannot listen on %s: %s", d->socket_path,
                    rc == TALLY_EINUSE ? "another process listens there" : tally_strerror(rc));
    if (d->o->tcp != NULL &&
        (rc = sup_sock_listen_tcp(d->sock, d->o->tcp_host, d->o->tcp_port)) != TALLY_OK)
        return fail(TALLYD_EXIT_FAIL, "cannot listen on --tcp %s: %s", d->o->tcp, listen_error(rc));
    sup_sock_set_max_connections(d->sock, (uint32_t)d->o->max_conns);
    d->routes = tallyd_http_new(d->front, (uint32_t)d->o->max_conns);
    if (d->routes == NULL)
        return fail(TALLYD_EXIT_FAIL, "out of memory");
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
        return fail(TALLYD_EXIT_FAIL, "cannot create the event loop");
    uv_signal_init(&d->loop, &d->sig_int);
    uv_signal_init(&d->loop, &d->sig_term);
    d->sig_int.data = d;
    d->sig_term.data = d;
    rc = proto_http_open(&d->loop, &cfg, &d->http);
    if (rc != TALLY_OK) {
        fail(TALLYD_EXIT_FAIL, "cannot start the HTTP server: %s", tally_strerror(rc));
        goto out;
    }
    rc = proto_http_listen(d->http, d->o->host, d->o->port);
    if (rc == TALLY_OK)
        rc = proto_http_port(d->http, &port);
    if (rc != TALLY_OK) {
        fail(TALLYD_EXIT_FAIL, "cannot listen on %s: %s", d->o->http, listen_error(rc));
        goto out;
    }
    /* Signals first: once the socket answers, a SIGTERM must find its handler. */
    if (uv_signal_start(&d->sig_int, on_signal, SIGINT) != 0 ||
        uv_signal_start(&d->sig_term, on_signal, SIGTERM) != 0) {
        fail(TALLYD_EXIT_FAIL, "cannot watch SIGINT and SIGTERM");
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
        return fail(TALLYD_EXIT_FAIL, "event loop still busy at exit");
    if (code == TALLYD_EXIT_OK)
        log_stop(d);
    return code;
}

int
main(int argc, char **argv)
{
    struct sigaction sa;
    struct opts o;
    struct tallyd d;
    int code;

    memset(&o, 0, sizeof(o));
    memset(&d, 0, sizeof(d));
    code = parse_args(argc, argv, &o);
    if (code >= 0)
        return code;
    d.o = &o;
    d.data = store_datadir_pick(o.data, TALLY_DEFAULT_DATA_DIR);
    if (store_datadir_check(d.data) != TALLY_OK)
        return fail(TALLYD_EXIT_CONFIG,
                    "data directory %s is not initialised: run 'tally init --data %s'", d.data,
                    d.data);
    /* A peer that went away is UV_EPIPE on the write, not a signal. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
    if (sodium_init() < 0)
        return fail(TALLYD_EXIT_FAIL, "cannot initialise libsodium");
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
            return fail(TALLYD_EXIT_FAIL, "another tallyd is running on %s", d.data);
        if (rc != TALLY_OK)
            return fail(TALLYD_EXIT_FAIL, "cannot lock %s: %s", lock, tally_strerror(rc));
    }
    code = serve(&d);
    close(d.lock_fd);
    return code;
}

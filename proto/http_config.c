/*
 * From a struct proto_http_config to a server: defaults applied to the limits
 * (0 means default), bounds checked, the route table and the names of the kept
 * headers copied, and the layout of the one block each connection gets at
 * accept computed once: the struct, then the read buffer, the request target,
 * the body, the kept header values and the write buffer (head room + body).
 */
#include "proto_http_int.h"

#include <string.h>

#define TIMEOUT_MAX_MS (24ULL * 3600 * 1000) /* keeps now + timeout far from overflow */

static const char *const tally_headers[PROTO_HTTP_H_TALLY_COUNT] = {
    [PROTO_HTTP_H_AUTHORIZATION] = "Authorization",
    [PROTO_HTTP_H_ENDPOINT] = "X-Tally-Endpoint",
    [PROTO_HTTP_H_COST] = "X-Tally-Cost",
    [PROTO_HTTP_H_LEASE] = "X-Tally-Lease",
    [PROTO_HTTP_H_DENY_STATUS] = "X-Tally-Deny-Status",
    [PROTO_HTTP_H_CALLER] = "X-Tally-Caller",
    [PROTO_HTTP_H_CALLER + 1] = "X-Tally-Caller",
    [PROTO_HTTP_H_CALLER + 2] = "X-Tally-Caller",
    [PROTO_HTTP_H_CALLER + 3] = "X-Tally-Caller",
};

static const char *const reject_names[PROTO_HTTP_REJECT_COUNT] = {
    [PROTO_HTTP_REJECT_BAD_REQUEST] = "bad_request",
    [PROTO_HTTP_REJECT_NOT_FOUND] = "not_found",
    [PROTO_HTTP_REJECT_METHOD] = "method_not_allowed",
    [PROTO_HTTP_REJECT_BODY_TOO_LARGE] = "body_too_large",
    [PROTO_HTTP_REJECT_URL_TOO_LONG] = "url_too_long",
    [PROTO_HTTP_REJECT_HEAD_TOO_LARGE] = "header_too_large",
    [PROTO_HTTP_REJECT_TOO_MANY_HEADERS] = "too_many_headers",
    [PROTO_HTTP_REJECT_RESPONSE_ERROR] = "response_error",
    [PROTO_HTTP_REJECT_IDLE_TIMEOUT] = "idle_timeout",
    [PROTO_HTTP_REJECT_REQUEST_TIMEOUT] = "request_timeout",
    [PROTO_HTTP_REJECT_CONN_LIMIT] = "connection_limit",
    [PROTO_HTTP_REJECT_NO_MEMORY] = "no_memory",
    [PROTO_HTTP_REJECT_ACCEPT_ERROR] = "accept_error",
};

const char *
proto_http_reject_name(enum proto_http_reject reason)
{
    if ((unsigned)reason >= PROTO_HTTP_REJECT_COUNT)
        return "unknown";
    return reject_names[reason];
}

/* `v`, or `def` when 0; TALLY_EINVAL outside [lo, hi]. */
static int
pick_size(size_t v, size_t def, size_t lo, size_t hi, size_t *out)
{
    *out = v == 0 ? def : v;
    return *out >= lo && *out <= hi ? TALLY_OK : TALLY_EINVAL;
}

static int
pick_ms(uint64_t v, uint64_t def, uint64_t *out)
{
    *out = v == 0 ? def : v;
    return *out <= TIMEOUT_MAX_MS ? TALLY_OK : TALLY_EINVAL;
}

static int
limits_apply(struct http_limits *lim, const struct proto_http_config *cfg)
{
    const size_t max = PROTO_HTTP_LIMIT_BYTES_MAX;
    int rc = TALLY_OK;

    /* An error body ({"error":...,"detail":...}) always fits in 256 bytes. */
    rc |= pick_size(cfg->max_head_bytes, PROTO_HTTP_DEFAULT_MAX_HEAD_BYTES, 16, max,
                    &lim->max_head_bytes);
    rc |= pick_size(cfg->max_url_bytes, PROTO_HTTP_DEFAULT_MAX_URL_BYTES, 1, max,
                    &lim->max_url_bytes);
    rc |= pick_size(cfg->max_headers, PROTO_HTTP_DEFAULT_MAX_HEADERS, 1, 100000, &lim->max_headers);
    rc |= pick_size(cfg->max_value_bytes, PROTO_HTTP_DEFAULT_MAX_VALUE_BYTES, 1, max,
                    &lim->max_value_bytes);
    rc |= pick_size(cfg->max_body_bytes, PROTO_HTTP_DEFAULT_MAX_BODY_BYTES, 1, max,
                    &lim->max_body_bytes);
    rc |= pick_size(cfg->max_response_bytes, PROTO_HTTP_DEFAULT_MAX_RESPONSE_BYTES, 256, max,
                    &lim->max_response_bytes);
    rc |= pick_size(cfg->read_buffer_bytes, PROTO_HTTP_DEFAULT_READ_BUFFER_BYTES, 1, max,
                    &lim->read_buffer_bytes);
    rc |= pick_ms(cfg->idle_timeout_ms, PROTO_HTTP_DEFAULT_IDLE_TIMEOUT_MS, &lim->idle_timeout_ms);
    rc |= pick_ms(cfg->request_timeout_ms, PROTO_HTTP_DEFAULT_REQUEST_TIMEOUT_MS,
                  &lim->request_timeout_ms);
    rc |= pick_ms(cfg->linger_timeout_ms, PROTO_HTTP_DEFAULT_LINGER_TIMEOUT_MS,
                  &lim->linger_timeout_ms);
    lim->max_connections =
        cfg->max_connections == 0 ? PROTO_HTTP_DEFAULT_MAX_CONNECTIONS : cfg->max_connections;
    if (lim->max_connections > PROTO_HTTP_LIMIT_CONNECTIONS)
        rc |= TALLY_EINVAL;
    lim->backlog = cfg->backlog == 0 ? PROTO_HTTP_DEFAULT_BACKLOG : cfg->backlog;
    if (lim->backlog < 1 || lim->backlog > 65535)
        rc |= TALLY_EINVAL;
    return rc == TALLY_OK ? TALLY_OK : TALLY_EINVAL;
}

static bool
token_valid(const char *s, size_t len)
{
    size_t i;

    if (len == 0 || len > PROTO_HTTP_NAME_MAX)
        return false;
    for (i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (ch <= ' ' || ch >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", ch) != NULL)
            return false;
    }
    return true;
}

static int
names_copy(proto_http_server *srv, const struct proto_http_config *cfg)
{
    const char *const *names = cfg->headers != NULL ? cfg->headers : tally_headers;
    size_t n = cfg->headers != NULL ? cfg->headers_count : PROTO_HTTP_H_TALLY_COUNT;
    size_t i;

    if (n > PROTO_HTTP_KEPT_MAX)
        return TALLY_EINVAL;
    for (i = 0; i < n; i++) {
        size_t len = names[i] == NULL ? 0 : strlen(names[i]);

        if (!token_valid(names[i], len))
            return TALLY_EINVAL;
        memcpy(srv->kept[i].name, names[i], len + 1);
        srv->kept[i].len = len;
    }
    srv->kept_count = n;
    return TALLY_OK;
}

static int
routes_copy(proto_http_server *srv, const struct proto_http_config *cfg)
{
    size_t i;

    if (cfg->routes == NULL)
        return cfg->routes_count == 0 ? TALLY_OK : TALLY_EINVAL;
    if (cfg->routes_count == 0 || cfg->routes_count > PROTO_HTTP_ROUTES_MAX)
        return TALLY_EINVAL;
    for (i = 0; i < cfg->routes_count; i++) {
        const struct proto_http_route *r = &cfg->routes[i];
        size_t len = r->path == NULL ? 0 : strlen(r->path);

        if (len == 0 || len > PROTO_HTTP_NAME_MAX || r->path[0] != '/' || r->methods == 0)
            return TALLY_EINVAL;
        memcpy(srv->routes[i].path, r->path, len + 1);
        srv->routes[i].len = len;
        srv->routes[i].methods = r->methods;
        srv->routes[i].id = r->id;
    }
    srv->routes_count = cfg->routes_count;
    return TALLY_OK;
}

static size_t
align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Every term is bounded by PROTO_HTTP_LIMIT_BYTES_MAX: no overflow. */
static void
layout(proto_http_server *srv)
{
    const struct http_limits *lim = &srv->lim;
    size_t off = align16(sizeof(struct http_conn));

    srv->off_rbuf = off;
    off = align16(off + lim->read_buffer_bytes);
    srv->off_url = off;
    off = align16(off + lim->max_url_bytes + 1);
    srv->off_body = off;
    off = align16(off + lim->max_body_bytes + 1);
    srv->off_kept = off;
    off = align16(off + srv->kept_count * (lim->max_value_bytes + 1));
    srv->off_wbuf = off;
    off = align16(off + HTTP_HEAD_RESERVE + lim->max_response_bytes + 1);
    srv->off_obuf = off;
    srv->conn_size = off + HTTP_OUT_BATCH;
}

int
proto_http_open(uv_loop_t *loop, const struct proto_http_config *cfg, proto_http_server **out)
{
    proto_http_server *srv = NULL;
    int rc = TALLY_EINVAL;

    *out = NULL;
    if (loop == NULL || cfg == NULL || cfg->handler == NULL)
        goto out;
    rc = TALLY_ENOMEM;
    srv = tally_calloc(1, sizeof(*srv));
    if (srv == NULL)
        goto out;
    srv->loop = loop;
    srv->handler = cfg->handler;
    srv->app_data = cfg->app_data;
    srv->on_cancel = cfg->on_cancel;
    rc = limits_apply(&srv->lim, cfg);
    if (rc == TALLY_OK)
        rc = names_copy(srv, cfg);
    if (rc == TALLY_OK)
        rc = routes_copy(srv, cfg);
    if (rc != TALLY_OK)
        goto out;
    layout(srv);
    if (uv_tcp_init(loop, &srv->listener) != 0) {
        rc = TALLY_EIO;
        goto out;
    }
    srv->listener.data = srv;
    srv->pending = 1; /* the listener */
    *out = srv;
    srv = NULL; /* ownership moved to the caller */
out:
    tally_free(srv); /* its listener was never initialised */
    return rc;
}

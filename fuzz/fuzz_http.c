/*
 * libFuzzer target: tallyd's HTTP request handling end to end in one process:
 * the real server (proto/http_*.c over http_parser) with tallyd's routes and
 * handler (cli/http_routes.c) over the real decision service (sup_front) on
 * a data dir made by store_datadir_init() with a plan, endpoints, a tenant
 * and one link whose token is FUZZ_TOKEN (in the dictionary and the seeds),
 * so inputs reach the child counters, the leases and real supervisor
 * processes (the tallyd of this build), not only auth. Each input is written as-is on a fresh
 * loopback TCP connection (pipelined requests, garbage, truncation), then the client half-closes
 * and reads every answer until the server closes. Properties: the server never crashes, every
 * answer is well-formed HTTP/1.1 with Cache-Control: no-store and Content-Length (none on a 204),
 * and each connection is closed and freed afterwards.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <http_parser.h>
#include <sodium.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "front_http.h"
#include "fuzz_util.h"
#include "store_config.h"

struct client {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    uv_shutdown_t shutdown_req;
    http_parser rp;
    uv_buf_t out;
    char rbuf[65536];
    char field[32];
    size_t field_len;
    bool no_store, has_length;
    bool strict; /* no HEAD in the input: answers parse as plain responses */
    bool done, closed;
    int answers;
    size_t head_bytes;
};

static uv_loop_t loop;
static proto_http_server *srv;
static sup_front *front;
static struct sup_http *routes;
static int port;
static char data_dir[64];

static void
on_request(void *app_data, const struct proto_http_request *req, struct proto_http_response *resp)
{
    sup_http_handle(app_data, req, resp);
}

static void
on_cancel(void *app_data, proto_http_deferred *d)
{
    sup_http_cancel(app_data, d);
}

/* The one live token (a fixed string, so the dictionary and seeds know it). */
#define FUZZ_TOKEN "tly_fuzzFUZZfuzzFUZZfuzzFUZZfuzzFUZZ"

static int
remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void
remove_data_dir(void)
{
    (void)nftw(data_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void
add_link(store_db *db)
{
    struct store_link l;
    unsigned char *key = NULL;

    memset(&l, 0, sizeof(l));
    FUZZ_CHECK(store_key_load(data_dir, &key) == TALLY_OK);
    FUZZ_CHECK(tenant_token_hash(key, FUZZ_TOKEN, l.hash) == TALLY_OK);
    store_key_free(key);
    tenant_link_id_new(l.id);
    snprintf(l.tenant, sizeof(l.tenant), "acme");
    FUZZ_CHECK(store_link_insert(db, &l) == TALLY_OK);
}

/* A data dir with a plan (2 slots per link), a cheap endpoint, an expensive
 * one, an endpoint keyed by caller and a tenant with one link. */
static void
make_data_dir(void)
{
    struct tenant_plan plan = {.name = "free", .limits = {1, {{100000, 60000}}}, .concurrency = 2};
    struct tenant_endpoint ep = {.name = "search", .limits = {1, {{20, 1000}}}, .cost = 1};
    struct tenant_endpoint exp = {
        .name = "export", .limits = {1, {{1000, 60000}}}, .cost = 1, .expensive = true};
    struct tenant_endpoint login = {
        .name = "login", .limits = {1, {{5, 300000}}}, .cost = 1, .key = TENANT_KEY_CALLER};
    store_db *db = NULL;

    snprintf(data_dir, sizeof(data_dir), "/tmp/tally-fuzz-http-XXXXXX");
    FUZZ_CHECK(mkdtemp(data_dir) != NULL);
    atexit(remove_data_dir);
    FUZZ_CHECK(rmdir(data_dir) == 0); /* store_datadir_init creates it 0700 */
    FUZZ_CHECK(store_datadir_init(data_dir) == TALLY_OK);
    FUZZ_CHECK(store_config_open(data_dir, false, &db) == TALLY_OK);
    FUZZ_CHECK(store_plan_put(db, &plan) == TALLY_OK);
    FUZZ_CHECK(store_endpoint_put(db, &ep) == TALLY_OK);
    FUZZ_CHECK(store_endpoint_put(db, &exp) == TALLY_OK);
    FUZZ_CHECK(store_endpoint_put(db, &login) == TALLY_OK);
    FUZZ_CHECK(store_tenant_add(db, "acme", "free", 0) == TALLY_OK);
    add_link(db);
    store_db_close(db);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const struct proto_http_route table[] = {
        {"/healthz", PROTO_HTTP_GET, ROUTE_HEALTHZ},
        {"/v1/check", PROTO_HTTP_GET | PROTO_HTTP_POST, ROUTE_CHECK},
        {"/v1/release", PROTO_HTTP_POST, ROUTE_RELEASE},
        {"/metrics", PROTO_HTTP_GET, ROUTE_METRICS},
    };
    struct proto_http_config cfg = {
        .handler = on_request,
        .on_cancel = on_cancel,
        .routes = table,
        .routes_count = sizeof(table) / sizeof(table[0]),
    };
    struct sup_front_config fc = {.exe = TALLYD_EXE, .strict = true, .wait_ms = 2000};

    (void)argc;
    (void)argv;
    FUZZ_CHECK(sodium_init() >= 0);
    make_data_dir();
    FUZZ_CHECK(uv_loop_init(&loop) == 0);
    fc.data = data_dir;
    FUZZ_CHECK(sup_front_open(&loop, &fc, &front) == TALLY_OK);
    routes = sup_http_new(front, 64);
    FUZZ_CHECK(routes != NULL);
    cfg.app_data = routes;
    FUZZ_CHECK(proto_http_open(&loop, &cfg, &srv) == TALLY_OK);
    FUZZ_CHECK(proto_http_listen(srv, "127.0.0.1", 0) == TALLY_OK);
    FUZZ_CHECK(proto_http_port(srv, &port) == TALLY_OK);
    sup_http_set_sources(routes, srv, NULL);
    return 0;
}

/* --- the client: write, half-close, read every answer -------------------- */

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
    struct client *c = p->data;

    if (c->field_len + len < sizeof(c->field)) {
        memcpy(c->field + c->field_len, at, len);
        c->field_len += len;
        c->field[c->field_len] = '\0';
    } else {
        c->field_len = sizeof(c->field); /* too long to be one we check */
    }
    return 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
    struct client *c = p->data;

    if (c->field_len < sizeof(c->field)) {
        if (strcasecmp(c->field, "cache-control") == 0 && len == 8 &&
            memcmp(at, "no-store", 8) == 0)
            c->no_store = true;
        if (strcasecmp(c->field, "content-length") == 0)
            c->has_length = true;
    }
    c->field_len = 0;
    return 0;
}

static int
on_message_begin(http_parser *p)
{
    struct client *c = p->data;

    c->no_store = false;
    c->has_length = false;
    c->field_len = 0;
    return 0;
}

static int
on_headers_complete(http_parser *p)
{
    struct client *c = p->data;

    FUZZ_CHECK(p->status_code >= 200 && p->status_code <= 599);
    FUZZ_CHECK(c->no_store);
    FUZZ_CHECK(c->has_length || p->status_code == 204); /* 204: no body, no length */
    return 0;
}

static int
on_message_complete(http_parser *p)
{
    struct client *c = p->data;

    c->answers++;
    return 0;
}

static const http_parser_settings resp_settings = {
    .on_message_begin = on_message_begin,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

static void
on_closed(uv_handle_t *h)
{
    struct client *c = h->data;

    c->closed = true;
}

static void
client_done(struct client *c)
{
    if (c->done)
        return;
    c->done = true;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct client *c = h->data;

    (void)suggested;
    *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct client *c = s->data;

    if (nread < 0) {
        client_done(c); /* EOF, or a reset after the server's final answer */
        return;
    }
    if (nread == 0)
        return;
    if (c->head_bytes == 0)
        FUZZ_CHECK(nread >= 9 && memcmp(buf->base, "HTTP/1.1 ", 9) == 0);
    c->head_bytes += (size_t)nread;
    if (c->strict) {
        size_t n = http_parser_execute(&c->rp, &resp_settings, buf->base, (size_t)nread);

        if (n != (size_t)nread || HTTP_PARSER_ERRNO(&c->rp) != HPE_OK)
            fprintf(stderr, "bad answer: %s\n", http_errno_name(HTTP_PARSER_ERRNO(&c->rp)));
        FUZZ_CHECK(n == (size_t)nread && HTTP_PARSER_ERRNO(&c->rp) == HPE_OK);
    }
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status;
}

static void
on_write(uv_write_t *req, int status)
{
    (void)req;
    (void)status; /* the server may close before taking everything: fine */
}

static void
on_connect(uv_connect_t *req, int status)
{
    struct client *c = req->data;

    FUZZ_CHECK(status == 0);
    FUZZ_CHECK(uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0);
    if (c->out.len > 0)
        FUZZ_CHECK(uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &c->out, 1, on_write) == 0);
    FUZZ_CHECK(uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) == 0);
}

static bool
has_head(const uint8_t *data, size_t size)
{
    size_t i;

    for (i = 0; i + 4 <= size; i++) {
        if (memcmp(data + i, "HEAD", 4) == 0)
            return true;
    }
    return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct client c;
    struct sockaddr_in addr;
    struct proto_http_stats st;

    memset(&c, 0, sizeof(c));
    c.out = uv_buf_init((char *)data, (unsigned)size);
    c.strict = !has_head(data, size);
    http_parser_init(&c.rp, HTTP_RESPONSE);
    c.rp.data = &c;
    FUZZ_CHECK(uv_ip4_addr("127.0.0.1", port, &addr) == 0);
    FUZZ_CHECK(uv_tcp_init(&loop, &c.tcp) == 0);
    c.tcp.data = &c;
    c.connect_req.data = &c;
    FUZZ_CHECK(uv_tcp_connect(&c.connect_req, &c.tcp, (const struct sockaddr *)&addr, on_connect) ==
               0);
    while (!c.closed)
        uv_run(&loop, UV_RUN_ONCE);
    /* The server frees the connection once it sees our close. */
    for (;;) {
        proto_http_stats(srv, &st);
        if (st.connections_active == 0)
            break;
        uv_run(&loop, UV_RUN_ONCE);
    }
    return 0;
}

/*
 * Helpers of the serve suites (serve_util.h): the real binaries, a blocking
 * HTTP client over a plain socket (one request per connection, read to EOF),
 * and tallyd's log file.
 */
#define _DEFAULT_SOURCE
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include "serve_util.h"
#include "store_journal.h"
#include "store_paths.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static struct test_out out_buf;

int64_t
serve_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
serve_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
serve_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void
serve_tally_ok(const struct serve_env *e, char *out, size_t cap, ...)
{
    char bin[512];
    char *argv[40];
    int argc = 0;
    va_list ap;
    char *a;

    test_bin("tally", bin, sizeof(bin));
    argv[argc++] = bin;
    argv[argc++] = "--data";
    argv[argc++] = (char *)e->data;
    va_start(ap, cap);
    while ((a = va_arg(ap, char *)) != NULL && argc < 39)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    if (test_run(argv, NULL, &out_buf) != 0)
        fail_msg("tally %s %s: exit %d: %s", argv[3], argc > 4 ? argv[4] : "", out_buf.code,
                 out_buf.err);
    if (out != NULL) {
        size_t n = strcspn(out_buf.out, "\n");
        snprintf(out, cap, "%.*s", (int)n, out_buf.out);
    }
}

void
serve_env_init(struct serve_env *e)
{
    /* The suites count against limits of an hour, a day or a year, all of them windows of
     * floor(now / period): every boundary is the top of an hour. No test lasts 90 s. */
    test_within_one_window(3600000, 90000);
    memset(e, 0, sizeof(*e));
    test_tmpdir(e->root, sizeof(e->root));
    snprintf(e->data, sizeof(e->data), "%s/data", e->root);
    serve_tally_ok(e, NULL, 0, "init", NULL);
}

void
serve_env_release(struct serve_env *e)
{
    if (e->d.pid > 0)
        test_daemon_kill9(&e->d);
    test_rmtree(e->root);
}

/* The port after `"key":"HOST:` in the last start line, or 0. */
static int
start_port(const char *log, const char *key)
{
    const char *start = NULL, *p = log, *at, *colon;
    char want[32];

    while ((p = strstr(p, "\"event\":\"start\"")) != NULL)
        start = p++;
    if (start == NULL)
        return 0;
    snprintf(want, sizeof(want), "\"%s\":\"", key);
    at = strstr(start, want);
    if (at == NULL || (colon = strchr(at + strlen(want), ':')) == NULL)
        return 0;
    return atoi(colon + 1);
}

void
serve_start(struct serve_env *e, const char *extra1, const char *extra2)
{
    int64_t until = serve_now_ms() + 10000;
    int lines_before = serve_log_count(e, "\"event\":\"start\"");

    if (test_daemon_start(&e->d, e->data, "--wait-ms=3000", extra1, extra2, NULL) != 0) {
        char *log = serve_log(e);
        fail_msg("tallyd did not start: %s", log != NULL ? log : "(no log)");
    }
    /* The socket answers a moment before the start line is written. */
    while (serve_log_count(e, "\"event\":\"start\"") == lines_before) {
        if (serve_now_ms() > until)
            fail_msg("no start line from tallyd");
        serve_sleep_ms(10);
    }
    {
        char *log = serve_log(e);
        e->http_port = start_port(log, "http");
        e->tcp_port = start_port(log, "tcp");
        free(log);
    }
    assert_true(e->http_port > 0);
}

void
serve_stop(struct serve_env *e)
{
    assert_int_equal(test_daemon_stop(&e->d), 0);
}

void
serve_http_get(int port, const char *path, const char *headers, struct serve_http *out)
{
    serve_http_request(port, "GET", path, headers, out);
}

void
serve_http_request(int port, const char *method, const char *path, const char *headers,
                   struct serve_http *out)
{
    struct sockaddr_in sa;
    struct timeval tv = {10, 0};
    char req[4096];
    char buf[sizeof(out->head) + sizeof(out->body)];
    size_t got = 0;
    const char *sep;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int n;

    memset(out, 0, sizeof(*out));
    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    n = snprintf(req, sizeof(req),
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%sConnection: close\r\n\r\n", method, path,
                 headers != NULL ? headers : "",
                 strcmp(method, "POST") == 0 ? "Content-Length: 0\r\n" : "");
    assert_int_equal(write(fd, req, (size_t)n), n);
    for (;;) {
        ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    sep = strstr(buf, "\r\n\r\n");
    if (sep == NULL || strncmp(buf, "HTTP/1.1 ", 9) != 0)
        fail_msg("not an HTTP answer: '%s'", buf);
    snprintf(out->head, sizeof(out->head), "%.*s", (int)(sep - buf + 2), buf);
    out->status = atoi(buf + 9);
    out->body_len = got - (size_t)(sep + 4 - buf);
    snprintf(out->body, sizeof(out->body), "%s", sep + 4);
}

bool
serve_http_header(const struct serve_http *r, const char *name, char *val, size_t cap)
{
    const char *line = strstr(r->head, "\r\n");
    size_t len = strlen(name);

    while (line != NULL && line[2] != '\0') {
        line += 2;
        if (strncasecmp(line, name, len) == 0 && line[len] == ':') {
            const char *v = line + len + 1;
            size_t n;
            while (*v == ' ')
                v++;
            n = strcspn(v, "\r");
            snprintf(val, cap, "%.*s", (int)n, v);
            return true;
        }
        line = strstr(line, "\r\n");
    }
    return false;
}

void
serve_check(const struct serve_env *e, const char *token, const char *endpoint,
            struct serve_http *out)
{
    char headers[512];

    snprintf(headers, sizeof(headers), "Authorization: Bearer %s\r\nX-Tally-Endpoint: %s\r\n",
             token, endpoint);
    serve_http_get(e->http_port, "/v1/check", headers, out);
}

double
serve_metric(const char *page, const char *series)
{
    size_t len = strlen(series);
    const char *p = page;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, series, len) == 0 && p[len] == ' ')
            return strtod(p + len + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

double
serve_metric_now(const struct serve_env *e, const char *series)
{
    struct serve_http h;

    serve_http_get(e->http_port, "/metrics", NULL, &h);
    assert_int_equal(h.status, 200);
    return serve_metric(h.body, series);
}

char *
serve_log(const struct serve_env *e)
{
    size_t len = 0;
    char *log = test_read_file(e->d.log[0] != '\0' ? e->d.log : "/nonexistent", &len);

    if (log == NULL) {
        log = malloc(1);
        assert_non_null(log);
        log[0] = '\0';
    }
    return log;
}

int
serve_log_count(const struct serve_env *e, const char *needle)
{
    char *log = serve_log(e);
    char *line = log;
    int n = 0;

    while (line != NULL && *line != '\0') {
        char *end = strchr(line, '\n');
        if (end != NULL)
            *end = '\0';
        /* tallyd's own lines; a supervisor process writes its own kind */
        n += strncmp(line, "{\"ts\":\"", 7) == 0 && strstr(line, needle) != NULL;
        line = end != NULL ? end + 1 : NULL;
    }
    free(log);
    return n;
}

void
serve_ledger_make(const struct serve_env *e, const char *tenant)
{
    char path[STORE_PATH_MAX];
    store_db *db = NULL;

    assert_int_equal(store_tenant_dirs(e->data, tenant), TALLY_OK);
    assert_int_equal(store_path_tenant(e->data, tenant, "ledger.db", path, sizeof(path)), TALLY_OK);
    assert_int_equal(store_journal_open(path, STORE_OPEN_CREATE, NULL, &db), TALLY_OK);
    store_db_close(db);
}

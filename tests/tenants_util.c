/*
 * What the many-tenant suites share (tenants_util.h).
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serve_util.h"
#include "store.h"
#include "store_config.h"
#include "tenant.h"

#include "tenants_util.h"

int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000000/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "api", "--limit", "10/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "hot", "--limit", "100000000/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
    *state = e;
    return 0;
}

int
teardown(void **state)
{
    struct env *e = *state;

    serve_env_release(&e->s);
    free(e);
    return 0;
}

/* Tenants PREFIX000.. on plan pro, one link each, tokens into tokens[i]. */
void
add_tenants(const char *data, const char *prefix, int n, char (*tokens)[TOKEN_BUF])
{
    store_db *db = NULL;
    unsigned char *key = NULL;
    int64_t now = serve_now_ms();

    assert_int_equal(store_config_open(data, false, &db), TALLY_OK);
    assert_int_equal(store_key_load(data, &key), TALLY_OK);
    assert_int_equal(store_db_begin(db), TALLY_OK);
    for (int i = 0; i < n; i++) {
        struct store_link l;
        char name[32];
        char token[TENANT_TOKEN_LEN + 1];

        snprintf(name, sizeof(name), "%s%03d", prefix, i);
        assert_int_equal(store_tenant_add(db, name, "pro", now), TALLY_OK);
        memset(&l, 0, sizeof(l));
        tenant_link_id_new(l.id);
        tenant_token_new(token);
        assert_int_equal(tenant_token_hash(key, token, l.hash), TALLY_OK);
        snprintf(l.tenant, sizeof(l.tenant), "%s", name);
        l.created_ms = now;
        assert_int_equal(store_link_insert(db, &l), TALLY_OK);
        snprintf(tokens[i], TOKEN_BUF, "%s", token);
    }
    assert_int_equal(store_db_commit(db), TALLY_OK);
    store_key_free(key);
    store_db_close(db);
}

/* Endpoints PREFIX000.. with the policy of `like`. */
void
add_endpoints(const char *data, const char *like, const char *prefix, int n)
{
    store_db *db = NULL;
    struct tenant_endpoint ep;

    assert_int_equal(store_config_open(data, false, &db), TALLY_OK);
    assert_int_equal(store_endpoint_get(db, "", like, &ep), TALLY_OK);
    assert_int_equal(store_db_begin(db), TALLY_OK);
    for (int i = 0; i < n; i++) {
        snprintf(ep.name, sizeof(ep.name), "%s%03d", prefix, i);
        assert_int_equal(store_endpoint_put(db, &ep), TALLY_OK);
    }
    assert_int_equal(store_db_commit(db), TALLY_OK);
    store_db_close(db);
}

/* ---- a small HTTP client usable from any thread (no cmocka inside) ---- */

int64_t
now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sends GET /v1/check; the connected socket, or -1. */
int
check_send(int port, const char *token, const char *endpoint)
{
    struct sockaddr_in sa;
    char req[512];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int len;

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = snprintf(req, sizeof(req),
                   "GET /v1/check HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n"
                   "X-Tally-Endpoint: %s\r\nConnection: close\r\n\r\n",
                   token, endpoint);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        write(fd, req, (size_t)len) != len) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads the answer on fd (closed after); the HTTP status, or -1. */
int
check_read(int fd)
{
    char buf[4096];
    size_t got = 0;
    ssize_t n;
    int status = -1;

    if (fd < 0)
        return -1;
    while (got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    if (got > 12 && strncmp(buf, "HTTP/1.1 ", 9) == 0)
        status = atoi(buf + 9);
    close(fd);
    return status;
}

/* GET /v1/check; the HTTP status, or -1. */
int
check(int port, const char *token, const char *endpoint)
{
    return check_read(check_send(port, token, endpoint));
}

int
fd_count(pid_t pid, const char *needle, int *matching)
{
    char path[64], link[4096], target[4096];
    struct dirent *de;
    DIR *d;
    int n = 0;

    *matching = 0;
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    d = opendir(path);
    if (d == NULL)
        return -1;
    /* readdir() is thread-safe on distinct DIR streams (glibc); one per call here. */
    /* cppcheck-suppress readdirCalled */
    while ((de = readdir(d)) != NULL) {
        ssize_t len;
        if (de->d_name[0] == '.')
            continue;
        n++;
        snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
        len = readlink(link, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = '\0';
            if (needle != NULL && strstr(target, needle) != NULL)
                (*matching)++;
        }
    }
    closedir(d);
    return n;
}

double
metric(const struct env *e, const char *series)
{
    return serve_metric_now(&e->s, series);
}

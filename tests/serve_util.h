/*
 * What the serve suites share: a data dir with the real `tally`, the real
 * tallyd started on it (ports read from its JSON start line), a blocking
 * HTTP/1.1 client for one request per connection, and reading tallyd's log.
 *
 * Header-wide rules: functions fail the running cmocka test on anything
 * unexpected; call them from a test only.
 */
#ifndef SERVE_UTIL_H
#define SERVE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "test_daemon.h"
#include "test_support.h"

struct serve_env {
    char root[64];
    char data[128];
    struct test_daemon d;
    int http_port;
    int tcp_port; /* 0 without --tcp */
};

/** One HTTP answer: status, the raw head, and the body (NUL-terminated). */
struct serve_http {
    int status;
    char head[4096];
    char body[16384];
    size_t body_len;
};

/** Runs `tally --data DATA ARGS...` (NULL-terminated) and fails the test unless it
 *  exits 0; its stdout (first line, no newline) goes to out when not NULL. */
void serve_tally_ok(const struct serve_env *e, char *out, size_t cap, ...);
/** A fresh data dir, initialised by `tally init`. */
void serve_env_init(struct serve_env *e);
/** Kills tallyd if it still runs and removes the data dir. */
void serve_env_release(struct serve_env *e);
/** Starts tallyd --wait-ms=3000 plus up to two extra arguments (NULL to stop) and
 *  waits for its start line; sets http_port and tcp_port. */
void serve_start(struct serve_env *e, const char *extra1, const char *extra2);
/** SIGTERM; fails the test unless tallyd exits 0. */
void serve_stop(struct serve_env *e);
/** `method` `path` on 127.0.0.1:port with `headers` (each "Name: value\r\n"; may
 *  be NULL), no body, Connection: close; the whole answer into *out. */
void serve_http_request(int port, const char *method, const char *path, const char *headers,
                        struct serve_http *out);
/** serve_http_request() with GET. */
void serve_http_get(int port, const char *path, const char *headers, struct serve_http *out);
/** The value of header `name` (case-insensitive) into val; false when absent. */
bool serve_http_header(const struct serve_http *r, const char *name, char *val, size_t cap);
/** GET /v1/check with the token and the endpoint. */
void serve_check(const struct serve_env *e, const char *token, const char *endpoint,
                 struct serve_http *out);
/** The value of the sample `series` (e.g. `tally_decisions_total{result="admitted"}`)
 *  in a metrics page, or -1 when absent. */
double serve_metric(const char *page, const char *series);
/** The value of `series` on tallyd's /metrics now (GET must answer 200), -1 when absent. */
double serve_metric_now(const struct serve_env *e, const char *series);
/** tallyd's log so far; free() it. */
char *serve_log(const struct serve_env *e);
/** Lines written by tallyd itself (tally_log lines, {"ts":"...) containing `needle`;
 *  the supervisor processes share the file with lines of their own. */
int serve_log_count(const struct serve_env *e, const char *needle);
/** Gives `tenant` an empty ledger, as a tenant served before has: its first request after a
 *  start goes to its supervisor (a new tenant's is a first turn, made by tallyd without one). */
void serve_ledger_make(const struct serve_env *e, const char *tenant);
/** Monotonic milliseconds. */
int64_t serve_now_ms(void);
/** Wall-clock milliseconds (windows are aligned on them). */
int64_t serve_wall_ms(void);
void serve_sleep_ms(int ms);

#endif /* SERVE_UTIL_H */

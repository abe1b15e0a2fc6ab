/*
 * The bad-input suites' fixture: a data dir with one tenant on a small plan,
 * a real tallyd on it, and raw clients that send bytes exactly as given (the
 * binary socket and HTTP over blocking sockets with deadlines), so each suite
 * can check the exact answer to each bad input and that the daemon, and its
 * counts, survive it.
 *
 * Plan `free`: 100/1m, concurrency 1. Endpoints: `search` 5/1m, `wide`
 * 1000/1m, `export` 100/1m expensive. Tenant `acme` with two links.
 */
#ifndef BADINPUT_ENV_H
#define BADINPUT_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_client.h"
#include "test_daemon.h"

#define BI_WAIT_MS 10000 /* longest a read waits for the daemon (sanitizer builds are slow) */

struct bi_env {
    char root[128];
    char data[256];
    char token[64];
    char token2[64];
    struct test_daemon d;
    int port; /* tallyd's HTTP port */
};

/** Sets up the data dir and starts tallyd (asserts). */
void bi_env_up(struct bi_env *e);
/** Stops tallyd (it must exit 0: bad input never crashed it) and removes the dir. */
void bi_env_down(struct bi_env *e);

/** A blocking client socket to tallyd's Unix socket, or to its HTTP port. */
int bi_unix_connect(const struct bi_env *e);
int bi_tcp_connect(const struct bi_env *e);
/** Writes all n bytes (a peer that closed is not an error here). */
void bi_send(int fd, const void *p, size_t n);

/** Reads into buf until `want` bytes, EOF or BI_WAIT_MS; returns bytes read and
 *  sets *eof when the peer closed. */
size_t bi_recv(int fd, void *buf, size_t want, bool *eof);
/** True iff the peer closes within `ms` without sending anything more. */
bool bi_closed_silently(int fd, int ms);

/** Binary protocol: sends HELLO (version 1) and checks the HELLO_REPLY. */
void bi_hello(int fd);
/** Reads one whole frame into buf (PROTO_CLIENT_MSG_MAX bytes); false on EOF. */
bool bi_frame(int fd, uint8_t *buf, struct proto_frame *f);
/** Reads one frame that must be ERROR with `code`; returns its message (static). */
const char *bi_expect_error(int fd, int32_t code);
/** One CHECK on a fresh connection: the reply's status (asserts it came). */
int bi_check(const struct bi_env *e, const char *token, const char *endpoint, int64_t cost);

/** One HTTP answer as read. */
struct bi_http {
    int status;
    char head[2048];
    char body[1024];
};
/** Sends `req` on a fresh connection and reads one answer into *r. */
void bi_http(const struct bi_env *e, const char *req, struct bi_http *r);
/** Reads one answer from an open connection; false on EOF before one came. */
bool bi_http_read(int fd, struct bi_http *r);
/** GET /v1/check with the token, endpoint and cost (NULL: no header). */
void bi_http_check(const struct bi_env *e, const char *token, const char *endpoint,
                   const char *cost, struct bi_http *r);
/** Admissions left on `endpoint` for `token` now: checks until refused (HTTP); a 503 (no
 *  supervisor within --wait-ms on a loaded machine) is asked again, up to 20 times. */
int bi_admit_all(const struct bi_env *e, const char *token, const char *endpoint);

#endif /* BADINPUT_ENV_H */

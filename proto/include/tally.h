/*
 * libtally: the C client of tallyd's binary protocol (proto/PROTOCOL.md).
 *
 * Blocking use:
 *     tally_client *c;
 *     if (tally_client_open("/var/lib/tally/tally.sock", 1000, &c) == TALLY_OK) {
 *         struct tally_result r;
 *         if (tally_check(c, token, "search", 0, &r) == TALLY_OK && r.status == TALLY_ADMITTED)
 *             ...;
 *         tally_client_close(c);
 *     }
 *
 * Header-wide rules: a client handle belongs to one thread at a time. Strings are
 * borrowed for the call. Results are TALLY_OK or a negative tally_rc; a refusal
 * is a result (r.status), not an error.
 */
#ifndef TALLY_H
#define TALLY_H

#include <stdbool.h>
#include <stdint.h>

#include "tally_common.h"

typedef struct tally_client tally_client;

enum tally_status {
    TALLY_ADMITTED = 0,
    TALLY_REFUSED = 1,
    TALLY_UNAUTHORIZED = 2,
    TALLY_UNAVAILABLE = 3,
    TALLY_BAD_REQUEST = 4,
    TALLY_INTERNAL = 5
};

struct tally_result {
    enum tally_status status;
    const char *scope;   /* "plan", "link", "endpoint", "concurrency", "caller", "none"; static */
    bool degraded;       /* admitted under the degraded local limit */
    bool shadow_refused; /* shadow endpoint: would have been refused */
    bool never;          /* refused: the cost exceeds a limit */
    int64_t retry_after_ms; /* refused or unavailable */
    int64_t limit;          /* the reported window's N, -1 when none */
    int64_t period_ms;
    int64_t remaining; /* left of it after this request, never more than truly remains */
    int64_t reset_ms;  /* ms until the reported bound resets */
    int64_t slot_id;   /* concurrency slot taken (release it with tally_release), 0 when none */
    char detail[64];   /* bad request / internal: why */
};

/** Connects to `where`: a Unix socket path, or "tcp:HOST:PORT". `timeout_ms` bounds
 *  every later call too (0 = 5000). *out is owned by the caller, release with
 *  tally_client_close(). TALLY_EUNAVAIL when nobody listens there. */
TALLY_EXPORT TALLY_MUST_CHECK int tally_client_open(const char *where, int timeout_ms,
                                                    tally_client **out /* OUT */);
/** Closes the connection and frees the handle. NULL is a no-op. */
TALLY_EXPORT void tally_client_close(tally_client *c);
/** Asks whether `token` may call `endpoint` now with `cost` (0 = the endpoint's
 *  default). Blocks for the answer. */
TALLY_EXPORT TALLY_MUST_CHECK int tally_check(tally_client *c, const char *token,
                                              const char *endpoint, int64_t cost,
                                              struct tally_result *out /* OUT */);
/** Asks whether the `n` callers (1 to 4 strings "KIND:VALUE", e.g. "ip:203.0.113.7",
 *  "account:alice@example.com"; each its own budget, all must admit) may call
 *  `endpoint`, an endpoint keyed by caller, now with `cost` (0 = its default). Blocks
 *  for the answer; a malformed caller is answered TALLY_BAD_REQUEST by the daemon.
 *  TALLY_EINVAL when they do not fit one request (more than 4, or together over 419
 *  bytes). */
TALLY_EXPORT TALLY_MUST_CHECK int tally_check_callers(tally_client *c, const char *endpoint,
                                                      const char *const *callers, size_t n,
                                                      int64_t cost,
                                                      struct tally_result *out /* OUT */);
/** Releases concurrency slot `slot_id` taken by `token`. Idempotent. */
TALLY_EXPORT TALLY_MUST_CHECK int tally_release(tally_client *c, const char *token,
                                                int64_t slot_id);
/** Admin: asks tallyd to re-read its configuration now and waits until it has
 *  (what `tally` does after every change). */
TALLY_EXPORT TALLY_MUST_CHECK int tally_reload(tally_client *c);
/** "admitted", "refused", "unauthorized", "unavailable", "bad_request", "internal";
 *  static storage, never NULL. */
TALLY_EXPORT const char *tally_status_name(enum tally_status status);

/*
 * Asynchronous pipelined client: one connection driven by the caller's own event
 * loop (poll, epoll, libuv's uv_poll_t, ...). No threads, and no allocation after
 * tally_async_open(): requests live in fixed tables sized at open.
 *
 *     tally_async *a;
 *     tally_async_open("/var/lib/tally/tally.sock", 1000, 0, &a);   // blocks for the handshake
 *     tally_async_check(a, token, "search", 0, on_answer, ctx);     // queues, no I/O
 *     while (work is pending) {
 *         struct pollfd p = {tally_async_fd(a), POLLIN | (tally_async_wants_write(a) ? POLLOUT :
 * 0)}; poll(&p, 1, -1); if (tally_async_process(a) < 0) break;   // writes, reads, calls on_answer
 *     }
 *     tally_async_close(a);
 *
 * Up to the server's window (128 requests per connection, from the handshake) are
 * in flight at once; up to `queue_max` more wait in the handle and go out as
 * answers free the window. Beyond that tally_async_check() returns TALLY_ETOOBIG
 * (process answers first). Answers arrive in any order; each is matched to its
 * request by request id, and every accepted request's callback runs exactly once:
 * with TALLY_OK and the answer, or with an error when the connection fails
 * (TALLY_EUNAVAIL: the server closed; TALLY_EPROTO: it sent something unreadable)
 * or the handle is closed first (TALLY_ECANCELED). A handle whose connection
 * failed stays failed: open a new one.
 */
typedef struct tally_async tally_async;

/** Called once per request. `r` (borrowed, valid during the call) holds the answer
 *  when rc == TALLY_OK; otherwise rc says why there is none and *r is zeroed. The
 *  callback may queue new requests; it must not close the handle. */
typedef void (*tally_async_cb)(void *user, int rc, const struct tally_result *r);

/** Connects to `where` (a Unix socket path, or "tcp:HOST:PORT") and does the
 *  handshake, blocking up to `timeout_ms` (0 = 5000); the socket is non-blocking
 *  afterwards. `queue_max`: requests kept beyond the in-flight window (0 = 1024,
 *  at most 65536, TALLY_EINVAL beyond; about 530 bytes each, allocated here).
 *  *out is owned by the caller, release with tally_async_close(). */
TALLY_EXPORT TALLY_MUST_CHECK int tally_async_open(const char *where, int timeout_ms,
                                                   unsigned queue_max, tally_async **out /* OUT */);
/** Fails every pending request with TALLY_ECANCELED (callbacks run here), closes
 *  the connection and frees the handle. NULL is a no-op. */
TALLY_EXPORT void tally_async_close(tally_async *a);
/** The socket to poll: readable means tally_async_process() has answers to read;
 *  poll for writable too while tally_async_wants_write(). Owned by the handle. */
TALLY_EXPORT int tally_async_fd(const tally_async *a);
/** True while encoded requests wait for the socket to accept them. */
TALLY_EXPORT bool tally_async_wants_write(const tally_async *a);
/** Requests accepted whose callback has not run yet (in flight and queued). */
TALLY_EXPORT unsigned tally_async_pending(const tally_async *a);
/** Queues a CHECK of (`token`, `endpoint`, `cost`) as tally_check() would send it;
 *  `cb(user, ...)` runs later from tally_async_process() or tally_async_close().
 *  No I/O. TALLY_ETOOBIG when window and queue are full, TALLY_EINVAL for a bad
 *  endpoint or cost, the connection's error once it failed; on any error the
 *  callback never runs. */
TALLY_EXPORT TALLY_MUST_CHECK int tally_async_check(tally_async *a, const char *token,
                                                    const char *endpoint, int64_t cost,
                                                    tally_async_cb cb, void *user);
/** Writes what the socket accepts now, without blocking. TALLY_OK (check
 *  tally_async_wants_write() for a rest) or the connection's error. */
TALLY_EXPORT TALLY_MUST_CHECK int tally_async_flush(tally_async *a);
/** Reads what has arrived without blocking, runs the callbacks of the answers, moves
 *  queued requests into the window, then flushes. Returns how many callbacks ran
 *  (>= 0), or the connection's error: then every pending callback has run with it. */
TALLY_EXPORT int tally_async_process(tally_async *a);

#endif /* TALLY_H */

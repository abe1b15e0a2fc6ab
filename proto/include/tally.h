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
    const char *scope;      /* "plan", "link", "endpoint", "concurrency", "none"; static */
    bool degraded;          /* admitted under the degraded local limit */
    bool shadow_refused;    /* shadow endpoint: would have been refused */
    bool never;             /* refused: the cost exceeds a limit */
    int64_t retry_after_ms; /* refused or unavailable */
    int64_t limit;          /* the reported bound, -1 when none */
    int64_t period_ms;
    int64_t remaining;
    int64_t reset_ms; /* ms until the reported bound resets */
    int64_t slot_id;  /* concurrency slot taken (release it with tally_release), 0 when none */
    char detail[64];  /* bad request / internal: why */
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
/** Releases concurrency slot `slot_id` taken by `token`. Idempotent. */
TALLY_EXPORT TALLY_MUST_CHECK int tally_release(tally_client *c, const char *token,
                                                int64_t slot_id);
/** Admin: asks tallyd to re-read its configuration now and waits until it has
 *  (what `tally` does after every change). */
TALLY_EXPORT TALLY_MUST_CHECK int tally_reload(tally_client *c);

#endif /* TALLY_H */

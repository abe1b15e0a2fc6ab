/*
 * proto_client: the client protocol over the Unix socket (and TCP) of tallyd,
 * on the framing of proto_frame.h. A client opens with HELLO (versions it
 * speaks) and then pipelines requests, each with its own request id; answers
 * come back in any order carrying the id. See proto/PROTOCOL.md.
 *
 * Header-wide rules: pure codecs; decoders validate every field (names with
 * tenant_name_valid, numbers in range, no trailing bytes) and return
 * TALLY_EPROTO on anything else. Encoders write one whole frame into a caller
 * buffer of at least PROTO_CLIENT_MSG_MAX bytes and return its length, or 0 when
 * a field is out of range.
 */
#ifndef PROTO_CLIENT_H
#define PROTO_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_frame.h"
#include "tenant.h"

enum proto_client_type {
    PROTO_C_HELLO = 32,       /* client -> tallyd: min and max version spoken */
    PROTO_C_HELLO_REPLY = 33, /* tallyd -> client: chosen version, limits */
    PROTO_C_CHECK = 34,       /* may this token make this call now? */
    PROTO_C_CHECK_REPLY = 35,
    PROTO_C_RELEASE = 36, /* release a concurrency slot */
    PROTO_C_RELEASE_REPLY = 37,
    PROTO_C_RELOAD = 38, /* admin: re-read the configuration now (tally, local only) */
    PROTO_C_RELOAD_REPLY = 39,
    PROTO_C_ERROR = 40, /* the request could not be read; the connection closes */
    /* 41, 42: STATS (proto_stats.h) */
    PROTO_C_CHECK_CALLERS = 43 /* a check on an endpoint keyed by caller; answer CHECK_REPLY */
};

/* Answer status of a CHECK, mirrored by `tally check` exit codes and HTTP statuses. */
enum proto_status {
    PROTO_ADMITTED = 0,     /* HTTP 200, exit 0 */
    PROTO_REFUSED = 1,      /* HTTP 429 (or 403), exit 1 */
    PROTO_UNAUTHORIZED = 2, /* HTTP 401, exit 2 */
    PROTO_UNAVAILABLE = 3,  /* HTTP 503, exit 3 */
    PROTO_BAD_REQUEST = 4,  /* HTTP 400, exit 64: unknown endpoint, bad cost */
    PROTO_INTERNAL = 5      /* HTTP 500: the daemon could not decide (storage), exit 74 */
};

/* Flags of a CHECK_REPLY frame. */
enum proto_check_flags {
    PROTO_F_DEGRADED = 1 << 0,       /* admitted under the degraded local limit */
    PROTO_F_SHADOW_REFUSED = 1 << 1, /* shadow endpoint: would have been refused */
    PROTO_F_NEVER = 1 << 2           /* refused: the cost exceeds a limit, retrying cannot help */
};

#define PROTO_TOKEN_WIRE_MAX 255
/* Every client message fits in this many bytes, header included: encoders need
 * an output buffer this large, and servers read no larger frame. */
#define PROTO_CLIENT_MSG_MAX 512

struct proto_check {
    char token[PROTO_TOKEN_WIRE_MAX + 1];
    char endpoint[TENANT_NAME_MAX + 1];
    int64_t cost; /* 0 = the endpoint's default */
};

/* Callers of one CHECK_CALLERS: 0..4 (the daemon answers 0 with bad request), each
 * 1..PROTO_CALLER_WIRE_MAX bytes without NUL, validated by the daemon (400 semantics). The
 * frame's 512 bytes bound them together: with a 63-byte endpoint, 419 bytes of callers. */
#define PROTO_CALLERS_WIRE_MAX 4
#define PROTO_CALLER_WIRE_MAX  273 /* KIND (16) + ':' + VALUE (256) */
struct proto_check_callers {
    char endpoint[TENANT_NAME_MAX + 1];
    int64_t cost; /* 0 = the endpoint's default */
    uint32_t n;
    uint16_t len[PROTO_CALLERS_WIRE_MAX];
    char caller[PROTO_CALLERS_WIRE_MAX][PROTO_CALLER_WIRE_MAX + 1]; /* NUL-terminated */
};
struct proto_check_reply {
    uint8_t status;         /* enum proto_status */
    uint8_t scope;          /* enum tenant_scope of the bound reported */
    uint16_t flags;         /* enum proto_check_flags */
    int64_t retry_after_ms; /* refused or unavailable: wait this long */
    int64_t limit;          /* the reported window's N (admitted or refused), -1 when none */
    int64_t period_ms;      /* its period */
    int64_t remaining;      /* after this request, at most what truly remains; -1 when none */
    int64_t reset_ms;       /* ms until it resets */
    int64_t slot_id;        /* concurrency slot taken, 0 when none */
    char detail[64];        /* bad request / internal: a short reason, "" otherwise */
};

struct proto_release {
    char token[PROTO_TOKEN_WIRE_MAX + 1];
    int64_t slot_id;
};

struct proto_hello {
    uint8_t min_version;
    uint8_t max_version;
};

struct proto_hello_reply {
    uint8_t version;
    uint32_t max_frame;    /* PROTO_FRAME_MAX */
    uint32_t max_inflight; /* requests a connection may have outstanding */
};

/* Encoders: whole frame into out (>= PROTO_CLIENT_MSG_MAX bytes); length, or 0. */
size_t proto_hello_encode(uint8_t *out, uint32_t id, const struct proto_hello *m);
size_t proto_hello_reply_encode(uint8_t *out, uint32_t id, const struct proto_hello_reply *m);
size_t proto_check_encode(uint8_t *out, uint32_t id, const struct proto_check *m);
size_t proto_check_callers_encode(uint8_t *out, uint32_t id, const struct proto_check_callers *m);
size_t proto_check_reply_encode(uint8_t *out, uint32_t id, const struct proto_check_reply *m);
size_t proto_release_encode(uint8_t *out, uint32_t id, const struct proto_release *m);
/** RELEASE_REPLY and RELOAD_REPLY carry one status byte; RELOAD carries nothing. */
size_t proto_status_encode(uint8_t *out, uint8_t type, uint32_t id, uint8_t status);
size_t proto_empty_encode(uint8_t *out, uint8_t type, uint32_t id);
/** ERROR: a code (tally rc) and a short message; the sender closes after it. */
size_t proto_error_encode(uint8_t *out, uint32_t id, int32_t code, const char *message);

/* Decoders of a frame's payload: TALLY_OK or TALLY_EPROTO. */
TALLY_MUST_CHECK int proto_hello_decode(const struct proto_frame *f, struct proto_hello *out);
TALLY_MUST_CHECK int proto_hello_reply_decode(const struct proto_frame *f,
                                              struct proto_hello_reply *out);
TALLY_MUST_CHECK int proto_check_decode(const struct proto_frame *f, struct proto_check *out);
TALLY_MUST_CHECK int proto_check_callers_decode(const struct proto_frame *f,
                                                struct proto_check_callers *out);
TALLY_MUST_CHECK int proto_check_reply_decode(const struct proto_frame *f,
                                              struct proto_check_reply *out);
TALLY_MUST_CHECK int proto_release_decode(const struct proto_frame *f, struct proto_release *out);
TALLY_MUST_CHECK int proto_status_decode(const struct proto_frame *f, uint8_t *status);
TALLY_MUST_CHECK int proto_error_decode(const struct proto_frame *f, int32_t *code, char *msg,
                                        size_t cap);

/* The blocking connection of libtally (proto/client.c, tally.h) for the programs that need more
 * than tally.h offers: a request it has no call for (STATS, `tally stats`), or their own pipelined
 * reads and writes on the socket (the load generators). `where` is a Unix socket path or
 * "tcp:HOST:PORT" (a numeric host), as for tally_client_open(). */
struct tally_client;

/** Connects to `where` without a HELLO (for a peer that speaks another protocol too).
 *  *fd (blocking, close-on-exec) is owned by the caller, release with close(). TALLY_OK,
 *  TALLY_EUNAVAIL (nobody listens), TALLY_EPERM, TALLY_EINVAL, TALLY_ETOOBIG, TALLY_EIO. */
TALLY_MUST_CHECK int proto_client_dial(const char *where, int *fd /* OUT */);
/** tally_client_open(), then hands its socket over: *fd (HELLO exchanged, nothing unread) is
 *  owned by the caller, release with close(); *max_inflight is the server's window. TALLY_OK
 *  or an error of tally_client_open(). */
TALLY_MUST_CHECK int proto_client_connect(const char *where, int timeout_ms, int *fd /* OUT */,
                                          uint32_t *max_inflight /* OUT */);
/** A request id for the next request on c. */
uint32_t proto_client_next_id(struct tally_client *c);
/** Sends frame msg[0..len) (request id `id`, encoded by the caller) on c and waits, within c's
 *  timeout, for the answer carrying `id`: *reply points into c's buffer, valid until the next
 *  call on c. An ERROR answer returns its code (TALLY_EPROTO when it has none). TALLY_OK,
 *  TALLY_EINVAL (len 0), TALLY_ETIMEDOUT, TALLY_EUNAVAIL, TALLY_EPROTO, TALLY_EIO. */
TALLY_MUST_CHECK int proto_client_request(struct tally_client *c, const uint8_t *msg, size_t len,
                                          uint32_t id, struct proto_frame *reply /* OUT */);

#endif /* PROTO_CLIENT_H */

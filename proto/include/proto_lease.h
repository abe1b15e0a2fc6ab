/*
 * proto_lease: the lease channel between child counters and their tenant's supervisor
 * (docs/LEASE-PROTOCOL.md). Each message is one proto_frame whose type is one of
 * enum proto_lease_type (1..31; the client protocol uses the codes above) and whose payload is
 * the big-endian encoding below. Frame flags are reserved (0) and the frame's request id is free
 * for the transport: matching uses the origin.
 *
 * Every message carries an origin (child, incarnation, seq): a request carries the sender's, a
 * reply echoes the request's. The supervisor deduplicates on it, so a request is retransmitted
 * with the same origin and the same fields. Budgets are named by (endpoint, link id), never by
 * key strings: the supervisor resolves the path from its own copy of the tenant configuration.
 * Times on the wire are relative (TTLs, waits); nothing carries an absolute clock reading.
 *
 * Payloads (str = u8 length + bytes; link ids are "lnk_" + 16 hex):
 *   origin        str child, u64 incarnation, u64 seq              (every message starts with it)
 *   HELLO         str tenant
 *   WELCOME       u64 epoch, u32 children, u32 concurrency, i64 lease_ttl_ms, i64 heartbeat_ms
 *   ACQUIRE       str endpoint, str link, i64 want, i64 need, i64 rate_milli,
 *                 u64 report_lease, i64 report_used, i64 debt, u8 flags
 *   GRANT         str endpoint, str link, u64 lease_id, i64 n, i64 ttl_ms, u32 flags,
 *                 u32 holders, u64 epoch, i64 start_ms
 *   DENY          str endpoint, str link, u8 scope, u8 flags, i64 retry_after_ms, i64 limit
 *   RETURN        u64 lease_id, i64 used
 *   RETURN_ACK    u64 lease_id, i64 credited
 *   HEARTBEAT     str endpoint, u8 count, count x (str link, i64 rate_milli, i64 debt)
 *   HB_ACK        u64 epoch, u32 children
 *   SLOT_ACQUIRE  str endpoint, str link
 *   SLOT_GRANT    str link, i64 slot_id, i64 ttl_ms
 *   SLOT_DENY     str link, i64 retry_after_ms, i64 limit
 *   SLOT_RELEASE  str link, i64 slot_id
 *   SLOT_RELEASE_ACK str link, i64 slot_id, u8 released
 *   ERROR         u16 code, i64 retry_after_ms
 *   RECALL        str endpoint, str link, u64 lease_id   (pushed by the supervisor, answers no
 *                 request: origin = the holder (child, incarnation) and seq = lease_id)
 *
 * Header-wide rules: pure code, no allocation, no clock. Structs are caller-owned values; strings
 * inside them are NUL-terminated arrays. The decoder accepts exactly what proto_lease_validate
 * accepts and the encoder refuses anything else, so every decoded message is in range.
 */
#ifndef PROTO_LEASE_H
#define PROTO_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_frame.h"
#include "tally_common.h"
#include "tenant.h"

enum proto_lease_type {
    PROTO_LEASE_HELLO = 1,
    PROTO_LEASE_WELCOME = 2,
    PROTO_LEASE_ACQUIRE = 3,
    PROTO_LEASE_GRANT = 4,
    PROTO_LEASE_DENY = 5,
    PROTO_LEASE_RETURN = 6,
    PROTO_LEASE_RETURN_ACK = 7,
    PROTO_LEASE_HEARTBEAT = 8,
    PROTO_LEASE_HB_ACK = 9,
    PROTO_LEASE_SLOT_ACQUIRE = 10,
    PROTO_LEASE_SLOT_GRANT = 11,
    PROTO_LEASE_SLOT_DENY = 12,
    PROTO_LEASE_SLOT_RELEASE = 13,
    PROTO_LEASE_SLOT_RELEASE_ACK = 14,
    PROTO_LEASE_ERROR = 15,
    PROTO_LEASE_RECALL = 16, /* supervisor to child, unsolicited: stop using a lease */
};
#define PROTO_LEASE_TYPE_MIN 1
#define PROTO_LEASE_TYPE_MAX 16

/* Cluster mode: the supervisor's journal goes to the cluster's log through tallyd, on the same
 * channel, in frames of their own (not lease messages: no origin). Every payload is big-endian.
 *   SYNC   sup -> tallyd  nonce (8): answer once everything earlier in the log is applied here
 *   READY  tallyd -> sup  nonce (8) | status (1): 0, the supervisor may replay its journal copy;
 *                         else it exits (this host does not lead)
 *   BATCH  sup -> tallyd  seq (8) | op (1) | body: one LEDGER record (op and body below),
 *                         appended to the log
 *   DONE   tallyd -> sup  seq (8) | status (1): 0, BATCH seq is committed on a majority and
 *                         applied here; else it may not be: the supervisor exits and a new one
 *                         replays what the log holds
 * A supervisor's seqs start at a random number, so an answer meant for an earlier process of
 * the tenant is not taken for its own. Ops: APPEND (body: count (4), then count times len (4) |
 * a journal record), BEGIN (a replacement of every record starts: empty body), CHUNK (records
 * of it, as APPEND), END (the journal becomes the replacement). */
enum proto_journal_type {
    PROTO_JOURNAL_SYNC = 32,
    PROTO_JOURNAL_READY = 33,
    PROTO_JOURNAL_BATCH = 34,
    PROTO_JOURNAL_DONE = 35,
};
enum proto_journal_op {
    PROTO_JOURNAL_APPEND = 'A',
    PROTO_JOURNAL_BEGIN = 'B',
    PROTO_JOURNAL_CHUNK = 'C',
    PROTO_JOURNAL_END = 'E',
};
#define PROTO_JOURNAL_BODY_MAX (60 * 1024) /* a BATCH's body: within one frame */

/* Bounds checked by the codec. */
#define PROTO_LEASE_ID_MAX    ((uint64_t)INT64_MAX) /* incarnations, seqs, lease ids: SQLite ints */
#define PROTO_LEASE_N_MAX     TENANT_LIMIT_MAX_N    /* lease sizes, used, debt, want */
#define PROTO_LEASE_MS_MAX    TENANT_LIMIT_MAX_PERIOD_MS /* TTLs, waits, heartbeat periods */
#define PROTO_LEASE_RATE_MAX  ((int64_t)1 << 52)         /* milli-tokens per second */
#define PROTO_LEASE_COUNT_MAX 65535                      /* children, holders, concurrency */
#define PROTO_LEASE_HB_MAX    4                          /* links per HEARTBEAT */
#define PROTO_LEASE_LINK_MAX  TENANT_LINK_ID_LEN
#define PROTO_LEASE_LINK_BUF  24   /* a link id, its NUL, rounded up */
#define PROTO_LEASE_FRAME_MAX 1024 /* every lease frame fits: size send buffers with it */

/* ACQUIRE flags. */
enum proto_lease_acquire_flags {
    PROTO_LEASE_ACQ_NEXT = 1 << 0, /* a lease for the windows after the current ones, from the
                                      earliest end of a window of the path on (need 0) */
};
/* GRANT flags. */
enum proto_lease_grant_flags {
    PROTO_LEASE_GRANT_PASS = 1 << 0, /* pass-through: near exhaustion, do not prefetch */
    PROTO_LEASE_GRANT_KEEP = 1 << 1, /* plentiful and small: keep it to its deadline when idle */
    PROTO_LEASE_GRANT_EDGE = 1 << 2, /* the TTL ends at a window boundary: no renewal by age */
    PROTO_LEASE_GRANT_LAST = 1 << 3, /* with EDGE: every window of its path ends at its deadline,
                                        so what is left then is worth nothing: not reported */
};
/* DENY flags. */
enum proto_lease_deny_flags {
    PROTO_LEASE_DENY_NEVER = 1 << 0, /* the cost exceeds a limit: never admissible */
    PROTO_LEASE_DENY_PASS = 1 << 1,  /* a prefetch refused in pass-through: ask with a request */
};

/* ERROR codes: what the child should do about it. */
enum proto_lease_error_code {
    PROTO_LEASE_E_HELLO = 1,    /* unknown or newer incarnation: send HELLO first */
    PROTO_LEASE_E_STALE = 2,    /* older incarnation or seq outside the window: ignore */
    PROTO_LEASE_E_LINK = 3,     /* link unknown, revoked, expired or not allowed here */
    PROTO_LEASE_E_ENDPOINT = 4, /* endpoint not configured for this tenant */
    PROTO_LEASE_E_BUSY = 5,     /* a bounded table is full: retry after retry_after_ms */
    PROTO_LEASE_E_INVALID = 6,  /* well-formed but meaningless (e.g. tenant mismatch) */
};
#define PROTO_LEASE_E_MAX 6

struct proto_lease_origin {
    char child[TENANT_NAME_MAX + 1]; /* the child's name (its endpoint) */
    uint64_t incarnation;            /* 1.., grows with every restart of the child */
    uint64_t seq;                    /* 1.., grows with every new request of an incarnation */
};

struct proto_lease_hello {
    char tenant[TENANT_NAME_MAX + 1];
};

struct proto_lease_welcome {
    uint64_t epoch;       /* supervisor restarts */
    uint32_t children;    /* P_known: children registered */
    uint32_t concurrency; /* K slots per link, 0 = unbounded (no slot needed) */
    int64_t lease_ttl_ms; /* T_lease */
    int64_t heartbeat_ms; /* heartbeat period */
};

struct proto_lease_acquire {
    char endpoint[TENANT_NAME_MAX + 1];
    char link[PROTO_LEASE_LINK_BUF];
    int64_t want;          /* lease size asked for, >= max(need, 1) */
    int64_t need;          /* cost of the request waiting for it; 0 = prefetch */
    int64_t rate_milli;    /* the child's EWMA rate on this link, milli-tokens/s */
    uint64_t report_lease; /* a lease of this incarnation the child stopped using (0 = none) */
    int64_t report_used;   /* tokens used from it (0 when no report) */
    int64_t debt;          /* degraded admissions on this link not yet reported */
    uint8_t flags;         /* enum proto_lease_acquire_flags */
};

struct proto_lease_grant {
    char endpoint[TENANT_NAME_MAX + 1];
    char link[PROTO_LEASE_LINK_BUF];
    uint64_t lease_id;
    int64_t n;
    int64_t ttl_ms; /* relative to when the child sent the request */
    uint32_t flags; /* enum proto_lease_grant_flags */
    uint32_t holders;
    uint64_t epoch;
    int64_t start_ms; /* usable only this long after the grant arrives (a NEXT lease), else 0;
                         ttl_ms counts from the send as always, start included */
};

struct proto_lease_deny {
    char endpoint[TENANT_NAME_MAX + 1];
    char link[PROTO_LEASE_LINK_BUF];
    uint8_t scope;          /* enum tenant_scope that fired */
    uint8_t flags;          /* enum proto_lease_deny_flags */
    int64_t retry_after_ms; /* -1 (TENANT_RETRY_NEVER) with PROTO_LEASE_DENY_NEVER */
    int64_t limit;          /* that bound's N, 0 when unknown */
};

struct proto_lease_return {
    uint64_t lease_id;
    int64_t used; /* final: the child stopped using the lease before sending */
};

struct proto_lease_return_ack {
    uint64_t lease_id;
    int64_t credited; /* tokens given back, 0 when the lease was closed already */
};

struct proto_lease_hb_entry {
    char link[PROTO_LEASE_LINK_BUF];
    int64_t rate_milli;
    int64_t debt; /* degraded admissions not yet reported */
};

struct proto_lease_heartbeat {
    char endpoint[TENANT_NAME_MAX + 1];
    uint32_t count; /* 0..PROTO_LEASE_HB_MAX */
    struct proto_lease_hb_entry e[PROTO_LEASE_HB_MAX];
};

struct proto_lease_hb_ack {
    uint64_t epoch;
    uint32_t children;
};

struct proto_lease_slot_acquire {
    char endpoint[TENANT_NAME_MAX + 1];
    char link[PROTO_LEASE_LINK_BUF];
};

struct proto_lease_slot_grant {
    char link[PROTO_LEASE_LINK_BUF];
    int64_t slot_id; /* 0: the plan bounds no concurrency, nothing to release */
    int64_t ttl_ms;
};

struct proto_lease_slot_deny {
    char link[PROTO_LEASE_LINK_BUF];
    int64_t retry_after_ms;
    int64_t limit; /* K */
};

struct proto_lease_slot_release {
    char link[PROTO_LEASE_LINK_BUF];
    int64_t slot_id;
};

struct proto_lease_slot_release_ack {
    char link[PROTO_LEASE_LINK_BUF];
    int64_t slot_id;
    bool released; /* false when it was released or expired already (idempotent) */
};

struct proto_lease_error {
    uint16_t code; /* enum proto_lease_error_code */
    int64_t retry_after_ms;
};

/* A budget of the lease's path ran short while the lease was kept: the holder stops using it
 * and reports it (RETURN, or on its next ACQUIRE) so that the supervisor credits what is
 * left. Advisory: safety never depends on it. Idempotent: a lease already retired, unknown or
 * of another incarnation is ignored. */
struct proto_lease_recall {
    char endpoint[TENANT_NAME_MAX + 1];
    char link[PROTO_LEASE_LINK_BUF];
    uint64_t lease_id;
};

/* One message: type, origin (sender's or echoed), and the body for that type. */
struct proto_lease_msg {
    uint8_t type; /* enum proto_lease_type */
    struct proto_lease_origin origin;
    union {
        struct proto_lease_hello hello;
        struct proto_lease_welcome welcome;
        struct proto_lease_acquire acquire;
        struct proto_lease_grant grant;
        struct proto_lease_deny deny;
        struct proto_lease_return ret;
        struct proto_lease_return_ack return_ack;
        struct proto_lease_heartbeat heartbeat;
        struct proto_lease_hb_ack hb_ack;
        struct proto_lease_slot_acquire slot_acquire;
        struct proto_lease_slot_grant slot_grant;
        struct proto_lease_slot_deny slot_deny;
        struct proto_lease_slot_release slot_release;
        struct proto_lease_slot_release_ack slot_release_ack;
        struct proto_lease_error error;
        struct proto_lease_recall recall;
    };
};

/** Name of a lease message type ("ACQUIRE"), "UNKNOWN" otherwise. Static storage. */
const char *proto_lease_type_name(uint8_t type);
/** True iff `type` goes from supervisor to child (a reply, or a RECALL). */
bool proto_lease_is_reply(uint8_t type);
/** Checks every field of `m` (borrowed) against the ranges above: names valid
 *  (tenant_name_valid, tenant_link_id_valid), numbers in range, flags known. TALLY_OK or
 *  TALLY_EPROTO. */
TALLY_MUST_CHECK int proto_lease_validate(const struct proto_lease_msg *m);
/** Encodes `m` (borrowed) as one whole frame (header + payload) into buf of `cap` bytes;
 *  *len gets the frame length. TALLY_OK, TALLY_EPROTO when `m` is invalid, TALLY_ETOOBIG when
 *  cap is short (PROTO_LEASE_FRAME_MAX always suffices). Nothing useful is in buf on error. */
TALLY_MUST_CHECK int proto_lease_encode(const struct proto_lease_msg *m, uint32_t request_id,
                                        uint8_t *buf, size_t cap, size_t *len /* OUT */);
/** Decodes frame `f` (borrowed) into *out: the type must be a lease type, the frame flags 0,
 *  the payload exactly as long as its fields, and the message valid. TALLY_OK or TALLY_EPROTO
 *  (*out unspecified). */
TALLY_MUST_CHECK int proto_lease_decode(const struct proto_frame *f,
                                        struct proto_lease_msg *out /* OUT */);

#endif /* PROTO_LEASE_H */

/*
 * proto_caller: the channel between tallyd and a caller authority (one of the
 * processes that count the budgets of endpoints keyed by caller;
 * docs/LEASE-PROTOCOL.md §6), on the framing of proto_frame.h. tallyd sends a
 * DECIDE per request and authority (the callers of the request that the
 * authority owns, by their keyed hash, and the endpoint's policy as tallyd
 * read it); the authority answers with a VERDICT carrying the frame's request
 * id. A request whose callers belong to several authorities is sent as a HOLD
 * (a DECIDE with PROTO_CALLER_F_HOLD): admitted, it is charged like a DECIDE and
 * can be taken back with a CANCEL when another authority refused.
 *
 * Header-wide rules: pure codecs; decoders validate every field (names,
 * algorithm, limits, counts, flags, no trailing bytes) and return TALLY_EPROTO on
 * anything else; encoders refuse what the decoder would and return the frame's
 * length, or 0.
 */
#ifndef PROTO_CALLER_H
#define PROTO_CALLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_frame.h"
#include "tenant.h"
#include "tenant_callers.h"

enum proto_caller_type {
    PROTO_CALLER_DECIDE = 48,  /* tallyd -> authority */
    PROTO_CALLER_VERDICT = 49, /* authority -> tallyd */
    PROTO_CALLER_CANCEL = 50,  /* tallyd -> authority: take a HOLD back (no answer) */
};

#define PROTO_CALLER_F_HOLD 1 /* DECIDE flag: remember how to take the charge back */

/* Every message fits in this many bytes, header included. */
#define PROTO_CALLER_MSG_MAX 512

struct proto_caller_decide {
    char endpoint[TENANT_NAME_MAX + 1];
    enum tenant_algorithm algorithm;
    struct tenant_limits limits;
    int64_t max_callers; /* this authority's share of the endpoint's ceiling, >= 1 */
    int64_t cost;        /* 1..TENANT_COST_MAX */
    bool hold;
    uint32_t n; /* 1..TENANT_CALLERS_MAX */
    unsigned char keys[TENANT_CALLERS_MAX][TENANT_CALLER_KEY_BYTES];
};

struct proto_caller_verdict {
    bool admitted;
    bool never;
    bool sketched;
    uint8_t caller;         /* index in the DECIDE's keys of the caller reported */
    int64_t retry_after_ms; /* 0, > 0, or TENANT_RETRY_NEVER */
    int64_t limit;
    int64_t period_ms;
    int64_t remaining;
    int64_t reset_ms; /* wall clock */
    bool failed;      /* the authority could not decide (no memory): not admitted */
    uint64_t entries; /* exact entries the authority holds, every endpoint (for /metrics) */
    uint64_t bytes;   /* memory of its caller tables, sketches included */
};

size_t proto_caller_decide_encode(uint8_t *out, uint32_t id, const struct proto_caller_decide *m);
size_t proto_caller_verdict_encode(uint8_t *out, uint32_t id, const struct proto_caller_verdict *m);
/** CANCEL of the HOLD sent with request id `hold_id`. */
size_t proto_caller_cancel_encode(uint8_t *out, uint32_t id, uint32_t hold_id);

TALLY_MUST_CHECK int proto_caller_decide_decode(const struct proto_frame *f,
                                                struct proto_caller_decide *out /* OUT */);
TALLY_MUST_CHECK int proto_caller_verdict_decode(const struct proto_frame *f,
                                                 struct proto_caller_verdict *out /* OUT */);
TALLY_MUST_CHECK int proto_caller_cancel_decode(const struct proto_frame *f,
                                                uint32_t *hold_id /* OUT */);

#endif /* PROTO_CALLER_H */

/*
 * proto_stats: the STATS request of the client protocol (proto/PROTOCOL.md),
 * what `tally stats [TENANT]` asks a running tallyd: its decision counters,
 * its supervisors and, for one tenant, each endpoint's child counter. An admin
 * request, answered from counters the daemon keeps anyway; the answer may be
 * larger than other client messages (up to PROTO_STATS_REPLY_MAX bytes).
 *
 * Header-wide rules: pure codecs, as proto_client.h. Encoders write one whole
 * frame and return its length, or 0 when it does not fit or a field is out of
 * range; decoders return TALLY_OK or TALLY_EPROTO.
 */
#ifndef PROTO_STATS_H
#define PROTO_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "proto_frame.h"
#include "tenant.h"

#define PROTO_C_STATS       41 /* admin: counters, and a tenant's endpoints */
#define PROTO_C_STATS_REPLY 42
#define PROTO_C_FLUSH       44 /* admin: a tenant's child counters give their leases back now */
#define PROTO_C_FLUSH_REPLY 45 /* u8 status: 0 done, 1 unknown tenant */

#define PROTO_STATS_ENDPOINTS_MAX 64 /* endpoints listed; `more` says some were left out */
#define PROTO_STATS_REPLY_MAX     8192

/* STATS_REPLY.tenant_status */
enum proto_stats_tenant {
    PROTO_STATS_NO_TENANT = 0,
    PROTO_STATS_TENANT = 1,
    PROTO_STATS_UNKNOWN = 2
};

/* An endpoint's child counter, as its counters and answers show it. */
struct proto_stats_endpoint {
    char name[TENANT_NAME_MAX + 1];
    uint8_t mode;      /* 0 normal, 1 degraded (fail-open), 2 unavailable (fail-closed) */
    uint8_t reachable; /* its supervisor answers */
    uint32_t links;    /* links it holds state for */
    uint32_t leases;   /* live leases */
    uint64_t admitted, refused, degraded, unavailable;
};

struct proto_stats_reply {
    uint64_t checks, admitted, refused, unauthorized, bad_request, unavailable, internal;
    uint64_t degraded, shadow_refused, reloads;
    uint64_t sup_starts, sup_restarts, sup_idle_exits, sup_crashes;
    uint32_t sup_live, children, links_live;
    uint8_t tenant_status; /* enum proto_stats_tenant */
    uint8_t sup_up;        /* the tenant's supervisor is running */
    uint32_t sup_pid;      /* its pid, 0 when none */
    uint8_t more;          /* endpoints past PROTO_STATS_ENDPOINTS_MAX were left out */
    uint8_t n_endpoints;
    struct proto_stats_endpoint ep[PROTO_STATS_ENDPOINTS_MAX];
};

/** STATS: `tenant` "" for the daemon only. out >= PROTO_CLIENT_MSG_MAX bytes (512). */
size_t proto_stats_encode(uint8_t *out, uint32_t id, const char *tenant);
/** FLUSH of `tenant` (a valid name): what `tally usage` sends before it reads the tenant's
 *  ledger, so that leases come back with what they admitted. The reply is a status frame. */
size_t proto_flush_encode(uint8_t *out, uint32_t id, const char *tenant);
TALLY_MUST_CHECK int proto_flush_decode(const struct proto_frame *f,
                                        char tenant[TENANT_NAME_MAX + 1] /* OUT */);
TALLY_MUST_CHECK int proto_stats_decode(const struct proto_frame *f,
                                        char tenant[TENANT_NAME_MAX + 1] /* OUT */);
/** STATS_REPLY into out (cap >= PROTO_STATS_REPLY_MAX). */
size_t proto_stats_reply_encode(uint8_t *out, size_t cap, uint32_t id,
                                const struct proto_stats_reply *m);
TALLY_MUST_CHECK int proto_stats_reply_decode(const struct proto_frame *f,
                                              struct proto_stats_reply *out /* OUT */);

#endif /* PROTO_STATS_H */

/*
 * proto_cluster: the CLUSTER request of the client protocol (proto/PROTOCOL.md),
 * asked by `tally cluster status`: this host's place in its cluster, the leader,
 * the log's indexes and each member with its replication progress (known by the
 * leader only). A tallyd that is not in a cluster answers with in_cluster 0.
 */
#ifndef PROTO_CLUSTER_H
#define PROTO_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_frame.h"

#define PROTO_C_CLUSTER       46 /* admin: the cluster as this host sees it */
#define PROTO_C_CLUSTER_REPLY 47

#define PROTO_CLUSTER_MEMBERS_MAX 16
#define PROTO_CLUSTER_ADDR_MAX    64
#define PROTO_CLUSTER_REPLY_MAX   4096

/* A member: its role in the member list (0 voter, 1 front) and in the log's current
 * configuration (0 voter, 1 standby, 2 spare, 3 not in it yet). */
struct proto_cluster_member {
    uint64_t id;
    uint8_t role;
    uint8_t log_role;
    uint8_t progress_known; /* match_index is the leader's knowledge */
    uint64_t match_index;
    char address[PROTO_CLUSTER_ADDR_MAX];
    uint8_t pk[32];
    uint8_t clock_known;   /* clock_skew_ms is measured (the leader's is 0 by definition) */
    int64_t clock_skew_ms; /* its wall clock minus the leader's */
};

struct proto_cluster_status {
    uint8_t in_cluster;
    uint64_t self, leader, term;
    uint64_t commit_index, applied_index, last_index;
    uint8_t n;
    struct proto_cluster_member m[PROTO_CLUSTER_MEMBERS_MAX];
};

/** CLUSTER (no payload). out >= PROTO_FRAME_HEADER bytes. */
size_t proto_cluster_encode(uint8_t *out, uint32_t id);
/** TALLY_OK iff f is a well-formed CLUSTER. */
int proto_cluster_decode(const struct proto_frame *f);
/** CLUSTER_REPLY into out (cap bytes); its length, 0 if it does not fit or is invalid. */
size_t proto_cluster_reply_encode(uint8_t *out, size_t cap, uint32_t id,
                                  const struct proto_cluster_status *s);
/** TALLY_OK or TALLY_EPROTO. */
int proto_cluster_reply_decode(const struct proto_frame *f, struct proto_cluster_status *out);

#endif /* PROTO_CLUSTER_H */

/*
 * Internals of this host's place in its cluster, shared by node.c (the log's records
 * applied, the configuration following the member list, snapshots, status) and node_join.c
 * (JOIN from strangers and ADMIN from members: the wire and the answers).
 */
#ifndef CLUSTER_NODE_INT_H
#define CLUSTER_NODE_INT_H

#include "cluster_node.h"

#define RECORD_MEMBER 'M'
#define RECORD_LEAVE  'L'
#define ADMIN_LEAVE   1
#define RECONCILE_MS  500
#define JOINS_MAX     4
/* A member that left stays in the log's configuration this long after its LEAVE applied here,
 * so that heartbeats carry the commit to it and it learns it left. */
#define REMOVE_GRACE_MS 1500

struct pending_join {
    uint64_t token; /* the stranger's connection */
    uint64_t id;    /* the member id it will get */
};

struct cluster_node {
    char data[512];
    struct cluster_state st;
    struct cluster_hostkey key;
    cluster_log *lg;
    struct cluster_net_hooks hooks;
    uv_timer_t reconcile;
    bool change_busy;
    struct pending_join joins[JOINS_MAX];
    struct pending_join leaves[JOINS_MAX]; /* ADMIN leave requests waiting for their commit */
    struct {
        uint64_t id;
        uint64_t at_ms; /* uv_now when its LEAVE applied */
    } departed[JOINS_MAX];
    /* Lease frames (node_lease.c): a follower's link to the leader; the leader's links from
     * the members. */
    struct cluster_lease_cbs lease_cbs;
    cluster_conn *lease_out;
    uint64_t lease_out_to; /* the leader it dials */
    bool lease_out_ready;
    struct {
        uint64_t token, member;
    } lease_in[CLUSTER_MEMBERS_MAX];
    bool role_known, role_leading, role_link; /* as last told */
    bool closing, log_closed;
    uv_loop_t *loop;
    void (*close_cb)(void *data);
    void *close_data;
};

/** The wall clock (Unix ms): invites expire by it. */
int64_t cluster__wall_ms(void);
/** One info line about member id (address and detail may be NULL). */
void cluster__log_member(const char *event, uint64_t id, const char *address, const char *detail);
void cluster__put_u64(uint8_t *p, uint64_t v);
uint64_t cluster__get_u64(const uint8_t *p);
/** Refuses the JOIN or ADMIN of connection `token` with status and a reason. */
void cluster__join_refuse(cluster_node *n, uint64_t token, uint8_t status, const char *why);
/** Answers a JOIN whose MEMBER record (member id) is committed. */
void cluster__join_accept(cluster_node *n, uint64_t token, uint64_t id);
/** Lease links (node_lease.c): dials or drops the link to the leader as leadership says and
 *  tells the front where its leases come from. */
void cluster__lease_tick(cluster_node *n);
/** Closes the lease links; true when nothing is left open (else cluster__node_maybe_free
 *  runs again once the link to the leader is closed). */
bool cluster__lease_close(cluster_node *n);
/** Frees n once its log and its lease link are both closed. */
void cluster__node_maybe_free(cluster_node *n);
int cluster__on_lease_open(void *ctx, uint64_t token, uint64_t member);
void cluster__on_lease_msg(void *ctx, uint64_t token, const uint8_t *msg, size_t len);
void cluster__on_lease_close(void *ctx, uint64_t token);
/** cluster_net_hooks (ctx: the node). */
bool cluster__strangers_welcome(void *ctx);
int cluster__on_join(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES],
                     const uint8_t *msg, size_t len);
int cluster__on_admin(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES],
                      const uint8_t *msg, size_t len);

#endif /* CLUSTER_NODE_INT_H */

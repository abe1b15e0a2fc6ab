/*
 * The members of a cluster as the network sees them (id, address, static key),
 * and libraft's transport over the host channel: every raft connection is a
 * cluster_conn (mutually authenticated, encrypted) to a member's one port, so
 * nothing raft says crosses the network in the clear. libraft reads and writes
 * a plain libuv stream; the transport hands it one end of a socketpair and
 * moves the bytes between the other end and the channel.
 *
 * Loop thread only.
 */
#ifndef CLUSTER_NET_H
#define CLUSTER_NET_H

#include <raft.h>
#include <raft/uv.h>

#include "cluster_conn.h"

#define CLUSTER_ADDR_MAX 64 /* "host:port", IPv4 dotted quad or [IPv6] */

struct cluster_member {
    uint64_t id;                    /* raft server id, > 0 */
    char address[CLUSTER_ADDR_MAX]; /* its cluster port */
    uint8_t pk[CLUSTER_KEY_BYTES];  /* its static key, pinned at join */
};

/* What a connection carries, said by its first message. */
#define CLUSTER_HELLO_RAFT                                                                         \
    1 /* a member's raft stream: id (8, big-endian), len, address, nonce (8) */
#define CLUSTER_HELLO_JOIN  2 /* a stranger asking to join with an invite (cluster_node.h) */
#define CLUSTER_HELLO_ADMIN 3 /* a member's request to the leader (`tally cluster leave`) */
#define CLUSTER_HELLO_LEASE 4 /* a member's lease frames to and from the leader, both ways */
#define CLUSTER_HELLO_TWIN  5 /* the second connection of a raft stream: id (8), nonce (8) */

/* Strangers: who runs the port decides whether a key that is not a member may come in to
 * ask to join, and answers its JOIN. */
struct cluster_net_hooks {
    /** A key that is not a member dialed: may it say JOIN? (invites are outstanding) */
    bool (*strangers_welcome)(void *ctx);
    /** A stranger's JOIN (msg: what follows its kind byte) on connection `token`; answer
     *  later with cluster_transport_join_answer(). An error closes the connection. */
    int (*on_join)(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES],
                   const uint8_t *msg, size_t len);
    /** A member's ADMIN request, answered the same way. */
    int (*on_admin)(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES],
                    const uint8_t *msg, size_t len);
    /** A member (id) opened a lease connection, `token` from now on; an error closes it.
     *  Optional: without it lease connections are refused. */
    int (*on_lease_open)(void *ctx, uint64_t token, uint64_t member);
    /** One message on lease connection `token` (after its hello). */
    void (*on_lease_msg)(void *ctx, uint64_t token, const uint8_t *msg, size_t len);
    /** Lease connection `token` is gone. */
    void (*on_lease_close)(void *ctx, uint64_t token);
    void *ctx;
};

struct cluster_net_cfg {
    uv_loop_t *loop;
    const struct cluster_hostkey *self;   /* copied */
    const struct cluster_member *members; /* copied: every member, this host included */
    size_t n_members;
    uint32_t handshake_ms;                 /* a peer that has not proved its key by then is cut */
    const struct cluster_net_hooks *hooks; /* NULL: strangers are refused */
};

/** Parses "host:port" (IPv4 or [IPv6]) into *out. TALLY_OK or TALLY_EINVAL. */
TALLY_MUST_CHECK int cluster_addr_parse(const char *s, struct sockaddr_storage *out /* OUT */);

/** Sets up t (caller-allocated, zeroed) as a raft_uv_transport over host channels to
 *  cfg's members. Release with cluster_transport_release() once libraft closed it (after
 *  raft_close's callback). TALLY_OK, TALLY_EINVAL or TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_transport_init(struct raft_uv_transport *t,
                                            const struct cluster_net_cfg *cfg);
/** The members from now on (copied): keys let in, ids dialed. TALLY_OK or TALLY_ENOMEM (the
 *  old table stays). Connections already open stay. */
TALLY_MUST_CHECK int cluster_transport_set_members(struct raft_uv_transport *t,
                                                   const struct cluster_member *m, size_t n);
/** Answers the JOIN of connection `token` with msg, then ends the connection.
 *  TALLY_OK, TALLY_ENOTFOUND (the stranger left) or as cluster_conn_send. */
TALLY_MUST_CHECK int cluster_transport_join_answer(struct raft_uv_transport *t, uint64_t token,
                                                   const uint8_t *msg, size_t len);
/** Sends msg on lease connection `token`. TALLY_OK, TALLY_ENOTFOUND (it is gone) or as
 *  cluster_conn_send. */
TALLY_MUST_CHECK int cluster_transport_lease_send(struct raft_uv_transport *t, uint64_t token,
                                                  const uint8_t *msg, size_t len);
/** Closes lease connection `token` (on_lease_close follows); gone already is a no-op. */
void cluster_transport_lease_close(struct raft_uv_transport *t, uint64_t token);
/** Frees what cluster_transport_init allocated. */
void cluster_transport_release(struct raft_uv_transport *t);

/* Raft messages received since the transport started, counted by the connection whose copy
 * came first (every raft stream rides two: cluster_net_int.h). */
struct cluster_transport_stats {
    uint64_t twins;      /* second connections paired with their stream */
    uint64_t by_primary; /* messages taken from the stream's first connection */
    uint64_t by_twin;    /* ... from its twin, ahead of the first connection's copy */
    uint64_t duplicates; /* copies dropped: the other connection had brought them */
};
/** The counters above. */
void cluster_transport_stats(const struct raft_uv_transport *t,
                             struct cluster_transport_stats *out /* OUT */);

#endif /* CLUSTER_NET_H */

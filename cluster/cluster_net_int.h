/*
 * Internals of libraft's transport over host channels, shared by net.c (the
 * raft_uv_transport: listening, dialing, closing, the members) and net_proxy.c
 * (one raft connection: a socketpair end for libraft, a channel to the peer).
 */
#ifndef CLUSTER_NET_INT_H
#define CLUSTER_NET_INT_H

#include "cluster_net.h"

#define HELLO_MIN  10 /* CLUSTER_HELLO_RAFT: kind | id (8, big-endian) | len | address | nonce */
#define TWIN_HELLO 17 /* CLUSTER_HELLO_TWIN: kind | id (8) | nonce (8) */
#define SEQ_BYTES  8  /* every message of a raft stream after the hello: seq (8) | bytes */
#define READ_CHUNK 65536
#define FLOW_HIGH  (1u << 20) /* queued for a peer beyond this, libraft's end is not read */
#define TWIN_MAX   16384      /* larger messages (a snapshot's) are not copied to the twin */
#define TWIN_QUEUE (1u << 16) /* nor any while this much waits for the twin's peer */

struct transport;

struct proxy {
    struct transport *t;
    struct proxy *prev, *next;
    cluster_conn *conn; /* NULL once its on_close came */
    uv_pipe_t local;    /* our end of the socketpair */
    bool local_open, local_closing;
    bool dialer;
    bool handed;                 /* libraft has its end */
    uint64_t join_token;         /* a JOIN or ADMIN waits for its answer (0: none) */
    uint64_t lease_token;        /* a member's lease connection (0: not one) */
    bool paused;                 /* libraft's end is not read: the peer is behind */
    struct raft_uv_connect *req; /* a dial libraft waits for */
    /* A raft stream rides two connections: every message (up to TWIN_MAX) goes on both, and
     * the receiver takes a message's first copy in sequence, so a segment lost on one
     * waits for no retransmission when the other brought it. The primary carries all of
     * them and owns the socketpair; the twin is a proxy of its own that points to it. */
    struct proxy *twin;    /* on a primary: its twin (NULL: none, or gone) */
    struct proxy *primary; /* on a twin: the stream it carries (NULL: gone) */
    bool is_twin;
    bool twin_up;     /* on a dialer's twin: its hello is out */
    uint64_t nonce;   /* names the stream in the twin's hello */
    uint64_t tx_seq;  /* on a primary: the next message's sequence number */
    uint64_t rx_next; /* on a primary: the sequence number taken next */
    uint64_t id;      /* the member at the other end */
    char address[CLUSTER_ADDR_MAX];
};

struct transport {
    struct raft_uv_transport *t;
    uv_loop_t *loop;
    struct cluster_hostkey self;
    struct cluster_member *members;
    size_t n_members;
    uint32_t handshake_ms;
    uint64_t id; /* ours, from init */
    char address[CLUSTER_ADDR_MAX];
    uv_tcp_t listener;
    bool listening, listener_closing;
    raft_uv_accept_cb accept_cb;
    struct proxy *proxies;
    const struct cluster_net_hooks *hooks;
    uint64_t next_token;
    bool closing;
    raft_uv_transport_close_cb close_cb;
    struct cluster_transport_stats stats;
    uint8_t rbuf[SEQ_BYTES + READ_CHUNK]; /* one read at a time on this loop, after the seq */
};

struct local_write {
    uv_write_t w;
    uint8_t bytes[];
};

/** The member with this raft id, or this static key (NULL: none). */
const struct cluster_member *cluster__member_by_id(const struct transport *t, uint64_t id);
const struct cluster_member *cluster__member_by_key(const struct transport *t, const uint8_t *pk);
/** Calls the transport's close callback once it is closing and nothing is left open. */
void cluster__transport_maybe_closed(struct transport *t);

/** A proxy of t, listed in t->proxies (its connection set by the caller). NULL: no memory. */
struct proxy *cluster__proxy_new(struct transport *t, bool dialer);
/** Frees p once its connection and its socketpair end are both closed. */
void cluster__proxy_maybe_free(struct proxy *p);
/** Closes p's socketpair end (libraft sees its stream end). */
void cluster__proxy_close_local(struct proxy *p);
/** A proxy's channel callbacks (data: the proxy). */
extern const struct cluster_conn_cbs cluster__proxy_cbs;

#endif /* CLUSTER_NET_INT_H */

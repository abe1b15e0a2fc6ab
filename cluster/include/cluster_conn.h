/*
 * A host channel (cluster_chan.h) over a TCP connection on a libuv loop: dial a
 * member whose key is pinned, or accept one and check its key against the
 * members. Messages are handed over only once the peer proved its key; a peer
 * refused, a message that does not open, a handshake slower than its deadline
 * or a cut connection each close the connection, logged with the peer's address
 * and key fingerprint.
 *
 * Loop thread only. Callbacks may call cluster_conn_send and cluster_conn_close.
 */
#ifndef CLUSTER_CONN_H
#define CLUSTER_CONN_H

#include <uv.h>

#include "cluster_chan.h"

typedef struct cluster_conn cluster_conn;

struct cluster_conn_cbs {
    /** The peer proved its key: messages may be sent. Optional. */
    void (*on_ready)(cluster_conn *c, void *data);
    /** One message from the peer (valid until return). */
    void (*on_msg)(cluster_conn *c, const uint8_t *msg, size_t len, void *data);
    /** The connection is gone: TALLY_OK after cluster_conn_close or the peer's finish,
     *  else why (TALLY_EUNAUTH, TALLY_EPROTO, TALLY_ETIMEDOUT, TALLY_EIO for a cut,
     *  TALLY_EUNAVAIL for a dial nobody answered, TALLY_ENOMEM). Called once; c is freed
     *  when it returns. */
    void (*on_close)(cluster_conn *c, int rc, void *data);
    /** Everything queued for the peer has been written (see cluster_conn_queued): a sender
     *  that paused can go on. Optional. */
    void (*on_drained)(cluster_conn *c, void *data);
};

struct cluster_conn_opts {
    const struct cluster_hostkey *self; /* borrowed, copied */
    uint32_t handshake_ms;              /* the peer proves its key within this, or is cut */
    const struct cluster_conn_cbs *cbs; /* borrowed: must outlive the connection */
    void *data;                         /* handed to the callbacks */
};

/** Dials addr, a member whose static key is peer_pk. *out is the caller's until
 *  on_close. TALLY_OK (on_close will be called), TALLY_EINVAL or TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_conn_dial(uv_loop_t *loop, const struct sockaddr *addr,
                                       const uint8_t peer_pk[CLUSTER_KEY_BYTES],
                                       const struct cluster_conn_opts *o,
                                       cluster_conn **out /* OUT */);
/** Accepts a connection waiting on server (a listening TCP handle); peer_ok decides
 *  which keys are let in. TALLY_OK (on_close will be called), TALLY_EIO (nothing to
 *  accept) or TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_conn_accept(uv_stream_t *server, cluster_chan_peer_fn peer_ok,
                                         void *peer_ctx, const struct cluster_conn_opts *o,
                                         cluster_conn **out /* OUT */);
/** Queues msg (copied) for the peer. TALLY_OK or as cluster_chan_send. */
TALLY_MUST_CHECK int cluster_conn_send(cluster_conn *c, const uint8_t *msg, size_t len);
/** Ends the connection: an established one sends its final message first (best
 *  effort, not waited for). on_close follows with TALLY_OK. Twice is a no-op. */
void cluster_conn_close(cluster_conn *c);
/** Bytes queued for the peer and not written yet (a sender pauses above its own mark and
 *  resumes at on_drained). */
size_t cluster_conn_queued(const cluster_conn *c);
/** The peer's static key (NULL while a listener has not learnt it). */
const uint8_t *cluster_conn_peer(const cluster_conn *c);

#endif /* CLUSTER_CONN_H */

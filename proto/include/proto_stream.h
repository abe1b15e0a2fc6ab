/*
 * proto_stream: framed connections over libuv streams, used for the client
 * socket of tallyd (Unix and TCP), for tallyd's channels to its supervisors and
 * for the supervisor's end of that channel. A connection reads frames into a
 * fixed buffer and hands each whole frame to on_frame; answers may be sent at
 * once or later (a check can wait for a lease), so a connection is reference
 * counted: whoever parks a request takes a reference and drops it when done.
 *
 * Header-wide rules: loop thread only. on_close runs exactly once, after which
 * on_frame never runs again; the memory is freed when the last reference goes
 * (after on_close). Sends on a closed connection are dropped (TALLY_EIO).
 */
#ifndef PROTO_STREAM_H
#define PROTO_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "proto_frame.h"

typedef struct proto_conn proto_conn;
typedef struct proto_listener proto_listener;

#define PROTO_CONN_OUT_MAX (4u << 20) /* queued output before a slow peer is cut */

struct proto_conn_cbs {
    /** A whole frame arrived. `f` is valid during the call only. */
    void (*on_frame)(proto_conn *c, const struct proto_frame *f, void *data);
    /** The connection is closing: EOF (TALLY_OK), a protocol error (TALLY_EPROTO),
     *  an I/O error (TALLY_EIO), output overflow (TALLY_ETOOBIG) or a local close. */
    void (*on_close)(proto_conn *c, int reason, void *data);
};

/** Wraps an open file descriptor (a socketpair end, fd 3 of a supervisor) in a
 *  connection. *out is owned by the caller's reference, release with
 *  proto_conn_unref() after proto_conn_close(). */
TALLY_MUST_CHECK int proto_conn_open_fd(uv_loop_t *loop, int fd, const struct proto_conn_cbs *cbs,
                                        void *data, proto_conn **out /* OUT */);
/** Creates a connection around a fresh, unopened pipe handle, for uv_spawn's stdio
 *  (UV_CREATE_PIPE): pass proto_conn_pipe() to uv_spawn, then proto_conn_start().
 *  If the spawn fails, proto_conn_close() + proto_conn_unref() free it. */
TALLY_MUST_CHECK int proto_conn_pipe_new(uv_loop_t *loop, const struct proto_conn_cbs *cbs,
                                         void *data, proto_conn **out /* OUT */);
uv_pipe_t *proto_conn_pipe(proto_conn *c);
/** Starts reading. TALLY_OK or TALLY_EIO. */
TALLY_MUST_CHECK int proto_conn_start(proto_conn *c);
/** Queues one whole frame (copied). TALLY_OK, TALLY_EIO when closed, TALLY_ETOOBIG
 *  when the peer is not reading (the connection is then closed). */
int proto_conn_send(proto_conn *c, const void *frame, size_t len);
/** One message on a SOCK_SEQPACKET or stream socket carrying `fd` (SCM_RIGHTS): sendmsg's
 *  result (EINTR retried). */
long proto_send_with_fd(int sock, const void *buf, size_t len, int fd, int flags);
/** Holds sent frames until the matching proto_conn_uncork(), which writes them at once: a
 *  peer that reads them in one read takes them in one turn. Calls nest (a read's own
 *  batching is one level). */
void proto_conn_cork(proto_conn *c);
void proto_conn_uncork(proto_conn *c);
/** Starts closing (idempotent). Pending output is dropped. */
void proto_conn_close(proto_conn *c);
/** Closes once the queued output has been written (a final answer, then close). */
void proto_conn_close_after_flush(proto_conn *c);
bool proto_conn_is_closing(const proto_conn *c);
void proto_conn_ref(proto_conn *c);
void proto_conn_unref(proto_conn *c);
void *proto_conn_data(const proto_conn *c);
void proto_conn_set_data(proto_conn *c, void *data);
/** Credentials of a Unix-socket peer (SO_PEERCRED); TALLY_ENOTFOUND otherwise. */
int proto_conn_peer_uid(const proto_conn *c, uint32_t *uid);

struct proto_listener_cbs {
    /** A connection was accepted; return the callbacks and data for it via the
     *  out-parameters, or return false to refuse it (closed at once). */
    bool (*on_accept)(proto_listener *l, void *data, struct proto_conn_cbs *cbs /* OUT */,
                      void **conn_data /* OUT */);
    /** Largest frame accepted connections take (their read buffer); 0 = PROTO_FRAME_MAX. */
    size_t max_frame;
    /** Called with each accepted connection after it is set up; the callee owns
     *  the connection's first reference and drops it (proto_conn_unref) in its
     *  on_close. */
    void (*on_conn)(proto_listener *l, proto_conn *c, void *data);
};

/** Listens on a Unix socket at `path` with file mode `mode` (e.g. 0660). A stale
 *  socket file (nobody listening) is removed first; a live one is TALLY_EINUSE.
 *  *out is owned by the caller, release with proto_listener_close(). */
TALLY_MUST_CHECK int proto_listener_unix(uv_loop_t *loop, const char *path, int mode,
                                         const struct proto_listener_cbs *cbs, void *data,
                                         proto_listener **out /* OUT */);
/** Listens on TCP `host`:`port` (IPv4 or IPv6 literal). */
TALLY_MUST_CHECK int proto_listener_tcp(uv_loop_t *loop, const char *host, int port,
                                        const struct proto_listener_cbs *cbs, void *data,
                                        proto_listener **out /* OUT */);
/** The bound TCP port (for port 0), or -1. */
int proto_listener_port(const proto_listener *l);
/** Stops listening, unlinks a Unix socket file, frees after the handle closes;
 *  `cb` (may be NULL) runs then. Accepted connections are not touched. */
void proto_listener_close(proto_listener *l, void (*cb)(void *data), void *data);

#endif /* PROTO_STREAM_H */

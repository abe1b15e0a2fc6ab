/*
 * sup_sock: tallyd's binary protocol server (proto/PROTOCOL.md) in front of a
 * sup_front: a Unix socket (mode 0660 by default) and optionally TCP. Each
 * connection must open with HELLO, then may pipeline up to
 * SUP_SOCK_MAX_INFLIGHT requests; answers carry the request id and may come
 * back out of order.
 *
 * Header-wide rules: loop thread only.
 */
#ifndef SUP_SOCK_H
#define SUP_SOCK_H

#include "sup_front_service.h"

#define SUP_SOCK_MAX_INFLIGHT 128
/* Connections open at once, Unix and TCP together, unless set otherwise. */
#define SUP_SOCK_DEFAULT_MAX_CONNECTIONS 10000
/* Connections beyond the cap waiting for their ERROR at once; more are closed
 * at accept without an answer. */
#define SUP_SOCK_REFUSALS_MAX 64

typedef struct sup_sock sup_sock;

struct sup_sock_stats {
    uint64_t connections;
    uint64_t active;
    uint64_t requests;
    uint64_t protocol_errors;
    uint64_t refused; /* connections refused at the cap (answered ERROR, or closed) */
};

/** Serves `front` (borrowed, must outlive the server) on the Unix socket `path`
 *  (mode `mode`) and, if tcp_host is not NULL, on tcp_host:tcp_port. *out is owned
 *  by the caller, release with sup_sock_close(). TALLY_EINUSE when another tallyd
 *  listens on `path`. */
TALLY_MUST_CHECK int sup_sock_open(uv_loop_t *loop, sup_front *front, const char *path, int mode,
                                   const char *tcp_host, int tcp_port, sup_sock **out /* OUT */);
/** Also serves the protocol on TCP host:port (an IPv4 or IPv6 literal; port 0 picks
 *  one). TCP has no authentication beyond the token: bind it to loopback or a
 *  private network. TALLY_OK, TALLY_EINUSE, TALLY_EPERM, TALLY_EINVAL, TALLY_EEXIST
 *  when already listening on TCP. */
TALLY_MUST_CHECK int sup_sock_listen_tcp(sup_sock *s, const char *host, int port);
/** At most `max` connections open at once (0 = SUP_SOCK_DEFAULT_MAX_CONNECTIONS).
 *  One more is answered, whatever its first frame, with ERROR TALLY_EUNAVAIL
 *  "too many connections" carrying that frame's request id, then closed; open
 *  ones are served on. */
void sup_sock_set_max_connections(sup_sock *s, uint32_t max);
struct proto_cluster_status;
/** Fills the answer to CLUSTER (`tally cluster status`). */
typedef void (*sup_sock_cluster_fn)(void *ctx, struct proto_cluster_status *out);
/** CLUSTER is answered by fn(ctx, ...) from now on; NULL: "not in a cluster". */
void sup_sock_set_cluster(sup_sock *s, sup_sock_cluster_fn fn, void *ctx);
/** The bound TCP port, or -1 when not listening on TCP. */
int sup_sock_tcp_port(const sup_sock *s);
void sup_sock_stats(const sup_sock *s, struct sup_sock_stats *out /* OUT */);
/** Stops listening (the socket file is removed), closes every connection (their
 *  requests are cancelled), then calls cb. */
void sup_sock_close(sup_sock *s, void (*cb)(void *data), void *data);

#endif /* SUP_SOCK_H */

/*
 * sup_front: tallyd's server, the front of the decision service. One call runs it:
 * HTTP forward-auth and the binary protocol on one libuv loop, the child counters
 * (one per tenant and endpoint) and the tenants' supervisor processes, until SIGINT
 * or SIGTERM. Everything else of the front is internal (sup_front_service.h and
 * the headers next to it in supervisor/front/).
 */
#ifndef SUP_FRONT_H
#define SUP_FRONT_H

#include <stdbool.h>
#include <stdint.h>

#define SUP_FRONT_CHILD_IDLE_MS_DEFAULT     60000
#define SUP_FRONT_MAX_OPEN_CHILDREN_DEFAULT 1024

/** The default of --max-supervisors for this machine: an eighth of its memory at 2 MiB
 *  per supervisor, at most a quarter of the open-file limit, 64 to 4096. */
uint32_t sup_max_supervisors_default(void);

/* ---- tallyd's server: the front over HTTP and the binary protocol (server.c) ---- */

enum sup_server_exit {
    SUP_SERVER_OK = 0,
    SUP_SERVER_FAIL = 1,
    SUP_SERVER_USAGE = 64,
    SUP_SERVER_CONFIG = 78 /* bad key, schema or socket directory */
};

struct sup_server_opts {
    const char *data; /* initialised data dir, locked by the caller */
    const char *http; /* --http as given, for messages */
    const char *host; /* HTTP address, without brackets */
    int port;         /* 0 picks one (logged at start) */
    bool ipv6;
    const char *socket; /* NULL = DATA/tally.sock */
    const char *tcp;    /* --tcp as given, or NULL: no TCP listener */
    const char *tcp_host;
    int tcp_port;
    bool tcp_ipv6;
    bool strict; /* durability */
    int64_t wait_ms;
    int64_t idle_exit_ms;
    uint32_t max_supervisors;
    uint32_t max_connections;
    int64_t batch_sync_ms;         /* batched only; 0 = the supervisors' default */
    uint64_t journal_compact_rows; /* 0 = the supervisors' default */
    int64_t keep_lease_ms;         /* 0 = the supervisors' default (1 h) */
    int64_t child_idle_ms;         /* 0 = the front's default (60000) */
    uint32_t max_open_children;    /* 0 = the front's default (1024) */
    uint32_t election_ms;          /* in a cluster: the log's election timeout */
    uint32_t snapshot_every;       /* in a cluster: batches between two snapshots (0: 100000) */
};

/** Serves `o` (borrowed) until SIGINT or SIGTERM, then shuts down in order (HTTP, the
 *  socket, the front with its leases returned) and returns an enum sup_server_exit.
 *  Failures are one "tallyd: ..." line on stderr. Owns the calling thread. */
int sup_server_run(const struct sup_server_opts *o);

#endif /* SUP_FRONT_H */

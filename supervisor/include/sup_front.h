/*
 * sup_front: tallyd's decision service. It owns the in-memory configuration
 * (reloaded when the config database changes), the deployment key, the child
 * counters (one per tenant and endpoint, each with its own SQLite file) and
 * the supervisor manager, and answers one question per request: may this
 * token make this call now?
 *
 * Auth comes first: the token's keyed hash must resolve to a live link
 * allowed on the endpoint before anything else is looked at or created (no
 * child, no file, no process for noise). Then the child decides from its
 * leases; when it has none it asks the tenant's supervisor and the request
 * waits (at most wait_ms) for the grant.
 *
 * Header-wide rules: loop thread only. A request lives in caller-owned memory
 * (struct sup_front_req) from sup_front_check() until its done callback runs
 * or sup_front_cancel() returns; done may run before sup_front_check returns.
 */
#ifndef SUP_FRONT_H
#define SUP_FRONT_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "proto_client.h"
#include "sup_manager.h"

typedef struct sup_front sup_front;
struct front_child;

struct sup_front_config {
    const char *data;
    const char *exe;          /* tallyd itself, to spawn supervisors */
    bool strict;              /* durability */
    int64_t wait_ms;          /* longest wait for the supervisor; 0 = 50 */
    int64_t cold_start_ms;    /* longest wait for a supervisor being started; 0 = 5000 */
    int64_t idle_exit_ms;     /* supervisors hibernate after this; 0 = 60000 */
    uint32_t max_supervisors; /* 0 = 1024 */
};

struct sup_front_req;
typedef void (*sup_front_done_fn)(struct sup_front_req *r, const struct proto_check_reply *reply);

/* One request in flight: embed it in the connection; the fields below the line
 * are private. */
struct sup_front_req {
    sup_front_done_fn done;
    void *data;
    /* private */
    struct sup_front_req *next, *prev;
    struct front_child *child;
    char link[TENANT_LINK_ID_LEN + 1];
    int64_t cost;
    int64_t give_up_ms;
    uint64_t lease_id;
    uint64_t slot_op;
    int stage; /* 0 idle, 1 waiting for a lease, 2 waiting for a slot */
    bool degraded;
};

struct sup_front_stats {
    uint64_t checks;
    uint64_t admitted, refused, unauthorized, bad_request, unavailable, internal;
    uint64_t degraded;
    uint64_t refused_by_scope[6];
    uint64_t waits;
    uint64_t lease_messages; /* lease frames sent to supervisors */
    uint64_t reloads;
    uint32_t children;
    uint32_t live_links;
    struct sup_manager_stats sup;
};

/** *out is owned by the caller, release with sup_front_close(). Loads the key and
 *  the configuration. TALLY_OK, TALLY_ENODATA, TALLY_ENOKEY, storage errors. */
TALLY_MUST_CHECK int sup_front_open(uv_loop_t *loop, const struct sup_front_config *cfg,
                                    sup_front **out /* OUT */);
/** Decides a request; r->done runs exactly once unless sup_front_cancel() is called
 *  first. `token` (borrowed) is wiped from nothing: the caller owns it. cost 0 =
 *  the endpoint's default. */
void sup_front_check(sup_front *f, struct sup_front_req *r, const char *token, const char *endpoint,
                     int64_t cost);
/** Releases slot `slot_id` of the token's link (idempotent). PROTO_ADMITTED when
 *  queued, PROTO_UNAUTHORIZED for a bad token, PROTO_BAD_REQUEST otherwise. */
int sup_front_release(sup_front *f, const char *token, int64_t slot_id);
/** The caller gives up on r (its connection closed): done will not run. */
void sup_front_cancel(sup_front *f, struct sup_front_req *r);
/** Re-reads the configuration now if it changed (force: even if not). TALLY_OK or
 *  a storage error (the old configuration stays). */
int sup_front_reload(sup_front *f, bool force);
void sup_front_stats(const sup_front *f, struct sup_front_stats *out /* OUT */);
/** The manager, for metrics and tests. */
sup_manager *sup_front_manager(sup_front *f);
/** Returns leases (RETURN to the supervisors), flushes the child files, closes
 *  every child and the manager, then calls cb. */
void sup_front_close(sup_front *f, void (*cb)(void *data), void *data);

#endif /* SUP_FRONT_H */

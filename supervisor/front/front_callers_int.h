/*
 * Inside front_callers: the requests waiting for verdicts (front_callers.c) and the
 * authority processes (front_callers_auth.c).
 */
#ifndef FRONT_CALLERS_INT_H
#define FRONT_CALLERS_INT_H

#include "front_callers.h"
#include "proto_caller.h"
#include "proto_stream.h"
#include "sup_callers.h"

#define POOL          4096 /* caller requests waiting for verdicts at once */
#define SWEEP_MS      5    /* deadline resolution */
#define BACKOFF_MIN   10
#define BACKOFF_MAX   2000
#define DEGRADED_MAX  65536 /* callers counted per endpoint while authorities are away */
#define KILL_AFTER_MS 2000  /* at shutdown: an authority not gone by then is killed */

struct front_caller_req {
    struct sup_front_req *r;
    struct front_caller_req *next, *prev;
    uint32_t id;                         /* request id of every DECIDE it sent */
    uint8_t involved, waiting, admitted; /* bits by authority */
    uint8_t unsent; /* authorities its DECIDE could not reach yet (one going away): tried again
                       by the sweep, which starts the next one */
    bool failed;
    bool have;
    struct proto_caller_verdict best;
    int64_t give_up_ms; /* monotonic */
    int64_t sent_wall_ms;
    char endpoint[TENANT_NAME_MAX + 1];
    enum tenant_unavailable on_unavailable;
    enum tenant_algorithm algorithm;
    struct tenant_limits degraded;
    struct tenant_limits limits;
    int64_t max_callers; /* each authority's share of the endpoint's ceiling */
    int64_t cost;
    uint32_t n;
    unsigned char keys[TENANT_CALLERS_MAX][TENANT_CALLER_KEY_BYTES];
};

struct authority {
    struct front_callers *fc;
    unsigned shard;
    uv_process_t proc;
    proto_conn *conn;
    bool live;     /* spawned, not exited */
    bool answered; /* has answered since it was spawned */
    bool counted;  /* its process handle is waited for by the close */
    bool closing;  /* its process handle is being closed (libuv's flag stays set after) */
    int64_t backoff_ms;
    uint64_t not_before; /* loop ms */
    uint64_t entries;
    uint64_t bytes;
};

struct degraded_table {
    char endpoint[TENANT_NAME_MAX + 1];
    tenant_callers *t;
};

struct front_callers {
    sup_front *f;
    struct authority a[SUP_CALLER_SHARDS];
    struct front_caller_req pool[POOL];
    struct front_caller_req *free, *busy;
    uint32_t next_id;
    uv_timer_t sweep;
    uv_timer_t kill;
    struct degraded_table degraded[8];
    bool closing;
    int pending; /* handles and processes to wait for at close */
    void (*closed)(sup_front *f);
};

/* front_callers_auth.c */
void fc__count_down(struct front_callers *fc);
void fc__on_handle_closed(uv_handle_t *h);
bool fc__any_live(const struct front_callers *fc);
/** Sends a frame to authority a, starting it when it is not running (and not in its
 *  backoff). TALLY_OK, or TALLY_EUNAVAIL: the request waits for its deadline. */
int fc__authority_send(struct authority *a, const uint8_t *frame, size_t len);
void fc__on_kill(uv_timer_t *t);
/* front_callers.c: a verdict from authority `data`. */
void fc__on_frame(proto_conn *c, const struct proto_frame *fr, void *data);

#endif /* FRONT_CALLERS_INT_H */

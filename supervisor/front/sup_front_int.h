/*
 * Internals shared by the front's files. A request goes top to bottom:
 * front.c (auth, configuration, the policy) -> front_child.c (the child
 * decides, or the request parks for a lease or a slot) -> front_reply.c (the
 * answer, counted and observed by front_obs.c). Around the children:
 * front_child_life.c (the table of children: find, create, close) and
 * front_store.c (each child's file, written on the thread pool).
 *
 * Three of them call each other on purpose: front_child.c finds a child for a
 * supervisor's reply through front_child_life.c, which pumps and unparks when
 * it closes one; front_child.c hands the child's writes to front_store.c, whose
 * completion (on the loop) resumes the child: re-runs the requests a durable
 * write unblocked and pumps again, or frees a closed child. That is a
 * completion callback, written as a direct call.
 */
#ifndef SUP_FRONT_INT_H
#define SUP_FRONT_INT_H

#include <pthread.h>
#include <time.h>

#include "proto_lease.h"
#include "store_snapshot.h"
#include "store_use.h"
#include "sup_child_host.h"
#include "sup_front_service.h"
#include "tenant_index.h"

#include "front_fast.h"
#include "front_obs.h"
#include "sup_manager.h"

#define FRONT_STORE_BATCH 64
/* Answers held for a new child until its incarnation is durable (front_pump.c). */
#define FRONT_HELD_MAX          16
#define FRONT_STORE_BATCH_FIRST 4 /* rows the batch has room for at first; doubles when full */
/* Tenants whose first turn tallyd makes at once (front_first.c); past it, a new tenant's
 * supervisor is started for its first lease. */
#define FRONT_FIRST_MAX 16
/* A supervisor's start warms at most this many of its tenant's links (front_child.c). */
#define FRONT_WARM_MAX 16

/* The rows read with the file, resumed into the new state machine on the loop. */
struct front_resume {
    struct sup_child_lease_rec *rec;
    size_t n, cap;
};

/* A child's file and its one batch of writes in flight (front_store.c). */
struct front_store {
    store_db *db;
    uv_work_t work;
    bool busy; /* a batch is on the thread pool: the loop leaves db alone */
    int rc;
    size_t n;
    uint64_t writes, failures;
    uint64_t failing;     /* failed attempts in a row */
    uint64_t incarnation; /* from the open */
    /* The fingerprint of the limits over the child's path (front_limits_fp) when its rows
     * were written: by the last open, or by the idle close that parked leases; read (found
     * or not) and replaced by today's at the open. */
    int64_t limits_fp;
    int64_t limits_fp_now; /* the open: today's fingerprint, stored by the open */
    bool limits_fp_found, limits_fp_put;
    bool created;   /* the open in flight found no file: it made one */
    bool fresh;     /* the look before the open found no file (front_prestart.c) */
    bool no_ledger; /* ... and no ledger for the tenant either */
    /* A new file's first incarnation is sent (HELLO, the first ACQUIREs) while it is being
     * stored: from the open until the first batch, which writes it first, is durable
     * (inc_writing: that batch is in flight), the supervisor's answers wait in held (up to
     * FRONT_HELD_MAX; more are dropped and asked again by the child's retransmission). */
    bool inc_pending, inc_writing;
    struct proto_lease_msg *held;
    uint32_t n_held;
    bool reopening; /* the batch in flight opens the file first (it was asleep) */
    /* ... and closes it again after the write (the cap of open files was reached when it was
     * queued): the child stays asleep, its file open only for the job's time. */
    bool close_after;
    struct front_resume resume;
    char errmsg[512];      /* why the open failed */
    int64_t backoff_ms;    /* before the next attempt of a failed batch */
    int64_t retry_mono_ms; /* when a failed batch (n > 0, not busy) is tried again */
    /* Up to FRONT_STORE_BATCH writes (batch_cap allocated), from the first write until the file
     * closes: an asleep child does not carry them. */
    struct sup_child_persist *batch;
    uint32_t batch_cap;
};

/* A child counter's life around its file (front_child_life.c). Each step that
 * touches the disk runs on the thread pool; its requests wait (SUP_FRONT_OPENING)
 * while the child is anything but OPEN or DRAINING.
 *   OPENING  -> OPEN      file opened, incarnation bumped, rows read (thread pool);
 *                         the state machine is created and resumed on the loop
 *   OPENING  -> (gone)    the open failed: its requests get 503, the entry is freed
 *   OPEN     -> OPEN      the least recently used over max_open_children closes
 *                         its file (thread pool) and stays: its next write opens
 *                         the file again on the thread pool (same incarnation)
 *   OPEN     -> DRAINING  idle for child_idle_ms: sup_child_park, RETURNs out
 *   DRAINING -> CLOSING   nothing in flight (or the drain deadline passed)
 *   CLOSING  -> (gone)    file checkpointed and closed (thread pool), entry freed;
 *               OPENING   instead when requests came meanwhile: a new incarnation */
enum front_child_state {
    FRONT_CHILD_OPENING = 0,
    FRONT_CHILD_OPEN,
    FRONT_CHILD_DRAINING,
    FRONT_CHILD_CLOSING,
};

struct front_child {
    sup_front *f;
    char tenant[TENANT_NAME_MAX + 1];
    char endpoint[TENANT_NAME_MAX + 1];
    char key[2 * TENANT_NAME_MAX + 2]; /* "tenant/endpoint": its key in child_index */
    struct tenant_endpoint policy;
    uint64_t policy_reloads; /* f->stats.reloads when policy was taken */
    sup_child *child;        /* NULL unless OPEN or DRAINING */
    enum front_child_state state;
    int64_t used_mono_ms;                    /* the last request */
    int64_t drain_mono_ms;                   /* DRAINING: close then, whatever is still in flight */
    struct front_child *lru_prev, *lru_next; /* OPEN children, most recently used first */
    struct front_child *file_prev, *file_next; /* OPEN children with their file open, too */
    bool in_files;                             /* in that second list */
    bool leaving;                              /* its file counts in f->n_leaving */
    struct front_store store;
    uv_timer_t timer;
    bool timer_live;
    bool closed;                   /* timer closed: freed once the last write is done */
    bool pump_soon;                /* on f->pumpq: set and cleared by the queue alone */
    struct front_child *pump_next; /* f->pumpq: children to pump before the next poll */
    int64_t armed_ms; /* monotonic instant the timer was armed for by arm(); INT64_MIN: other */
    struct sup_front_req *parked; /* FIFO: head; tail via head->prev */
    uint8_t mode;                 /* enum front_mode, for front_obs.c */
    int64_t mode_since_ms;        /* monotonic: when mode last left normal */
    uint64_t obs_incarnation;     /* front_obs.c: the child's incarnation last seen sending, */
    uint64_t obs_seq_hi;          /* and the highest seq it sent (first sends come in order) */
};

struct sup_front {
    uv_loop_t *loop;
    int64_t pump_log_ms;      /* monotonic: the last "lease_pump_deferred" line */
    uint64_t health_probe_ms; /* loop time of the last data dir probe (0: never) */
    bool data_unwritable;     /* what that probe found */
    struct sup_front_config cfg;
    char data[4096];
    char exe[4096];
    store_db *config;
    store_snapshot *snap;
    store_use *use;        /* exact use counters of leases (front_store.c); NULL = none */
    const char *use_state; /* what its open found, for the start line */
    unsigned char *key;
    sup_manager *mgr;
    struct front_callers *callers; /* endpoints keyed by caller (front_callers.c) */
    struct front_child **children;
    uint32_t n_children;
    uint32_t cap_children;
    struct tenant_index child_index; /* key -> index into children */
    struct front_fast fast;          /* the turn's clock, the token memo */
    struct front_child *lru_head, *lru_tail;
    /* Children whose pump is due before the next poll (front_child_pump_soon), run by an idle
     * handle: a timer due now per child, as before, cost two operations on a timer heap of
     * every loaded child (10,000 of them: 7 % of tallyd's CPU). */
    struct front_child *pumpq;
    uv_idle_t pump_idle;
    struct front_child *file_head, *file_tail; /* OPEN children with an open file, by use */
    uint32_t n_files;                          /* child files open or being opened */
    uint32_t n_leaving;                        /* of those, children draining or closing */
    uv_timer_t idle_timer;                     /* closes idle children */
    /* New child files made ahead in DATA/pool, one fill at a time on the thread pool
     * (front_store.c): a tenant's first request renames one into place. */
    uv_work_t pool_work;
    bool pool_on, pool_busy, pool_again;
    bool pool_ledgers;     /* the fill keeps ledgers open for first turns (not in a cluster) */
    bool pool_turned;      /* a first turn was made: the fills make ledgers from then on */
    unsigned pool_flags;   /* the child files' open flags (front_store_flags), for the fill */
    uv_timer_t pool_timer; /* a fill after a take (front_pool.c) */
    uv_timer_t reload_timer;
    struct sup_front_stats stats;
    struct front_obs obs;
    bool closing;
    int pending;
    void (*close_cb)(void *data);
    void *close_data;
    int children_pending;
    void (*children_done)(sup_front *f);
    uint8_t frame[PROTO_LEASE_FRAME_MAX];
    /* Cluster mode (front_cluster.c): where lease frames go. */
    struct sup_front_cluster cl;
    bool cl_on;      /* in a cluster */
    bool cl_leading; /* this host's supervisors decide */
    bool cl_link;    /* a follower's link to the leader is up */
    uint8_t cl_frame[PROTO_LEASE_FRAME_MAX];
    /* Tenants whose first turn tallyd makes (front_first.c). */
    struct front_first *firsts[FRONT_FIRST_MAX];
    uint32_t n_firsts;
    /* The last child_open_failed line: one a minute per (tenant, endpoint). */
    char open_failed[2 * TENANT_NAME_MAX + 2];
    int64_t open_failed_mono_ms;
};

/* A fingerprint of every limit over fc's path in `snap` (what limits_changed compares); 0
 * when the tenant or the endpoint is gone. Leases parked under one fingerprint are not used
 * under another. */
int64_t front_limits_fp(const store_snapshot *snap, const struct front_child *fc);

/** The manager, for metrics. */
sup_manager *sup_front_manager(sup_front *f);
/** Marks fc used now (its place in the LRU and file lists). */
void front_child_touch(sup_front *f, struct front_child *fc);
/* The table of children and its lists (front_child_table.c). Sizes the index for `cap`
 * children and files those there are: TALLY_OK or TALLY_ENOMEM. */
int front_child_index(sup_front *f, uint32_t cap);
/* Adds fc to the table (room made by the caller) / takes it out (the last moves in). */
void front_child_table_add(sup_front *f, struct front_child *fc);
void front_child_table_remove(sup_front *f, struct front_child *fc);
/* The OPEN children by last use, most recent first. */
void front_lru_unlink(sup_front *f, struct front_child *fc);
void front_lru_push_front(sup_front *f, struct front_child *fc);
/* The OPEN children whose file is open, by use. */
void front_files_unlink(sup_front *f, struct front_child *fc);
void front_files_push_front(sup_front *f, struct front_child *fc);
/** The child of (tenant, endpoint), NULL when none is known. */
struct front_child *front_child_find(sup_front *f, const char *tenant, const char *endpoint);
/** The child of (tenant, endpoint), created on first use (or after an idle close) with
 *  its file being opened on the thread pool: until it is FRONT_CHILD_OPEN, requests
 *  wait with front_child_submit. TALLY_OK or TALLY_ENOMEM (nothing created). */
int front_child_get(sup_front *f, const char *tenant, const struct tenant_endpoint *policy,
                    struct front_child **out);
/** Runs r on fc, or parks it (SUP_FRONT_OPENING) until fc's file is open. */
void front_child_submit(struct front_child *fc, struct sup_front_req *r);
/** The open started by front_store_open_start is done (rc, details in fc->store). */
void front_child_opened(struct front_child *fc, int rc);
/** The file closed by front_store_close_start is closed (had_file: it was open). */
void front_child_file_closed(struct front_child *fc, bool had_file);
/** The file of an OPEN child closed by front_store_sleep_start is closed: the child stays. */
void front_child_file_slept(struct front_child *fc);
/** An OPEN child's file was opened again for a write: it counts among the open files. */
void front_child_file_woke(struct front_child *fc);
/* A child's file could not be opened: one log line a minute at most (front_obs.c). */
void front_log_open_failed(sup_front *f, const char *tenant, const char *endpoint, int rc,
                           const char *detail);
/** A DRAINING child whose last RETURN or write is done closes its file. */
void front_child_drain_check(struct front_child *fc);
/** Loop: when fc's tenant has no supervisor running, queues a look for fc's file on the thread
 *  pool, which opens it when it exists, and else starts the supervisor and then queues the
 *  open (true); false: nothing queued (front_prestart.c). */
bool front_prestart_look(struct front_child *fc);
/** Loop: fc's file is new (the look found none) and its tenant's first turn is under way:
 *  the state machine starts now, with a new file's first incarnation, and its requests run
 *  (their messages make the turn) while the file is made and that incarnation stored on the
 *  thread pool; answers wait for it as for any new file. False: nothing started (the open
 *  is the caller's to queue). */
bool front_child_start_early(struct front_child *fc);
/** The job of front_child_start_early is done (rc; details in fc->store). */
void front_child_early_done(struct front_child *fc, int rc);
/** Loop: queues that job (front_store.c); false if it could not be. */
bool front_store_early_queue(struct front_child *fc);
/** Loop: queues the open of fc's file (front_store.c). */
void front_store_open_queue(struct front_child *fc);
/** The open's job (thread pool) and its end (loop), for a look that opens at once. */
void front_store_open_work(uv_work_t *w);
/* The open flags of a child's file (store_child_open). */
unsigned front_store_flags(const sup_front *f);
void front_store_open_done(uv_work_t *w, int status);
/** Starts the idle sweep (front_child_life.c); its timer is closed by front_children_close. */
void front_children_init(sup_front *f);
/** Runs r (link, cost set) on its child: answers it or parks it. */
void front_child_run(struct front_child *fc, struct sup_front_req *r, unsigned flags);
/** Gives back what an expensive operation took when it got no slot (front_child.c). */
void front_child_refund(struct front_child *fc, struct sup_front_req *r, uint64_t lease_id);
/** What a message from the supervisor told the child: a slot answer, a link's lease. */
void front_child_on_event(struct front_child *fc, const struct sup_child_event *ev);
/** Sets the child's timer to its next wake (front_pump.c). */
void front_child_arm(struct front_child *fc);
/** Carries out the child's intents: messages, writes, timer (front_pump.c). */
void front_child_pump(struct front_child *fc);
/** Pumps fc at the end of this loop turn (once, however many requests ask). */
void front_child_pump_soon(struct front_child *fc);
/** Takes fc off the pump queue (its timer is closing). */
void front_child_pump_forget(struct front_child *fc);
void front_pumpq_init(sup_front *f);
void front_pumpq_close(sup_front *f, uv_close_cb cb);
/** Routes a reply from the tenant's supervisor to the child it is for. */
void front_child_on_frame(sup_front *f, const char *tenant, const struct proto_frame *fr);
/** A message from the tenant's supervisor (or a first turn), decoded: to its child. */
void front_child_on_lease(sup_front *f, const char *tenant, const struct proto_lease_msg *m);
/* First turns (front_first.c). Loop: a record for `tenant`, which has neither a ledger nor a
 * supervisor, so its next lease messages make its first turn (true), or false: its
 * supervisor is to be started as before. */
bool front_first_begin(sup_front *f, const char *tenant);
/* Is a first turn of `tenant` under way (its messages go to it)? */
bool front_first_pending(sup_front *f, const char *tenant);
/* A message of `tenant` taken by its record (true, *rc as sup_manager_send), or false: it is
 * the supervisor's. */
bool front_first_take(sup_front *f, const char *tenant, const struct proto_lease_msg *m, int *rc);
/* After a pump of `tenant`'s child: the messages taken make the turn (thread pool). */
void front_first_kick(sup_front *f, const char *tenant);
/* A record that will make no turn lets its lock go (thread pool), then sends what it holds
 * to the supervisor. */
void front_first_release(sup_front *f, struct front_first *ff);
/* The idle sweep: records that no message came to let their lock go. */
void front_first_sweep(sup_front *f, int64_t now_mono_ms);
/* sup_front_close: drops the records, counting those on the thread pool among f->pending. */
void front_first_close(sup_front *f);
/** The tenant's supervisor went away. */
void front_child_on_down(sup_front *f, const char *tenant);
/* Cluster routing (front_cluster.c). Sends a child's message of `tenant`: to this host's
 * supervisor, or to the leader (its name then carries this member's id). As sup_manager_send. */
int front_lease_send(sup_front *f, const char *tenant, struct proto_lease_msg *m);
/* A frame from a supervisor (or the leader) whose origin names m's child: true when it was
 * for another member's children and has been sent on; else m's child is this host's own
 * endpoint name again. */
bool front_lease_route_in(sup_front *f, const char *tenant, struct proto_lease_msg *m);
/* Is the tenant's supervisor reachable (this host's running, or the leader's link up)? */
bool front_lease_up(const sup_front *f, const char *tenant);
/* A supervisor's journal frame (SYNC, BATCH): to the cluster's log through the node; the
 * answer (READY, DONE) comes back with sup_front_cluster_journal_done. */
void front_cluster_journal(sup_front *f, const char *tenant, const struct proto_frame *fr);
/* In cluster mode, not leading: the supervisors are elsewhere. */
bool front_lease_remote(const sup_front *f);
void front_child_unpark(struct front_child *fc, struct sup_front_req *r);
/** Shuts every child down (RETURNs sent, files flushed) and closes it; calls done
 *  when the last timer handle is closed. */
void front_children_close(sup_front *f, void (*done)(sup_front *f));
/** Re-runs the requests of `link` parked for a lease, in arrival order. */
void front_child_rerun_link(struct front_child *fc, const char *link);
/** A closed child whose last write is done: its file is closed on the thread pool, then
 *  it is freed (counting down the close). */
void front_child_release(struct front_child *fc);

/* The child's file (front_store.c). */
/** Opens (creates) the file on the thread pool, bumps its incarnation counter and reads
 *  its rows; front_child_opened() runs on the loop when done. */
void front_store_open_start(struct front_child *fc);
/** The answers held while a new file's incarnation was being stored go to the child, in
 *  order (front_pump.c). */
void front_child_deliver_held(struct front_child *fc);
/** Cleans DATA/pool and makes this process take new files from it (front_pool_refill fills
 *  it). */
void front_pool_open(sup_front *f);
/** Fills DATA/pool again on the thread pool (one fill at a time; a file was taken). */
void front_pool_refill(sup_front *f);
/** Sets up the fill after a take and fills the pool a first time. */
void front_pool_start(sup_front *f);
/** A file was taken from the pool: a fill follows shortly, off the path of the request that
 *  took it. */
void front_pool_taken(sup_front *f);
/** Closes the handle behind front_pool_taken (cb gets it). */
void front_pool_close(sup_front *f, uv_close_cb cb);
/** One of the things sup_front_close waits for is done: the last frees the front. */
void front_pending_done(sup_front *f);
/** Resumes the rows read at open into fc->child (before its first message), then frees
 *  them. */
int front_store_resume(struct front_child *fc);
/** Closes the file on the thread pool (checkpointed: its WAL removed);
 *  front_child_file_closed() runs on the loop when done (at once when it was closed). */
void front_store_close_start(struct front_child *fc);
/** Closes the file of an OPEN child that stays (nothing to write, not busy) on the thread
 *  pool; front_child_file_slept() runs on the loop when done. Its next batch of writes
 *  opens the file again first, on the thread pool (front_store_flush). */
void front_store_sleep_start(struct front_child *fc);
/** Queues the child's pending writes as one batch on the thread pool unless one is
 *  in flight; true when it queued one. When it is durable the child hears of it,
 *  and is pumped (or, closed, flushed again and then released). */
bool front_store_flush(struct front_child *fc);
/** When a failed batch is due again (monotonic ms); INT64_MAX when none waits. */
int64_t front_store_wake_ms(const struct front_child *fc);
/** Closes the file here and now (shutdown only) and frees the rows read at open. */
void front_store_close(struct front_child *fc);
/** Opens DATA/lease-use.map for this boot (at start, before the loop runs), logging what it
 *  found; without it (no boot id, no room) resumed leases start from their marks. */
void front_use_open(sup_front *f);
/** The exact use counters for fc's state machine (ctx = fc), into *out; false when none. */
bool front_use_counters(struct front_child *fc, struct sup_child_counters *out /* OUT */);

/** Answers r and counts it. */
void front_reply(sup_front *f, struct sup_front_req *r, const struct proto_check_reply *reply);
void front_reply_status(sup_front *f, struct sup_front_req *r, uint8_t status,
                        int64_t retry_after_ms, const char *detail);

#endif /* SUP_FRONT_INT_H */

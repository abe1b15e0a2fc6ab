/*
 * The manager's layouts, shared by manager.c (the process table, spawning, exits,
 * the ceiling) and manager_log.c (its log lines). Not installed.
 */
#ifndef SUP_MANAGER_INT_H
#define SUP_MANAGER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "proto_stream.h"
#include "sup_manager.h"
#include "tenant.h"

#define HEALTHY_RUN_MS 10000
/* Restarts of a supervisor that found its tenant locked by another never wait longer. */
#define LOCKED_RETRY_MS 250
/* Frames kept for a tenant waiting for room; more are dropped (retransmitted). */
#define PENDING_MAX (64u << 10)
/* A supervisor with frames unanswered is asked to hibernate only once the
 * oldest waiter has waited this long (a reply would be lost with its channel). */
#define BUSY_VICTIM_MS 500

struct sup_proc {
    char tenant[TENANT_NAME_MAX + 1];
    sup_manager *m;
    uv_process_t process;
    bool process_live;    /* spawned, exit_cb not yet run */
    bool process_closing; /* uv_close called on the handle */
    proto_conn *conn;
    uint64_t started_ms;
    uint64_t last_used_ms;
    uint64_t not_before_ms; /* backoff: no spawn before this loop time */
    bool answered;          /* a frame came back since the spawn */
    bool start_failed;      /* the last start ended before an answer; counted in stats.failing */
    uint32_t in_flight;     /* frames sent since the spawn minus frames received */
    int64_t backoff_ms;
    bool waiting_room;      /* needs a process, the ceiling is reached */
    bool waiting_acquire;   /* ... and asks for tokens: served first */
    uint64_t waiting_since; /* loop time: the oldest waiter is spawned first */
    uint8_t *pending;       /* frames to send once spawned (waiting_room) */
    size_t pending_len;
    uint32_t pending_frames;
};

struct sup_manager {
    uv_loop_t *loop;
    struct sup_manager_config cfg;
    char data_dir[4096];
    char exe[4096];
    char durability[16];
    struct sup_manager_cbs cbs;
    void *data;
    struct sup_proc **procs;
    uint32_t n_procs;
    uint32_t cap_procs;
    struct sup_manager_stats stats;
    uint32_t n_waiting; /* procs with waiting_room: make_room has nothing to do at 0 */
    bool closing;
    int pending_handles;
    void (*close_cb)(void *data);
    void *close_data;
};

/* One line per start, restart, exit and hibernation (tally_log.h). */
void sup__manager_log_start(const struct sup_proc *p, bool restart);
void sup__manager_log_exit(const struct sup_proc *p, int pid, int64_t status, int term_signal,
                           uint64_t ran_ms);
void sup__manager_log_hibernate(const struct sup_proc *p, const sup_manager *m);

#endif /* SUP_MANAGER_INT_H */

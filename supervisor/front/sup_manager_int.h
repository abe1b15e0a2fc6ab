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
#include "tenant_index.h"

#define HEALTHY_RUN_MS 10000
/* Restarts of a supervisor that found its tenant locked by another never wait longer. */
#define LOCKED_RETRY_MS 250
/* Frames kept for a tenant waiting for room; more are dropped (retransmitted). */
#define PENDING_MAX (64u << 10)
/* A supervisor with frames unanswered is asked to hibernate only once the
 * oldest waiter has waited this long (a reply would be lost with its channel). */
#define BUSY_VICTIM_MS 500

/* The default ceiling of supervisors (sup_max_supervisors_default): an eighth of the
 * machine's memory at SUP_BUDGET_BYTES each (an idle supervisor measures under 1 MiB
 * of PSS; the budget leaves room for a busy one's lease tables), at most a quarter
 * of the open-file limit, within [SUP_DEFAULT_MIN, SUP_DEFAULT_MAX]. */
#define SUP_BUDGET_BYTES (2u << 20)
#define SUP_DEFAULT_MIN  64
#define SUP_DEFAULT_MAX  4096

/* Starts the fork server has not answered yet, at most; more go through uv_spawn. */
#define SUP_FORK_QUEUE 1024
/* A fork server that died is started again no sooner than this. */
#define FORK_RETRY_MS 1000

struct sup_proc {
    char tenant[TENANT_NAME_MAX + 1];
    sup_manager *m;
    uv_process_t process; /* a supervisor started by uv_spawn */
    bool forked;          /* ... or by the fork server (manager_fork.c): no handle */
    bool fork_queued;     /* forked: its pid has not come back yet */
    int pid;              /* forked: its pid once known, else 0 */
    bool process_live;    /* spawned, exit not yet seen */
    bool process_closing; /* uv_close called on the handle */
    proto_conn *conn;
    uint64_t started_ms;
    uint64_t started_ns; /* uv_hrtime() at the start */
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
    /* m->live: the process_live ones, most recently used first (make_room's victims come from
     * the tail); m->waiters: the waiting_room ones, oldest first. */
    struct sup_proc *live_prev, *live_next, *wait_prev, *wait_next;
    bool in_live;
    bool going_counted; /* counted in m->n_going */
};

/* The fork server as tallyd sees it (manager_fork.c). */
#define SUP_FORK_SPARES_KNOWN 8

struct sup_forker {
    sup_manager *m;
    uv_process_t server;
    bool server_live; /* spawned, exit_cb not yet run */
    int ctl;          /* control socket (SOCK_SEQPACKET), -1 when none */
    uv_poll_t poll;   /* readable ctl: pids coming back */
    bool poll_live;
    uv_signal_t sigchld; /* reaps the forked supervisors */
    bool sigchld_live;
    bool closed;                            /* the manager is closing: never started again */
    uint64_t not_before_ms;                 /* no new fork server before this loop time */
    struct sup_proc *queue[SUP_FORK_QUEUE]; /* waiting for their pid, in request order */
    uint32_t head, n_queue;
    /* The fork server's spares (forked ahead of a tenant), by pid (0: a free slot): reaped
     * here if they die before they have one; a pid leaves when an answer names it (it became
     * a supervisor). A spare reaped while starts were queued may have taken one of them (an
     * answer will name it), so its wait status stays here until the answer or the queue's
     * end says. */
    struct sup_spare {
        int pid;
        bool dead;  /* reaped, while starts were queued */
        int status; /* its wait status, when dead */
    } spares[SUP_FORK_SPARES_KNOWN];
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
    struct tenant_index proc_index; /* procs by tenant: one lookup per frame, not a scan */
    struct sup_manager_stats stats;
    uint32_t n_waiting; /* procs with waiting_room: make_room has nothing to do at 0 */
    uint32_t n_going;   /* live procs whose channel is closed or closing (sup__proc_going) */
    struct sup_proc *live_head, *live_tail, *wait_head, *wait_tail;
    struct sup_forker forker;
    bool closing;
    int pending_handles;
    void (*close_cb)(void *data);
    void *close_data;
};

/* manager_procs.c: the supervisor of `tenant`, NULL when none; created when missing (NULL
 * without memory). */
struct sup_proc *sup__proc_find(const sup_manager *m, const char *tenant);
struct sup_proc *sup__proc_get(sup_manager *m, const char *tenant);

/* manager_procs.c: the lists and counts the ceiling is kept with, so that a frame costs no scan
 * of every tenant. sup__proc_track files p after a change of process_live or of its channel
 * (in m->live while live, counted in n_going while going); sup__proc_touch marks it used now;
 * sup__wait_add / sup__wait_remove follow waiting_room (n_waiting included). */
bool sup__proc_going(const struct sup_proc *p);
void sup__proc_track(struct sup_proc *p);
void sup__proc_touch(struct sup_proc *p, uint64_t now_ms);
void sup__wait_add(struct sup_proc *p, uint64_t now_ms);
void sup__wait_remove(struct sup_proc *p);

/* manager.c: a supervisor went away (status, or the signal that ended it); frees
 * the manager when it is closing and nothing is left. */
void sup__proc_exited(struct sup_proc *p, int64_t status, int term_signal);
void sup__manager_maybe_finish(sup_manager *m);

/* manager_fork.c: the fork server. _open starts it (TALLY_OK, or TALLY_EUNAVAIL:
 * starts go through uv_spawn); _start asks it for p's process with `fd` as its
 * channel (the caller keeps and closes its copy), TALLY_EUNAVAIL when it cannot;
 * _close stops it; _release closes what is left once no supervisor runs (true
 * when nothing was left to close). */
int sup__fork_open(sup_manager *m);
int sup__fork_start(sup_manager *m, struct sup_proc *p, int fd);
void sup__fork_close(sup_manager *m);
bool sup__fork_release(sup_manager *m);

/* The strings sup__manager_options writes into. */
struct sup_manager_optbuf {
    char idle[32], sync_ms[32], compact[32], keep[32];
};
/** The options every supervisor runs with (data dir, durability, idle exit, log level, batch
 *  sync, compaction), into args (room for 12); returns how many. For uv_spawn of
 *  `tallyd --supervise T` and for the fork server, which passes them on. */
int sup__manager_options(const sup_manager *m, char **args, struct sup_manager_optbuf *b);
/** The descriptors a spawned process gets: no stdin, tallyd's stdout and stderr (the JSON
 *  log); the caller sets stdio[3], the channel. */
void sup__manager_stdio(uv_stdio_container_t stdio[4]);

/* One line per start, restart, exit and hibernation (tally_log.h). */
void sup__manager_log_start(const struct sup_proc *p, bool restart);
void sup__manager_log_ready(const struct sup_proc *p, uint64_t start_us);
void sup__manager_log_exit(const struct sup_proc *p, int pid, int64_t status, int term_signal,
                           uint64_t ran_ms);
void sup__manager_log_hibernate(const struct sup_proc *p, const sup_manager *m);

#endif /* SUP_MANAGER_INT_H */

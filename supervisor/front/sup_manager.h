/*
 * sup_manager: tallyd's side of the supervisor processes. One supervisor per
 * tenant, spawned on demand (uv_spawn of tallyd itself with --supervise, the
 * lease channel on fd 3 as a socketpair), restarted with exponential backoff
 * after a crash, allowed to exit when idle (hibernation: exit status 0) and
 * never run twice for one tenant: the supervisor holds an exclusive lock on
 * its tenant folder, and one that cannot take it exits with status 75 and is
 * retried after the backoff (an orphan from a killed tallyd sees EOF on its
 * channel and exits, releasing the lock).
 *
 * Header-wide rules: loop thread only; strings borrowed for the call.
 */
#ifndef SUP_MANAGER_H
#define SUP_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "proto_frame.h"
#include "proto_stream.h"
#include "sup_front_service.h" /* struct sup_manager_stats */

typedef struct sup_manager sup_manager;

#define SUP_EXIT_IDLE   0  /* hibernation */
#define SUP_EXIT_LOCKED 75 /* another supervisor holds the tenant: retry later */

struct sup_manager_config {
    const char *data_dir;
    const char *exe;               /* path of the tallyd binary (uv_exepath) */
    const char *durability;        /* "strict" or "batched", passed on */
    int64_t idle_exit_ms;          /* passed on; 0 = default 60000 */
    int64_t backoff_min_ms;        /* 0 = 10 */
    int64_t backoff_max_ms;        /* 0 = 2000 */
    uint32_t max_supervisors;      /* running at once, going-away ones included; 0 = 1024; at
                                      the ceiling the least recently used hibernates and the
                                      tenant that needs room waits for its exit */
    int64_t batch_sync_ms;         /* passed on as --batch-sync-ms (batched only); 0 = not passed */
    uint64_t journal_compact_rows; /* passed on as --journal-compact-rows; 0 = not passed */
    int64_t keep_lease_ms;         /* passed on as --keep-lease-ms; 0 = not passed */
};

struct sup_manager_cbs {
    /** A frame from `tenant`'s supervisor (valid during the call). */
    void (*on_frame)(void *data, const char *tenant, const struct proto_frame *f);
    /** `tenant`'s supervisor went away (crash, idle exit, lock refusal); in-flight
     *  requests to it get no answer and should be retried. `status` is the exit
     *  status, or 128 + signal. */
    void (*on_down)(void *data, const char *tenant, int status);
};

/** *out is owned by the caller, release with sup_manager_close(). */
TALLY_MUST_CHECK int sup_manager_open(uv_loop_t *loop, const struct sup_manager_config *cfg,
                                      const struct sup_manager_cbs *cbs, void *data,
                                      sup_manager **out /* OUT */);
/** Sends one frame to `tenant`'s supervisor, spawning it if needed. TALLY_OK (the
 *  frame is queued; no answer is promised; at the max_supervisors ceiling it waits,
 *  bounded, for an exit to make room), TALLY_EUNAVAIL while the tenant is in
 *  restart backoff or the spawn failed, TALLY_ENAME for an invalid tenant. */
int sup_manager_send(sup_manager *m, const char *tenant, const void *frame, size_t len);
/** Sends a frame to `tenant`'s running supervisor only (none running: TALLY_EUNAVAIL), not
 *  counted as awaiting an answer: tallyd's own answers to a supervisor. */
int sup_manager_send_ctl(sup_manager *m, const char *tenant, const void *frame, size_t len);
/* Holds what is sent to tenant's running supervisor until sup_manager_uncork(), so the frames
 * leave in one write (a HELLO and the ACQUIRE behind it are taken in one turn). NULL when no
 * channel is open; sup_manager_uncork(NULL) does nothing. */
proto_conn *sup_manager_cork(sup_manager *m, const char *tenant);
void sup_manager_uncork(proto_conn *c);
/** Starts `tenant`'s supervisor ahead of its first frame when there is room and it is
 *  neither running nor in restart backoff; otherwise does nothing (the first frame
 *  starts or waits for it as usual). A new child's file is created meanwhile. */
void sup_manager_prestart(sup_manager *m, const char *tenant);
/** Asks every running supervisor to hibernate (its channel closed): this host no longer
 *  decides (in a cluster, another member leads). The next frame starts one again. */
void sup_manager_hibernate_all(sup_manager *m);
/** True iff `tenant`'s supervisor is running. */
bool sup_manager_is_up(const sup_manager *m, const char *tenant);
/** True iff `tenant`'s supervisor was spawned and has not answered yet (cold
 *  start: replaying its journal). */
bool sup_manager_is_starting(const sup_manager *m, const char *tenant);
/** True iff `tenant`'s supervisor last went away by crashing (non-zero exit,
 *  signal, failed spawn) and has not exited cleanly since: its next start is a
 *  restart, an outage rather than a cold start. */
bool sup_manager_crashed(const sup_manager *m, const char *tenant);
/** Milliseconds until `tenant` may be spawned again (0 when it may now). */
int64_t sup_manager_backoff_left_ms(const sup_manager *m, const char *tenant);
void sup_manager_stats(const sup_manager *m, struct sup_manager_stats *out /* OUT */);
/** The pid of `tenant`'s supervisor, 0 when none (tests, logs). */
int sup_manager_pid(const sup_manager *m, const char *tenant);
/** Closes every channel (supervisors see EOF, persist and exit), waits for the
 *  processes, then calls cb. */
void sup_manager_close(sup_manager *m, void (*cb)(void *data), void *data);

#endif /* SUP_MANAGER_H */

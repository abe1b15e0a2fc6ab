/*
 * What test_fail_kill9 needs beyond fail_util.h: libtally clients asking in a
 * loop that time every call (connection attempts included), count answers by
 * kind and by refusing scope, and count admissions per wall-clock window of
 * the budget (1 h); and /proc probes for who holds a tenant: the supervisor
 * processes, their parents, which of them has the tenant's journal open, and
 * which pid holds a flock (/proc/locks).
 *
 * Header-wide rules: functions fail the running cmocka test on anything
 * unexpected; askers run on their own threads, the rest on the test's thread.
 */
#ifndef KILL9_UTIL_H
#define KILL9_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define K9_WINDOW_MS 3600000LL /* the budgets' period: one window covers a run */
#define K9_WINDOWS   2         /* a run may straddle one boundary, never two */

/* One libtally client asking (token, endpoint) in a loop. Caller-allocated,
 * zeroed; k9_asker_start(), then k9_asker_stop(). Counters are read after the
 * stop (or racily, for progress). */
struct k9_asker {
    char socket[300];
    char token[64];
    char endpoint[64];
    int link;                 /* the caller's index of the token */
    atomic_int pause_ms;      /* between calls; the test may change it */
    int timeout_ms;           /* libtally's bound on every call */
    atomic_llong *timed_from; /* monotonic ms: calls started before it are not timed */
    pthread_t th;
    bool running;
    atomic_bool stop;
    atomic_llong admitted, degraded, refused, unavailable, other, errors;
    atomic_llong refused_plan, refused_link;
    atomic_llong max_ms, max_error_ms; /* slowest timed call; slowest failed one */
    atomic_llong last_admit_ms;        /* monotonic ms of the latest non-degraded admission */
    atomic_llong win0;                 /* window id of the asker's start */
    atomic_llong win_admitted[K9_WINDOWS], win_degraded[K9_WINDOWS];
};

void k9_asker_start(struct k9_asker *a, const char *socket, const char *token, const char *endpoint,
                    int link, int pause_ms, int timeout_ms, atomic_llong *timed_from);
void k9_asker_stop(struct k9_asker *a);

int64_t k9_mono_ms(void);
int64_t k9_wall_ms(void);

/** Parent pid of pid from /proc/PID/stat; 0 when gone. */
pid_t k9_ppid(pid_t pid);
/** How many of the n killed pids tallyd's log (borrowed) shows exiting by the signal. Each must
 *  have its supervisor_exit line; a supervisor found alive may have exited on its own (idle)
 *  just before the kill reached it, a zombie: at most one such, printed with its reason. */
int k9_killed_by_signal(const char *log, const pid_t *killed, int n);
/** True iff pid has a file open whose path ends with `suffix`. */
bool k9_has_open(pid_t pid, const char *suffix);
/** How many open files of pid have a link target starting with `prefix`
 *  ("socket:" counts its sockets). */
int k9_count_fds(pid_t pid, const char *prefix);
/** The pid holding a flock on `path` per /proc/locks (matched by inode): 0 when
 *  none, -1 when several lines name it. */
pid_t k9_flock_holder(const char *path);
/** True iff connecting to the Unix socket `path` is refused (a stale file). */
bool k9_socket_refuses(const char *path);
/** When `path` was made (its ctime) in ns, 0 when missing: an inode number is
 *  reused at once, a replaced file is told by this. */
long long k9_made_ns(const char *path);
/** SIGKILLs every process whose command line contains `needle` (arguments
 *  joined by spaces); returns how many. */
int k9_kill_matching(const char *needle);
/** True iff pid exists and is not a zombie. */
bool k9_alive(pid_t pid);

/* Samples the tenant's supervisors on a thread every few milliseconds: how
 * many have the journal (ledger.db) open at once, and whether the one that has
 * it is the holder of supervisor.lock. Caller-allocated, zeroed. */
struct k9_watch {
    char data[256];
    char tenant[64];
    char lock[400];
    pthread_t th;
    bool running;
    atomic_bool stop;
    atomic_int max_authorities; /* most supervisors with the journal open at one sample */
    atomic_int wrong_holder;    /* samples where the journal's user did not hold the lock */
    atomic_llong samples;
};

void k9_watch_start(struct k9_watch *w, const char *data, const char *tenant);
void k9_watch_stop(struct k9_watch *w);

/** Every token in `file` (one per line, made by a `tally link create` burst during kills)
 *  still authenticates at tallyd's `socket` ("closed" endpoint); prints the count. */
void k9_check_tokens(const char *socket, const char *file, int timeout_ms);

#endif /* KILL9_UTIL_H */

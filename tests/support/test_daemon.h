/*
 * Running the real tallyd in tests: start it on a data dir with an ephemeral
 * HTTP port and its Unix socket, wait until it answers, stop it with SIGTERM
 * or kill it with SIGKILL, and find its supervisor processes.
 */
#ifndef TEST_DAEMON_H
#define TEST_DAEMON_H

#include <stdbool.h>
#include <sys/types.h>

struct test_daemon {
    pid_t pid;
    char data[256];
    char socket[300];
    char log[300]; /* stderr of tallyd, appended */
};

/** Runs `path` (borrowed for the process's life; NULL: the built tallyd) as the daemon of the
 *  following test_daemon_start() calls: a test build such as tallyd_powerloss. */
void test_daemon_use_bin(const char *path);
/** Starts tallyd --data DATA --socket DATA/tally.sock --http 127.0.0.1:0 plus the
 *  NULL-terminated extra arguments; waits up to 10 s for the socket to accept.
 *  Returns 0 or -1 (the log says why). */
int test_daemon_start(struct test_daemon *d, const char *data, ...);
/** SIGTERM and wait; returns the exit status (128 + signal when killed). */
int test_daemon_stop(struct test_daemon *d);
/** SIGKILL and reap. */
void test_daemon_kill9(struct test_daemon *d);
/** Pids of processes whose command line contains `--supervise TENANT` and
 *  `--data DATA`; returns how many (at most max). */
int test_supervisor_pids(const char *data, const char *tenant, pid_t *pids, int max);
/** Pids of the caller authorities (`--callers S`) of DATA; returns how many (at most max). */
int test_caller_authority_pids(const char *data, pid_t *pids, int max);
/** The number after "FIELD:" in /proc/PID/status (VmRSS in kB, voluntary_ctxt_switches,
 *  ...); -1 when the process or the field is not there. */
long long test_proc_status(pid_t pid, const char *field);
/** Waits up to timeout_ms until test_supervisor_pids() returns `want`. */
bool test_wait_supervisors(const char *data, const char *tenant, int want, int timeout_ms);

#endif

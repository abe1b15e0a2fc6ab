/*
 * What the failure suites (docs/FAILURE-MODES.md §1) share on top of
 * serve_util.h: a steady load on its own thread that times every answer,
 * a tmpfs data dir mounted and unmounted by the test, a filler file that
 * takes a disk's last byte, PRAGMA integrity_check over every SQLite file of
 * a data dir, and a process's resident memory.
 *
 * Header-wide rules: functions fail the running cmocka test on anything
 * unexpected; call them from the test's thread only.
 */
#ifndef FAIL_UTIL_H
#define FAIL_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "serve_util.h"

/* Answers counted by kind since the last fail_load_take(). */
struct fail_counts {
    int64_t admitted; /* admitted from leases (not degraded) */
    int64_t degraded; /* admitted under the degraded local limit */
    int64_t refused;
    int64_t unavailable;
    int64_t other;  /* any other status */
    int64_t errors; /* no answer within the client's timeout, or a broken connection */
    int64_t max_ms; /* the slowest answer */
};

/* One libtally client asking (token, endpoint) in a loop with a pause between
 * requests. Caller-allocated; fail_load_start(), then fail_load_stop(). */
struct fail_load {
    char socket[300];
    char token[64];
    char endpoint[64];
    int pause_ms;
    pthread_t th;
    bool running;
    atomic_bool stop;
    atomic_llong n[6]; /* indexed like the fields of struct fail_counts */
    atomic_llong max_ms;
};

/** Adds the counts of c into sum (the slowest answer is the larger). */
void fail_counts_add(struct fail_counts *sum, const struct fail_counts *c);
/** One line "# WHAT admitted N degraded N ... max N ms" on stdout. */
void fail_counts_print(const char *what, const struct fail_counts *c);
/** Fails the test, printing the counts, on any error, any odd answer, or an answer slower
 *  than bound_ms. */
void fail_counts_clean(const char *what, const struct fail_counts *c, int64_t bound_ms);

void fail_load_start(struct fail_load *l, const char *socket, const char *token,
                     const char *endpoint, int pause_ms);
/** Counts since the last take (or the start), and resets them. */
struct fail_counts fail_load_take(struct fail_load *l);
/** Stops the thread and joins it; a no-op when not running. */
void fail_load_stop(struct fail_load *l);

/** The failure suites' tenants on an initialised data dir: plan pro, endpoints `open`
 *  (degraded limit degraded_n/1h) and `closed`, tenants a and b with one link each. */
void fail_two_tenants(const struct serve_env *s, int degraded_n, char *token_a, size_t cap_a,
                      char *token_b, size_t cap_b);

/* The set-up of the bounded-resources suites (test_fail_caps, test_fail_conns): plan p (10 a
 * year), endpoint api (1,000 a year), tenants t0..t4 with one link each. */
#define FAIL_CAPS_TENANTS 5
struct fail_caps_env {
    struct serve_env s;
    char tokens[FAIL_CAPS_TENANTS][64];
};
/** cmocka setup and teardown (the log of a failed test is kept). */
int fail_caps_setup(void **state);
int fail_caps_teardown(void **state);

/** Mounts a tmpfs of `size` ("16m") on the existing directory `dir`; fails the
 *  test with a clear message when it cannot (the suites need root). */
void fail_tmpfs_mount(const char *dir, const char *size);
/** Unmounts `dir` (lazily when busy); quiet when it is not mounted. */
void fail_tmpfs_umount(const char *dir);
/** Writes `path` until the disk is full; returns the bytes written. */
int64_t fail_fill(const char *path);

/** Runs PRAGMA integrity_check on every *.db under dir; fails the test on any
 *  answer but "ok". Returns the number of files checked. */
int fail_integrity_check(const char *dir);
/** VmRSS of pid in KiB, from /proc/PID/status (-1 when unreadable). */
int64_t fail_rss_kib(pid_t pid);
/** Files (not directories) under dir; 0 when dir does not exist. */
int fail_count_files(const char *dir);

/** Copies tallyd's log to $TALLY_KEEP_LOG when set (a failed run's evidence). */
void fail_keep_log(const char *log);

#endif /* FAIL_UTIL_H */

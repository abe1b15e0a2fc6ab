/*
 * What the suites share: temporary data dirs, running the real built
 * binaries as child processes with their output captured, and small file
 * helpers. Tests spawn `tally` and `tallyd` exactly as users do.
 */
#ifndef TEST_SUPPORT_H
#define TEST_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TEST_OUT_MAX (256 * 1024)

struct test_out {
    int code;               /* exit status, or 128 + signal */
    char out[TEST_OUT_MAX]; /* stdout, NUL-terminated */
    char err[TEST_OUT_MAX]; /* stderr, NUL-terminated */
};

/** Makes a fresh directory under /tmp into buf (at least 64 bytes). */
void test_tmpdir(char *buf, size_t len);
/** Removes a directory tree (rm -rf). */
void test_rmtree(const char *path);
/** Full path of a built binary ("tally", "tallyd") into buf. */
void test_bin(const char *name, char *buf, size_t len);
/** Runs argv (argv[0] a path, NULL-terminated) with `input` on stdin (may be NULL),
 *  waits, captures output into *o. Returns o->code. */
int test_run(char *const argv[], const char *input, struct test_out *o);
/** Runs `tally --data DIR ARGS...` (NULL-terminated varargs), output into *o. */
int test_tally(const char *data, struct test_out *o, ...);
/** Reads a whole file into a malloc'd buffer (*len set); NULL when missing. */
char *test_read_file(const char *path, size_t *len);
/** True iff any regular file under dir contains `needle` (bytes). */
bool test_dir_contains(const char *dir, const char *needle);
/** True iff every file under dir (and dir itself) denies all access to group and others. */
bool test_dir_private(const char *dir);
/** splitmix64: the next pseudo-random number of *state (deterministic). The one generator
 *  of the suites: seed it from test_seed() so that TALLY_SEED replays a run. */
uint64_t test_rand(uint64_t *state);
/** Uniform enough in lo..hi inclusive (the modulo bias is irrelevant here); lo <= hi. */
int64_t test_rand_range(uint64_t *state, int64_t lo, int64_t hi);
/** A TCP port on 127.0.0.1 that was free a moment ago (bound, read back, closed); -1 when
 *  none could be had. */
int test_free_port(void);
/** Monotonic milliseconds. */
int64_t test_now_ms(void);
/** Wall-clock (CLOCK_REALTIME) milliseconds since the epoch: what tallyd's windows count by. */
int64_t test_wall_ms(void);
/** The leader's id as `tally cluster status` on DATA names it (0: none known, or no answer). */
unsigned long long test_cluster_leader(const char *data);
/** Waits until DATA's tallyd names `want` as the leader: false when timeout_ms went by first. */
bool test_cluster_wait_leader(const char *data, unsigned long long want, int timeout_ms);
/** For a test that counts against limits of `period_ms` windows and runs up to `need_ms`: when
 *  the running window (aligned on the wall clock, as tally's are) ends sooner, sleeps until
 *  just past its end, so the test's counts all fall in one window. */
void test_within_one_window(int64_t period_ms, int64_t need_ms);
/** Seed for property tests: $TALLY_SEED or the time; printed once. */
uint64_t test_seed(void);

#endif

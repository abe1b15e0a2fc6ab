/*
 * Many tenants through the real tallyd: child counter files are opened off the
 * loop, idle ones close, and descriptors stay bounded.
 *
 *  - An idle child closes its file (/metrics tally_child_counters_open drops to
 *    0 and /proc/PID/fd no longer lists it) and its next requests resume it
 *    exactly: k admitted of N before, exactly N - k after.
 *  - SIGTERM while child files are being opened: tallyd exits 0.
 *  - With --max-open-children 8, asking 48 tenants in turn keeps tallyd's
 *    descriptors under a bound far below one file per tenant: the least
 *    recently used children close their files and stay loaded (asleep), their
 *    WALs kept on disk for the reopen.
 *  - New child files taken from DATA/pool are made again after the first
 *    requests (each with its WAL started), and the files taken work.
 *  - Every request is answered under pipelined load over 200 tenants x 2 links
 *    (tally-bench, Zipf 1.1, 8 connections x 8 in flight), pass after pass, while
 *    supervisors start and exit idle: no request is left unanswered (a child
 *    lost from tallyd's pump queue once left its requests unanswered for good),
 *    and once warm under 1 % of the answers are neither admitted nor refused (a
 *    503 after --wait-ms, when a loaded machine starts a supervisor slowly).
 *
 * A hot tenant's p99 with newcomers beside it: test_e2e_newcomers.c.
 *
 * Tenants, links and endpoints are created in bulk through the store (one
 * transaction) rather than by hundreds of `tally` runs; tallyd sees them at its
 * next configuration poll.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serve_util.h"
#include "store.h"
#include "store_config.h"
#include "tenant.h"

#include "tenants_util.h"

/* ---- the flags ---- */

static int
tallyd_args(struct test_out *o, const char *a, const char *b)
{
    char bin[512];
    char *argv[] = {bin, (char *)a, (char *)b, NULL};

    test_bin("tallyd", bin, sizeof(bin));
    return test_run(argv, NULL, o);
}

static void
test_flags_are_validated_and_documented(void **state)
{
    static struct test_out o;
    static const char *const bad[] = {
        "--child-idle-ms=0",     "--child-idle-ms=86400001",    "--child-idle-ms=soon",
        "--max-open-children=0", "--max-open-children=-1",      "--max-open-children=1000001",
        "--keep-lease-ms=4999",  "--keep-lease-ms=31536000001", "--keep-lease-ms=1h"};

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(tallyd_args(&o, bad[i], "--data=/nonexistent"), 64);
        assert_non_null(strstr(o.err, "invalid --"));
    }
    assert_int_equal(tallyd_args(&o, "--help", NULL), 0);
    assert_non_null(strstr(o.out, "--child-idle-ms MS"));
    assert_non_null(strstr(o.out, "--max-open-children N"));
    assert_non_null(strstr(o.out, "--keep-lease-ms MS"));
}

/* ---- an idle child closes its file and resumes exactly ---- */

static void
test_idle_child_closes_and_resumes_exactly(void **state)
{
    struct env *e = *state;
    int admitted = 0, refused = 0, open_fds = 0;
    int64_t until;

    serve_start(&e->s, "--child-idle-ms=300", NULL);
    for (int i = 0; i < 4; i++)
        assert_int_equal(check(e->s.http_port, e->token, "api"), 200);
    (void)fd_count(e->s.d.pid, "/endpoints/api.db", &open_fds);
    assert_true(open_fds >= 1);
    /* Idle: the child returns its leases, closes the file and is freed. */
    until = serve_now_ms() + 10000;
    while (metric(e, "tally_child_counters_open") != 0) {
        assert_true(serve_now_ms() < until);
        serve_sleep_ms(50);
    }
    assert_true(fd_count(e->s.d.pid, "/endpoints/api.db", &open_fds) > 0);
    assert_int_equal(open_fds, 0);
    assert_true(metric(e, "tally_child_files_total{event=\"close\"}") >= 1);
    assert_true(metric(e, "tally_child_counters") == 0);
    /* Reopened as a new incarnation: exactly 10 - 4 more. */
    for (int i = 0; i < 10; i++) {
        int st = check(e->s.http_port, e->token, "api");
        admitted += st == 200;
        refused += st == 429;
    }
    assert_int_equal(admitted, 6);
    assert_int_equal(refused, 4);
    assert_true(metric(e, "tally_child_files_total{event=\"open\"}") >= 2);
    serve_stop(&e->s);
}

/* ---- shutdown while files are being opened ---- */

static void
test_shutdown_while_opening(void **state)
{
    struct env *e = *state;
    int fds[40];

    add_endpoints(e->s.data, "api", "sd", 40);
    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < 40; i++) {
        char ep[32];
        snprintf(ep, sizeof(ep), "sd%03d", i);
        fds[i] = check_send(e->s.http_port, e->token, ep);
    }
    /* SIGTERM with opens in flight: tallyd exits 0 (ASan clean, its loop closes with
     * nothing left on it). */
    serve_stop(&e->s);
    for (int i = 0; i < 40; i++) {
        int st = check_read(fds[i]);
        assert_true(st == 200 || st == 503 || st == -1);
    }
}

/* ---- descriptors stay bounded ---- */

/* How many of tenants PREFIX000.. hold commits in endpoint api's WAL (an emptied one stays). */
static int
wal_count(const char *data, const char *prefix, int n)
{
    char path[512];
    struct stat st;
    int k = 0;

    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/tenants/%s%03d/endpoints/api.db-wal", data, prefix, i);
        k += stat(path, &st) == 0 && st.st_size > 0;
    }
    return k;
}

#define FD_TENANTS  48
#define FD_MAX_OPEN 8

static void
test_descriptors_stay_bounded(void **state)
{
    struct env *e = *state;
    static char tokens[FD_TENANTS][TOKEN_BUF];
    int base, worst = 0, files_worst = 0;

    add_tenants(e->s.data, "fd", FD_TENANTS, tokens);
    serve_start(&e->s, "--max-open-children=8", "--max-supervisors=16");
    assert_int_equal(check(e->s.http_port, e->token, "api"), 200);
    {
        int dummy;
        base = fd_count(e->s.d.pid, NULL, &dummy);
    }
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < FD_TENANTS; i++) {
            int files, n;
            assert_int_equal(check(e->s.http_port, tokens[i], "api"), 200);
            n = fd_count(e->s.d.pid, "/endpoints/", &files);
            if (n > worst)
                worst = n;
            if (files > files_worst)
                files_worst = files;
        }
    }
    print_message("descriptors: %d at start, at most %d with %d tenants (child files: at most %d "
                  "descriptors)\n",
                  base, worst, FD_TENANTS, files_worst);
    /* 2 per open child (file, WAL; at most 3 with a -shm), a few children closing, one channel
     * per live supervisor; without the cap it would be 3 per tenant. */
    assert_true(files_worst <= 3 * (FD_MAX_OPEN + 4));
    assert_true(worst <= base + 3 * (FD_MAX_OPEN + 4) + 16 + 16);
    assert_true(metric(e, "tally_child_counters_open") <= FD_MAX_OPEN + 4);
    /* The cap closed files, not children: every child is still loaded (asleep), and
     * its next write opened its file again. */
    assert_true(metric(e, "tally_child_files_total{event=\"sleep\"}") > 0);
    assert_true(metric(e, "tally_child_counters") == FD_TENANTS + 1);
    /* An asleep child's WAL stays (no checkpoint, no fsync when it sleeps): more WALs on
     * disk than files open, each read back by the reopen that served round 2. */
    assert_true(wal_count(e->s.data, "fd", FD_TENANTS) > FD_MAX_OPEN + 4);
    serve_stop(&e->s);
}

/* ---- the pool of new child files is made again after first requests ---- */

/* How many child files DATA/pool holds ready, each with its WAL started. */
static int
pool_children(const char *data)
{
    char path[512];
    int n = 0;

    for (int k = 0; k < 8; k++) {
        snprintf(path, sizeof(path), "%s/pool/child-%d.db-wal", data, k);
        n += access(path, F_OK) == 0;
    }
    return n;
}

/* Waits (at most 10 s) until DATA/pool holds its four child files. */
static void
pool_wait_full(const char *data)
{
    int64_t until = serve_now_ms() + 10000;

    while (pool_children(data) < 4) {
        assert_true(serve_now_ms() < until);
        serve_sleep_ms(20);
    }
}

#define POOL_TENANTS 6

static void
test_pool_is_made_again_after_first_requests(void **state)
{
    struct env *e = *state;
    static char tokens[POOL_TENANTS][TOKEN_BUF];

    add_tenants(e->s.data, "pl", POOL_TENANTS, tokens);
    serve_start(&e->s, NULL, NULL);
    pool_wait_full(e->s.data);
    /* More first requests at once than the pool holds: the first take the pool's files, the
     * rest write their own; none waits for a fill. */
    for (int i = 0; i < POOL_TENANTS; i++)
        assert_int_equal(check(e->s.http_port, tokens[i], "api"), 200);
    pool_wait_full(e->s.data);
    /* Made again, and the new tenants' files are theirs (a second request is admitted). */
    for (int i = 0; i < POOL_TENANTS; i++)
        assert_int_equal(check(e->s.http_port, tokens[i], "api"), 200);
    serve_stop(&e->s);
}

/* ---- every request answered under load over many tenants ---- */

#define LOAD_TENANTS "200"
#define LOAD_PASSES  6
#define LOAD_CONNS   "8"
#define LOAD_DEPTH   "8"

/* NAME=value of tally-bench's summary line (the last one with decisions_per_s=), -1 when
 * absent. */
static long
bench_field(const char *out, const char *name)
{
    const char *line = NULL, *p;
    char key[64];

    for (p = strstr(out, "decisions_per_s="); p != NULL; p = strstr(p + 1, "decisions_per_s="))
        line = p;
    if (line == NULL)
        return -1;
    snprintf(key, sizeof(key), " %s=", name);
    p = strstr(line, key);
    return p != NULL ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void
test_every_request_answered_under_load(void **state)
{
    struct env *e = *state;
    char links[512], bench[512], tokens[512], sock[512], seed[16];
    struct test_out *o = malloc(sizeof(*o));

    assert_non_null(o);
    snprintf(links, sizeof(links), "%s/bench/tally-bench-links", TALLY_BIN_DIR);
    snprintf(bench, sizeof(bench), "%s/bench/tally-bench", TALLY_BIN_DIR);
    snprintf(tokens, sizeof(tokens), "%s/load.tok", e->s.root);
    snprintf(sock, sizeof(sock), "%s/tally.sock", e->s.data);
    {
        char *argv[] = {links,        "--data",  e->s.data, "--plan", "pro",  "--tenants",
                        LOAD_TENANTS, "--links", "2",       "--out",  tokens, NULL};
        assert_int_equal(test_run(argv, NULL, o), 0);
    }
    /* Hourly limits, as plans have: plenty, so quiet links keep their leases and hot ones
     * write their marks. Supervisors exit after 1 s idle: passes see them start, exit and
     * start again. */
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "100000/1h", NULL);
    serve_start(&e->s, "--idle-exit-ms=1000", NULL);
    for (int pass = 0; pass < LOAD_PASSES; pass++) {
        long admitted, refused, other, timeouts;

        snprintf(seed, sizeof(seed), "%d", pass + 1);
        {
            char *argv[] = {bench,        "--socket",
                            sock,         "--tokens",
                            tokens,       "--endpoint",
                            "search",     "--zipf",
                            "1.1",        "--links-per-tenant",
                            "2",          "--draw-tenants",
                            LOAD_TENANTS, "--seed",
                            seed,         "--connections",
                            LOAD_CONNS,   "--pipeline",
                            LOAD_DEPTH,   "--requests",
                            "50000000",   "--seconds",
                            "2",          "--timeout-ms",
                            "8000",       NULL};
            if (test_run(argv, NULL, o) != 0)
                fail_msg("tally-bench: exit %d: %s", o->code, o->err);
        }
        admitted = bench_field(o->out, "admitted");
        refused = bench_field(o->out, "refused");
        other = bench_field(o->out, "other");
        timeouts = bench_field(o->out, "timeouts");
        print_message("pass %d: admitted %ld, refused %ld, neither %ld (timeouts %ld)\n", pass + 1,
                      admitted, refused, other, timeouts);
        assert_true(admitted > 0);
        assert_int_equal(timeouts, 0);
        if (pass >= LOAD_PASSES - 3)
            assert_true(other * 100 <= admitted + refused + other);
        /* Every supervisor of the pass goes idle and exits before the next one. */
        serve_sleep_ms(pass % 2 == 0 ? 200 : 2500);
    }
    serve_stop(&e->s);
    free(o);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags_are_validated_and_documented),
        cmocka_unit_test_setup_teardown(test_idle_child_closes_and_resumes_exactly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_while_opening, setup, teardown),
        cmocka_unit_test_setup_teardown(test_descriptors_stay_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_is_made_again_after_first_requests, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_every_request_answered_under_load, setup, teardown),
    };

    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests_name("e2e_tenants", tests, NULL, NULL);
}

/*
 * Leases end to end with the real processes: tallyd, its child counters and a
 * supervisor per tenant, driven over the binary protocol by a pipelined load
 * generator. Windows are a year long so no test straddles a boundary: every
 * count below is exact. After each run the supervisor's journal is replayed
 * into a ledger and every budget is checked: granted - credited <= N (I1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store_snapshot.h"
#include "sup_child_codec.h"
#include "sup_child_host.h"
#include "sup_journal_codec.h"
#include "sup_lease.h"
#include "test_daemon.h"
#include "test_load.h"
#include "test_support.h"

static struct test_out o;

struct env {
    char root[64];
    char data[128];
    char tokens[4][64];
    const char *tok[4];
    struct test_daemon d;
};

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static void
tally_ok(const char *data, ...)
{
    char bin[512];
    char *argv[40];
    int argc = 0;
    va_list ap;
    char *a;

    test_bin("tally", bin, sizeof(bin));
    argv[argc++] = bin;
    argv[argc++] = "--data";
    argv[argc++] = (char *)data;
    va_start(ap, data);
    while ((a = va_arg(ap, char *)) != NULL && argc < 39)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    if (test_run(argv, NULL, &o) != 0)
        fail_msg("tally %s: exit %d: %s", argv[3], o.code, o.err);
}

/* A tenant on plan `plan_limit` with endpoints a (per link `ep_limit`), b and c
 * (roomy), and four links. */
static void
make_env(struct env *e, const char *plan_limit, const char *ep_limit)
{
    int i;

    test_tmpdir(e->root, sizeof(e->root));
    snprintf(e->data, sizeof(e->data), "%s/data", e->root);
    tally_ok(e->data, "init", NULL);
    tally_ok(e->data, "plan", "set", "pro", "--limit", plan_limit, "--concurrency", "2", NULL);
    tally_ok(e->data, "endpoint", "set", "a", "--limit", ep_limit, NULL);
    tally_ok(e->data, "endpoint", "set", "b", "--limit", "100000/365d", NULL);
    tally_ok(e->data, "endpoint", "set", "c", "--limit", "100000/365d", NULL);
    tally_ok(e->data, "tenant", "add", "acme", "--plan", "pro", NULL);
    for (i = 0; i < 4; i++) {
        tally_ok(e->data, "link", "create", "acme", NULL);
        snprintf(e->tokens[i], sizeof(e->tokens[i]), "%.36s", o.out);
        e->tok[i] = e->tokens[i];
    }
}

static int
teardown(void **state)
{
    struct env *e = *state;

    if (e->d.pid > 0)
        test_daemon_kill9(&e->d);
    test_rmtree(e->root);
    return 0;
}

/* Sanitizer builds on a busy 2-core machine can take tens of milliseconds per
 * lease round trip: these tests are about counts, not latency, so requests may
 * wait up to 3 s for their grant. */
static void
start(struct env *e, const char *extra)
{
    int rc = extra != NULL ? test_daemon_start(&e->d, e->data, "--wait-ms=3000", extra, NULL)
                           : test_daemon_start(&e->d, e->data, "--wait-ms=3000", NULL);
    if (rc != 0) {
        size_t len = 0;
        char *log = test_read_file(e->d.log, &len);
        fail_msg("tallyd did not start: %s", log != NULL ? log : "(no log)");
    }
}

/* ---- I1 on the real journal ---- */

struct cell_check {
    int cells;
    int violations;
};

static int
check_cell(void *ctx, const struct sup_cell_info *c)
{
    struct cell_check *cc = ctx;

    cc->cells++;
    if (c->granted - c->credited > c->limit) {
        cc->violations++;
        fprintf(stderr, "I1: scope %d endpoint %s link %s window %lld: G=%lld C=%lld N=%lld\n",
                (int)c->scope, c->endpoint, c->link, (long long)c->window_id, (long long)c->granted,
                (long long)c->credited, (long long)c->limit);
    }
    return 0;
}

/* Replays acme's journal into a fresh ledger and checks every cell. */
static int
journal_cells(const char *data)
{
    char path[512];
    struct sup_ledger_config cfg;
    struct cell_check cc = {0, 0};
    store_snapshot *snap = NULL;
    store_db *config = NULL;
    sup_ledger *l = NULL;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    const struct store_snap_tenant *t;
    struct tenant_endpoint eps[8];
    size_t n = 0, i, k = 0;
    const struct tenant_endpoint *all;

    assert_int_equal(store_config_open(data, false, &config), TALLY_OK);
    assert_int_equal(store_snapshot_load(config, "acme", &snap), TALLY_OK);
    t = store_snapshot_tenant(snap, "acme");
    assert_non_null(t);
    all = store_snapshot_endpoints(snap, &n);
    for (i = 0; i < n && k < 8; i++)
        eps[k++] = all[i];
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.tenant, sizeof(cfg.tenant), "acme");
    cfg.plan = *t->plan;
    cfg.endpoints = eps;
    cfg.endpoint_count = k;
    assert_int_equal(sup_ledger_open(&cfg, &l), TALLY_OK);
    snprintf(path, sizeof(path), "%s/tenants/acme/ledger.db", data);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT rec FROM journal ORDER BY seq", -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        struct sup_record rec;
        assert_int_equal(sup_record_decode(sqlite3_column_blob(st, 0),
                                           (size_t)sqlite3_column_bytes(st, 0), &rec),
                         TALLY_OK);
        assert_int_equal(sup_ledger_replay(l, &rec), TALLY_OK);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    (void)sup_ledger_each_cell(l, check_cell, &cc);
    sup_ledger_close(l);
    store_snapshot_free(snap);
    store_db_close(config);
    assert_int_equal(cc.violations, 0);
    return cc.cells;
}

/* ---- tests ---- */

static void
test_200_concurrent_requests_admit_exactly_10(void **state)
{
    static struct env e;
    struct test_load_result r;

    *state = &e;
    make_env(&e, "1000/365d", "10/365d");
    start(&e, NULL);
    test_load_run(e.d.socket, e.tok, 1, "a", 200, 20, 20000, &r);
    assert_int_equal(r.lost, 0);
    assert_int_equal(r.admitted, 10);
    assert_int_equal(r.refused, 190);
    /* and again: the refused were not charged, the admitted were */
    test_load_run(e.d.socket, e.tok, 1, "a", 50, 5, 20000, &r);
    assert_int_equal(r.admitted, 0);
    assert_int_equal(test_daemon_stop(&e.d), 0);
    assert_true(journal_cells(e.data) > 0);
}

static void
test_plan_cap_shared_by_endpoints_and_links(void **state)
{
    static struct env e;
    struct test_load_result ra, rb, rc;

    *state = &e;
    make_env(&e, "60/365d", "100000/365d");
    start(&e, NULL);
    /* the same cap, split over three endpoints (three child counters) and four
     * links, all at once */
    {
        const char *eps[3] = {"a", "b", "c"};
        struct test_load_result *res[3] = {&ra, &rb, &rc};
        int fds[3];
        pid_t pids[3];
        for (int k = 0; k < 3; k++) {
            int pfd[2];
            assert_int_equal(pipe(pfd), 0);
            pids[k] = fork();
            if (pids[k] == 0) {
                struct test_load_result r;
                close(pfd[0]);
                test_load_run(e.d.socket, e.tok, 4, eps[k], 100, 10, 20000, &r);
                _exit(write(pfd[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
            }
            close(pfd[1]);
            fds[k] = pfd[0];
        }
        for (int k = 0; k < 3; k++) {
            assert_int_equal(read(fds[k], res[k], sizeof(*res[k])), (ssize_t)sizeof(*res[k]));
            close(fds[k]);
            waitpid(pids[k], NULL, 0);
        }
    }
    assert_int_equal(ra.lost + rb.lost + rc.lost, 0);
    fprintf(stderr, "admitted a=%d b=%d c=%d\n", ra.admitted, rb.admitted, rc.admitted);
    assert_true(ra.admitted + rb.admitted + rc.admitted <= 60);
    /* once idle leases come back (1 s), the whole cap is reachable */
    sleep_ms(1600);
    {
        struct test_load_result rest;
        int total = ra.admitted + rb.admitted + rc.admitted;
        test_load_run(e.d.socket, e.tok, 4, "c", 100, 4, 20000, &rest);
        total += rest.admitted;
        test_load_run(e.d.socket, e.tok, 4, "b", 100, 4, 20000, &rest);
        total += rest.admitted;
        fprintf(stderr, "admitted in all: %d of 60\n", total);
        assert_int_equal(total, 60);
    }
    assert_int_equal(test_daemon_stop(&e.d), 0);
    journal_cells(e.data);
}

static void
test_idle_supervisor_exits_and_comes_back_with_counts(void **state)
{
    static struct env e;
    struct test_load_result r;

    *state = &e;
    make_env(&e, "1000/365d", "10/365d");
    start(&e, "--idle-exit-ms=400");
    test_load_run(e.d.socket, e.tok, 1, "a", 6, 1, 20000, &r);
    assert_int_equal(r.admitted, 6);
    assert_true(test_wait_supervisors(e.data, "acme", 1, 5000));
    /* leases go back after 1 s idle, then the supervisor hibernates */
    assert_true(test_wait_supervisors(e.data, "acme", 0, 10000));
    test_load_run(e.d.socket, e.tok, 1, "a", 20, 4, 20000, &r);
    assert_int_equal(r.admitted, 4);
    assert_int_equal(r.refused, 16);
    assert_int_equal(test_daemon_stop(&e.d), 0);
    journal_cells(e.data);
}

/* What a child killed now may strand: per lease row in its file, the durable mark
 * runs ahead of use by at most a chunk and a half (chunk = max(n/4, min(n, 4)),
 * raised half a chunk early) plus one request's cost. */
static int64_t
mark_slack_bound(const char *data)
{
    char path[512];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t bound = 0;

    snprintf(path, sizeof(path), "%s/tenants/acme/endpoints/a.db", data);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT rec FROM lease", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        struct sup_child_lease_rec rec;
        int64_t chunk;
        assert_int_equal(sup_child_rec_decode(sqlite3_column_blob(st, 0),
                                              (size_t)sqlite3_column_bytes(st, 0), &rec),
                         TALLY_OK);
        chunk = rec.n < 4 ? rec.n : 4;
        if (rec.n / 4 > chunk)
            chunk = rec.n / 4;
        bound += chunk + chunk / 2 + 1;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return bound;
}

/* kill -9 of tallyd between bursts, three times: each restarted child resumes the
 * leases in its file (a new incarnation), so what the dead child held comes back
 * by resumption. Only the write-ahead slack of its durable marks is lost. */
static void
test_kill9_idle_tallyd_resumes_leases(void **state)
{
    static struct env e;
    struct test_load_result r;
    int admitted = 0;
    int64_t bound = 0;
    int kill;

    *state = &e;
    make_env(&e, "400/365d", "100000/365d");
    start(&e, NULL);
    for (kill = 0; kill < 3; kill++) {
        test_load_run(e.d.socket, e.tok, 1, "a", 60, 1, 20000, &r);
        assert_int_equal(r.admitted, 60);
        admitted += r.admitted;
        /* Quiet first: a prefetched grant still on its way, or whose row is not yet
         * written, when the child dies is not in the file and counts as spent at
         * its expiry (at most one lease per link); the chaos tests cover that. */
        sleep_ms(300);
        test_daemon_kill9(&e.d);
        /* Plus what has no row: a lease of at most SUP_CHILD_MARK_CHUNK_MIN_DEFAULT tokens is
         * used without one (no fsync for a quiet link's lease), and the link may hold two (in
         * use and prefetched); it expires as spent. */
        bound += mark_slack_bound(e.data) + 2 * SUP_CHILD_MARK_CHUNK_MIN_DEFAULT;
        start(&e, NULL);
    }
    /* within the leases' lifetime: the resumed leases are used first */
    test_load_run(e.d.socket, e.tok, 1, "a", 400, 4, 20000, &r);
    admitted += r.admitted;
    fprintf(stderr,
            "resumed: %d of 400 admitted over 3 kills, %d stranded, bound %lld (refused %d "
            "unavailable %d lost %d other %d)\n",
            admitted, 400 - admitted, (long long)bound, r.refused, r.unavailable, r.lost, r.other);
    if (r.lost > 0) {
        size_t len = 0;
        char *log = test_read_file(e.d.log, &len);
        fprintf(stderr, "tallyd log:\n%s\n", log != NULL ? log : "(none)");
        free(log);
    }
    assert_true(admitted <= 400);
    assert_int_equal(r.admitted + r.refused, 400);
    /* Per kill, each lease loses at most its mark's write-ahead. */
    assert_true(400 - admitted <= bound);
    assert_int_equal(test_daemon_stop(&e.d), 0);
    journal_cells(e.data);
}

static void
test_unknown_tokens_create_no_state(void **state)
{
    static struct env e;
    struct test_load_result r;
    const char *bad[3] = {"tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "garbage", ""};
    char path[256];
    struct stat sb;

    *state = &e;
    make_env(&e, "1000/365d", "10/365d");
    start(&e, NULL);
    test_load_run(e.d.socket, bad, 3, "a", 3000, 10, 20000, &r);
    assert_int_equal(r.unauthorized, 3000);
    test_load_run(e.d.socket, bad, 3, "nosuch", 300, 3, 20000, &r);
    assert_int_equal(r.unauthorized, 300);
    /* a valid token on an unknown endpoint: 400, still nothing created */
    test_load_run(e.d.socket, e.tok, 1, "nosuch", 100, 2, 20000, &r);
    assert_int_equal(r.bad_request, 100);
    snprintf(path, sizeof(path), "%s/tenants", e.data);
    assert_int_equal(stat(path, &sb), -1);
    {
        pid_t pids[4];

        assert_int_equal(test_supervisor_pids(e.data, "acme", pids, 4), 0);
    }
    assert_int_equal(test_daemon_stop(&e.d), 0);
}

/* kill -9 of the supervisor, of tallyd, or of both, at random instants during
 * bursts, many times: never more than N admitted, and every kill is survived. */
static void
chaos(int what)
{
    static struct env e;
    uint64_t seed = test_seed();
    int admitted = 0;
    int round;
    const int n = 400;
    char limit[32];

    snprintf(limit, sizeof(limit), "%d/365d", n);
    make_env(&e, limit, "100000/365d");
    /* Compact the journal every few dozen records, so kills land during compactions too. */
    start(&e, "--journal-compact-rows=16");
    for (round = 0; round < 12; round++) {
        struct test_load_result r;
        pid_t loader;
        int pipefd[2];
        assert_int_equal(pipe(pipefd), 0);
        loader = fork();
        if (loader == 0) {
            close(pipefd[0]);
            test_load_run(e.d.socket, e.tok, 4, round % 2 ? "a" : "b", 40, 4, 15000, &r);
            if (write(pipefd[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
                _exit(1);
            _exit(0);
        }
        close(pipefd[1]);
        sleep_ms((int)(test_rand(&seed) % 1500));
        if (what & 1) {
            pid_t pids[4];
            int k = test_supervisor_pids(e.data, "acme", pids, 4);
            while (k-- > 0)
                kill(pids[k], SIGKILL);
        }
        if (what & 2) {
            test_daemon_kill9(&e.d);
            /* stale socket, orphan supervisor, held locks: all recovered */
            start(&e, "--journal-compact-rows=16");
        }
        assert_int_equal(read(pipefd[0], &r, sizeof(r)), (ssize_t)sizeof(r));
        close(pipefd[0]);
        waitpid(loader, NULL, 0);
        admitted += r.admitted;
        fprintf(stderr, "round %d: admitted %d refused %d unavailable %d lost %d (total %d)\n",
                round, r.admitted, r.refused, r.unavailable, r.lost, admitted);
        assert_true(admitted <= n);
    }
    /* after the dust settles (lease TTL 5 s + margin), what is left can be had */
    sleep_ms(7000);
    {
        struct test_load_result r;
        test_load_run(e.d.socket, e.tok, 4, "a", 400, 4, 20000, &r);
        admitted += r.admitted;
        fprintf(stderr, "after recovery: +%d, %d of %d admitted, %d stranded by the kills\n",
                r.admitted, admitted, n, n - admitted);
        assert_true(admitted <= n);
    }
    assert_int_equal(test_daemon_stop(&e.d), 0);
    journal_cells(e.data);
    {
        size_t len = 0;
        char *log = test_read_file(e.d.log, &len);
        assert_non_null(log);
        assert_non_null(strstr(log, "\"event\":\"journal_compacted\""));
        free(log);
    }
    test_rmtree(e.root);
}

static void
test_kill9_supervisor_during_bursts(void **state)
{
    (void)state;
    chaos(1);
}

static void
test_kill9_tallyd_during_bursts(void **state)
{
    (void)state;
    chaos(2);
}

static void
test_kill9_both_during_bursts(void **state)
{
    (void)state;
    chaos(3);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_200_concurrent_requests_admit_exactly_10, teardown),
        cmocka_unit_test_teardown(test_plan_cap_shared_by_endpoints_and_links, teardown),
        cmocka_unit_test_teardown(test_idle_supervisor_exits_and_comes_back_with_counts, teardown),
        cmocka_unit_test_teardown(test_unknown_tokens_create_no_state, teardown),
        cmocka_unit_test_teardown(test_kill9_idle_tallyd_resumes_leases, teardown),
        cmocka_unit_test(test_kill9_supervisor_during_bursts),
        cmocka_unit_test(test_kill9_tallyd_during_bursts),
        cmocka_unit_test(test_kill9_both_during_bursts),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("e2e_leases", tests, NULL, NULL);
}

/*
 * A new child counter's first incarnation is sent before it is stored, and nothing the
 * supervisor answers is used before it is durable. The HELLO and the first ACQUIRE of a new
 * child file go out while its first batch stores the incarnation (that store overlaps the
 * supervisor's start); the answers wait until the batch is durable. A reused file takes the
 * next incarnation before it sends anything, as always.
 *
 * tallyd runs as tallyd_powerloss (tests/support/powerloss_vfs.c: kill -9 drops every write
 * that was never synced, as an OS crash does) with every sync of a child file taking SLOW_MS
 * more, and `--durability batched`, where no lease row gates the first admission: a tenant's
 * first request is admitted no sooner than SLOW_MS, and a power loss right after that answer
 * finds the incarnation on disk. Without the hold the answer comes first (the supervisor grants
 * in a few ms) and the power loss takes the incarnation away: a restart would send it again.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve_util.h"

#define SLOW_MS 300

struct env {
    struct serve_env s;
    char token[2][64]; /* tenants t0 and t1 */
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    char ms[16];

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "p", "--limit", "1000/1h", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "e", "--limit", "1000/1h", NULL);
    for (int i = 0; i < 2; i++) {
        char t[8];

        snprintf(t, sizeof(t), "t%d", i);
        serve_tally_ok(&e->s, NULL, 0, "tenant", "add", t, "--plan", "p", NULL);
        serve_tally_ok(&e->s, e->token[i], sizeof(e->token[i]), "link", "create", t, NULL);
    }
    test_daemon_use_bin(TALLYD_POWERLOSS);
    snprintf(ms, sizeof(ms), "%d", SLOW_MS);
    assert_int_equal(setenv("TALLY_TEST_CHILD_SYNC_MS", ms, 1), 0);
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    if (e->s.d.pid > 0)
        test_daemon_kill9(&e->s.d);
    (void)test_wait_supervisors(e->s.data, "t0", 0, 5000);
    (void)test_wait_supervisors(e->s.data, "t1", 0, 5000);
    unsetenv("TALLY_TEST_CHILD_SYNC_MS");
    test_daemon_use_bin(NULL);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

/* A power loss: tallyd stopped (it restarts nothing), the supervisors killed, then tallyd; every
 * process dies with its unsynced writes. */
static void
power_loss(struct env *e)
{
    pid_t sup[16];

    assert_int_equal(kill(e->s.d.pid, SIGSTOP), 0);
    for (int t = 0; t < 2; t++) {
        char name[8];
        int n;

        snprintf(name, sizeof(name), "t%d", t);
        n = test_supervisor_pids(e->s.data, name, sup, 16);
        for (int i = 0; i < n; i++)
            assert_int_equal(kill(sup[i], SIGKILL), 0);
    }
    test_daemon_kill9(&e->s.d);
    assert_true(test_wait_supervisors(e->s.data, "t0", 0, 5000));
    assert_true(test_wait_supervisors(e->s.data, "t1", 0, 5000));
}

/* The incarnation stored in tenant t's file of endpoint e (0: none). */
static int64_t
stored_incarnation(const struct env *e, int t)
{
    char path[512];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = 0;

    snprintf(path, sizeof(path), "%s/tenants/t%d/endpoints/e.db", e->s.data, t);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT v FROM meta WHERE k = 'incarnation'", -1, &st, NULL),
        SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Admitted, in how many ms. */
static int64_t
admitted_in_ms(const struct env *e, int t)
{
    struct serve_http r;
    int64_t t0 = serve_now_ms();

    serve_check(&e->s, e->token[t], "e", &r);
    if (r.status != 200)
        fail_msg("tenant t%d: %d %s", t, r.status, r.body);
    return serve_now_ms() - t0;
}

static void
test_first_answer_waits_for_a_durable_incarnation(void **state)
{
    struct env *e = *state;
    int64_t ms;

    serve_start(&e->s, "--durability=batched", NULL);
    ms = admitted_in_ms(e, 0);
    /* The answer waited for the first batch: the incarnation's sync takes SLOW_MS. */
    if (ms < SLOW_MS)
        fail_msg("a new child's first answer came %lld ms after the request, before its "
                 "incarnation could be durable (%d ms)",
                 (long long)ms, SLOW_MS);
    power_loss(e);
    assert_int_equal(stored_incarnation(e, 0), 1);

    /* After the restart: t0's file is reused (the next incarnation, stored before anything is
     * sent), t1's is new (its first, sent while it is stored). */
    serve_start(&e->s, "--durability=batched", NULL);
    (void)admitted_in_ms(e, 0);
    ms = admitted_in_ms(e, 1);
    assert_true(ms >= SLOW_MS);
    power_loss(e);
    assert_int_equal(stored_incarnation(e, 0), 2);
    assert_int_equal(stored_incarnation(e, 1), 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_answer_waits_for_a_durable_incarnation, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("fail_first_answer", tests, NULL, NULL);
}

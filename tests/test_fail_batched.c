/*
 * What `--durability batched` loses to a power loss, measured (README
 * "Failure modes", durability). tallyd and its supervisor run as
 * tallyd_powerloss, the daemon built with the power-loss hook
 * (tests/support/powerloss_vfs.c): journal
 * and child-file writes that were never fsynced live only in the process,
 * so kill -9 of every process drops exactly what an OS crash would. Under a
 * steady load on one tenant whose plan allows N per hour, everything is
 * killed mid-window (three times), or as the plan runs out, tallyd restarts
 * and the load goes on until the plan refuses for good. Admitted over the
 * whole window, counted by the clients: strict admits at most N; batched at
 * most N plus what was admitted in the last SYNC_MS + LATE_MS before each
 * loss (the supervisor fsyncs its journal at most SYNC_MS after a commit, and
 * admissions from a forgotten grant come after it). With the sync timer
 * pushed past the run (--batch-sync-ms 60000), the loss is most of what was
 * granted since the start: the hook bites.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fail_util.h"
#include "serve_util.h"

#define LIMIT_N   200000
#define LIMIT_END 5000 /* the plan of the runs that lose power as it runs out */
#define LOADS     4
#define SYNC_MS   100 /* supervisor/process.c BATCH_SYNC_MS_DEFAULT */
#define LATE_MS   200 /* timer lateness, the fsync itself and answer latency under ASan */
#define SAMPLE_MS 20
#define SAMPLES   4096
#define KILLS     3 /* power losses in one budget window */

struct env {
    struct serve_env s;
    char token_a[64]; /* tenant a, plan N = LIMIT_N */
    char token_b[64]; /* tenant b, plan N = LIMIT_END */
    const char *tenant;
    const char *extra; /* one more tallyd flag, or NULL */
    struct fail_load l[LOADS];
};

/* One run's figures. */
struct run {
    int64_t before;     /* admitted before the last power loss */
    int64_t tail;       /* of those, admitted in the last SYNC_MS + LATE_MS before a loss */
    int64_t after;      /* admitted after the last restart */
    int64_t rate_per_s; /* admissions per second before the last loss */
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    char limit[32];

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    snprintf(limit, sizeof(limit), "%d/1h", LIMIT_N);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", limit, NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "e", "--limit", "1000000/365d",
                   "--on-unavailable", "closed", NULL);
    snprintf(limit, sizeof(limit), "%d/1h", LIMIT_END);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "small", "--limit", limit, NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "a", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "b", "--plan", "small", NULL);
    serve_tally_ok(&e->s, e->token_a, sizeof(e->token_a), "link", "create", "a", NULL);
    serve_tally_ok(&e->s, e->token_b, sizeof(e->token_b), "link", "create", "b", NULL);
    test_daemon_use_bin(TALLYD_POWERLOSS);
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    for (int i = 0; i < LOADS; i++)
        fail_load_stop(&e->l[i]);
    if (e->s.d.pid > 0)
        test_daemon_kill9(&e->s.d);
    (void)test_wait_supervisors(e->s.data, "a", 0, 5000);
    (void)test_wait_supervisors(e->s.data, "b", 0, 5000);
    test_daemon_use_bin(NULL);
    fail_keep_log(e->s.d.log);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

static struct fail_counts
take_all(struct env *e)
{
    struct fail_counts sum = {0}, c;

    for (int i = 0; i < LOADS; i++) {
        c = fail_load_take(&e->l[i]);
        sum.admitted += c.admitted;
        sum.degraded += c.degraded;
        sum.refused += c.refused;
        sum.unavailable += c.unavailable;
        sum.other += c.other;
        sum.errors += c.errors;
    }
    return sum;
}

/* Four clients in a loop on the tenant's link, `pause_ms` between requests. */
static void
start_loads(struct env *e, int pause_ms)
{
    for (int i = 0; i < LOADS; i++)
        fail_load_start(&e->l[i], e->s.d.socket,
                        strcmp(e->tenant, "a") == 0 ? e->token_a : e->token_b, "e", pause_ms);
}

/* SIGSTOP tallyd so it restarts nothing, SIGKILL the supervisor, then tallyd:
 * every process dies with its unsynced writes. */
static void
kill_everything(struct env *e)
{
    pid_t sup[16];
    int n;

    assert_int_equal(kill(e->s.d.pid, SIGSTOP), 0);
    n = test_supervisor_pids(e->s.data, e->tenant, sup, 16);
    for (int i = 0; i < n; i++)
        assert_int_equal(kill(sup[i], SIGKILL), 0);
    test_daemon_kill9(&e->s.d);
    assert_true(test_wait_supervisors(e->s.data, e->tenant, 0, 5000));
}

/* Loads until `want` more are admitted (0: until the plan's first refusal),
 * sampling every SAMPLE_MS, then kills everything; adds to r what was
 * admitted, and what in the last SYNC_MS + LATE_MS before the kill. */
static void
load_then_kill(struct env *e, int64_t want, struct run *r)
{
    static int64_t at[SAMPLES], adm[SAMPLES];
    int64_t t0 = serve_now_ms(), t_kill, got = 0;
    struct fail_counts c = {0};
    int n = 0;

    for (;;) {
        if (want > 0 ? got >= want : c.refused > 0)
            break;
        serve_sleep_ms(SAMPLE_MS);
        c = take_all(e);
        assert_int_equal(c.other + c.degraded + c.errors, 0);
        if (want > 0)
            assert_int_equal(c.refused, 0);
        got += c.admitted;
        at[n % SAMPLES] = serve_now_ms();
        adm[n % SAMPLES] = c.admitted;
        n++;
        if (serve_now_ms() - t0 > 60000)
            fail_msg("only %lld admitted in 60 s", (long long)got);
    }
    t_kill = serve_now_ms();
    r->rate_per_s = got * 1000 / (t_kill - t0 > 0 ? t_kill - t0 : 1);
    kill_everything(e);
    c = take_all(e); /* answers that arrived during the kill */
    r->before += got + c.admitted;
    r->tail += c.admitted;
    for (int i = n - 1; i >= 0 && i > n - SAMPLES; i--) {
        if (at[i % SAMPLES] < t_kill - SYNC_MS - LATE_MS - SAMPLE_MS)
            break;
        r->tail += adm[i % SAMPLES];
    }
}

/* `kills` times: load, kill everything, restart; then the load goes on until
 * the plan refuses for good (leases of the dead processes expire as spent
 * within their TTL of 5 s). */
static void
run_window(struct env *e, const char *durability, int kills, int64_t limit, struct run *r)
{
    char mode[32];
    int64_t t_restart, quiet_since = 0;
    struct fail_counts c;

    memset(r, 0, sizeof(*r));
    snprintf(mode, sizeof(mode), "--durability=%s", durability);
    serve_start(&e->s, mode, e->extra);
    start_loads(e, limit == LIMIT_N ? 0 : 2); /* slower as the plan runs out */
    for (int k = 0; k < kills; k++) {
        int64_t t_kill;
        load_then_kill(e, limit == LIMIT_N ? LIMIT_N / 8 : 0, r);
        t_kill = serve_now_ms();
        serve_start(&e->s, mode, e->extra);
        if (k + 1 < kills) {
            /* until the restarted processes admit again */
            while ((c = take_all(e)).admitted == 0) {
                if (serve_now_ms() - t_kill > 30000)
                    fail_msg("no admission within 30 s of the restart");
                serve_sleep_ms(SAMPLE_MS);
            }
            r->before += c.admitted;
        }
    }
    t_restart = serve_now_ms();
    for (;;) {
        serve_sleep_ms(250);
        c = take_all(e);
        r->after += c.admitted;
        if (c.admitted > 0 || c.refused == 0)
            quiet_since = 0;
        else if (quiet_since == 0)
            quiet_since = serve_now_ms();
        if (serve_now_ms() - t_restart > 8000 && quiet_since != 0 &&
            serve_now_ms() - quiet_since > 1500)
            break;
        if (serve_now_ms() - t_restart > 90000)
            fail_msg("the plan did not refuse for good within 90 s of the restart");
    }
    for (int i = 0; i < LOADS; i++)
        fail_load_stop(&e->l[i]);
    c = take_all(e);
    r->after += c.admitted;
    printf("# %s, %d power loss%s%s: admitted %lld before (%lld/s; %lld in the last %d ms "
           "before each loss), %lld after: total %lld for N = %lld, over-admission %lld\n",
           durability, kills, kills > 1 ? "es" : "", limit == LIMIT_N ? "" : " as the plan ran out",
           (long long)(r->before), (long long)r->rate_per_s, (long long)r->tail, SYNC_MS + LATE_MS,
           (long long)r->after, (long long)(r->before + r->after), (long long)limit,
           (long long)(r->before + r->after - limit));
    serve_stop(&e->s);
    assert_true(test_wait_supervisors(e->s.data, e->tenant, 0, 5000));
    assert_true(fail_integrity_check(e->s.data) >= 3); /* tally.db, the journal, the child */
}

static void
test_strict_loses_nothing_to_a_power_loss(void **state)
{
    struct env *e = *state;
    struct run r;

    e->tenant = "a";
    run_window(e, "strict", KILLS, LIMIT_N, &r);
    assert_true(r.before + r.after <= LIMIT_N);
}

static void
test_batched_loses_at_most_its_last_sync_interval(void **state)
{
    struct env *e = *state;
    struct run r;

    e->tenant = "a";
    run_window(e, "batched", KILLS, LIMIT_N, &r);
    assert_true(r.before + r.after <= LIMIT_N + r.tail);
}

/* The hook works, and the timer is what bounds the loss: with it set past the
 * run (--batch-sync-ms 60000, longer than load_then_kill may load; SQLite's
 * checkpoints only) a power loss forgets nearly every grant since the
 * supervisor started. */
static void
test_batched_without_sync_timer_loses_the_whole_tail(void **state)
{
    struct env *e = *state;
    struct run r;

    e->extra = "--batch-sync-ms=60000";
    e->tenant = "a";
    run_window(e, "batched", 1, LIMIT_N, &r);
    assert_true(r.before + r.after - LIMIT_N >= r.before / 2);
}

/* The power fails as the plan runs out: the last grants are the smallest
 * (one request's cost near exhaustion) and the dead processes strand almost
 * nothing, so the over-admission measured is close to what was forgotten. */
static void
test_strict_at_exhaustion(void **state)
{
    struct env *e = *state;
    struct run r;

    e->tenant = "b";
    run_window(e, "strict", 1, LIMIT_END, &r);
    assert_true(r.before + r.after <= LIMIT_END);
}

static void
test_batched_at_exhaustion(void **state)
{
    struct env *e = *state;
    struct run r;

    e->tenant = "b";
    run_window(e, "batched", 1, LIMIT_END, &r);
    assert_true(r.before + r.after <= LIMIT_END + r.tail);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_strict_loses_nothing_to_a_power_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batched_loses_at_most_its_last_sync_interval, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_batched_without_sync_timer_loses_the_whole_tail, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_strict_at_exhaustion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batched_at_exhaustion, setup, teardown),
    };

    return cmocka_run_group_tests_name("fail_batched", tests, NULL, NULL);
}

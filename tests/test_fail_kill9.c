/*
 * kill -9 in a loop under load, and tallyd's clean restart after kill -9 of
 * itself (docs/FAILURE-MODES.md §1). One tenant on a plan with a cap for the
 * tenant (PLAN_N per hour) and one per link (LINK_N per hour), an endpoint
 * that fails open (degraded limit DEGRADED_D) and one that fails closed;
 * libtally clients on three links and both endpoints ask in a loop, every
 * call timed. The budgets are per hour so one window covers a run: every
 * admission is counted in the windows its call spanned, and strict mode must
 * never admit more than a budget's N in any of them, whatever was killed.
 *
 * - the supervisor killed 20 times at random instants: every answer within
 *   --wait-ms plus a margin, closed answers only admitted/refused/503, open
 *   ones only admitted/degraded/refused, degraded admissions within D;
 * - tallyd killed 8 times and started again at once, while `tally link
 *   create` runs in a loop and journal compactions are frequent: every call
 *   returns (a connection error at the kill, never a hang), the stale socket
 *   is replaced, the orphaned supervisor exits, the journal is never open in
 *   two supervisors, and the new tallyd's supervisor is the one holding the
 *   tenant's lock;
 * - the orphan SIGSTOPped when tallyd is killed: the new tallyd starts
 *   (nothing of the old one is inherited), its supervisor finds the tenant
 *   locked and tallyd answers by policy until SIGCONT lets the orphan see EOF
 *   and exit; then the new supervisor takes over;
 * - a second tallyd on a running one's data dir is refused and leaves its
 *   socket alone; after kill -9 the lock is free again and the stale socket
 *   is replaced.
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
#include <sys/wait.h>
#include <unistd.h>

#include "fail_util.h"
#include "kill9_util.h"
#include "serve_util.h"
#include "tally.h"

#define WAIT_MS      200
#define MARGIN_MS    800  /* sanitizer builds on a shared 2-core machine */
#define COLD_MS      5000 /* a supervisor's first start under a new tallyd (README) */
#define CLIENT_MS    15000
#define PLAN_N       3000
#define LINK_N       1200
#define SLOW_MS      100 /* between calls while killing: the budgets last the kills */
#define DEGRADED_D   40
#define LINKS        3
#define ASKERS       (2 * LINKS)
#define SUP_KILLS    20
#define TALLYD_KILLS 8

struct env {
    struct serve_env s;
    char tok[LINKS][64];
    struct k9_asker a[ASKERS]; /* a[2k] link k on open, a[2k + 1] link k on closed */
    atomic_llong timed_from;
    struct k9_watch w;
    pid_t burst;   /* the `tally link create` loop, or 0 */
    pid_t stopped; /* a SIGSTOPped orphan to wake at teardown, or 0 */
    char wait[32];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    char plan[32], link[32], degraded[32];

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    snprintf(plan, sizeof(plan), "%d/1h", PLAN_N);
    snprintf(link, sizeof(link), "%d/1h", LINK_N);
    snprintf(degraded, sizeof(degraded), "%d/1h", DEGRADED_D);
    snprintf(e->wait, sizeof(e->wait), "--wait-ms=%d", WAIT_MS);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", plan, "--link-limit", link,
                   NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "open", "--limit", "100000/1h",
                   "--on-unavailable", "open", "--degraded-limit", degraded, NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "closed", "--limit", "100000/1h",
                   "--on-unavailable", "closed", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    for (int k = 0; k < LINKS; k++)
        serve_tally_ok(&e->s, e->tok[k], sizeof(e->tok[k]), "link", "create", "acme", NULL);
    serve_ledger_make(&e->s, "acme"); /* served before: its supervisor is what gets killed */
    atomic_init(&e->timed_from, INT64_MAX);
    return 0;
}

/* Ends the `tally link create` loop of start_burst() and the `tally` it runs. */
static void
stop_burst(struct env *e)
{
    char cli[300];

    snprintf(cli, sizeof(cli), "--data %s link create", e->s.data);
    kill(e->burst, SIGKILL);
    waitpid(e->burst, NULL, 0);
    (void)k9_kill_matching(cli);
    e->burst = 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    if (e->stopped > 0)
        kill(e->stopped, SIGCONT);
    if (e->burst > 0)
        stop_burst(e);
    for (int i = 0; i < ASKERS; i++)
        k9_asker_stop(&e->a[i]);
    k9_watch_stop(&e->w);
    if (getenv("TALLY_KEEP_LOG") != NULL) { /* every test's log, one after the other */
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "cat '%s' >> '%s'", e->s.d.log, getenv("TALLY_KEEP_LOG"));
        if (system(cmd) != 0)
            fprintf(stderr, "could not keep %s\n", e->s.d.log);
    }
    serve_env_release(&e->s);
    free(e);
    return 0;
}

static void
start(struct env *e)
{
    /* compactions every 16 journal rows: kills land in the middle of some */
    if (test_daemon_start(&e->s.d, e->s.data, e->wait, "--journal-compact-rows=16", NULL) != 0) {
        char *log = serve_log(&e->s);
        fail_msg("tallyd did not start: %s", log != NULL ? log : "(no log)");
    }
}

/* Every asker at SLOW_MS while things get killed (the budgets last), then
 * run_to_caps() meets the caps. */
static void
start_askers(struct env *e, int timeout_ms)
{
    for (int k = 0; k < LINKS; k++) {
        k9_asker_start(&e->a[2 * k], e->s.d.socket, e->tok[k], "open", k, SLOW_MS, timeout_ms,
                       &e->timed_from);
        k9_asker_start(&e->a[2 * k + 1], e->s.d.socket, e->tok[k], "closed", k, SLOW_MS, timeout_ms,
                       &e->timed_from);
    }
}

/* Until both endpoints admitted (the first start's cold wait is over), then
 * every call is timed. */
static void
warm_up(struct env *e)
{
    int64_t t0 = serve_now_ms();

    while (atomic_load(&e->a[0].admitted) == 0 || atomic_load(&e->a[1].admitted) == 0) {
        if (serve_now_ms() - t0 > 30000)
            fail_msg("no admission within 30 s of the start");
        serve_sleep_ms(20);
    }
    atomic_store(&e->timed_from, k9_mono_ms());
}

static void
stop_askers(struct env *e)
{
    for (int i = 0; i < ASKERS; i++)
        k9_asker_stop(&e->a[i]);
}

static long long
sum(const struct env *e, size_t field_offset, int endpoint_parity)
{
    long long n = 0;

    for (int i = 0; i < ASKERS; i++) {
        if (endpoint_parity >= 0 && i % 2 != endpoint_parity)
            continue;
        n += atomic_load((const atomic_llong *)((const char *)&e->a[i] + field_offset));
    }
    return n;
}

#define SUM(e, field, parity) sum(e, offsetof(struct k9_asker, field), parity)

/* Strict mode: in every window, admissions from leases never exceed the plan's
 * N nor a link's N, and degraded ones stay within their bound (so the plan's
 * total stays within N + D). */
static void
check_budgets(const struct env *e, long long degraded_bound)
{
    for (int w = 0; w < K9_WINDOWS; w++) {
        long long plan = 0, degraded = 0;
        for (int k = 0; k < LINKS; k++) {
            long long link = atomic_load(&e->a[2 * k].win_admitted[w]) +
                             atomic_load(&e->a[2 * k + 1].win_admitted[w]);
            if (link > LINK_N)
                fail_msg("window %d: link %d admitted %lld > N %d", w, k, link, LINK_N);
            plan += link;
            degraded += atomic_load(&e->a[2 * k].win_degraded[w]);
        }
        if (w == 0 || plan + degraded > 0)
            printf("# window %d: admitted %lld (plan N %d), degraded %lld (bound %lld)\n", w, plan,
                   PLAN_N, degraded, degraded_bound);
        if (plan > PLAN_N)
            fail_msg("window %d: admitted %lld > plan N %d", w, plan, PLAN_N);
        if (degraded > degraded_bound)
            fail_msg("window %d: degraded %lld > bound %lld", w, degraded, degraded_bound);
    }
}

static bool
straddled(const struct env *e)
{
    return k9_wall_ms() / K9_WINDOW_MS != atomic_load(&e->a[0].win0);
}

static void
print_askers(const struct env *e)
{
    for (int i = 0; i < ASKERS; i++) {
        const struct k9_asker *a = &e->a[i];
        printf("# link %d %-6s admitted %lld degraded %lld refused %lld (plan %lld link %lld) "
               "unavailable %lld other %lld errors %lld slowest %lld ms (failed %lld ms)\n",
               a->link, a->endpoint, (long long)a->admitted, (long long)a->degraded,
               (long long)a->refused, (long long)a->refused_plan, (long long)a->refused_link,
               (long long)a->unavailable, (long long)a->other, (long long)a->errors,
               (long long)a->max_ms, (long long)a->max_error_ms);
    }
}

static long long
slowest(const struct env *e)
{
    long long m = 0;

    for (int i = 0; i < ASKERS; i++)
        if (atomic_load(&e->a[i].max_ms) > m)
            m = atomic_load(&e->a[i].max_ms);
    return m;
}

/* Link 0 at full speed until its cap refuses, then every link until the
 * plan's cap does, or `ms` passed: both caps are met under the same load. */
static void
run_to_caps(struct env *e, int ms)
{
    int64_t t0 = serve_now_ms();

    atomic_store(&e->a[0].pause_ms, 0);
    atomic_store(&e->a[1].pause_ms, 0);
    while (SUM(e, refused_link, -1) == 0 && serve_now_ms() - t0 < ms)
        serve_sleep_ms(50);
    for (int i = 2; i < ASKERS; i++)
        atomic_store(&e->a[i].pause_ms, 0);
    while (SUM(e, refused_plan, -1) == 0 && serve_now_ms() - t0 < ms)
        serve_sleep_ms(50);
    printf("# caps met %lld ms after the load went full speed\n", (long long)(serve_now_ms() - t0));
}

static void
test_kill9_supervisor_loop_under_load(void **state)
{
    struct env *e = *state;
    uint64_t seed = test_seed();
    int64_t t0;
    int kills = 0;
    pid_t killed[SUP_KILLS];

    start(e);
    start_askers(e, CLIENT_MS);
    warm_up(e);
    k9_watch_start(&e->w, e->s.data, "acme");
    t0 = serve_now_ms();
    while (kills < SUP_KILLS) {
        pid_t pids[4];
        int64_t t1;
        serve_sleep_ms(150 + (int)(test_rand(&seed) % 251));
        /* the previous kill's restart may still be in its backoff */
        for (t1 = serve_now_ms(); test_supervisor_pids(e->s.data, "acme", pids, 4) != 1;) {
            if (serve_now_ms() - t1 > 10000)
                fail_msg("kill %d: no single supervisor to kill within 10 s", kills);
            serve_sleep_ms(5);
        }
        assert_int_equal(k9_ppid(pids[0]), e->s.d.pid);
        if (getenv("TALLY_FAIL_TRACE") != NULL)
            printf("# kill %d of pid %d at %lld\n", kills, (int)pids[0], (long long)k9_wall_ms());
        assert_int_equal(kill(pids[0], SIGKILL), 0);
        killed[kills++] = pids[0];
    }
    printf("# %d supervisor kills in %lld ms\n", kills, (long long)(serve_now_ms() - t0));
    run_to_caps(e, 20000);
    stop_askers(e);
    k9_watch_stop(&e->w);
    print_askers(e);
    printf("# slowest answer %lld ms (bound %d); the journal open in at most %d supervisor(s) "
           "over %lld samples\n",
           slowest(e), WAIT_MS + MARGIN_MS, atomic_load(&e->w.max_authorities),
           (long long)atomic_load(&e->w.samples));
    assert_true(slowest(e) <= WAIT_MS + MARGIN_MS);
    assert_int_equal(SUM(e, errors, -1), 0);
    assert_int_equal(SUM(e, other, -1), 0);
    assert_int_equal(SUM(e, unavailable, 0), 0); /* open: never 503 */
    assert_int_equal(SUM(e, degraded, 1), 0);    /* closed: never degraded */
    assert_true(SUM(e, unavailable, 1) > 0);     /* the kills were outages */
    assert_true(atomic_load(&e->w.max_authorities) <= 1);
    assert_int_equal(atomic_load(&e->w.wrong_holder), 0);
    check_budgets(e, DEGRADED_D);
    if (!straddled(e)) { /* (a run across an hour boundary meets fresh budgets) */
        assert_true(SUM(e, refused_plan, -1) > 0);
        assert_true(SUM(e, refused_link, -1) > 0);
    }
    /* every killed pid has its exit line, each kill seen as a crash; each crash followed by a
     * restart (the loop waits for one before the next kill); the last kill's restart comes with
     * the next request that needs the supervisor, and with kept leases and cached refusals the
     * askers may need none */
    {
        char *log = serve_log(&e->s);
        int crashes = k9_killed_by_signal(log, killed, kills);
        int restarts = serve_log_count(&e->s, "\"event\":\"supervisor_restart\"");
        assert_int_equal(serve_log_count(&e->s, "\"reason\":\"signal\""), crashes);
        assert_true(restarts >= crashes - 1 && restarts <= crashes);
        free(log);
    }
    {
        char *log = serve_log(&e->s);
        assert_non_null(strstr(log, "\"event\":\"journal_compacted\""));
        free(log);
    }
    serve_stop(&e->s);
    printf("# SQLite files ok: %d\n", fail_integrity_check(e->s.data));
}

/* `tally link create acme` in a loop in a child process, tokens appended to
 * `file`; forked before any thread so no pipe of it leaks into a tallyd. */
static pid_t
start_burst(const struct env *e, const char *file)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        struct test_out *o = malloc(sizeof(*o));
        FILE *f = fopen(file, "a");
        if (o == NULL || f == NULL)
            _exit(1);
        for (;;) {
            if (test_tally(e->s.data, o, "link", "create", "acme", NULL) == 0) {
                o->out[strcspn(o->out, "\n")] = '\0';
                fprintf(f, "%s\n", o->out);
                fflush(f);
            }
        }
    }
    return pid;
}

static int
cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;

    return (x > y) - (x < y);
}

/* After a restart: the old tallyd's supervisors exit, and the tenant's lock
 * ends up with a supervisor of the new tallyd, the only one. */
static int64_t
orphans_gone(const struct env *e, const pid_t *old, int n_old)
{
    char lock[400];
    int64_t t0 = serve_now_ms(), gone = -1;

    snprintf(lock, sizeof(lock), "%s/tenants/acme/supervisor.lock", e->s.data);
    for (;;) {
        pid_t pids[4];
        int live = 0;
        for (int i = 0; i < n_old; i++)
            live += k9_alive(old[i]);
        if (live == 0 && gone < 0)
            gone = serve_now_ms() - t0;
        if (gone >= 0 && test_supervisor_pids(e->s.data, "acme", pids, 4) == 1 &&
            k9_ppid(pids[0]) == e->s.d.pid && k9_flock_holder(lock) == pids[0])
            return gone;
        if (serve_now_ms() - t0 > 10000)
            fail_msg("10 s after the restart: %d orphan(s) live, the new supervisor %s", live,
                     gone < 0 ? "not checked" : "not holding the lock alone");
        serve_sleep_ms(10);
    }
}

static void
test_kill9_tallyd_loop_under_load(void **state)
{
    struct env *e = *state;
    uint64_t seed = test_seed();
    long long first[TALLYD_KILLS], restart[TALLYD_KILLS], orphan[TALLYD_KILLS];
    char tokens[300], cli[300];
    int cli_kills = 0;

    snprintf(tokens, sizeof(tokens), "%s/burst.tokens", e->s.root);
    snprintf(cli, sizeof(cli), "--data %s link create", e->s.data);
    e->burst = start_burst(e, tokens);
    start(e);
    start_askers(e, CLIENT_MS);
    warm_up(e);
    k9_watch_start(&e->w, e->s.data, "acme");
    for (int round = 0; round < TALLYD_KILLS; round++) {
        pid_t old[4];
        int n_old;
        long long before = k9_made_ns(e->s.d.socket);
        int64_t t_spawn, t1;
        serve_sleep_ms(300 + (int)(test_rand(&seed) % 601));
        n_old = test_supervisor_pids(e->s.data, "acme", old, 4);
        if (getenv("TALLY_FAIL_TRACE") != NULL)
            printf("# kill %d at %lld\n", round, (long long)k9_wall_ms());
        test_daemon_kill9(&e->s.d);
        cli_kills += k9_kill_matching(cli); /* and a `tally link create` mid-write, if any */
        assert_true(k9_made_ns(e->s.d.socket) == before); /* left behind */
        assert_true(k9_socket_refuses(e->s.d.socket));    /* and stale */
        t_spawn = k9_mono_ms();
        start(e);
        restart[round] = k9_mono_ms() - t_spawn;
        assert_true(k9_made_ns(e->s.d.socket) != before); /* replaced */
        for (t1 = serve_now_ms(); atomic_load(&e->a[1].last_admit_ms) < t_spawn &&
                                  atomic_load(&e->a[3].last_admit_ms) < t_spawn;) {
            if (serve_now_ms() - t1 > 15000)
                fail_msg("round %d: no admission within 15 s of the restart", round);
            serve_sleep_ms(2);
        }
        first[round] = k9_mono_ms() - t_spawn;
        orphan[round] = orphans_gone(e, old, n_old);
        printf("# kill %d: socket answers %lld ms after the spawn, first admission %lld ms, "
               "%d orphan(s) gone %lld ms after the restart\n",
               round, restart[round], first[round], n_old, orphan[round]);
    }
    run_to_caps(e, 30000);
    stop_askers(e);
    k9_watch_stop(&e->w);
    stop_burst(e);
    print_askers(e);
    printf("# %d `tally link create` processes killed with tallyd\n", cli_kills);
    qsort(first, TALLYD_KILLS, sizeof(first[0]), cmp_ll);
    qsort(restart, TALLYD_KILLS, sizeof(restart[0]), cmp_ll);
    printf("# %d tallyd kills: restart to first admission p50 %lld ms max %lld ms; socket "
           "answering p50 %lld ms max %lld ms; slowest call %lld ms (bound %d)\n",
           TALLYD_KILLS, first[TALLYD_KILLS / 2], first[TALLYD_KILLS - 1],
           restart[TALLYD_KILLS / 2], restart[TALLYD_KILLS - 1], slowest(e),
           COLD_MS + WAIT_MS + MARGIN_MS);
    assert_true(slowest(e) <= COLD_MS + WAIT_MS + MARGIN_MS); /* no hang */
    assert_int_equal(SUM(e, other, -1), 0);
    assert_int_equal(SUM(e, unavailable, 0), 0);
    assert_int_equal(SUM(e, degraded, 1), 0);
    assert_true(atomic_load(&e->w.max_authorities) <= 1);
    assert_int_equal(atomic_load(&e->w.wrong_holder), 0);
    /* A degraded allowance lives in a child's memory: each tallyd has its own. */
    check_budgets(e, (long long)DEGRADED_D * (TALLYD_KILLS + 1));
    if (!straddled(e)) {
        assert_true(SUM(e, refused_plan, -1) > 0);
        assert_true(SUM(e, refused_link, -1) > 0);
    }
    k9_check_tokens(e->s.d.socket, tokens, CLIENT_MS);
    serve_stop(&e->s);
    printf("# SQLite files ok: %d\n", fail_integrity_check(e->s.data));
}

static void
test_restart_while_orphan_stopped(void **state)
{
    struct env *e = *state;
    pid_t pids[4], orphan;
    int64_t t_cont, exited = -1, normal = -1;
    long long open_before, closed_before;

    start(e);
    start_askers(e, CLIENT_MS);
    warm_up(e);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pids, 4), 1);
    orphan = pids[0];
    assert_int_equal(kill(orphan, SIGSTOP), 0);
    e->stopped = orphan;
    test_daemon_kill9(&e->s.d);
    assert_true(k9_socket_refuses(e->s.d.socket));
    /* the orphan kept nothing of tallyd's: not its lock, not its listening
     * sockets (one socket: its channel), so a new tallyd starts beside it */
    {
        char lock[400];
        snprintf(lock, sizeof(lock), "%s/tallyd.lock", e->s.data);
        assert_int_equal(k9_flock_holder(lock), 0);
        assert_int_equal(k9_count_fds(orphan, "socket:"), 1);
    }
    start(e);
    k9_watch_start(&e->w, e->s.data, "acme");
    serve_sleep_ms(2500);
    /* while the orphan lingers, the new supervisor finds the tenant locked */
    assert_true(serve_log_count(&e->s, "\"reason\":\"locked\"") >= 1);
    {
        char lock[400];
        snprintf(lock, sizeof(lock), "%s/tenants/acme/supervisor.lock", e->s.data);
        assert_int_equal(k9_flock_holder(lock), orphan);
    }
    /* The children decide on their kept leases (resumed from their files) until those run
     * out, about 3 s of this load: only then does a request need the absent authority. */
    for (int64_t t = serve_now_ms(); SUM(e, unavailable, 1) == 0 && serve_now_ms() - t < 10000;)
        serve_sleep_ms(20);
    open_before = SUM(e, degraded, 0);
    closed_before = SUM(e, unavailable, 1);
    printf("# orphan stopped: open degraded %lld, closed 503 %lld, slowest %lld ms\n", open_before,
           closed_before, slowest(e));
    assert_true(closed_before > 0); /* closed: 503 while the tenant has no authority */
    t_cont = serve_now_ms();
    assert_int_equal(kill(orphan, SIGCONT), 0);
    e->stopped = 0;
    while (serve_now_ms() - t_cont < 15000 && (exited < 0 || normal < 0)) {
        if (exited < 0 && !k9_alive(orphan))
            exited = serve_now_ms() - t_cont;
        if (normal < 0 && atomic_load(&e->a[1].last_admit_ms) > t_cont &&
            atomic_load(&e->a[3].last_admit_ms) > t_cont)
            normal = serve_now_ms() - t_cont;
        serve_sleep_ms(5);
    }
    printf("# after SIGCONT: the orphan exited in %lld ms, admissions from the new "
           "supervisor after %lld ms\n",
           (long long)exited, (long long)normal);
    assert_true(exited >= 0 && exited <= 5000); /* EOF on its channel */
    assert_true(normal >= 0);
    (void)orphans_gone(e, &orphan, 1);
    stop_askers(e);
    k9_watch_stop(&e->w);
    print_askers(e);
    assert_true(slowest(e) <= COLD_MS + MARGIN_MS);
    assert_int_equal(SUM(e, errors, -1) > 0, true); /* the kill broke the connections */
    assert_int_equal(SUM(e, other, -1), 0);
    assert_int_equal(SUM(e, unavailable, 0), 0);
    assert_int_equal(SUM(e, degraded, 1), 0);
    assert_true(atomic_load(&e->w.max_authorities) <= 1);
    assert_int_equal(atomic_load(&e->w.wrong_holder), 0);
    check_budgets(e, (long long)DEGRADED_D * 2);
    serve_stop(&e->s);
}

static void
test_second_tallyd_refused_and_dead_lock_freed(void **state)
{
    struct env *e = *state;
    static struct test_out out;
    struct test_out *o = &out;
    char bin[512], lock[400];
    char *argv[] = {bin,           "--data", e->s.data,     "--socket",
                    e->s.d.socket, "--http", "127.0.0.1:0", NULL};
    long long made;

    test_bin("tallyd", bin, sizeof(bin));
    snprintf(lock, sizeof(lock), "%s/tallyd.lock", e->s.data);
    start(e);
    made = k9_made_ns(e->s.d.socket);
    assert_int_equal(k9_flock_holder(lock), e->s.d.pid);
    /* a second one exits at once, saying why, and leaves the live socket alone */
    assert_int_equal(test_run(argv, NULL, o), 1);
    assert_non_null(strstr(o->err, "another tallyd is running"));
    assert_true(k9_made_ns(e->s.d.socket) == made);
    assert_false(k9_socket_refuses(e->s.d.socket));
    test_daemon_kill9(&e->s.d);
    /* a dead holder holds nothing: the file stays, its lock is gone */
    assert_int_equal(access(lock, F_OK), 0);
    assert_int_equal(k9_flock_holder(lock), 0);
    assert_true(k9_socket_refuses(e->s.d.socket));
    start(e);
    assert_true(k9_made_ns(e->s.d.socket) != made);
    assert_int_equal(k9_flock_holder(lock), e->s.d.pid);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_second_tallyd_refused_and_dead_lock_freed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restart_while_orphan_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_supervisor_loop_under_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_tallyd_loop_under_load, setup, teardown),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("fail_kill9", tests, NULL, NULL);
}

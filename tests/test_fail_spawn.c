/*
 * Supervisor starts through the real processes: the first requests of 50 new
 * tenants sent at once are all admitted and their supervisors start side by
 * side (tallyd logs more than one start before the first of them is ready);
 * a supervisor forked by the fork server has tallyd as its parent, the tenant
 * in its command line and the tenant's lock; and killing the fork server with
 * SIGKILL is survived: tallyd keeps answering, new tenants' supervisors start
 * (through uv_spawn, then through a new fork server) and running ones are
 * still reaped and restarted by tallyd; the fork server's spares serve new
 * tenants, and a spare killed before it had one is reaped.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "fail_util.h"
#include "kill9_util.h"
#include "serve_util.h"
#include "tally.h"

#define TENANTS 50

struct env {
    struct serve_env s;
    char token[TENANTS + 4][64];
};

struct first {
    const struct env *e;
    int i;
    int rc;
    enum tally_status status;
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    char name[16];

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "1000/1m", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "1000/1m", NULL);
    for (int i = 0; i < TENANTS + 4; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        serve_tally_ok(&e->s, NULL, 0, "tenant", "add", name, "--plan", "pro", NULL);
        serve_tally_ok(&e->s, e->token[i], sizeof(e->token[i]), "link", "create", name, NULL);
        serve_ledger_make(&e->s, name); /* served before: its first request starts a supervisor */
    }
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    fail_keep_log(e->s.d.log);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

/* One check with its own connection; no cmocka call off the main thread. */
static void *
first_check(void *arg)
{
    struct first *f = arg;
    struct tally_result r;
    tally_client *c = NULL;

    f->rc = tally_client_open(f->e->s.d.socket, 10000, &c);
    if (f->rc == TALLY_OK)
        f->rc = tally_check(c, f->e->token[f->i], "search", 0, &r);
    if (f->rc == TALLY_OK)
        f->status = r.status;
    tally_client_close(c);
    return NULL;
}

static void
admitted(const struct env *e, int i)
{
    struct first f = {e, i, 0, TALLY_REFUSED};

    first_check(&f);
    if (f.rc != TALLY_OK)
        fail_msg("t%d: %s", i, tally_strerror(f.rc));
    assert_int_equal(f.status, TALLY_ADMITTED);
}

/* The most supervisors started and not yet ready at once, from the log's order:
 * tallyd's supervisor_start lines against the supervisors' own supervisor_ready. */
static int
most_starting(const struct env *e)
{
    char *log = serve_log(&e->s);
    char *save = NULL;
    int now = 0, most = 0;

    for (char *line = strtok_r(log, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, "\"event\":\"supervisor_start\"") != NULL && ++now > most)
            most = now;
        else if (strstr(line, "\"event\":\"supervisor_ready\"") != NULL)
            now--;
    }
    free(log);
    return most;
}

/* Up to max of tallyd's children whose command line holds `what`; how many. */
static int
children_with(const struct env *e, const char *what, pid_t *out, int max)
{
    char path[64], line[4096];
    int found = 0;
    DIR *d = opendir("/proc");
    struct dirent *ent;

    /* readdir() is thread-safe on distinct DIR streams (glibc); one per call here. */
    /* cppcheck-suppress readdirCalled */
    while (d != NULL && found < max && (ent = readdir(d)) != NULL) {
        pid_t pid = (pid_t)atoi(ent->d_name);
        FILE *f;
        size_t n;
        if (pid <= 0 || k9_ppid(pid) != e->s.d.pid)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        n = fread(line, 1, sizeof(line) - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++)
            line[i] = line[i] == '\0' ? ' ' : line[i];
        line[n] = '\0';
        if (strstr(line, what) != NULL)
            out[found++] = pid;
    }
    if (d != NULL)
        closedir(d);
    return found;
}

/* tallyd's child running the fork server, 0 when none. */
static pid_t
fork_server_pid(const struct env *e)
{
    pid_t pid = 0;

    return children_with(e, "--fork-server ", &pid, 1) == 1 ? pid : 0;
}

/* The state letter of pid (Z: exited, not reaped), 0 once it is gone. */
static char
proc_state(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p[2] : 0;
}

/* Waits (up to 10 s) until tallyd has `want` spares; their pids in out. */
static void
wait_spares(const struct env *e, int want, pid_t *out)
{
    int64_t t0 = serve_now_ms();

    int n;

    while ((n = children_with(e, "--spare-supervisor", out, 4)) != want) {
        if (serve_now_ms() - t0 > 10000)
            fail_msg("%d spares, not %d, after 10 s", n, want);
        serve_sleep_ms(20);
    }
}

/* The fork server keeps two spares, forked ahead of any tenant: a new tenant's supervisor is
 * one of them. A spare killed before it had a tenant is reaped by tallyd (no zombie, a
 * spare_exit in the metrics), the next new tenant is served all the same, and the spares are
 * forked again once no start is asked for. */
static void
test_spawn_spares(void **state)
{
    struct env *e = *state;
    pid_t spares[4], sup[4], again[4];
    int64_t t0;

    serve_start(&e->s, NULL, NULL);
    wait_spares(e, 2, spares);
    assert_int_equal(k9_ppid(spares[0]), e->s.d.pid);
    assert_int_equal(k9_ppid(spares[1]), e->s.d.pid);
    admitted(e, 0);
    assert_int_equal(test_supervisor_pids(e->s.data, "t0", sup, 4), 1);
    assert_true(sup[0] == spares[0] || sup[0] == spares[1]);
    /* The other spare, killed before it has a tenant. */
    assert_int_equal(kill(sup[0] == spares[0] ? spares[1] : spares[0], SIGKILL), 0);
    for (t0 = serve_now_ms();
         serve_metric_now(&e->s, "tally_supervisor_events_total{event=\"spare_exit\"}") < 1;) {
        if (serve_now_ms() - t0 > 10000)
            fail_msg("the killed spare was not reaped within 10 s");
        serve_sleep_ms(20);
    }
    assert_int_equal(proc_state(sup[0] == spares[0] ? spares[1] : spares[0]), 0);
    admitted(e, 1);
    wait_spares(e, 2, again);
    for (int i = 0; i < 2; i++)
        assert_int_not_equal(proc_state(again[i]), 'Z');
    admitted(e, 2);
    assert_int_equal(serve_metric_now(&e->s, "tally_supervisor_events_total{event=\"crash\"}"), 0);
    serve_stop(&e->s);
}

static void
test_spawn_concurrent(void **state)
{
    struct env *e = *state;
    pthread_t th[TENANTS];
    struct first f[TENANTS];
    pid_t pids[4];
    char lock[300];

    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < TENANTS; i++) {
        f[i] = (struct first){e, i, -1, TALLY_REFUSED};
        assert_int_equal(pthread_create(&th[i], NULL, first_check, &f[i]), 0);
    }
    for (int i = 0; i < TENANTS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (f[i].rc != TALLY_OK)
            fail_msg("t%d: %s", i, tally_strerror(f[i].rc));
        /* Answered; a start slower than the cold-start deadline (a loaded machine,
         * sanitizers) answers unavailable, and the next check is admitted. */
        if (f[i].status == TALLY_UNAVAILABLE) {
            printf("# t%d: first check unavailable (slow start)\n", i);
            admitted(e, i);
        } else {
            assert_int_equal(f[i].status, TALLY_ADMITTED);
        }
    }
    printf("# at most %d supervisors starting at once\n", most_starting(e));
    assert_true(most_starting(e) > 1);
    /* A forked supervisor: tallyd's child, named by its command line, holding the lock. */
    assert_int_equal(test_supervisor_pids(e->s.data, "t7", pids, 4), 1);
    assert_int_equal(k9_ppid(pids[0]), e->s.d.pid);
    snprintf(lock, sizeof(lock), "%s/tenants/t7/supervisor.lock", e->s.data);
    assert_int_equal(k9_flock_holder(lock), pids[0]);
    assert_true(fork_server_pid(e) > 0);
    serve_stop(&e->s);
}

static void
test_spawn_fork_server_killed(void **state)
{
    struct env *e = *state;
    pid_t server, again = 0, pids[4];
    int64_t t0;

    serve_start(&e->s, NULL, NULL);
    admitted(e, 0);
    server = fork_server_pid(e);
    assert_true(server > 0);
    assert_int_equal(kill(server, SIGKILL), 0);
    serve_sleep_ms(50);
    /* Served at once: a running supervisor, and a new tenant's through uv_spawn. */
    admitted(e, 0);
    admitted(e, TENANTS);
    /* A running supervisor forked by the dead server is still tallyd's to restart. */
    assert_int_equal(test_supervisor_pids(e->s.data, "t0", pids, 4), 1);
    assert_int_equal(kill(pids[0], SIGKILL), 0);
    for (t0 = serve_now_ms(); !test_wait_supervisors(e->s.data, "t0", 1, 100);) {
        if (serve_now_ms() - t0 > 10000)
            fail_msg("t0's supervisor was not restarted within 10 s");
        admitted(e, 0);
    }
    admitted(e, 0);
    /* A new fork server after its retry delay, and starts go through it again. */
    serve_sleep_ms(1200);
    admitted(e, TENANTS + 1);
    for (t0 = serve_now_ms(); (again = fork_server_pid(e)) == 0 || again == server;) {
        if (serve_now_ms() - t0 > 10000)
            fail_msg("no new fork server within 10 s");
        serve_sleep_ms(20);
    }
    admitted(e, TENANTS + 2);
    assert_int_equal(test_supervisor_pids(e->s.data, "t52", pids, 4), 1);
    assert_int_equal(k9_ppid(pids[0]), e->s.d.pid);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_spawn_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_fork_server_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_spares, setup, teardown),
    };

    return cmocka_run_group_tests_name("fail_spawn", tests, NULL, NULL);
}

/*
 * Bounded resources (docs/FAILURE-MODES.md §2), each with
 * an explicit answer at its cap, through the real tallyd, its supervisors and
 * `tally` (the connection caps are test_fail_conns.c; a child counter's full
 * link table is test_sup_child.c):
 *
 * - --max-supervisors 2 with five tenants asked round-robin: a sampler that
 *   scans /proc every few milliseconds never sees more than two supervisor
 *   processes (zombies included), every request is answered (admitted or
 *   refused, never 503: a tenant waiting for room is a cold start), and the
 *   counts survive the hibernations exactly (10 admitted per tenant, no more).
 * - a plan's --max-links 3: `tally link create` of a 4th live link exits 1
 *   with one line and creates nothing; a revoked link frees its place. 256
 *   endpoint names: `endpoint set` of a 257th (default or plan override)
 *   exits 1, `apply` of a file with 257 exits 65; nothing changes.
 * - out-of-range cap flags of tallyd are usage errors.
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
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fail_util.h"
#include "proto_client.h"
#include "serve_util.h"
#include "tally.h"
#include "tenant.h"

#define MAX_SUPS    2
#define ROUNDS      6
#define PER_VISIT   3
#define TENANT_CAP  10
#define CLIENT_WAIT 15000 /* ms: a cold start of an ASan supervisor on a busy machine */

/* ---- supervisors, counted from /proc ---- */

/* The parent of pid, from /proc/PID/stat; 0 when unreadable. */
static pid_t
parent_of(pid_t pid)
{
    char path[64], line[1024];
    const char *rp;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, line, sizeof(line) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    line[n] = '\0';
    rp = strrchr(line, ')'); /* ") S PPID ..." */
    return rp != NULL && strlen(rp) > 4 ? (pid_t)atoi(rp + 4) : 0;
}

/* True when pid is a child of tallyd whose command line has `--supervise` and
 * `--data DATA`. (A process of the same command line whose parent is a
 * supervisor is LeakSanitizer's tracer at its exit, not a supervisor.) */
static bool
is_supervisor(pid_t pid, pid_t tallyd, const char *data)
{
    char path[64], line[4096], want[300];
    ssize_t n;
    int fd;

    if (parent_of(pid) != tallyd)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    n = read(fd, line, sizeof(line) - 2);
    close(fd);
    if (n <= 0)
        return false;
    for (ssize_t i = 0; i < n; i++) {
        if (line[i] == '\0')
            line[i] = ' ';
    }
    line[n] = ' ';
    line[n + 1] = '\0';
    snprintf(want, sizeof(want), "--data %s ", data);
    return strstr(line, "--supervise ") != NULL && strstr(line, want) != NULL;
}

/* Supervisor processes of `data` alive together (zombies count: tallyd has not
 * reaped them, so their slot is not free), or -1 when the scan was not a
 * snapshot: one seen early was gone by the end, so a later one may have
 * replaced it. Every pid still there at the end was alive at that instant. */
static int
count_supervisors(pid_t tallyd, const char *data)
{
    pid_t pids[64];
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *ent;

    if (d == NULL)
        return -1;
    /* readdir() is thread-safe on distinct DIR streams (glibc); one per call here. */
    /* cppcheck-suppress readdirCalled */
    while ((ent = readdir(d)) != NULL && n < 64) {
        pid_t pid = (pid_t)atoi(ent->d_name);
        if (pid > 0 && is_supervisor(pid, tallyd, data))
            pids[n++] = pid;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        if (kill(pids[i], 0) != 0)
            return -1;
    }
    return n;
}

struct sampler {
    pid_t tallyd;
    const char *data;
    pthread_t th;
    atomic_bool stop;
    atomic_int max;
    atomic_long samples;
};

static void *
sampler_main(void *arg)
{
    struct sampler *s = arg;

    while (!atomic_load(&s->stop)) {
        int n = count_supervisors(s->tallyd, s->data);
        if (n >= 0) {
            if (n > atomic_load(&s->max))
                atomic_store(&s->max, n);
            atomic_fetch_add(&s->samples, 1);
        }
        serve_sleep_ms(2);
    }
    return NULL;
}

static void
test_max_supervisors_lru_hibernates(void **state)
{
    struct fail_caps_env *e = *state;
    struct sampler smp = {.data = e->s.data};
    int admitted[FAIL_CAPS_TENANTS] = {0}, refused[FAIL_CAPS_TENANTS] = {0}, other = 0;
    int64_t slowest = 0, t0;
    struct serve_http h;
    tally_client *c = NULL;

    serve_start(&e->s, "--max-supervisors=2", NULL);
    smp.tallyd = e->s.d.pid;
    assert_int_equal(pthread_create(&smp.th, NULL, sampler_main, &smp), 0);
    assert_int_equal(tally_client_open(e->s.d.socket, CLIENT_WAIT, &c), TALLY_OK);
    t0 = serve_now_ms();
    for (int round = 0; round < ROUNDS; round++) {
        for (int t = 0; t < FAIL_CAPS_TENANTS; t++) {
            for (int k = 0; k < PER_VISIT; k++) {
                struct tally_result r;
                int64_t at = serve_now_ms();
                assert_int_equal(tally_check(c, e->tokens[t], "api", 0, &r), TALLY_OK);
                if (serve_now_ms() - at > slowest)
                    slowest = serve_now_ms() - at;
                if (r.status == TALLY_ADMITTED)
                    admitted[t]++;
                else if (r.status == TALLY_REFUSED)
                    refused[t]++;
                else
                    other++;
            }
        }
    }
    tally_client_close(c);
    serve_sleep_ms(1500); /* the children's idle returns wake supervisors too */
    atomic_store(&smp.stop, true);
    pthread_join(smp.th, NULL);
    serve_http_get(e->s.http_port, "/metrics", NULL, &h);
    printf("# %d tenants x %d requests in %lld ms, slowest %lld ms; %ld samples, at most %d "
           "supervisors; %d starts, %d hibernations (supervisor_hibernate)\n",
           FAIL_CAPS_TENANTS, ROUNDS * PER_VISIT, (long long)(serve_now_ms() - t0),
           (long long)slowest, (long)atomic_load(&smp.samples), atomic_load(&smp.max),
           serve_log_count(&e->s, "\"event\":\"supervisor_start\""),
           serve_log_count(&e->s, "\"event\":\"supervisor_hibernate\""));
    for (int t = 0; t < FAIL_CAPS_TENANTS; t++) {
        printf("# t%d: admitted %d, refused %d\n", t, admitted[t], refused[t]);
        assert_int_equal(admitted[t], TENANT_CAP);
        assert_int_equal(refused[t], ROUNDS * PER_VISIT - TENANT_CAP);
    }
    assert_int_equal(other, 0);
    assert_true(atomic_load(&smp.samples) > 100);
    assert_true(atomic_load(&smp.max) <= MAX_SUPS);
    assert_true(atomic_load(&smp.max) >= 1);
    assert_true(serve_metric(h.body, "tally_supervisors_live") <= MAX_SUPS);
    /* every visit after the first two needed room: hibernations happened */
    assert_true(serve_log_count(&e->s, "\"event\":\"supervisor_hibernate\"") >= FAIL_CAPS_TENANTS);
    assert_true(serve_log_count(&e->s, "\"event\":\"supervisor_start\"") > FAIL_CAPS_TENANTS);
    serve_stop(&e->s);
}

static int
count_lines(const char *s, const char *needle)
{
    int n = 0;

    for (const char *p = strstr(s, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Out-of-range caps are usage errors (exit 64, one line); --help names both flags. */
static void
test_cap_flags_are_checked(void **state)
{
    struct fail_caps_env *e = *state;
    static struct test_out o;
    static const char *const bad[][2] = {
        {"--max-supervisors=0", "invalid --max-supervisors '0': 1 to 100000"},
        {"--max-supervisors=100001", "invalid --max-supervisors '100001'"},
        {"--max-supervisors=-1", "invalid --max-supervisors"},
        {"--max-connections=0", "invalid --max-connections '0': 1 to 1000000"},
        {"--max-connections=1000001", "invalid --max-connections"},
        {"--max-connections=ten", "invalid --max-connections"},
    };
    char tallyd[512], data[300];

    test_bin("tallyd", tallyd, sizeof(tallyd));
    snprintf(data, sizeof(data), "--data=%s", e->s.data);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {tallyd, data, (char *)bad[i][0], NULL};
        assert_int_equal(test_run(argv, NULL, &o), 64);
        assert_non_null(strstr(o.err, bad[i][1]));
        assert_int_equal(count_lines(o.err, "\n"), 1);
    }
    {
        char *argv[] = {tallyd, "--help", NULL};
        assert_int_equal(test_run(argv, NULL, &o), 0);
        assert_non_null(strstr(o.out, "--max-supervisors N"));
        assert_non_null(strstr(o.out, "--max-connections N"));
    }
}

/* ---- links and endpoints per tenant ---- */

/* A configuration file with plans p and small and `names` endpoint names. */
static void
write_config(const char *path, int names)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fprintf(f, "plan p --limit 10/365d\nplan small --limit 10/365d --max-links 3\n");
    fprintf(f, "endpoint api --limit 1000/365d\n");
    for (int i = 1; i < names; i++)
        fprintf(f, "endpoint e%d --limit 5/1m\n", i);
    assert_int_equal(fclose(f), 0);
}

static void
test_max_links_and_endpoints(void **state)
{
    struct fail_caps_env *e = *state;
    static struct test_out o;
    char tok[4][64], path[256];

    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "small", "--limit", "10/365d", "--max-links", "3",
                   NULL);
    assert_int_equal(test_tally(e->s.data, &o, "plan", "show", "small", NULL), 0);
    assert_non_null(strstr(o.out, "--max-links 3"));
    assert_int_equal(test_tally(e->s.data, &o, "plan", "set", "x", "--limit", "1/1m", "--max-links",
                                "1000001", NULL),
                     64);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "s", "--plan", "small", NULL);
    for (int i = 0; i < 3; i++)
        serve_tally_ok(&e->s, tok[i], sizeof(tok[i]), "link", "create", "s", NULL);
    assert_int_equal(test_tally(e->s.data, &o, "link", "create", "s", NULL), 1);
    assert_string_equal(o.out, "");
    assert_int_equal(count_lines(o.err, "\n"), 1);
    assert_non_null(strstr(o.err, "tally: tenant s has 3 live links, the cap of plan small "
                                  "(--max-links 3)"));
    assert_int_equal(test_tally(e->s.data, &o, "link", "list", "s", NULL), 0);
    assert_int_equal(count_lines(o.out, " live "), 3);
    /* a revoked link frees its place */
    serve_tally_ok(&e->s, NULL, 0, "link", "revoke", tok[0], NULL);
    serve_tally_ok(&e->s, tok[3], sizeof(tok[3]), "link", "create", "s", NULL);
    assert_int_equal(test_tally(e->s.data, &o, "link", "create", "s", NULL), 1);
    /* the other tenants' plan keeps the default (1,000,000) */
    serve_tally_ok(&e->s, NULL, 0, "link", "create", "t0", NULL);

    /* 256 endpoint names in all: a file of 256 applies, one more is refused */
    snprintf(path, sizeof(path), "%s/caps.conf", e->s.root);
    write_config(path, TENANT_MAX_ENDPOINTS);
    assert_int_equal(test_tally(e->s.data, &o, "apply", path, NULL), 0);
    assert_int_equal(test_tally(e->s.data, &o, "endpoint", "set", "e256", "--limit", "5/1m", NULL),
                     1);
    assert_non_null(strstr(o.err, "256 endpoint names are defined"));
    assert_int_equal(test_tally(e->s.data, &o, "endpoint", "set", "e256", "--plan", "small",
                                "--limit", "5/1m", NULL),
                     1);
    /* a plan override of an existing name adds no name */
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "e1", "--plan", "small", "--limit", "9/1m",
                   NULL);
    write_config(path, TENANT_MAX_ENDPOINTS + 1);
    assert_int_equal(test_tally(e->s.data, &o, "apply", path, NULL), 65);
    assert_non_null(strstr(o.err, "more than 256 endpoint names"));
    assert_int_equal(test_tally(e->s.data, &o, "endpoint", "list", NULL), 0);
    assert_int_equal(count_lines(o.out, "\n"), TENANT_MAX_ENDPOINTS + 1); /* + e1 for small */
    assert_null(strstr(o.out, "e256"));
    /* tallyd serves a tenant that sees all 256 (its supervisor holds them) */
    serve_start(&e->s, NULL, NULL);
    {
        struct serve_http h;
        serve_check(&e->s, tok[1], "e255", &h);
        assert_int_equal(h.status, 200);
        serve_check(&e->s, tok[1], "e1", &h);
        assert_int_equal(h.status, 200);
    }
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_max_supervisors_lru_hibernates, fail_caps_setup,
                                        fail_caps_teardown),
        cmocka_unit_test_setup_teardown(test_max_links_and_endpoints, fail_caps_setup,
                                        fail_caps_teardown),
        cmocka_unit_test_setup_teardown(test_cap_flags_are_checked, fail_caps_setup,
                                        fail_caps_teardown),
    };

    if (getenv("TALLY_TEST_FILTER") != NULL) /* one test: TALLY_TEST_FILTER=test_max_conn* */
        cmocka_set_test_filter(getenv("TALLY_TEST_FILTER"));
    return cmocka_run_group_tests_name("fail_caps", tests, NULL, NULL);
}

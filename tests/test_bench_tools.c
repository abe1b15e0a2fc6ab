/*
 * The benchmark tools measure nothing here; these tests pin that they measure
 * the right thing: the RESP codec of tally-bench --redis (table-driven), the
 * echo server answering tally-bench with tally's framing (both write modes),
 * the Lua limiters deciding correctly in a real redis-server (skipped when
 * redis-server is not installed), and tally-bench-links filling a real data dir.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bench_resp.h"
#include "test_support.h"

static char tmp[256];
static pid_t children[8]; /* servers started here, stopped in teardown if a test failed */
static int n_children;

static int
group_setup(void **state)
{
    (void)state;
    test_tmpdir(tmp, sizeof(tmp));
    return 0;
}

static int
group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < n_children; i++) {
        if (children[i] > 0 && kill(children[i], SIGKILL) == 0)
            waitpid(children[i], NULL, 0);
    }
    test_rmtree(tmp);
    return 0;
}

static void
bench_bin(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/bench/%s", TALLY_BIN_DIR, name);
}

/* Starts argv in the background; returns its pid. */
static pid_t
spawn(char *const argv[])
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        /* No inherited pipe may outlive the test: ctest waits for its EOF. */
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    if (n_children < (int)(sizeof(children) / sizeof(children[0])))
        children[n_children++] = pid;
    return pid;
}

static void
wait_socket(const char *path)
{
    struct stat st;
    int i;

    for (i = 0; i < 500; i++) {
        if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
            return;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    fail_msg("%s never appeared", path);
}

static int
stop(pid_t pid)
{
    int status = 0;

    kill(pid, SIGTERM);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    for (int i = 0; i < n_children; i++) {
        if (children[i] == pid)
            children[i] = 0;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Parses tally-bench's last line; the format is the contract scripts rely on. */
static void
last_line(const char *out, long *admitted, long *refused)
{
    const char *l = strrchr(out, '\n');
    double dps, p50, p99, p999;

    assert_non_null(l);
    while (l > out && l[-1] != '\n')
        l--;
    assert_int_equal(sscanf(l,
                            "decisions_per_s=%lf p50_us=%lf p99_us=%lf p999_us=%lf admitted=%ld "
                            "refused=%ld",
                            &dps, &p50, &p99, &p999, admitted, refused),
                     6);
    assert_true(dps > 0 && p50 > 0 && p50 <= p99 && p99 <= p999);
}

static void
write_tokens(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    int i;

    assert_non_null(f);
    for (i = 0; i < n; i++)
        fprintf(f, "tly_bench%032d\n", i);
    fclose(f);
}

struct resp_case {
    const char *in;
    int rc;
    int64_t value;
    size_t used;
};

static void
test_resp_reply_table(void **state)
{
    static const struct resp_case cases[] = {
        {":1\r\n", 1, 1, 4},
        {":-25\r\n:7\r\n", 1, -25, 6}, /* one reply at a time */
        {"*2\r\n:0\r\n:1500\r\n", 1, 0, 15},
        {"*2\r\n:1\r\n:0\r\n", 1, 1, 12},
        {"*2\r\n$1\r\nx\r\n:9\r\n", 1, 9, 15}, /* first integer of the array */
        {"$3\r\nabc\r\n", 1, 0, 9},
        {"$-1\r\n", 1, 0, 5},
        {"+OK\r\n", 1, 0, 5},
        {"*2\r\n:0\r\n", 0, 0, 0}, /* incomplete array */
        {"$3\r\nab", 0, 0, 0},
        {":1\r", 0, 0, 0},
        {"", 0, 0, 0},
        {"-NOSCRIPT No matching script\r\n", -1, 0, 0},
        {"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", -1, 0, 0}, /* nested too deep */
        {"?\r\n", -1, 0, 0},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t v = -99;
        size_t used = 99;
        int rc = resp_reply((const uint8_t *)cases[i].in, strlen(cases[i].in), &v, &used);
        if (rc != cases[i].rc)
            fail_msg("case %zu (%s): rc %d, want %d", i, cases[i].in, rc, cases[i].rc);
        if (rc == 1 && (v != cases[i].value || used != cases[i].used))
            fail_msg("case %zu: value %lld used %zu", i, (long long)v, used);
    }
}

static void
test_resp_evalsha_encodes_bulk_strings(void **state)
{
    const char *want = "*6\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$4\r\nrl:t\r\n"
                       "$2\r\n10\r\n$4\r\n1000\r\n";
    uint8_t out[128];
    size_t n = resp_evalsha(out, sizeof(out), "abc", "rl:t", "10", "1000");

    (void)state;
    assert_int_equal(n, strlen(want));
    assert_memory_equal(out, want, n);
    assert_int_equal(resp_evalsha(out, 20, "abc", "rl:t", "10", "1000"), 0); /* too small */
}

/* The echo server answers every CHECK of a pipelined, multi-connection load,
 * in both write modes, and leaves no socket file behind. */
static void
test_echo_answers_tally_bench(void **state)
{
    static const char *const modes[] = {NULL, "--write-each"};
    char echo[512], bench[512], sock[512], tokens[512];
    struct test_out *o = malloc(sizeof(*o));
    size_t m;

    (void)state;
    assert_non_null(o);
    bench_bin("tally-bench-echo", echo, sizeof(echo));
    bench_bin("tally-bench", bench, sizeof(bench));
    snprintf(sock, sizeof(sock), "%s/echo.sock", tmp);
    snprintf(tokens, sizeof(tokens), "%s/echo.tok", tmp);
    write_tokens(tokens, 7);
    for (m = 0; m < 2; m++) {
        char *eargv[] = {echo, "--socket", sock, (char *)modes[m], NULL};
        char *bargv[] = {bench, "--socket",   sock, "--tokens",   tokens, "--connections",
                         "4",   "--pipeline", "8",  "--requests", "3001", NULL};
        long admitted = 0, refused = -1;
        pid_t pid = spawn(eargv);
        wait_socket(sock);
        if (test_run(bargv, NULL, o) != 0)
            fail_msg("tally-bench: exit %d: %s", o->code, o->err);
        last_line(o->out, &admitted, &refused);
        assert_int_equal(admitted, 3001);
        assert_int_equal(refused, 0);
        assert_int_equal(stop(pid), 0);
        assert_int_equal(access(sock, F_OK), -1);
    }
    free(o);
}

/* Runs tally-bench against a new echo server on socket `name` with `ntokens` tokens and the
 * options `opts` (NULL-terminated, after --socket and --tokens): its output into o, its exit
 * status; *ms the wall time it took. `bad` when not NULL: options tally-bench must refuse
 * (exit 64), tried first against the same server. */
static int
bench_against_echo(const char *name, int ntokens, char *const *opts, char *const *bad,
                   struct test_out *o, long *ms)
{
    char echo[512], bench[512], sock[512], tokens[512];
    char *argv[16];
    struct timespec a, b;
    int n = 0, rc;

    bench_bin("tally-bench-echo", echo, sizeof(echo));
    bench_bin("tally-bench", bench, sizeof(bench));
    snprintf(sock, sizeof(sock), "%s/%s.sock", tmp, name);
    snprintf(tokens, sizeof(tokens), "%s/%s.tok", tmp, name);
    write_tokens(tokens, ntokens);
    argv[n++] = bench;
    argv[n++] = "--socket";
    argv[n++] = sock;
    argv[n++] = "--tokens";
    argv[n++] = tokens;
    for (int i = 0; opts[i] != NULL && n < 15; i++)
        argv[n++] = opts[i];
    argv[n] = NULL;
    {
        char *eargv[] = {echo, "--socket", sock, NULL};
        pid_t pid = spawn(eargv);
        wait_socket(sock);
        if (bad != NULL) { /* first: o then holds the run the caller reads */
            char *bargv[16];
            int k = 0;

            memcpy(bargv, argv, 5 * sizeof(argv[0]));
            for (k = 5; bad[k - 5] != NULL && k < 15; k++)
                bargv[k] = bad[k - 5];
            bargv[k] = NULL;
            assert_int_equal(test_run(bargv, NULL, o), 64);
        }
        clock_gettime(CLOCK_MONOTONIC, &a);
        rc = test_run(argv, NULL, o);
        clock_gettime(CLOCK_MONOTONIC, &b);
        *ms = (long)(b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
        assert_int_equal(stop(pid), 0);
    }
    return rc;
}

/* tally-bench --seconds stops on time with a valid last line. */
static void
test_bench_seconds_bounds_the_run(void **state)
{
    char *opts[] = {"--requests", "100000000", "--seconds", "0.5", NULL};
    struct test_out *o = malloc(sizeof(*o));
    long admitted = 0, refused = -1, ms;

    (void)state;
    assert_non_null(o);
    assert_int_equal(bench_against_echo("echo2", 3, opts, NULL, o, &ms), 0);
    last_line(o->out, &admitted, &refused);
    assert_true(admitted > 0 && admitted < 100000000);
    assert_true(ms < 30000);
    free(o);
}

/* tally-bench --gap-ms waits that long after each answer: 5 requests take at least 4 gaps,
 * each is answered, and the option is refused with more than one request in flight. */
static void
test_bench_gap_spaces_the_requests(void **state)
{
    char *opts[] = {"--requests", "5", "--gap-ms", "100", NULL};
    char *bad[] = {"--pipeline", "2", "--gap-ms", "100", NULL};
    struct test_out *o = malloc(sizeof(*o));
    long admitted = 0, refused = -1, ms;

    (void)state;
    assert_non_null(o);
    assert_int_equal(bench_against_echo("echo3", 5, opts, bad, o, &ms), 0);
    last_line(o->out, &admitted, &refused);
    assert_int_equal(admitted + refused, 5);
    assert_true(ms >= 400);
    free(o);
}

/* Runs the Lua limiter `script` with limit 3 over 2 keys, 10 requests one at a
 * time: each key admits exactly 3 (fixed window: 3 per window; GCRA: a burst of
 * N), so 6 admitted and 4 refused. */
static void
lua_limits(const char *redis_sock, const char *script)
{
    char bench[512], path[512], tokens[512];
    struct test_out *o = malloc(sizeof(*o));
    long admitted = 0, refused = 0;

    assert_non_null(o);
    bench_bin("tally-bench", bench, sizeof(bench));
    snprintf(path, sizeof(path), "%s/bench/redis/%s", TALLY_SOURCE_DIR, script);
    snprintf(tokens, sizeof(tokens), "%s/%s.tok", tmp, script);
    write_tokens(tokens, 2);
    {
        char *bargv[] = {bench, "--redis",     (char *)redis_sock, "--script", path,   "--limit",
                         "3",   "--period-ms", "3600000",          "--tokens", tokens, "--requests",
                         "10",  NULL};
        assert_int_equal(test_run(bargv, NULL, o), 0);
    }
    last_line(o->out, &admitted, &refused);
    assert_int_equal(admitted, 6);
    assert_int_equal(refused, 4);
    free(o);
}

static void
test_redis_lua_limiters_decide(void **state)
{
    char dir[512], sock[600], ping[700];
    pid_t pid;

    (void)state;
    if (system("command -v redis-server >/dev/null 2>&1") != 0)
        skip();
    snprintf(dir, sizeof(dir), "%s/redis", tmp);
    snprintf(sock, sizeof(sock), "%s/redis.sock", dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    {
        char *argv[] = {"/usr/bin/redis-server",
                        "--port",
                        "0",
                        "--unixsocket",
                        sock,
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--dir",
                        dir,
                        "--logfile",
                        "",
                        "--loglevel",
                        "warning",
                        NULL};
        char bin[] = "/usr/bin/redis-server";
        if (access(bin, X_OK) != 0)
            skip();
        pid = spawn(argv);
    }
    wait_socket(sock);
    lua_limits(sock, "fixed_window.lua");
    snprintf(ping, sizeof(ping), "redis-cli -s %s flushall >/dev/null", sock);
    assert_int_equal(system(ping), 0);
    lua_limits(sock, "gcra.lua");
    stop(pid);
}

/* tally-bench-links creates tenants and links through the store, the tokens
 * in a 0600 file, one per line. */
static void
test_links_fill_a_data_dir(void **state)
{
    char data[512], tokens[512], links[512], nbuf[16];
    struct test_out *o = malloc(sizeof(*o));
    struct stat st;
    size_t len = 0;
    char *text;
    int lines = 0;

    (void)state;
    assert_non_null(o);
    snprintf(data, sizeof(data), "%s/links", tmp);
    snprintf(tokens, sizeof(tokens), "%s/links.tok", tmp);
    bench_bin("tally-bench-links", links, sizeof(links));
    assert_int_equal(test_tally(data, o, "init", NULL), 0);
    assert_int_equal(test_tally(data, o, "plan", "set", "pro", "--limit", "100/1h", NULL), 0);
    snprintf(nbuf, sizeof(nbuf), "%d", 5);
    {
        char *argv[] = {links, "--data",  data, "--plan", "pro",  "--tenants",
                        "3",   "--links", nbuf, "--out",  tokens, NULL};
        assert_int_equal(test_run(argv, NULL, o), 0);
    }
    assert_int_equal(stat(tokens, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    text = test_read_file(tokens, &len);
    assert_non_null(text);
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    assert_int_equal(lines, 15);
    assert_int_equal(strncmp(text, "tly_", 4), 0);
    free(text);
    assert_int_equal(test_tally(data, o, "tenant", "list", NULL), 0);
    assert_non_null(strstr(o->out, "t1 "));
    assert_non_null(strstr(o->out, "t3 "));
    assert_int_equal(test_tally(data, o, "link", "list", "t2", NULL), 0);
    lines = 0;
    for (const char *p = o->out; *p; p++)
        lines += *p == '\n';
    assert_true(lines >= 5); /* five links (and perhaps a header line) */
    /* An unknown plan changes nothing. */
    {
        char *argv[] = {links,     "--data", data,       "--plan", "nope",  "--tenants", "1",
                        "--links", "1",      "--prefix", "x",      "--out", tokens,      NULL};
        assert_int_not_equal(test_run(argv, NULL, o), 0);
    }
    assert_int_equal(test_tally(data, o, "tenant", "list", NULL), 0);
    assert_null(strstr(o->out, "x1 "));
    free(o);
}

/* tally-bench-cluster measures commits that happened: every batch committed on three
 * members, both ways of sending, and a failover; nothing failed. */
static void
test_cluster_bench_commits_every_batch(void **state)
{
    char bin[512], dir[600];
    struct test_out *o = malloc(sizeof(*o));

    (void)state;
    assert_non_null(o);
    bench_bin("tally-bench-cluster", bin, sizeof(bin));
    snprintf(dir, sizeof(dir), "%s/cluster", tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    {
        char *argv[] = {bin, "--dir",         dir,   "--batches", "60", "--inflight",
                        "8", "--election-ms", "300", NULL};
        assert_int_equal(test_run(argv, NULL, o), 0);
    }
    assert_non_null(strstr(o->out, "one host: append + fdatasync: n=60 "));
    assert_non_null(strstr(o->out, "3 members: commit, 1 in flight: n=60 "));
    assert_non_null(strstr(o->out, "3 members: commit, 8 in flight: n=60 "));
    assert_non_null(strstr(o->out, "failover: a new leader after"));
    assert_non_null(strstr(o->out, "done_errors=0"));
    free(o);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resp_reply_table),
        cmocka_unit_test(test_resp_evalsha_encodes_bulk_strings),
        cmocka_unit_test(test_echo_answers_tally_bench),
        cmocka_unit_test(test_bench_seconds_bounds_the_run),
        cmocka_unit_test(test_bench_gap_spaces_the_requests),
        cmocka_unit_test(test_redis_lua_limiters_decide),
        cmocka_unit_test(test_links_fill_a_data_dir),
        cmocka_unit_test(test_cluster_bench_commits_every_batch),
    };

    return cmocka_run_group_tests_name("bench_tools", tests, group_setup, group_teardown);
}

/*
 * tallyd as a real process: spawned with libuv from $TALLY_BIN (set by ctest),
 * its stderr read for the JSON start line that carries the port bound for
 * --http 127.0.0.1:0, /healthz fetched over a plain blocking socket, and the
 * process stopped with SIGTERM or SIGINT (exit 0, a stop line). Also the
 * failures: uninitialised data dir (78 and its message, via --data and
 * $TALLY_DATA), bad options (64), address in use (1). The data dir is made by
 * `tally init` when that works, else by hand (empty tally.db and secret.key).
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uv.h>

#include "test_support.h"

#define GUARD_MS 20000

static char base_dir[256];  /* removed at the end */
static char init_dir[300];  /* initialised */
static char empty_dir[300]; /* exists, not initialised */
static char tallyd_path[1024];
static char tally_path[1024];

struct child {
    uv_loop_t loop;
    uv_timer_t guard;
    uv_process_t proc;
    uv_pipe_t out_pipe, err_pipe;
    bool timed_out, exited;
    int open_pipes;
    int64_t exit_status;
    int term_signal;
    char out[16384], err[16384];
    size_t out_len, err_len;
};

#define WAIT(ch, cond)                                                                             \
    do {                                                                                           \
        (ch)->timed_out = false;                                                                   \
        uv_timer_start(&(ch)->guard, on_guard, GUARD_MS, 0);                                       \
        while (!(cond) && !(ch)->timed_out)                                                        \
            uv_run(&(ch)->loop, UV_RUN_ONCE);                                                      \
        uv_timer_stop(&(ch)->guard);                                                               \
        assert_false((ch)->timed_out);                                                             \
    } while (0)

static void
on_guard(uv_timer_t *t)
{
    ((struct child *)t->data)->timed_out = true;
}

static void
on_exit_cb(uv_process_t *p, int64_t status, int term_signal)
{
    struct child *ch = p->data;

    ch->exited = true;
    ch->exit_status = status;
    ch->term_signal = term_signal;
    uv_close((uv_handle_t *)p, NULL);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct child *ch = h->data;
    bool is_err = h == (uv_handle_t *)&ch->err_pipe;
    char *b = is_err ? ch->err : ch->out;
    size_t len = is_err ? ch->err_len : ch->out_len;

    (void)suggested;
    *buf = uv_buf_init(b + len, (unsigned)(sizeof(ch->err) - 1 - len));
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct child *ch = s->data;
    bool is_err = s == (uv_stream_t *)&ch->err_pipe;

    (void)buf;
    if (nread < 0) {
        ch->open_pipes--;
        uv_close((uv_handle_t *)s, NULL);
        return;
    }
    if (is_err)
        ch->err[ch->err_len += (size_t)nread] = '\0';
    else
        ch->out[ch->out_len += (size_t)nread] = '\0';
}

/* Starts `argv` (NULL-terminated; argv[0] is the path) with stdout and stderr piped. */
static void
child_start(struct child *ch, char **argv)
{
    uv_process_options_t opt;
    uv_stdio_container_t stdio[3];

    memset(ch, 0, sizeof(*ch));
    assert_int_equal(uv_loop_init(&ch->loop), 0);
    uv_timer_init(&ch->loop, &ch->guard);
    ch->guard.data = ch;
    uv_pipe_init(&ch->loop, &ch->out_pipe, 0);
    uv_pipe_init(&ch->loop, &ch->err_pipe, 0);
    ch->out_pipe.data = ch->err_pipe.data = ch->proc.data = ch;
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&ch->out_pipe;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&ch->err_pipe;
    memset(&opt, 0, sizeof(opt));
    opt.file = argv[0];
    opt.args = argv;
    opt.exit_cb = on_exit_cb;
    opt.stdio = stdio;
    opt.stdio_count = 3;
    assert_int_equal(uv_spawn(&ch->loop, &ch->proc, &opt), 0);
    ch->open_pipes = 2;
    uv_read_start((uv_stream_t *)&ch->out_pipe, on_alloc, on_read);
    uv_read_start((uv_stream_t *)&ch->err_pipe, on_alloc, on_read);
}

/* Waits for the exit and both pipes' EOF, then checks the loop ends clean. */
static void
child_finish(struct child *ch)
{
    WAIT(ch, ch->exited && ch->open_pipes == 0);
    uv_close((uv_handle_t *)&ch->guard, NULL);
    uv_run(&ch->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&ch->loop), 0);
}

/* Runs tallyd with up to 6 arguments to its end; returns the exit status. */
static int
run_tallyd(struct child *ch, const char *a1, const char *a2, const char *a3, const char *a4)
{
    char *argv[] = {tallyd_path, (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};

    child_start(ch, argv);
    child_finish(ch);
    assert_int_equal(ch->term_signal, 0);
    return (int)ch->exit_status;
}

static size_t
count_lines(const char *s)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

/* Waits for the start line and returns the port in its "http" field. */
static int
wait_start(struct child *ch, const char *http_prefix)
{
    char want[64];
    const char *at;

    WAIT(ch, ch->exited || (strstr(ch->err, "\"event\":\"start\"") != NULL &&
                            strchr(strstr(ch->err, "\"event\":\"start\""), '\n') != NULL));
    if (ch->exited)
        fprintf(stderr, "# tallyd exited early: %s", ch->err);
    assert_false(ch->exited);
    snprintf(want, sizeof(want), "\"http\":\"%s:", http_prefix);
    at = strstr(ch->err, want);
    assert_non_null(at);
    assert_memory_equal(ch->err, "{\"ts\":\"", 7);
    assert_non_null(strstr(ch->err, "\"level\":\"info\",\"event\":\"start\""));
    return atoi(at + strlen(want));
}

/* GET `path` with Connection: close; the whole answer into out. */
static void
http_get(int family, int port, const char *path, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    struct timeval tv = {10, 0};
    char req[256];
    size_t len = 0;
    ssize_t n;
    int fd = socket(family, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, "::1", &s6->sin6_addr);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, "127.0.0.1", &s4->sin_addr);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_int_equal(
        connect(fd, (struct sockaddr *)&ss,
                family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)),
        0);
    n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", path);
    assert_int_equal(write(fd, req, (size_t)n), n);
    while (len < cap - 1 && (n = read(fd, out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    assert_true(n == 0); /* EOF, not a timeout */
    out[len] = '\0';
    close(fd);
}

static void
check_healthz(int family, int port)
{
    char resp[4096];

    http_get(family, port, "/healthz", resp, sizeof(resp));
    assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
    assert_non_null(strstr(resp, "\r\nCache-Control: no-store\r\n"));
    assert_non_null(strstr(resp, "\r\nContent-Length: 15\r\n"));
    assert_string_equal(strstr(resp, "\r\n\r\n") + 4, "{\"status\":\"ok\"}");
    http_get(family, port, "/nope", resp, sizeof(resp));
    assert_memory_equal(resp, "HTTP/1.1 404 Not Found\r\n", 24);
    assert_non_null(strstr(resp, "\r\nCache-Control: no-store\r\n"));
    assert_string_equal(strstr(resp, "\r\n\r\n") + 4, "{\"error\":\"not_found\"}");
}

/* Starts tallyd on `http`, checks /healthz, stops it with `sig`. */
static void
serve_and_stop(const char *data_arg, const char *http, const char *prefix, int family, int sig)
{
    char *argv[] = {tallyd_path, "--http", (char *)http, NULL, NULL, NULL};
    struct child ch;
    int port;

    if (data_arg != NULL) {
        argv[3] = "--data";
        argv[4] = (char *)data_arg;
    }
    child_start(&ch, argv);
    port = wait_start(&ch, prefix);
    assert_true(port > 0 && port < 65536);
    assert_int_equal(count_lines(ch.err), 1);
    check_healthz(family, port);
    assert_int_equal(uv_process_kill(&ch.proc, sig), 0);
    child_finish(&ch);
    assert_int_equal(ch.term_signal, 0);
    assert_int_equal(ch.exit_status, 0);
    assert_int_equal(count_lines(ch.err), 2); /* start and stop, nothing per request */
    assert_non_null(strstr(ch.err, "\"event\":\"stop\""));
    assert_non_null(
        strstr(ch.err, sig == SIGINT ? "\"signal\":\"SIGINT\"" : "\"signal\":\"SIGTERM\""));
    assert_non_null(strstr(ch.err, "\"requests\":2"));
}

static void
test_tallyd_healthz_and_sigterm(void **state)
{
    (void)state;
    serve_and_stop(init_dir, "127.0.0.1:0", "127.0.0.1", AF_INET, SIGTERM);
}

static void
test_tallyd_env_data_and_sigint(void **state)
{
    (void)state;
    setenv("TALLY_DATA", init_dir, 1);
    serve_and_stop(NULL, "127.0.0.1:0", "127.0.0.1", AF_INET, SIGINT);
    unsetenv("TALLY_DATA");
}

static void
test_tallyd_ipv6(void **state)
{
    struct sockaddr_in6 s6;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool have_v6;

    (void)state;
    memset(&s6, 0, sizeof(s6));
    s6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::1", &s6.sin6_addr);
    have_v6 = fd >= 0 && bind(fd, (struct sockaddr *)&s6, sizeof(s6)) == 0;
    if (fd >= 0)
        close(fd);
    if (!have_v6)
        skip(); /* no IPv6 loopback in this sandbox */
    serve_and_stop(init_dir, "[::1]:0", "[::1]", AF_INET6, SIGTERM);
}

static void
test_tallyd_uninitialised(void **state)
{
    char want[1024];
    struct child ch;

    (void)state;
    snprintf(want, sizeof(want),
             "tallyd: data directory %s is not initialised: run 'tally init --data %s'\n",
             empty_dir, empty_dir);
    assert_int_equal(run_tallyd(&ch, "--data", empty_dir, "--http", "127.0.0.1:0"), 78);
    assert_string_equal(ch.err, want);
    setenv("TALLY_DATA", empty_dir, 1);
    assert_int_equal(run_tallyd(&ch, "--http", "127.0.0.1:0", NULL, NULL), 78);
    unsetenv("TALLY_DATA");
    assert_string_equal(ch.err, want);
}

static void
test_tallyd_usage_errors(void **state)
{
    static const char *const bad_http[] = {
        "127.0.0.1",      "127.0.0.1:",   "127.0.0.1:65536", "127.0.0.1:8o",
        "localhost:8080", "::1:8080",     "[::1]8080",       "[127.0.0.1]:80",
        "1.2.3.4.5:80",   "127.0.0.1:-1", ":8080",
    };
    struct child ch;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad_http) / sizeof(bad_http[0]); i++) {
        assert_int_equal(run_tallyd(&ch, "--data", init_dir, "--http", bad_http[i]), 64);
        assert_int_equal(count_lines(ch.err), 1);
        assert_memory_equal(ch.err, "tallyd: invalid --http", 22);
    }
    assert_int_equal(run_tallyd(&ch, "--data", init_dir, "--durability", "fast"), 64);
    assert_int_equal(count_lines(ch.err), 1);
    assert_int_equal(run_tallyd(&ch, "--data", init_dir, "--bogus", NULL), 64);
    assert_int_equal(count_lines(ch.err), 1);
    assert_int_equal(run_tallyd(&ch, "--data", init_dir, "extra", NULL), 64);
    assert_int_equal(run_tallyd(&ch, "--data", NULL, NULL, NULL), 64);
    assert_int_equal(run_tallyd(&ch, "--data=", NULL, NULL, NULL), 64);
    assert_int_equal(run_tallyd(&ch, "--help", NULL, NULL, NULL), 0);
    assert_non_null(strstr(ch.out, "--http ADDR:PORT"));
    assert_non_null(strstr(ch.out, "exit codes"));
    assert_int_equal(run_tallyd(&ch, "--version", NULL, NULL, NULL), 0);
    assert_memory_equal(ch.out, "tallyd ", 7);
}

/* --batch-sync-ms and --journal-compact-rows: whole numbers in range, the
 * first only with --durability batched; each mistake one line and exit 64. */
static void
test_tallyd_tuning_flags_checked(void **state)
{
    static const char *const bad_sync[] = {
        "--batch-sync-ms=0",  "--batch-sync-ms=60001", "--batch-sync-ms=1.5",
        "--batch-sync-ms=-1", "--batch-sync-ms=x",     "--batch-sync-ms=99999999999999999999",
    };
    static const char *const bad_rows[] = {
        "--journal-compact-rows=15",
        "--journal-compact-rows=100000001",
        "--journal-compact-rows=1e3",
    };
    struct child ch;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad_sync) / sizeof(bad_sync[0]); i++) {
        assert_int_equal(run_tallyd(&ch, "--data", init_dir, "--durability=batched", bad_sync[i]),
                         64);
        assert_int_equal(count_lines(ch.err), 1);
        assert_non_null(strstr(ch.err, "tallyd: invalid --batch-sync-ms"));
    }
    assert_int_equal(run_tallyd(&ch, "--data", init_dir, "--batch-sync-ms=100", NULL), 64);
    assert_int_equal(count_lines(ch.err), 1);
    assert_string_equal(ch.err, "tallyd: --batch-sync-ms needs --durability batched\n");
    assert_int_equal(
        run_tallyd(&ch, "--data", init_dir, "--durability=strict", "--batch-sync-ms=100"), 64);
    assert_non_null(strstr(ch.err, "needs --durability batched"));
    for (i = 0; i < sizeof(bad_rows) / sizeof(bad_rows[0]); i++) {
        assert_int_equal(run_tallyd(&ch, "--data", init_dir, bad_rows[i], NULL), 64);
        assert_int_equal(count_lines(ch.err), 1);
        assert_non_null(strstr(ch.err, "tallyd: invalid --journal-compact-rows"));
    }
    assert_int_equal(run_tallyd(&ch, "--help", NULL, NULL, NULL), 0);
    assert_non_null(strstr(ch.out, "--batch-sync-ms MS"));
    assert_non_null(strstr(ch.out, "--journal-compact-rows N"));
}

/* A supervisor whose event loop cannot be set up (no descriptor left for
 * epoll: RLIMIT_NOFILE 5 with 0-3 open and the tenant's lock on 4) exits 74
 * with one error line naming the call, rather than running on a broken loop. */
static void
test_tallyd_supervisor_loop_failure_is_reported(void **state)
{
    char log[400];
    char *argv[] = {tallyd_path, "--supervise", "nofd", "--data", init_dir, NULL};
    char *text;
    size_t len = 0;
    int status = 0;
    pid_t pid;

    (void)state;
    snprintf(log, sizeof(log), "%s.nofd.log", init_dir);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {5, 5};
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int null = open("/dev/null", O_RDWR);
        if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 ||
            dup2(null, 3) < 0)
            _exit(120);
        for (int i = 4; i < 1024; i++)
            close(i);
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(121);
        execv(argv[0], argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    text = test_read_file(log, &len);
    assert_non_null(text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 74)
        fail_msg("status %d: %s", status, text);
    assert_non_null(strstr(text, "\"event\":\"supervisor_loop_failed\""));
    assert_non_null(strstr(text, "\"call\":\"uv_loop_init\""));
    free(text);
    unlink(log);
}

static void
test_tallyd_port_in_use(void **state)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    char http[64];
    struct child ch;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    (void)state;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(http, sizeof(http), "127.0.0.1:%d", ntohs(sa.sin_port));
    assert_int_equal(run_tallyd(&ch, "--data", init_dir, "--http", http), 1);
    close(fd);
    assert_int_equal(count_lines(ch.err), 1);
    assert_non_null(strstr(ch.err, "address already in use"));
    assert_non_null(strstr(ch.err, http));
}

static int
touch(const char *dir, const char *name)
{
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    return close(fd);
}

/* Makes init_dir with `tally init` if that works, else by hand. */
static void
make_data_dir(void)
{
    static struct test_out o;

    if (access(tally_path, X_OK) == 0 && test_tally(init_dir, &o, "init", NULL) == 0)
        return;
    fprintf(stderr, "# no working `tally init` (%s); making the data dir by hand\n", o.err);
    assert_true(mkdir(init_dir, 0700) == 0 || errno == EEXIST);
    assert_int_equal(touch(init_dir, "tally.db"), 0);
    assert_int_equal(touch(init_dir, "secret.key"), 0);
}

static int
group_setup(void **state)
{
    (void)state;
    test_bin("tallyd", tallyd_path, sizeof(tallyd_path));
    test_bin("tally", tally_path, sizeof(tally_path));
    if (access(tallyd_path, X_OK) != 0) {
        fprintf(stderr, "# no tallyd at %s\n", tallyd_path);
        return -1;
    }
    unsetenv("TALLY_DATA");
    test_tmpdir(base_dir, sizeof(base_dir));
    snprintf(init_dir, sizeof(init_dir), "%s/data", base_dir);
    snprintf(empty_dir, sizeof(empty_dir), "%s/empty", base_dir);
    if (mkdir(empty_dir, 0700) != 0)
        return -1;
    make_data_dir();
    return 0;
}

static int
group_teardown(void **state)
{
    (void)state;
    if (base_dir[0] != '\0')
        test_rmtree(base_dir);
    return 0;
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tallyd_healthz_and_sigterm),
        cmocka_unit_test(test_tallyd_env_data_and_sigint),
        cmocka_unit_test(test_tallyd_ipv6),
        cmocka_unit_test(test_tallyd_uninitialised),
        cmocka_unit_test(test_tallyd_usage_errors),
        cmocka_unit_test(test_tallyd_tuning_flags_checked),
        cmocka_unit_test(test_tallyd_supervisor_loop_failure_is_reported),
        cmocka_unit_test(test_tallyd_port_in_use),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("tallyd", tests, group_setup, group_teardown);
}

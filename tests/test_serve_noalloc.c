/*
 * No allocation per decision, over the whole path from the socket read to the
 * answer, for both protocols. The suite runs tallyd's server itself
 * (sup_server_run, supervisor/front/server.c, as tallyd_main() calls it) on a
 * thread of its own, on a data dir made by the real `tally`; the supervisors
 * are the built tallyd (see main()). From the test thread it connects real
 * sockets: the binary protocol on the Unix socket (HELLO through libtally's
 * client, then raw CHECK frames, pipelined) and HTTP/1.1 keep-alive on TCP
 * loopback (pipelined GET /v1/check). After a warm-up (the child counter, the
 * supervisor, the leases, the connection's buffers), it counts every
 * allocation of tally (tally_malloc and its family, test_alloc.h) and of libuv
 * (uv_replace_allocator, installed before any loop exists) over 12,000 admitted
 * decisions per protocol: the counts must not move. The test thread makes no
 * allocation of either kind while it counts (encoders, frame reader and
 * sockets only).
 */
#define _GNU_SOURCE /* memmem */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include "proto_client.h"
#include "proto_frame.h"
#include "serve_util.h"
#include "store_paths.h"
#include "sup_front.h"
#include "tally_log.h"
#include "test_alloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#define LINKS     3
#define ENDPOINT  "search"
#define BATCH     200   /* requests written at once, pipelined */
#define WARM      20000 /* decisions after the first fully admitted batch */
#define DECISIONS 12000 /* counted, per protocol */

/* ---- libuv's allocations, counted (installed by main() before any loop) ---- */

static _Atomic uint64_t uv_allocs;

static void *
uv_count_malloc(size_t n)
{
    atomic_fetch_add(&uv_allocs, 1);
    return malloc(n);
}

static void *
uv_count_realloc(void *p, size_t n)
{
    atomic_fetch_add(&uv_allocs, 1);
    return realloc(p, n);
}

static void *
uv_count_calloc(size_t count, size_t n)
{
    atomic_fetch_add(&uv_allocs, 1);
    return calloc(count, n);
}

/* ---- the server on its thread ---- */

struct fx {
    struct serve_env s;
    char tokens[LINKS][128];
    char log[192];
    char lock[192];
    char socket[192];
    struct sup_server_opts o;
    pthread_t thread;
    int lock_fd; /* DATA/tallyd.lock, held as tallyd_main() holds it */
    bool running;
    int code; /* sup_server_run's exit */
    int http_port;
};

/* Buffers of the clients: static so that nothing is allocated while counting. */
static uint8_t out_buf[BATCH * PROTO_CLIENT_MSG_MAX];
static uint8_t in_buf[PROTO_FRAME_MAX];
static char http_out[BATCH * 256];
static char http_in[BATCH * 1024];

static void *
server_main(void *arg)
{
    struct fx *fx = arg;

    fx->code = sup_server_run(&fx->o);
    return NULL;
}

/* The HTTP port of the start line in the log once it is there (the socket listens
 * by then), or 0. */
static int
started_port(const struct fx *fx)
{
    size_t len = 0;
    char *log = test_read_file(fx->log, &len);
    const char *at;
    int port = 0;

    if (log == NULL)
        return 0;
    at = strstr(log, "\"event\":\"start\"");
    if (at != NULL && (at = strstr(at, "\"http\":\"127.0.0.1:")) != NULL)
        port = atoi(at + strlen("\"http\":\"127.0.0.1:"));
    free(log);
    return port;
}

static int
group_setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    int64_t deadline;
    int fd, i;

    serve_env_init(&fx->s);
    serve_tally_ok(&fx->s, NULL, 0, "plan", "set", "pro", "--limit", "1000000000/365d", NULL);
    serve_tally_ok(&fx->s, NULL, 0, "endpoint", "set", ENDPOINT, "--limit", "1000000000/365d",
                   NULL);
    serve_tally_ok(&fx->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    for (i = 0; i < LINKS; i++)
        serve_tally_ok(&fx->s, fx->tokens[i], sizeof(fx->tokens[i]), "link", "create", "acme",
                       NULL);
    snprintf(fx->log, sizeof(fx->log), "%s/tallyd.log", fx->s.root);
    snprintf(fx->socket, sizeof(fx->socket), "%s/tally.sock", fx->s.data);
    snprintf(fx->lock, sizeof(fx->lock), "%s/tallyd.lock", fx->s.data);
    assert_int_equal(store_lock_take(fx->lock, &fx->lock_fd), TALLY_OK);
    fd = open(fx->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    tally_log_set_fd(fd); /* the server's lines; the supervisors keep stderr */
    /* tallyd's defaults (tallyd_args.c), an HTTP port picked by the kernel. */
    fx->o = (struct sup_server_opts){
        .data = fx->s.data,
        .http = "127.0.0.1:0",
        .host = "127.0.0.1",
        .port = 0,
        .strict = true,
        .wait_ms = 50,
        .idle_exit_ms = 10000,
        .max_supervisors = sup_max_supervisors_default(),
        .max_connections = 10000,
    };
    assert_int_equal(pthread_create(&fx->thread, NULL, server_main, fx), 0);
    fx->running = true;
    deadline = serve_now_ms() + 30000;
    while ((fx->http_port = started_port(fx)) == 0 && serve_now_ms() < deadline)
        serve_sleep_ms(20);
    assert_true(fx->http_port > 0);
    fx->s.http_port = fx->http_port; /* for serve_metric_now() */
    *state = fx;
    return 0;
}

static int
group_teardown(void **state)
{
    struct fx *fx = *state;

    if (fx->running) {
        kill(getpid(), SIGTERM); /* the server's uv_signal handler stops it in order */
        pthread_join(fx->thread, NULL);
    }
    assert_int_equal(fx->code, SUP_SERVER_OK);
    close(fx->lock_fd);
    serve_env_release(&fx->s);
    free(fx);
    return 0;
}

static void
write_all(int fd, const void *p, size_t n)
{
    const char *c = p;

    while (n > 0) {
        ssize_t w = write(fd, c, n);

        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        c += w;
        n -= (size_t)w;
    }
}

/* Read from /metrics around a counted window (never inside it): admissions, and lease
 * messages sent to the supervisor (what the window asked of it). */
struct window {
    double admitted, lease_messages;
};

static void
window_read(const struct fx *fx, struct window *w)
{
    w->admitted = serve_metric_now(&fx->s, "tally_decisions_total{result=\"admitted\"}");
    w->lease_messages = serve_metric_now(&fx->s, "tally_lease_messages_total");
    assert_true(w->admitted >= 0 && w->lease_messages >= 0);
}

/* The window's counts: both allocators unchanged, and tallyd counted every decision. */
static void
window_check(const char *what, const struct window *w0, const struct window *w1, int ok,
             uint64_t tally_allocs, uint64_t uv_allocs_made)
{
    print_message("%s: %d decisions on leases (%.0f lease messages), %llu tally and %llu "
                  "libuv allocations\n",
                  what, ok, w1->lease_messages - w0->lease_messages,
                  (unsigned long long)tally_allocs, (unsigned long long)uv_allocs_made);
    assert_int_equal(ok, DECISIONS);
    /* GET /metrics is no decision: every admission between the reads is one of ours. */
    assert_true(w1->admitted - w0->admitted == DECISIONS);
    assert_int_equal(tally_allocs, 0);
    assert_int_equal(uv_allocs_made, 0);
}

/* ---- the binary protocol ---- */

/* Writes n CHECK frames at once (the links in turn) and reads their n answers:
 * how many were admitted on a lease (not degraded). */
static int
binary_round(struct fx *fx, int fd, struct proto_frame_reader *r, int n, uint32_t *id)
{
    struct proto_check m;
    size_t len = 0;
    int got = 0, admitted = 0, i;

    memset(&m, 0, sizeof(m));
    snprintf(m.endpoint, sizeof(m.endpoint), "%s", ENDPOINT);
    m.cost = 1;
    for (i = 0; i < n; i++) {
        snprintf(m.token, sizeof(m.token), "%s", fx->tokens[i % LINKS]);
        len += proto_check_encode(out_buf + len, ++*id, &m);
    }
    write_all(fd, out_buf, len);
    while (got < n) {
        struct proto_check_reply rep;
        struct proto_frame f;
        uint8_t *space;
        size_t cap;
        ssize_t rd;
        int rc = proto_frame_next(r, &f);

        if (rc == TALLY_OK) {
            assert_int_equal(f.type, PROTO_C_CHECK_REPLY);
            assert_int_equal(proto_check_reply_decode(&f, &rep), TALLY_OK);
            /* admitted on a lease, not under the degraded local limit */
            admitted += rep.status == PROTO_ADMITTED && (rep.flags & PROTO_F_DEGRADED) == 0;
            got++;
            continue;
        }
        assert_int_equal(rc, TALLY_ENOTFOUND);
        cap = proto_frame_reader_space(r, &space);
        assert_true(cap > 0);
        rd = read(fd, space, cap);
        if (rd < 0 && errno == EINTR)
            continue;
        assert_true(rd > 0);
        proto_frame_reader_commit(r, (size_t)rd);
    }
    return admitted;
}

static void
test_noalloc_binary_protocol(void **state)
{
    struct fx *fx = *state;
    struct proto_frame_reader r;
    struct window w0, w1;
    uint64_t tally0, uv0, tally1, uv1;
    int64_t deadline = serve_now_ms() + 30000;
    uint32_t window = 0, id = 0;
    int batch, fd = -1, admitted = 0, i;

    assert_int_equal(proto_client_connect(fx->socket, 5000, &fd, &window), TALLY_OK);
    batch = window < BATCH ? (int)window : BATCH;
    assert_true(batch > 0);
    proto_frame_reader_init(&r, in_buf, sizeof(in_buf));
    /* Warm-up: the first requests open the child and start the supervisor. */
    while (binary_round(fx, fd, &r, batch, &id) < batch) {
        assert_true(serve_now_ms() < deadline);
        serve_sleep_ms(20);
    }
    for (i = 0; i < WARM; i += batch)
        (void)binary_round(fx, fd, &r, batch, &id);
    window_read(fx, &w0);
    tally0 = tally_alloc_count();
    uv0 = atomic_load(&uv_allocs);
    assert_true(uv0 > 0); /* the loop's setup went through the counting allocator */
    for (i = 0; i < DECISIONS; i += batch)
        admitted += binary_round(fx, fd, &r, DECISIONS - i < batch ? DECISIONS - i : batch, &id);
    tally1 = tally_alloc_count();
    uv1 = atomic_load(&uv_allocs);
    window_read(fx, &w1);
    window_check("binary protocol", &w0, &w1, admitted, tally1 - tally0, uv1 - uv0);
    close(fd);
}

/* ---- HTTP ---- */

static int
http_connect(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Length of the whole answer at p (head and Content-Length bytes of body) with its
 * status in *status, or 0 when it has not all arrived. */
static size_t
http_answer(const char *p, size_t len, int *status)
{
    const char *end = memmem(p, len, "\r\n\r\n", 4);
    const char *cl;
    size_t head;

    if (end == NULL)
        return 0;
    head = (size_t)(end - p) + 4;
    assert_true(len > 12 && memcmp(p, "HTTP/1.1 ", 9) == 0);
    *status = atoi(p + 9);
    cl = memmem(p, head, "\r\nContent-Length: ", 18);
    assert_non_null(cl);
    head += (size_t)strtoul(cl + 18, NULL, 10);
    return head <= len ? head : 0;
}

/* Writes n pipelined GET /v1/check (the links in turn) and reads their n answers:
 * how many were 200 on a lease (not degraded). */
static int
http_round(struct fx *fx, int fd, int n)
{
    size_t len = 0, have = 0, at = 0;
    int got = 0, ok = 0, i;

    for (i = 0; i < n; i++)
        len +=
            (size_t)snprintf(http_out + len, sizeof(http_out) - len,
                             "GET /v1/check HTTP/1.1\r\nHost: t\r\n"
                             "Authorization: Bearer %s\r\nX-Tally-Endpoint: " ENDPOINT "\r\n\r\n",
                             fx->tokens[i % LINKS]);
    assert_true(len < sizeof(http_out));
    write_all(fd, http_out, len);
    while (got < n) {
        int status = 0;
        size_t one = http_answer(http_in + at, have - at, &status);
        ssize_t rd;

        if (one > 0) {
            ok += status == 200 && memmem(http_in + at, one, "X-Tally-Degraded", 16) == NULL;
            at += one;
            got++;
            continue;
        }
        memmove(http_in, http_in + at, have - at);
        have -= at;
        at = 0;
        assert_true(have < sizeof(http_in));
        rd = read(fd, http_in + have, sizeof(http_in) - have);
        if (rd < 0 && errno == EINTR)
            continue;
        assert_true(rd > 0);
        have += (size_t)rd;
    }
    assert_int_equal(have, at); /* nothing more than the n answers */
    return ok;
}

static void
test_noalloc_http(void **state)
{
    struct fx *fx = *state;
    struct window w0, w1;
    uint64_t tally0, uv0, tally1, uv1;
    int64_t deadline = serve_now_ms() + 30000;
    int fd = http_connect(fx->http_port), ok = 0, i;

    while (http_round(fx, fd, BATCH) < BATCH) {
        assert_true(serve_now_ms() < deadline);
        serve_sleep_ms(20);
    }
    for (i = 0; i < WARM; i += BATCH)
        (void)http_round(fx, fd, BATCH);
    window_read(fx, &w0);
    tally0 = tally_alloc_count();
    uv0 = atomic_load(&uv_allocs);
    for (i = 0; i < DECISIONS; i += BATCH)
        ok += http_round(fx, fd, BATCH);
    tally1 = tally_alloc_count();
    uv1 = atomic_load(&uv_allocs);
    window_read(fx, &w1);
    window_check("HTTP", &w0, &w1, ok, tally1 - tally0, uv1 - uv0);
    close(fd);
}

/* server.c spawns the fork server and the supervisors from uv_exepath(), which here
 * is this suite: those command lines are handed to the built tallyd, whose
 * argument parser and process code they were meant for (same pid, fd 3 kept). */
static void
exec_tallyd_if_asked(int argc, char **argv)
{
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fork-server") == 0 || strcmp(argv[i], "--supervise") == 0 ||
            strcmp(argv[i], "--callers") == 0) {
            argv[0] = TALLYD_EXE;
            execv(TALLYD_EXE, argv);
            perror("execv " TALLYD_EXE);
            _exit(127);
        }
    }
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noalloc_binary_protocol),
        cmocka_unit_test(test_noalloc_http),
    };

    exec_tallyd_if_asked(argc, argv);
    /* Before any loop exists: libuv's own allocations are counted from the first. */
    if (uv_replace_allocator(uv_count_malloc, uv_count_realloc, uv_count_calloc, free) != 0)
        return 1;
    /* As tallyd_main() does before it serves. */
    signal(SIGPIPE, SIG_IGN); /* a gone peer is UV_EPIPE */
    if (sodium_init() < 0)
        return 1;
    umask(077);
    return cmocka_run_group_tests_name("serve_noalloc", tests, group_setup, group_teardown);
}

/*
 * Bounded resources (README "Failure modes", "Bounded resources"), each with
 * an explicit answer at its cap, through the real tallyd, its supervisors and
 * `tally`:
 *
 * - --max-supervisors 2 with five tenants asked round-robin: a sampler that
 *   scans /proc every few milliseconds never sees more than two supervisor
 *   processes (zombies included), every request is answered (admitted or
 *   refused, never 503: a tenant waiting for room is a cold start), and the
 *   counts survive the hibernations exactly (10 admitted per tenant, no more).
 * - --max-connections 3: one more binary-protocol connection (Unix or TCP)
 *   gets ERROR -18 "too many connections" in answer to its HELLO, one more
 *   HTTP connection 503 too_many_connections with Retry-After: 1, then each
 *   is closed; the open ones are served on, and a slot freed is taken again.
 *   Beyond the connections waiting for that answer (64 binary, 16 HTTP) one
 *   more is closed at accept, unanswered.
 * - a plan's --max-links 3: `tally link create` of a 4th live link exits 1
 *   with one line and creates nothing; a revoked link frees its place. 256
 *   endpoint names: `endpoint set` of a 257th (default or plan override)
 *   exits 1, `apply` of a file with 257 exits 65; nothing changes.
 * - a child counter whose link table reached its hard maximum (set tiny here)
 *   with every link busy answers a new link TALLY_EFULL (tallyd's 503),
 *   never an admission, and goes on serving the links it has.
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
#include "sup_child.h"
#include "sup_sock.h"
#include "tally.h"
#include "tenant.h"

#define TENANTS     5
#define MAX_SUPS    2
#define ROUNDS      6
#define PER_VISIT   3
#define TENANT_CAP  10
#define MAX_CONNS   3
#define CLIENT_WAIT 15000 /* ms: a cold start of an ASan supervisor on a busy machine */

struct env {
    struct serve_env s;
    char tokens[TENANTS][64];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    char name[16];

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "p", "--limit", "10/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "api", "--limit", "1000/365d", NULL);
    for (int i = 0; i < TENANTS; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        serve_tally_ok(&e->s, NULL, 0, "tenant", "add", name, "--plan", "p", NULL);
        serve_tally_ok(&e->s, e->tokens[i], sizeof(e->tokens[i]), "link", "create", name, NULL);
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
    struct env *e = *state;
    struct sampler smp = {.data = e->s.data};
    int admitted[TENANTS] = {0}, refused[TENANTS] = {0}, other = 0;
    int64_t slowest = 0, t0;
    struct serve_http h;
    tally_client *c = NULL;

    serve_start(&e->s, "--max-supervisors=2", NULL);
    smp.tallyd = e->s.d.pid;
    assert_int_equal(pthread_create(&smp.th, NULL, sampler_main, &smp), 0);
    assert_int_equal(tally_client_open(e->s.d.socket, CLIENT_WAIT, &c), TALLY_OK);
    t0 = serve_now_ms();
    for (int round = 0; round < ROUNDS; round++) {
        for (int t = 0; t < TENANTS; t++) {
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
           TENANTS, ROUNDS * PER_VISIT, (long long)(serve_now_ms() - t0), (long long)slowest,
           (long)atomic_load(&smp.samples), atomic_load(&smp.max),
           serve_log_count(&e->s, "\"event\":\"supervisor_start\""),
           serve_log_count(&e->s, "\"event\":\"supervisor_hibernate\""));
    for (int t = 0; t < TENANTS; t++) {
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
    assert_true(serve_log_count(&e->s, "\"event\":\"supervisor_hibernate\"") >= TENANTS);
    assert_true(serve_log_count(&e->s, "\"event\":\"supervisor_start\"") > TENANTS);
    serve_stop(&e->s);
}

/* ---- connections ---- */

static int
unix_connect(const char *path)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static int
tcp_connect(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Reads until EOF (or a reset) or `cap` bytes, at most 5 s; returns the bytes
 * read and sets *eof when the peer closed. */
static size_t
read_all(int fd, char *buf, size_t cap, bool *eof)
{
    size_t len = 0;
    int64_t until = serve_now_ms() + 5000;

    *eof = false;
    while (len < cap && serve_now_ms() < until) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        if (poll(&p, 1, 100) <= 0)
            continue;
        n = read(fd, buf + len, cap - len);
        if (n <= 0) {
            *eof = n == 0 || errno == ECONNRESET;
            break;
        }
        len += (size_t)n;
    }
    return len;
}

static bool
contains(const char *buf, size_t len, const char *needle)
{
    size_t n = strlen(needle);

    for (size_t i = 0; i + n <= len; i++) {
        if (memcmp(buf + i, needle, n) == 0)
            return true;
    }
    return false;
}

/* A raw HELLO on an over-cap binary connection: ERROR with the HELLO's id, code
 * TALLY_EUNAVAIL, "too many connections", then the connection closes. */
static void
expect_binary_refusal(int fd)
{
    struct proto_hello hello = {PROTO_VERSION, PROTO_VERSION};
    uint8_t out[64];
    char in[512];
    size_t len = proto_hello_encode(out, 77, &hello);
    bool eof = false;
    size_t got;
    uint32_t id;
    int32_t code;

    assert_int_equal(write(fd, out, len), (ssize_t)len);
    got = read_all(fd, in, sizeof(in), &eof);
    assert_true(got >= 17);
    assert_int_equal((uint8_t)in[5], PROTO_C_ERROR);
    memcpy(&id, in + 8, 4);
    memcpy(&code, in + 12, 4);
    assert_int_equal(ntohl(id), 77);
    assert_int_equal((int32_t)ntohl((uint32_t)code), TALLY_EUNAVAIL);
    assert_true(contains(in, got, "too many connections"));
    assert_true(eof);
    close(fd);
}

static void
check_admitted(tally_client *c, const char *token)
{
    struct tally_result r;

    assert_int_equal(tally_check(c, token, "api", 0, &r), TALLY_OK);
    assert_true(r.status == TALLY_ADMITTED || r.status == TALLY_REFUSED);
}

/* Opens a client, retrying for up to 3 s while a freed slot is not yet seen free. */
static tally_client *
open_eventually(const char *where)
{
    tally_client *c = NULL;
    int64_t until = serve_now_ms() + 3000;
    int rc;

    while ((rc = tally_client_open(where, CLIENT_WAIT, &c)) != TALLY_OK && serve_now_ms() < until)
        serve_sleep_ms(20);
    assert_int_equal(rc, TALLY_OK);
    return c;
}

static void
test_max_connections_binary(void **state)
{
    struct env *e = *state;
    tally_client *a = NULL, *b = NULL, *t = NULL, *over = NULL, *d;
    char tcp[64];
    struct serve_http h;

    serve_start(&e->s, "--max-connections=3", "--tcp=127.0.0.1:0");
    assert_true(e->s.tcp_port > 0);
    snprintf(tcp, sizeof(tcp), "tcp:127.0.0.1:%d", e->s.tcp_port);
    /* Unix and TCP share the cap. */
    a = open_eventually(e->s.d.socket); /* the start's probe may still hold a place */
    b = open_eventually(e->s.d.socket);
    t = open_eventually(tcp);
    check_admitted(a, e->tokens[0]);
    assert_int_equal(tally_client_open(e->s.d.socket, CLIENT_WAIT, &over), TALLY_EUNAVAIL);
    assert_int_equal(tally_client_open(tcp, CLIENT_WAIT, &over), TALLY_EUNAVAIL);
    expect_binary_refusal(unix_connect(e->s.d.socket));
    expect_binary_refusal(tcp_connect(e->s.tcp_port));
    /* the open ones are served on */
    check_admitted(a, e->tokens[0]);
    check_admitted(b, e->tokens[1]);
    check_admitted(t, e->tokens[2]);
    /* a slot freed is taken again */
    tally_client_close(b);
    d = open_eventually(e->s.d.socket);
    check_admitted(d, e->tokens[1]);
    assert_int_equal(tally_client_open(tcp, CLIENT_WAIT, &over), TALLY_EUNAVAIL);
    serve_http_get(e->s.http_port, "/metrics", NULL, &h);
    assert_int_equal(h.status, 200);
    assert_true(serve_metric(h.body, "tally_connections_refused_total{listener=\"socket\"}") >= 5);
    tally_client_close(a);
    tally_client_close(t);
    tally_client_close(d);
    serve_stop(&e->s);
}

/* One request on an open keep-alive connection; returns the status and the head. */
static int
http_ask(int fd, const char *path, char *head, size_t cap, bool *eof)
{
    char req[256], buf[4096];
    size_t len = 0;
    int status = 0;
    int64_t until = serve_now_ms() + 5000;
    const char *end = NULL, *cl;

    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    *eof = false;
    /* the head, then Content-Length bytes of body */
    while (serve_now_ms() < until) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            cl = strstr(buf, "Content-Length:");
            if (cl != NULL && cl < end && (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15) <= len)
                break;
        }
        if (poll(&p, 1, 100) <= 0)
            continue;
        n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0) {
            *eof = true;
            break;
        }
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (sscanf(buf, "HTTP/1.1 %d", &status) != 1)
        status = 0;
    snprintf(head, cap, "%s", buf);
    return status;
}

static void
test_max_connections_http(void **state)
{
    struct env *e = *state;
    int fds[MAX_CONNS], over, again;
    char head[4096], rest[64];
    bool eof = false;
    struct serve_http h;

    serve_start(&e->s, "--max-connections=3", NULL);
    for (int i = 0; i < MAX_CONNS; i++) {
        fds[i] = tcp_connect(e->s.http_port);
        assert_int_equal(http_ask(fds[i], "/healthz", head, sizeof(head), &eof), 200);
    }
    over = tcp_connect(e->s.http_port);
    assert_int_equal(http_ask(over, "/healthz", head, sizeof(head), &eof), 503);
    assert_non_null(strstr(head, "\"error\":\"too_many_connections\""));
    assert_non_null(strstr(head, "\r\nRetry-After: 1\r\n"));
    assert_non_null(strstr(head, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(head, "\r\nCache-Control: no-store\r\n"));
    read_all(over, rest, sizeof(rest), &eof);
    assert_true(eof);
    close(over);
    /* the open ones are served on, keep-alive */
    for (int i = 0; i < MAX_CONNS; i++)
        assert_int_equal(http_ask(fds[i], "/healthz", head, sizeof(head), &eof), 200);
    /* a slot freed is taken again */
    close(fds[0]);
    for (int64_t until = serve_now_ms() + 3000;; serve_sleep_ms(20)) {
        int st;
        again = tcp_connect(e->s.http_port);
        st = http_ask(again, "/healthz", head, sizeof(head), &eof);
        if (st == 200)
            break;
        close(again);
        assert_true(st == 503 && serve_now_ms() < until);
    }
    fds[0] = again;
    close(fds[1]); /* room for the metrics request */
    for (int64_t until = serve_now_ms() + 3000;; serve_sleep_ms(20)) {
        serve_http_get(e->s.http_port, "/metrics", NULL, &h);
        if (h.status == 200)
            break;
        assert_true(serve_now_ms() < until);
    }
    assert_true(serve_metric(h.body, "tally_connections_refused_total{listener=\"http\"}") >= 1);
    assert_true(serve_metric(h.body, "tally_http_rejected_total{reason=\"connection_limit\"}") >=
                1);
    close(fds[0]);
    close(fds[2]);
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
    struct env *e = *state;
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

/* True when the peer closes fd within 3 s without sending a byte. */
static bool
closed_unanswered(int fd)
{
    char buf[64];
    bool eof = false;

    return read_all(fd, buf, sizeof(buf), &eof) == 0 && eof;
}

/* Connections over the cap that send nothing hold their refusal slot (64 binary,
 * 16 HTTP, until their first frame or the HTTP idle timeout); beyond them a
 * connection is closed at accept, unanswered, and the served one goes on. */
static void
test_beyond_refusals_closed_at_once(void **state)
{
    struct env *e = *state;
    int idle_bin[SUP_SOCK_REFUSALS_MAX], idle_http[16];
    char head[4096];
    bool eof = false;
    tally_client *a = NULL;
    int served, fd;

    serve_start(&e->s, "--max-connections=1", NULL);
    /* the start's own probe may still hold the one place for a moment */
    a = open_eventually(e->s.d.socket);
    for (int i = 0; i < SUP_SOCK_REFUSALS_MAX; i++)
        idle_bin[i] = unix_connect(e->s.d.socket);
    serve_sleep_ms(300); /* accepted, each waiting for its first frame */
    fd = unix_connect(e->s.d.socket);
    assert_true(closed_unanswered(fd));
    close(fd);
    check_admitted(a, e->tokens[0]);
    /* a waiting one still gets its answer */
    expect_binary_refusal(idle_bin[0]);
    for (int i = 1; i < SUP_SOCK_REFUSALS_MAX; i++)
        close(idle_bin[i]);
    tally_client_close(a);

    served = tcp_connect(e->s.http_port);
    assert_int_equal(http_ask(served, "/healthz", head, sizeof(head), &eof), 200);
    for (int i = 0; i < 16; i++)
        idle_http[i] = tcp_connect(e->s.http_port);
    serve_sleep_ms(300);
    fd = tcp_connect(e->s.http_port);
    assert_true(closed_unanswered(fd));
    close(fd);
    assert_int_equal(http_ask(served, "/healthz", head, sizeof(head), &eof), 200);
    assert_int_equal(http_ask(idle_http[0], "/healthz", head, sizeof(head), &eof), 503);
    for (int i = 0; i < 16; i++)
        close(idle_http[i]);
    close(served);
    serve_stop(&e->s);
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
    struct env *e = *state;
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

/* ---- the child counter's link table at its hard maximum ---- */

static void
test_child_link_table_full_refuses(void **state)
{
    struct sup_child_config cfg;
    struct sup_time now = {1000, 1700000000000};
    char links[9][TENANT_LINK_ID_LEN + 1];
    struct proto_lease_msg m;
    struct sup_admit a;
    sup_child *c = NULL;
    int rc;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    strcpy(cfg.tenant, "acme");
    strcpy(cfg.policy.name, "api");
    cfg.policy.cost = 1;
    cfg.policy.on_unavailable = TENANT_UNAVAIL_OPEN; /* even fail-open: no admission */
    cfg.policy.degraded_limits.count = 1;
    cfg.policy.degraded_limits.v[0] = (struct tenant_limit){100, 60000};
    cfg.incarnation = 1;
    cfg.max_links = 4;
    cfg.links_max = 8; /* grows 4 -> 8, then full */
    assert_int_equal(sup_child_open(&cfg, &c), TALLY_OK);
    /* Eight links, each waiting for its first lease: none is idle, none evictable. */
    for (int i = 0; i < 9; i++)
        tenant_link_id_new(links[i]);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(sup_child_admit(c, links[i], 1, now, 0, &a), TALLY_OK);
        assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    }
    rc = sup_child_admit(c, links[8], 1, now, 0, &a);
    assert_int_equal(rc, TALLY_EFULL); /* front_child_run answers PROTO_UNAVAILABLE (503) */
    /* ... also when asked to decide without the supervisor (the give-up path) */
    rc = sup_child_admit(c, links[8], 1, now, SUP_ADMIT_GIVE_UP, &a);
    assert_int_equal(rc, TALLY_EFULL);
    /* The links it has are served as before: their asks go out, they wait. */
    assert_int_equal(sup_child_next_message(c, now, &m), TALLY_OK);
    assert_int_equal(m.type, PROTO_LEASE_HELLO);
    assert_int_equal(sup_child_admit(c, links[0], 1, now, 0, &a), TALLY_OK);
    assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    sup_child_close(c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_max_supervisors_lru_hibernates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_connections_binary, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_connections_http, setup, teardown),
        cmocka_unit_test_setup_teardown(test_beyond_refusals_closed_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_links_and_endpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cap_flags_are_checked, setup, teardown),
        cmocka_unit_test(test_child_link_table_full_refuses),
    };

    if (getenv("TALLY_TEST_FILTER") != NULL) /* one test: TALLY_TEST_FILTER=test_max_conn* */
        cmocka_set_test_filter(getenv("TALLY_TEST_FILTER"));
    return cmocka_run_group_tests_name("fail_caps", tests, NULL, NULL);
}

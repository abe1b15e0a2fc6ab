/*
 * The example suites' environment (examples_env.h): tallyd on a fresh data dir
 * through test_daemon.h, templates filled by plain string replacement, children
 * forked with their output in log files under the temp dir, and curl as the
 * client. Every child is stopped in release, so a failed assertion leaves no
 * nginx or caddy behind.
 */
#define _DEFAULT_SOURCE
#include "examples_env.h"

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
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_support.h"

static struct test_out o;

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void
print_file(const char *title, const char *path)
{
    size_t len = 0;
    char *text = test_read_file(path, &len);

    fprintf(stderr, "--- %s (%s)\n%s\n", title, path, text != NULL ? text : "(none)");
    free(text);
}

void
examples_dump_logs(const struct examples_env *e)
{
    int i;

    print_file("tallyd", e->d.log);
    for (i = 0; i < e->n_children; i++)
        print_file("child", e->logs[i]);
}

/* The port of the "http" field of tallyd's start line ("127.0.0.1:PORT"). */
static int
http_port_from_log(const char *log_path)
{
    size_t len = 0;
    char *text = test_read_file(log_path, &len);
    const char *p = text != NULL ? strstr(text, "\"event\":\"start\"") : NULL;
    int port = -1;

    if (p != NULL)
        p = strstr(p, "\"http\":\"");
    if (p != NULL)
        p = strchr(p + 8, ':');
    if (p != NULL)
        port = atoi(p + 1);
    free(text);
    return port;
}

void
examples_env_init(struct examples_env *e, int limit)
{
    char lim[32];
    int i;

    /* Counted against limits of a year, whose boundaries are tops of hours. */
    test_within_one_window(3600000, 90000);
    memset(e, 0, sizeof(*e));
    e->limit = limit;
    test_tmpdir(e->root, sizeof(e->root));
    snprintf(e->data, sizeof(e->data), "%s/data", e->root);
    snprintf(lim, sizeof(lim), "%d/365d", limit);
    assert_int_equal(test_tally(e->data, &o, "init", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "plan", "set", "small", "--limit", lim, NULL), 0);
    assert_int_equal(
        test_tally(e->data, &o, "endpoint", "set", "api", "--limit", "1000/365d", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "acme", "--plan", "small", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", NULL), 0);
    snprintf(e->token, sizeof(e->token), "%.36s", o.out);
    assert_int_equal(test_daemon_start(&e->d, e->data, "--wait-ms=3000", NULL), 0);
    for (i = 0; i < 500 && e->http_port <= 0; i++) {
        e->http_port = http_port_from_log(e->d.log);
        if (e->http_port <= 0)
            sleep_ms(10);
    }
    if (e->http_port <= 0) {
        examples_dump_logs(e);
        fail_msg("no start line with the HTTP port in %s", e->d.log);
    }
}

/* SIGTERM, up to 5 s, then SIGKILL; always reaped. */
static void
stop_child(pid_t pid)
{
    int status;
    int i;

    kill(pid, SIGTERM);
    for (i = 0; i < 500; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
}

void
examples_env_release(struct examples_env *e)
{
    int i;

    for (i = e->n_children - 1; i >= 0; i--)
        if (e->children[i] > 0)
            stop_child(e->children[i]);
    e->n_children = 0;
    if (e->d.pid > 0)
        test_daemon_stop(&e->d);
    if (e->root[0] == '\0')
        return; /* never initialised */
    test_wait_supervisors(e->data, "acme", 0, 10000);
    test_rmtree(e->root);
}

void
examples_fill_template(const char *src, const char *dst, ...)
{
    size_t len = 0;
    char *text = test_read_file(src, &len);
    const char *key;
    va_list ap;
    FILE *f;

    if (text == NULL)
        fail_msg("cannot read template %s", src);
    va_start(ap, dst);
    while ((key = va_arg(ap, const char *)) != NULL) {
        const char *value = va_arg(ap, const char *);
        char mark[64];
        char *at;
        snprintf(mark, sizeof(mark), "@%s@", key);
        while ((at = strstr(text, mark)) != NULL) {
            size_t head = (size_t)(at - text);
            size_t tail = strlen(at + strlen(mark));
            char *next = malloc(head + strlen(value) + tail + 1);
            assert_non_null(next);
            memcpy(next, text, head);
            memcpy(next + head, value, strlen(value));
            memcpy(next + head + strlen(value), at + strlen(mark), tail + 1);
            free(text);
            text = next;
        }
    }
    va_end(ap);
    {
        const char *left = strchr(text, '@');
        while (left != NULL) {
            size_t n = strspn(left + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_");
            if (n > 0 && left[1 + n] == '@')
                fail_msg("%s: placeholder left: %.*s", src, (int)n + 2, left);
            left = strchr(left + 1, '@');
        }
    }
    f = fopen(dst, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    free(text);
}

pid_t
examples_spawn(struct examples_env *e, const char *name, char *const argv[], char *const envp[])
{
    char *log = e->logs[e->n_children];
    char root[sizeof(e->root)];
    pid_t pid;

    assert_true(e->n_children < EXAMPLES_CHILDREN_MAX);
    memcpy(root, e->root, sizeof(root)); /* a copy: -O2 warns of overlap within *e */
    snprintf(log, sizeof(e->logs[0]), "%s/%s.log", root, name);
    if (access(argv[0], X_OK) != 0)
        fail_msg("%s is not installed (it is in the Makefile's DEB_PACKAGES: run make deps)",
                 argv[0]);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        setpgid(0, 0);
        if (envp != NULL)
            execve(argv[0], argv, envp);
        else
            execv(argv[0], argv);
        _exit(127);
    }
    e->children[e->n_children++] = pid;
    return pid;
}

void
examples_wait_port(struct examples_env *e, int port, int timeout_ms)
{
    struct sockaddr_in sa;
    int waited;
    int i;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    for (waited = 0; waited < timeout_ms; waited += 20) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return;
        for (i = 0; i < e->n_children; i++) {
            int status;
            if (e->children[i] > 0 && waitpid(e->children[i], &status, WNOHANG) == e->children[i]) {
                e->children[i] = 0;
                examples_dump_logs(e);
                fail_msg("a child exited (status %d) before 127.0.0.1:%d accepted", status, port);
            }
        }
        sleep_ms(20);
    }
    examples_dump_logs(e);
    fail_msg("nothing accepts on 127.0.0.1:%d after %d ms", port, timeout_ms);
}

/* Copies the value of header `name` from a block of response headers. */
static void
header_value(const char *headers, const char *name, char *out, size_t cap)
{
    const char *line = headers;
    size_t nlen = strlen(name);

    out[0] = '\0';
    while (line != NULL && *line != '\0') {
        if (strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            v += strspn(v, " \t");
            snprintf(out, cap, "%.*s", (int)strcspn(v, "\r\n"), v);
            return;
        }
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
}

void
examples_curl(int port, const char *path, const char *token, struct examples_answer *out)
{
    examples_curl_from(port, path, token, NULL, NULL, out);
}

void
examples_curl_from(int port, const char *path, const char *token, const char *from,
                   const char *header, struct examples_answer *out)
{
    char url[256];
    char auth[128];
    char *argv[20];
    int argc = 0;
    const char *last;

    memset(out, 0, sizeof(*out));
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    argv[argc++] = "/usr/bin/curl";
    argv[argc++] = "-sS";
    argv[argc++] = "--max-time";
    argv[argc++] = "15";
    argv[argc++] = "-i"; /* the head, then the body, on stdout */
    if (token[0] != '\0') {
        argv[argc++] = "-H";
        argv[argc++] = auth;
    }
    if (from != NULL) {
        argv[argc++] = "--interface";
        argv[argc++] = (char *)from;
    }
    if (header != NULL) {
        argv[argc++] = "-H";
        argv[argc++] = (char *)header;
    }
    argv[argc++] = url;
    argv[argc] = NULL;
    if (test_run(argv, NULL, &o) != 0)
        fail_msg("curl %s: exit %d: %s", url, o.code, o.err);
    /* The last head (curl -i prints each answer; there is one here). */
    last = strstr(o.out, "HTTP/");
    assert_non_null(last);
    out->status = atoi(last + strcspn(last, " ") + 1);
    header_value(last, "Retry-After", out->retry_after, sizeof(out->retry_after));
    header_value(last, "RateLimit", out->ratelimit, sizeof(out->ratelimit));
    {
        const char *body = strstr(last, "\r\n\r\n");
        snprintf(out->body, sizeof(out->body), "%s", body != NULL ? body + 4 : "");
    }
}

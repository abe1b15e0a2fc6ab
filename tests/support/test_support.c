/*
 * Test support: temp dirs, child processes with captured output (poll on two
 * pipes, so a chatty child never blocks), and directory scans for the
 * "no token on disk" and "nothing readable by others" properties.
 */
#define _DEFAULT_SOURCE
#include "test_support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void
test_tmpdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/tally-test-XXXXXX");
    if (mkdtemp(buf) == NULL) {
        perror("mkdtemp");
        abort();
    }
}

void
test_rmtree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[4096];

    if (d == NULL) {
        unlink(path);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode))
            test_rmtree(sub);
        else
            unlink(sub);
    }
    closedir(d);
    rmdir(path);
}

void
test_bin(const char *name, char *buf, size_t len)
{
    const char *dir = getenv("TALLY_BIN");

    if (dir == NULL || *dir == '\0')
        dir = TALLY_BIN_DIR "/cli";
    snprintf(buf, len, "%s/%s", dir, name);
}

static void
drain(int fd, char *buf, size_t *used, bool *open_)
{
    ssize_t n;
    char sink[4096];

    if (*used + 1 < TEST_OUT_MAX)
        n = read(fd, buf + *used, TEST_OUT_MAX - 1 - *used);
    else
        n = read(fd, sink, sizeof(sink));
    if (n > 0 && *used + 1 < TEST_OUT_MAX)
        *used += (size_t)n;
    else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
        *open_ = false;
}

int
test_run(char *const argv[], const char *input, struct test_out *o)
{
    int in[2], out[2], err[2];
    size_t used_out = 0, used_err = 0;
    bool open_out = true, open_err = true;
    int status = 0;
    pid_t pid;

    if (pipe(in) != 0 || pipe(out) != 0 || pipe(err) != 0)
        abort();
    pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        execv(argv[0], argv);
        perror(argv[0]);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    if (input != NULL && write(in[1], input, strlen(input)) < 0)
        perror("write stdin");
    close(in[1]);
    while (open_out || open_err) {
        struct pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (open_out && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            drain(out[0], o->out, &used_out, &open_out);
        if (open_err && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            drain(err[0], o->err, &used_err, &open_err);
        if (!open_out)
            p[0].fd = -1;
    }
    close(out[0]);
    close(err[0]);
    o->out[used_out] = '\0';
    o->err[used_err] = '\0';
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    o->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return o->code;
}

int
test_tally(const char *data, struct test_out *o, ...)
{
    char bin[4096];
    char *argv[64];
    int argc = 0;
    va_list ap;
    char *a;

    test_bin("tally", bin, sizeof(bin));
    argv[argc++] = bin;
    argv[argc++] = "--data";
    argv[argc++] = (char *)data;
    va_start(ap, o);
    while ((a = va_arg(ap, char *)) != NULL && argc < 63)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    return test_run(argv, NULL, o);
}

char *
test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

bool
test_dir_contains(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char sub[4096];
    bool found = false;

    if (d == NULL)
        return false;
    while (!found && (e = readdir(d)) != NULL) {
        struct stat sb;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        if (lstat(sub, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode)) {
            found = test_dir_contains(sub, needle);
        } else if (S_ISREG(sb.st_mode)) {
            size_t len = 0;
            char *buf = test_read_file(sub, &len);
            size_t nlen = strlen(needle);
            for (size_t i = 0; buf != NULL && i + nlen <= len && !found; i++)
                found = memcmp(buf + i, needle, nlen) == 0;
            free(buf);
        }
    }
    closedir(d);
    return found;
}

bool
test_dir_private(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    struct stat sb;
    char sub[4096];
    bool ok = true;

    if (d == NULL || stat(dir, &sb) != 0 || (sb.st_mode & 077) != 0) {
        if (d != NULL)
            closedir(d);
        return false;
    }
    while (ok && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        if (lstat(sub, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode))
            ok = test_dir_private(sub);
        else if (!S_ISSOCK(sb.st_mode))
            ok = (sb.st_mode & 077) == 0;
        if (!ok)
            fprintf(stderr, "not private: %s (mode %o)\n", sub, sb.st_mode & 0777);
    }
    closedir(d);
    return ok;
}

void
test_within_one_window(int64_t period_ms, int64_t need_ms)
{
    struct timespec ts;
    int64_t wall, left;

    clock_gettime(CLOCK_REALTIME, &ts);
    wall = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    left = period_ms - wall % period_ms;
    if (left >= need_ms)
        return;
    fprintf(stderr, "# %lld ms to the end of a %lld ms window: waiting past it\n", (long long)left,
            (long long)period_ms);
    left += 200;
    ts.tv_sec = (time_t)(left / 1000);
    ts.tv_nsec = (long)(left % 1000) * 1000000;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

uint64_t
test_seed(void)
{
    const char *env = getenv("TALLY_SEED");
    uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);

    fprintf(stderr, "seed: TALLY_SEED=%llu\n", (unsigned long long)seed);
    return seed;
}

uint64_t
test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int64_t
test_rand_range(uint64_t *state, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(test_rand(state) % (uint64_t)(hi - lo + 1));
}

int
test_free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port;

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    port = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
                   getsockname(fd, (struct sockaddr *)&sa, &len) == 0
               ? ntohs(sa.sin_port)
               : -1;
    close(fd);
    return port;
}

int64_t
test_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
test_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

unsigned long long
test_cluster_leader(const char *data)
{
    struct test_out o;
    unsigned long long self = 0, leader = 0;

    if (test_tally(data, &o, "cluster", "status", NULL) != 0 ||
        sscanf(o.out, "member %llu (this host)  leader %llu", &self, &leader) != 2)
        return 0;
    return leader;
}

bool
test_cluster_wait_leader(const char *data, unsigned long long want, int timeout_ms)
{
    int64_t until = test_now_ms() + timeout_ms;

    while (test_cluster_leader(data) != want) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        if (test_now_ms() > until)
            return false;
        nanosleep(&ts, NULL);
    }
    return true;
}

/*
 * The real tallyd as a child of the test: fork/exec with stderr to a log
 * file, readiness by connecting to its Unix socket, supervisors found through
 * /proc command lines.
 */
#define _DEFAULT_SOURCE
#include "test_daemon.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto_client.h"
#include "test_support.h"

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static bool
socket_answers(const char *path)
{
    int fd = -1;
    bool ok = proto_client_dial(path, &fd) == TALLY_OK;

    if (fd >= 0)
        close(fd);
    return ok;
}

/* The daemon's executable when not the built tallyd (test_daemon_use_bin). */
static const char *daemon_bin;

void
test_daemon_use_bin(const char *path)
{
    daemon_bin = path;
}

int
test_daemon_start(struct test_daemon *d, const char *data, ...)
{
    char bin[512];
    char *argv[40];
    int argc = 0;
    va_list ap;
    char *a;
    int i;

    memset(d, 0, sizeof(*d));
    snprintf(d->data, sizeof(d->data), "%s", data);
    snprintf(d->socket, sizeof(d->socket), "%s/tally.sock", data);
    snprintf(d->log, sizeof(d->log), "%s.tallyd.log", data);
    if (daemon_bin != NULL)
        snprintf(bin, sizeof(bin), "%s", daemon_bin);
    else
        test_bin("tallyd", bin, sizeof(bin));
    argv[argc++] = bin;
    argv[argc++] = "--data";
    argv[argc++] = d->data;
    argv[argc++] = "--socket";
    argv[argc++] = d->socket;
    argv[argc++] = "--http";
    argv[argc++] = "127.0.0.1:0";
    va_start(ap, data);
    while ((a = va_arg(ap, char *)) != NULL && argc < 38)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    d->pid = fork();
    if (d->pid < 0)
        return -1;
    if (d->pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    for (i = 0; i < 1000; i++) {
        int status;
        if (socket_answers(d->socket))
            return 0;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return -1;
        }
        sleep_ms(10);
    }
    return -1;
}

int
test_daemon_stop(struct test_daemon *d)
{
    int status = 0;

    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    while (waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
        ;
    d->pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void
test_daemon_kill9(struct test_daemon *d)
{
    int status = 0;

    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    while (waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
        ;
    d->pid = 0;
}

/* Reads /proc/PID/cmdline with NULs turned into spaces. */
static bool
cmdline(pid_t pid, char *buf, size_t len)
{
    char path[64];
    ssize_t n;
    ssize_t i;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return false;
    for (i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[n] = '\0';
    return true;
}

/* Pids of live (not zombie) processes whose command line holds `want_t` and
 * `--data DATA `. */
static int
pids_with(const char *data, const char *want_t, pid_t *pids, int max)
{
    char want_d[300];
    char line[4096];
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;

    snprintf(want_d, sizeof(want_d), "--data %s ", data);
    while (d != NULL && (e = readdir(d)) != NULL && n < max) {
        pid_t pid = (pid_t)atoi(e->d_name);
        char state[256];
        char path[64];
        FILE *f;
        if (pid <= 0 || !cmdline(pid, line, sizeof(line)))
            continue;
        if (strstr(line, want_t) == NULL || strstr(line, want_d) == NULL)
            continue;
        /* skip zombies: exited, waiting for their parent */
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (f != NULL && fgets(state, sizeof(state), f) != NULL) {
            const char *rp = strrchr(state, ')');
            if (rp != NULL && rp[2] == 'Z') {
                fclose(f);
                continue;
            }
        }
        if (f != NULL)
            fclose(f);
        pids[n++] = pid;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

int
test_supervisor_pids(const char *data, const char *tenant, pid_t *pids, int max)
{
    char want_t[128];

    snprintf(want_t, sizeof(want_t), "--supervise %s ", tenant);
    return pids_with(data, want_t, pids, max);
}

int
test_caller_authority_pids(const char *data, pid_t *pids, int max)
{
    return pids_with(data, "--callers ", pids, max);
}

bool
test_wait_supervisors(const char *data, const char *tenant, int want, int timeout_ms)
{
    pid_t pids[16];
    int waited;

    for (waited = 0; waited <= timeout_ms; waited += 10) {
        if (test_supervisor_pids(data, tenant, pids, 16) == want)
            return true;
        sleep_ms(10);
    }
    return false;
}

long long
test_proc_status(pid_t pid, const char *field)
{
    char path[64], line[256];
    size_t len = strlen(field);
    long long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, len) == 0 && line[len] == ':')
            v = strtoll(line + len + 1, NULL, 10);
    }
    fclose(f);
    return v;
}

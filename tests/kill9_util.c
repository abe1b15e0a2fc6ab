/*
 * Helpers of test_fail_kill9 (kill9_util.h): timed libtally askers that count
 * admissions per budget window, /proc probes for supervisors, their open
 * files and their flocks, and a check that tokens made during kills still
 * authenticate.
 */
#define _GNU_SOURCE /* readlink's and /proc's companions */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include "kill9_util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tally.h"
#include "test_daemon.h"

static int64_t
clock_ms(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
k9_mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

int64_t
k9_wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

static void
pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* TALLY_FAIL_TRACE=1: each call slower than a second, with its wall-clock end,
 * to match against tallyd's log. */
static void
trace(const struct k9_asker *a, const char *what, int64_t took)
{
    if (took > 1000 && getenv("TALLY_FAIL_TRACE") != NULL)
        fprintf(stderr, "# slow %s link %d %s: %lld ms, ended at %lld\n", what, a->link,
                a->endpoint, (long long)took, (long long)k9_wall_ms());
}

static void
raise_to(atomic_llong *max, int64_t v)
{
    long long seen = atomic_load(max);

    while (v > seen && !atomic_compare_exchange_weak(max, &seen, v))
        ;
}

/* An admission was decided between the request's send and its answer: it
 * counts in every window that interval touches (conservative for "<= N"). */
static void
count_windows(struct k9_asker *a, atomic_llong *win, int64_t sent_wall, int64_t got_wall)
{
    int64_t w0 = atomic_load(&a->win0);

    for (int64_t w = sent_wall / K9_WINDOW_MS; w <= got_wall / K9_WINDOW_MS; w++) {
        if (w - w0 < 0 || w - w0 >= K9_WINDOWS)
            continue; /* cannot happen within a run: noted by the caller's totals */
        atomic_fetch_add(&win[w - w0], 1);
    }
}

static void
answered(struct k9_asker *a, const struct tally_result *r, int64_t sent_wall)
{
    int64_t got_wall = k9_wall_ms();

    if (r->status == TALLY_ADMITTED && !r->degraded) {
        atomic_fetch_add(&a->admitted, 1);
        atomic_store(&a->last_admit_ms, k9_mono_ms());
        count_windows(a, a->win_admitted, sent_wall, got_wall);
    } else if (r->status == TALLY_ADMITTED) {
        atomic_fetch_add(&a->degraded, 1);
        count_windows(a, a->win_degraded, sent_wall, got_wall);
    } else if (r->status == TALLY_REFUSED) {
        atomic_fetch_add(&a->refused, 1);
        if (strcmp(r->scope, "plan") == 0)
            atomic_fetch_add(&a->refused_plan, 1);
        else if (strcmp(r->scope, "link") == 0)
            atomic_fetch_add(&a->refused_link, 1);
    } else if (r->status == TALLY_UNAVAILABLE) {
        atomic_fetch_add(&a->unavailable, 1);
    } else {
        atomic_fetch_add(&a->other, 1);
    }
}

static void *
asker_main(void *arg)
{
    struct k9_asker *a = arg;
    tally_client *c = NULL;

    while (!atomic_load(&a->stop)) {
        struct tally_result r;
        int64_t t0 = k9_mono_ms(), sent_wall = k9_wall_ms(), took;
        bool timed = t0 >= atomic_load(a->timed_from);
        int rc;

        if (c == NULL) {
            rc = tally_client_open(a->socket, a->timeout_ms, &c);
            took = k9_mono_ms() - t0;
            trace(a, rc == TALLY_OK ? "open" : "failed open", took);
            if (timed)
                raise_to(&a->max_ms, took);
            if (rc != TALLY_OK) {
                c = NULL;
                atomic_fetch_add(&a->errors, 1);
                raise_to(&a->max_error_ms, took);
                pause_ms(20); /* tallyd is down: it is being restarted */
                continue;
            }
        }
        t0 = k9_mono_ms();
        timed = t0 >= atomic_load(a->timed_from);
        rc = tally_check(c, a->token, a->endpoint, 0, &r);
        took = k9_mono_ms() - t0;
        trace(a, rc == TALLY_OK ? "check" : "failed check", took);
        if (timed)
            raise_to(&a->max_ms, took);
        if (rc != TALLY_OK) {
            atomic_fetch_add(&a->errors, 1);
            raise_to(&a->max_error_ms, took);
            tally_client_close(c);
            c = NULL;
        } else {
            answered(a, &r, sent_wall);
        }
        if (atomic_load(&a->pause_ms) > 0)
            pause_ms(atomic_load(&a->pause_ms));
    }
    tally_client_close(c);
    return NULL;
}

void
k9_asker_start(struct k9_asker *a, const char *socket, const char *token, const char *endpoint,
               int link, int pause, int timeout_ms, atomic_llong *timed_from)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->socket, sizeof(a->socket), "%s", socket);
    snprintf(a->token, sizeof(a->token), "%s", token);
    snprintf(a->endpoint, sizeof(a->endpoint), "%s", endpoint);
    a->link = link;
    atomic_init(&a->pause_ms, pause);
    a->timeout_ms = timeout_ms;
    a->timed_from = timed_from;
    atomic_init(&a->win0, k9_wall_ms() / K9_WINDOW_MS);
    assert_int_equal(pthread_create(&a->th, NULL, asker_main, a), 0);
    a->running = true;
}

void
k9_asker_stop(struct k9_asker *a)
{
    if (!a->running)
        return;
    atomic_store(&a->stop, true);
    pthread_join(a->th, NULL);
    a->running = false;
}

pid_t
k9_ppid(pid_t pid)
{
    char path[64], buf[512];
    const char *rp;
    FILE *f;
    int ppid = 0;
    char state = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    if (fgets(buf, sizeof(buf), f) != NULL && (rp = strrchr(buf, ')')) != NULL &&
        sscanf(rp + 1, " %c %d", &state, &ppid) != 2)
        ppid = 0;
    fclose(f);
    return (pid_t)ppid;
}

bool
k9_alive(pid_t pid)
{
    char path[64], buf[512];
    const char *rp;
    bool alive = false;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return false;
    if (fgets(buf, sizeof(buf), f) != NULL && (rp = strrchr(buf, ')')) != NULL)
        alive = rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
    fclose(f);
    return alive;
}

bool
k9_socket_refuses(const char *path)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0), rc, e;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    e = errno;
    close(fd);
    return rc != 0 && e == ECONNREFUSED;
}

long long
k9_made_ns(const char *path)
{
    struct stat sb;

    if (stat(path, &sb) != 0)
        return 0;
    return (long long)sb.st_ctim.tv_sec * 1000000000LL + sb.st_ctim.tv_nsec;
}

int
k9_kill_matching(const char *needle)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;

    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[64], line[4096];
        pid_t pid = (pid_t)atoi(e->d_name);
        FILE *f;
        size_t len;
        if (pid <= 0 || pid == getpid())
            continue;
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        len = fread(line, 1, sizeof(line) - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (line[i] == '\0')
                line[i] = ' ';
        line[len] = '\0';
        if (strstr(line, needle) != NULL && kill(pid, SIGKILL) == 0)
            n++;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

int
k9_count_fds(pid_t pid, const char *prefix)
{
    char dir[64], link[600], target[4096];
    struct dirent *e;
    int n = 0;
    DIR *d;

    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    d = opendir(dir);
    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL) {
        ssize_t len;
        if (e->d_name[0] == '.')
            continue;
        snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
        len = readlink(link, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        n += strncmp(target, prefix, strlen(prefix)) == 0;
    }
    closedir(d);
    return n;
}

bool
k9_has_open(pid_t pid, const char *suffix)
{
    char dir[64], link[600], target[4096];
    size_t sl = strlen(suffix);
    struct dirent *e;
    bool found = false;
    DIR *d;

    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    d = opendir(dir);
    if (d == NULL)
        return false;
    while (!found && (e = readdir(d)) != NULL) {
        ssize_t n;
        if (e->d_name[0] == '.')
            continue;
        snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
        n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        found = (size_t)n >= sl && strcmp(target + n - (ssize_t)sl, suffix) == 0;
    }
    closedir(d);
    return found;
}

/* One pass over /proc/locks. The file is made while it is read: when locks
 * come and go meanwhile, a line may be read twice, so lines are told apart by
 * their pid. */
static pid_t
flock_holder_once(const char *want)
{
    char line[512];
    pid_t holder = 0;
    FILE *f = fopen("/proc/locks", "r");

    if (f == NULL)
        return 0; /* (called from the watch thread too: no cmocka assert here) */
    while (fgets(line, sizeof(line), f) != NULL) {
        char kind[16], mode[16], access[16];
        int pid;
        if (strstr(line, want) == NULL || strstr(line, "->") != NULL)
            continue;
        if (sscanf(line, "%*d: %15s %15s %15s %d", kind, mode, access, &pid) != 4 ||
            strcmp(kind, "FLOCK") != 0)
            continue;
        holder = holder == 0 || holder == (pid_t)pid ? (pid_t)pid : -1;
    }
    fclose(f);
    return holder;
}

pid_t
k9_flock_holder(const char *path)
{
    struct stat sb;
    char want[64];
    pid_t holder = 0;

    if (stat(path, &sb) != 0)
        return 0;
    /* "1: FLOCK  ADVISORY  WRITE 1234 00:2f:5678 0 EOF": the device is the
     * superblock's, which an overlay mount may report differently: match the inode */
    snprintf(want, sizeof(want), ":%llu ", (unsigned long long)sb.st_ino);
    /* two holders must be seen in three passes running to be believed */
    for (int pass = 0; pass < 3 && (holder = flock_holder_once(want)) == -1; pass++)
        ;
    return holder;
}

/* Supervisors of the tenant that have its journal open right now. */
static int
authorities(const struct k9_watch *w, pid_t *who)
{
    pid_t pids[16];
    char suffix[128];
    int n = test_supervisor_pids(w->data, w->tenant, pids, 16), k = 0;

    snprintf(suffix, sizeof(suffix), "/tenants/%s/ledger.db", w->tenant);
    for (int i = 0; i < n; i++) {
        if (k9_has_open(pids[i], suffix)) {
            *who = pids[i];
            k++;
        }
    }
    return k;
}

static void *
watch_main(void *arg)
{
    struct k9_watch *w = arg;

    while (!atomic_load(&w->stop)) {
        pid_t who = 0, holder;
        int k = authorities(w, &who);
        /* A process exiting closes its files in fd order: the lock (opened
         * first) a moment before the journal. Look again before calling two
         * users of the journal, or a user without the lock, a fault. */
        if (k > 1 || (k == 1 && k9_flock_holder(w->lock) != who)) {
            pause_ms(5);
            k = authorities(w, &who);
            holder = k9_flock_holder(w->lock);
            if (k == 1 && holder != who) {
                atomic_fetch_add(&w->wrong_holder, 1);
                fprintf(stderr, "# journal open in pid %d, supervisor.lock held by %d\n", (int)who,
                        (int)holder);
            }
        }
        if (k > atomic_load(&w->max_authorities))
            atomic_store(&w->max_authorities, k);
        atomic_fetch_add(&w->samples, 1);
        pause_ms(10);
    }
    return NULL;
}

void
k9_watch_start(struct k9_watch *w, const char *data, const char *tenant)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->data, sizeof(w->data), "%s", data);
    snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
    snprintf(w->lock, sizeof(w->lock), "%s/tenants/%s/supervisor.lock", data, tenant);
    assert_int_equal(pthread_create(&w->th, NULL, watch_main, w), 0);
    w->running = true;
}

void
k9_watch_stop(struct k9_watch *w)
{
    if (!w->running)
        return;
    atomic_store(&w->stop, true);
    pthread_join(w->th, NULL);
    w->running = false;
}

void
k9_check_tokens(const char *socket, const char *file, int timeout_ms)
{
    char line[128];
    int n = 0, unknown = 0;
    FILE *f = fopen(file, "r");
    tally_client *c = NULL;

    assert_non_null(f);
    assert_int_equal(tally_client_open(socket, timeout_ms, &c), TALLY_OK);
    while (fgets(line, sizeof(line), f) != NULL) {
        struct tally_result r;
        line[strcspn(line, "\n")] = '\0';
        if (tally_check(c, line, "closed", 0, &r) != TALLY_OK || r.status == TALLY_UNAUTHORIZED) {
            fprintf(stderr, "# token %d of the link-create burst: unknown\n", n);
            unknown++;
        }
        n++;
    }
    fclose(f);
    tally_client_close(c);
    printf("# %d links created during the kills, %d unknown after the restarts\n", n, unknown);
    assert_true(n > 0);
    assert_int_equal(unknown, 0);
}

int
k9_killed_by_signal(const char *log, const pid_t *killed, int n)
{
    int by_signal = 0;

    assert_non_null(log);
    for (int i = 0; i < n; i++) {
        char needle[64];
        const char *at, *why;

        snprintf(needle, sizeof(needle), "\"pid\":%d,\"reason\":\"", (int)killed[i]);
        at = strstr(log, needle);
        if (at == NULL) {
            fail_msg("killed supervisor %d has no supervisor_exit line", (int)killed[i]);
            break;
        }
        why = at + strlen(needle);
        if (strncmp(why, "signal\"", 7) == 0)
            by_signal++;
        else
            printf("# supervisor %d had exited on its own before the kill: %.24s\n", (int)killed[i],
                   why);
    }
    assert_true(by_signal >= n - 1);
    return by_signal;
}

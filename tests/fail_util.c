/*
 * Helpers of the failure suites (fail_util.h): a timed steady load through
 * libtally on a thread, tmpfs mounts, a disk filler, integrity checks of the
 * SQLite files and /proc readings.
 */
#define _GNU_SOURCE /* nftw's FTW_PHYS */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include "fail_util.h"
#include "test_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

#include "tally.h"

#define CLIENT_TIMEOUT_MS 20000

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void
note(struct fail_load *l, int idx, int64_t ms)
{
    long long seen = atomic_load(&l->max_ms);

    atomic_fetch_add(&l->n[idx], 1);
    while (ms > seen && !atomic_compare_exchange_weak(&l->max_ms, &seen, ms))
        ;
    if (ms > 1000 && getenv("TALLY_FAIL_TRACE") != NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        fprintf(stderr, "# slow answer %s: %lld ms, answered at %lld.%03ld\n", l->endpoint,
                (long long)ms, (long long)ts.tv_sec, ts.tv_nsec / 1000000);
    }
}

static void *
load_main(void *arg)
{
    struct fail_load *l = arg;
    tally_client *c = NULL;

    while (!atomic_load(&l->stop)) {
        struct tally_result r;
        int64_t t0;
        int rc;

        if (c == NULL && tally_client_open(l->socket, CLIENT_TIMEOUT_MS, &c) != TALLY_OK) {
            c = NULL;
            atomic_fetch_add(&l->n[5], 1);
            pause_ms(50);
            continue;
        }
        t0 = mono_ms();
        rc = tally_check(c, l->token, l->endpoint, 0, &r);
        if (rc != TALLY_OK) {
            note(l, 5, mono_ms() - t0);
            tally_client_close(c);
            c = NULL;
        } else if (r.status == TALLY_ADMITTED) {
            note(l, r.degraded ? 1 : 0, mono_ms() - t0);
        } else if (r.status == TALLY_REFUSED) {
            note(l, 2, mono_ms() - t0);
        } else if (r.status == TALLY_UNAVAILABLE) {
            note(l, 3, mono_ms() - t0);
        } else {
            note(l, 4, mono_ms() - t0);
        }
        if (l->pause_ms > 0)
            pause_ms(l->pause_ms);
    }
    tally_client_close(c);
    return NULL;
}

void
fail_load_start(struct fail_load *l, const char *socket, const char *token, const char *endpoint,
                int pause)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->socket, sizeof(l->socket), "%s", socket);
    snprintf(l->token, sizeof(l->token), "%s", token);
    snprintf(l->endpoint, sizeof(l->endpoint), "%s", endpoint);
    l->pause_ms = pause;
    atomic_init(&l->stop, false);
    for (int i = 0; i < 6; i++)
        atomic_init(&l->n[i], 0);
    atomic_init(&l->max_ms, 0);
    assert_int_equal(pthread_create(&l->th, NULL, load_main, l), 0);
    l->running = true;
}

struct fail_counts
fail_load_take(struct fail_load *l)
{
    struct fail_counts c;

    c.admitted = atomic_exchange(&l->n[0], 0);
    c.degraded = atomic_exchange(&l->n[1], 0);
    c.refused = atomic_exchange(&l->n[2], 0);
    c.unavailable = atomic_exchange(&l->n[3], 0);
    c.other = atomic_exchange(&l->n[4], 0);
    c.errors = atomic_exchange(&l->n[5], 0);
    c.max_ms = atomic_exchange(&l->max_ms, 0);
    return c;
}

void
fail_load_stop(struct fail_load *l)
{
    if (!l->running)
        return;
    atomic_store(&l->stop, true);
    pthread_join(l->th, NULL);
    l->running = false;
}

void
fail_tmpfs_mount(const char *dir, const char *size)
{
    char opts[64];

    snprintf(opts, sizeof(opts), "size=%s,mode=0700", size);
    if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        fail_msg("cannot mount a tmpfs on %s: %s (the failure suites need root and "
                 "mount -t tmpfs)",
                 dir, strerror(errno));
}

void
fail_tmpfs_umount(const char *dir)
{
    if (umount2(dir, 0) != 0 && errno == EBUSY)
        (void)umount2(dir, MNT_DETACH);
}

int64_t
fail_fill(const char *path)
{
    static char block[64 * 1024];
    int64_t total = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    assert_true(fd >= 0);
    memset(block, 0x5a, sizeof(block));
    for (;;) {
        size_t chunk = sizeof(block);
        ssize_t w = write(fd, block, chunk);
        /* the last pages: smaller writes take what a big one could not */
        while (w < 0 && errno == ENOSPC && chunk > 512) {
            chunk /= 2;
            w = write(fd, block, chunk);
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            assert_int_equal(errno, ENOSPC);
            break;
        }
        total += w;
    }
    close(fd);
    return total;
}

static int checked;

static int
check_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    size_t n = strlen(path);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    const char *answer;

    (void)st;
    (void)ftw;
    if (flag != FTW_F || n < 3 || strcmp(path + n - 3, ".db") != 0)
        return 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW)
        fail_msg("%s: cannot run integrity_check: %s", path, sqlite3_errmsg(db));
    answer = (const char *)sqlite3_column_text(q, 0);
    if (answer == NULL || strcmp(answer, "ok") != 0)
        fail_msg("%s: integrity_check says %s", path, answer != NULL ? answer : "nothing");
    sqlite3_finalize(q);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    checked++;
    return 0;
}

int
fail_integrity_check(const char *dir)
{
    checked = 0;
    assert_int_equal(nftw(dir, check_one, 16, FTW_PHYS), 0);
    return checked;
}

int64_t
fail_rss_kib(pid_t pid)
{
    return test_proc_status(pid, "VmRSS");
}

static int files;

static int
count_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)st;
    (void)ftw;
    if (flag == FTW_F)
        files++;
    return 0;
}

int
fail_count_files(const char *dir)
{
    files = 0;
    if (access(dir, F_OK) != 0)
        return 0;
    assert_int_equal(nftw(dir, count_one, 16, FTW_PHYS), 0);
    return files;
}

void
fail_keep_log(const char *log)
{
    const char *to = getenv("TALLY_KEEP_LOG");
    char cmd[1024];

    if (to == NULL || log[0] == '\0')
        return;
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", log, to);
    if (system(cmd) != 0)
        fprintf(stderr, "could not copy %s to %s\n", log, to);
}

void
fail_counts_add(struct fail_counts *sum, const struct fail_counts *c)
{
    sum->admitted += c->admitted;
    sum->degraded += c->degraded;
    sum->refused += c->refused;
    sum->unavailable += c->unavailable;
    sum->other += c->other;
    sum->errors += c->errors;
    if (c->max_ms > sum->max_ms)
        sum->max_ms = c->max_ms;
}

void
fail_counts_print(const char *what, const struct fail_counts *c)
{
    printf("# %-16s admitted %lld degraded %lld refused %lld unavailable %lld other %lld "
           "errors %lld max %lld ms\n",
           what, (long long)c->admitted, (long long)c->degraded, (long long)c->refused,
           (long long)c->unavailable, (long long)c->other, (long long)c->errors,
           (long long)c->max_ms);
}

void
fail_counts_clean(const char *what, const struct fail_counts *c, int64_t bound_ms)
{
    if (c->errors != 0 || c->other != 0 || c->max_ms > bound_ms) {
        fail_counts_print(what, c);
        fail_msg("%s: %lld errors, %lld odd answers, slowest %lld ms (bound %lld ms)", what,
                 (long long)c->errors, (long long)c->other, (long long)c->max_ms,
                 (long long)bound_ms);
    }
}

void
fail_two_tenants(const struct serve_env *s, int degraded_n, char *token_a, size_t cap_a,
                 char *token_b, size_t cap_b)
{
    char degraded[32];

    snprintf(degraded, sizeof(degraded), "%d/1h", degraded_n);
    serve_tally_ok(s, NULL, 0, "plan", "set", "pro", "--limit", "1000000/365d", NULL);
    serve_tally_ok(s, NULL, 0, "endpoint", "set", "open", "--limit", "1000000/365d",
                   "--on-unavailable", "open", "--degraded-limit", degraded, NULL);
    serve_tally_ok(s, NULL, 0, "endpoint", "set", "closed", "--limit", "1000000/365d",
                   "--on-unavailable", "closed", NULL);
    serve_tally_ok(s, NULL, 0, "tenant", "add", "a", "--plan", "pro", NULL);
    serve_tally_ok(s, NULL, 0, "tenant", "add", "b", "--plan", "pro", NULL);
    serve_tally_ok(s, token_a, cap_a, "link", "create", "a", NULL);
    serve_tally_ok(s, token_b, cap_b, "link", "create", "b", NULL);
}

int
fail_caps_setup(void **state)
{
    struct fail_caps_env *e = calloc(1, sizeof(*e));
    char name[16];

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "p", "--limit", "10/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "api", "--limit", "1000/365d", NULL);
    for (int i = 0; i < FAIL_CAPS_TENANTS; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        serve_tally_ok(&e->s, NULL, 0, "tenant", "add", name, "--plan", "p", NULL);
        serve_tally_ok(&e->s, e->tokens[i], sizeof(e->tokens[i]), "link", "create", name, NULL);
    }
    return 0;
}

int
fail_caps_teardown(void **state)
{
    struct fail_caps_env *e = *state;

    fail_keep_log(e->s.d.log);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

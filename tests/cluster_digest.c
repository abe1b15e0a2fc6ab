/*
 * The members' copies compared (cluster_digest.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_digest.h"
#include "test_support.h"

#define TENANTS_MAX 64

static char last_error[512];

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int
by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One copy: its position and its records, read in one transaction. 0 with *rows == 0 and
 * *applied == 0 for a copy that holds nothing; -1 on an error (why: into err). */
static int
copy_digest(const char *path, long long *applied, long long *rows, uint64_t *hash, char *err,
            size_t errcap)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc;

    *applied = *rows = 0;
    *hash = 14695981039346656037ull;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_busy_timeout(db, 2000);
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    /* cluster_applied is created when tallyd first writes the copy: none yet, nothing held. */
    rc = sqlite3_prepare_v2(db, "SELECT n FROM cluster_applied WHERE id = 1", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            *applied = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        st = NULL;
    }
    if (sqlite3_prepare_v2(db, "SELECT rec FROM journal ORDER BY seq", -1, &st, NULL) != SQLITE_OK)
        goto fail;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint32_t len = (uint32_t)sqlite3_column_bytes(st, 0);
        const void *rec = sqlite3_column_blob(st, 0);

        *hash = fnv(*hash, &len, sizeof(len));
        if (len > 0)
            *hash = fnv(*hash, rec, len);
        (*rows)++;
    }
    if (rc != SQLITE_DONE)
        goto fail;
    sqlite3_finalize(st);
    (void)sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(db);
    return 0;
fail:
    snprintf(err, errcap, "%s: %s", path, db != NULL ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return -1;
}

int
cluster_digest(const char *data, char *out, size_t cap)
{
    char dir[512], path[768];
    char *names[TENANTS_MAX];
    int n = 0, rc = 0;
    size_t used = 0;
    struct dirent *e;
    DIR *d;

    out[0] = '\0';
    snprintf(dir, sizeof(dir), "%s/tenants", data);
    d = opendir(dir);
    if (d == NULL)
        return 0; /* no tenant has anything yet */
    /* One stream per call: glibc's readdir is safe on distinct streams (readdir_r is
     * deprecated). */
    /* cppcheck-suppress readdirCalled */
    while ((e = readdir(d)) != NULL && n < TENANTS_MAX) {
        if (e->d_name[0] == '.')
            continue;
        names[n] = strdup(e->d_name);
        if (names[n] != NULL)
            n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), by_name);
    for (int i = 0; i < n; i++) {
        long long applied, rows;
        uint64_t hash;
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s/ledger.db", dir, names[i]);
        f = fopen(path, "rb");
        if (f == NULL)
            continue; /* no copy: nothing held, as an empty one */
        fclose(f);
        if (rc == 0 && copy_digest(path, &applied, &rows, &hash, out, cap) != 0)
            rc = -1;
        else if (rc == 0 && (applied != 0 || rows != 0) && used < cap)
            used += (size_t)snprintf(out + used, cap - used,
                                     "%s applied %lld records %lld hash %016llx\n", names[i],
                                     applied, rows, (unsigned long long)hash);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    return rc;
}

static void
sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

long
cluster_digests_agree(const char *const *data, int n, long timeout_ms)
{
    static char first[8192], other[8192];
    int64_t t0 = test_now_ms();
    int differs = 0;

    for (;;) {
        bool same = cluster_digest(data[0], first, sizeof(first)) == 0 && first[0] != '\0';

        differs = 0;
        for (int i = 1; i < n && same; i++) {
            same = cluster_digest(data[i], other, sizeof(other)) == 0 && strcmp(first, other) == 0;
            if (!same)
                differs = i;
        }
        if (same)
            return (long)(test_now_ms() - t0);
        if (test_now_ms() - t0 >= timeout_ms)
            break;
        sleep_ms(50);
    }
    print_message("ledger copies of %s:\n%s", data[0], first);
    if (differs > 0)
        print_message("differ from those of %s:\n%s", data[differs], other);
    return -1;
}

int
cluster_usage(const char *data, const char *tenant, char *out, size_t cap)
{
    struct test_out *o = malloc(sizeof(*o));
    int rc = -1;

    out[0] = '\0';
    if (o != NULL && (rc = test_tally(data, o, "usage", tenant, NULL)) == 0)
        snprintf(out, cap, "%s", o->out);
    else if (o != NULL)
        snprintf(last_error, sizeof(last_error), "tally usage %.64s: exit %d: %.400s", tenant,
                 o->code, o->err);
    free(o);
    return rc;
}

const char *
cluster_last_error(void)
{
    return last_error;
}

long long
cluster_usage_sum(const char *usage, const char *scope, const char *endpoint)
{
    const char *p = usage;
    long long sum = -1;

    while (*p != '\0') {
        char tenant[64], sc[16], ep[64], link[64], limit[32], from[40], to[40];
        long long admitted;

        if (sscanf(p, "%63s %15s %63s %63s %31s %39s %39s %lld", tenant, sc, ep, link, limit, from,
                   to, &admitted) == 8 &&
            strcmp(sc, scope) == 0 && (endpoint == NULL || strcmp(ep, endpoint) == 0))
            sum = (sum < 0 ? 0 : sum) + admitted;
        p += strcspn(p, "\n");
        p += *p == '\n';
    }
    return sum;
}

void
cluster_export(const char *data, char *out, size_t cap)
{
    struct test_out *o = malloc(sizeof(*o));

    out[0] = '\0';
    if (o != NULL && test_tally(data, o, "export", NULL) == 0)
        snprintf(out, cap, "%s", o->out);
    free(o);
}

bool
cluster_has_snapshot(const char *data)
{
    char dir[512];
    struct dirent *e;
    bool found = false;
    DIR *d;

    snprintf(dir, sizeof(dir), "%s/cluster/raft", data);
    d = opendir(dir);
    /* cppcheck-suppress readdirCalled */
    while (d != NULL && !found && (e = readdir(d)) != NULL)
        found = strncmp(e->d_name, "snapshot-", 9) == 0;
    if (d != NULL)
        closedir(d);
    return found;
}

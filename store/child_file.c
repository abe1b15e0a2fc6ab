/*
 * A child counter's own file: the incarnation counter (bumped at every start, so a restarted
 * child is never mistaken for its earlier run) and the lease rows keyed by lease id, written in
 * batches of upserts and deletes, one transaction each (on the thread pool: the caller's
 * business). The rows are bytes to this file; their encoding belongs to the child. What this
 * file owns is the format version (user_version, see store_child.h) and the one-transaction
 * upgrade of a format-1 file, whose rows are re-encoded by the child's upgrade function.
 */
#include "store_child.h"
#include "store_int.h"

#include <sqlite3.h>
#include <stdbool.h>

#define CHILD_CACHE_PAGES "4" /* pages in SQLite's cache per open child file */

static int child_upgrade(store_db *db, int version, void *ctx);

static const char *const child_migrations[] = {
    /* 1: raw struct rows */
    "CREATE TABLE meta(k TEXT PRIMARY KEY, v INTEGER NOT NULL) STRICT;"
    "CREATE TABLE lease(id INTEGER PRIMARY KEY, rec BLOB NOT NULL) STRICT;",
    /* 2: encoded rows, rewritten by child_upgrade */
    "CREATE TABLE lease_next(id INTEGER PRIMARY KEY, rec BLOB NOT NULL) STRICT",
};
enum { C_META_GET, C_META_PUT, C_LEASE_PUT, C_LEASE_DEL, C_LEASE_ALL, C__COUNT };
static const char *const child_statements[C__COUNT] = {
    [C_META_GET] = "SELECT v FROM meta WHERE k = ?1",
    [C_META_PUT] = "INSERT OR REPLACE INTO meta(k, v) VALUES(?1, ?2)",
    [C_LEASE_PUT] = "INSERT OR REPLACE INTO lease(id, rec) VALUES(?1, ?2)",
    [C_LEASE_DEL] = "DELETE FROM lease WHERE id = ?1",
    [C_LEASE_ALL] = "SELECT id, rec FROM lease ORDER BY id",
};
static const struct store_schema child_schema = {"child", child_migrations, STORE_CHILD_FORMAT,
                                                 child_statements, C__COUNT};

static int
child_upgrade(store_db *db, int version, void *ctx)
{
    return version == 2 ? store__rows_upgrade(db, "lease", 1, ctx, true) : TALLY_OK;
}

int
store_child_pool_fill(unsigned want, unsigned *made)
{
    return store__pool_fill(&child_schema, child_upgrade, want, made);
}

/* A store_open_fn: a pool file is at the newest version, no upgrade runs. */
static int
open_pooled(const char *path, unsigned flags, store_db **out)
{
    return store_child_open(path, flags, NULL, out);
}

int
store_child_pool_open(unsigned flags, unsigned want, unsigned *made)
{
    return store__pool_open_fill(&child_schema, child_upgrade, flags, open_pooled, want, made);
}

int
store_child_open(const char *path, unsigned flags, const struct store_upgrade *up, store_db **out)
{
    /* The schema's upgrade takes a mutable context; the upgrade never writes through it. */
    int rc = store_db_open_ctx(path, &child_schema, flags | STORE_OPEN_CREATE, child_upgrade,
                               (void *)up, out);

    /* A child file is a few pages, written on the thread pool, and tallyd holds a thousand of
     * them open: each keeps at most CHILD_CACHE_PAGES in SQLite's cache (26 kB each were seen
     * with the default), and reads any other from the OS's page cache. */
    if (rc == TALLY_OK) /* failing, it only leaves the default, a larger cache */
        (void)sqlite3_exec(store_db_handle(*out), "PRAGMA cache_size=" CHILD_CACHE_PAGES, NULL,
                           NULL, NULL);
    return rc;
}

/* Reads meta `key` into *v (0 when absent); *found says whether it was there. */
static int
meta_get(store_db *db, const char *key, int64_t *v, bool *found)
{
    sqlite3_stmt *st = store_db_stmt(db, C_META_GET);
    int rc;

    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    *found = rc == SQLITE_ROW;
    *v = *found ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TALLY_OK : store_db_rc(db, rc);
}

static int
meta_put(store_db *db, const char *key, int64_t v)
{
    sqlite3_stmt *st = store_db_stmt(db, C_META_PUT);
    int rc;

    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v);
    rc = store_db_rc(db, sqlite3_step(st));
    sqlite3_reset(st);
    return rc;
}

int
store_child_incarnation_next(store_db *db, uint64_t *out, int64_t *limits, bool *limits_found)
{
    int64_t v = 0;
    bool found = false;
    int rc = store_db_begin(db);

    *out = 0;
    if (rc != TALLY_OK)
        return rc;
    rc = meta_get(db, "incarnation", &v, &found);
    if (rc == TALLY_OK)
        rc = meta_put(db, "incarnation", v + 1);
    if (rc == TALLY_OK && limits != NULL) {
        int64_t today = *limits;

        rc = meta_get(db, "limits", limits, limits_found);
        if (rc == TALLY_OK)
            rc = meta_put(db, "limits", today);
    }
    rc = store_db_end(db, rc);
    if (rc == TALLY_OK)
        *out = (uint64_t)(v + 1);
    return rc;
}

int
store_child_incarnation_peek(store_db *db, uint64_t *out)
{
    int64_t v = 0;
    bool found = false;
    int rc = meta_get(db, "incarnation", &v, &found);

    *out = rc == TALLY_OK && v > 0 ? (uint64_t)v : 0;
    return rc;
}

int
store_child_incarnation_set(store_db *db, uint64_t inc, int64_t limits)
{
    int rc;

    if (inc == 0 || inc > INT64_MAX)
        return TALLY_EINVAL;
    rc = store_db_begin(db);
    if (rc != TALLY_OK)
        return rc;
    rc = meta_put(db, "incarnation", (int64_t)inc);
    if (rc == TALLY_OK)
        rc = meta_put(db, "limits", limits);
    return store_db_end(db, rc);
}

int
store_child_meta_put(store_db *db, const char *key, int64_t v)
{
    int rc = store_db_begin(db);

    if (rc != TALLY_OK)
        return rc;
    return store_db_end(db, meta_put(db, key, v));
}

int
store_child_write(store_db *db, size_t n, store_child_write_fn write, void *ctx)
{
    uint8_t buf[STORE_RECORD_MAX];
    size_t i;
    int rc = store_db_begin(db);

    for (i = 0; i < n && rc == TALLY_OK; i++) {
        sqlite3_stmt *st;
        uint64_t id = 0;
        size_t len = 0;
        rc = write(ctx, i, &id, buf, sizeof(buf), &len);
        if (rc != TALLY_OK)
            break;
        if (NEVER(len > sizeof(buf))) {
            rc = TALLY_EINVAL;
            break;
        }
        if (len > 0) {
            st = store_db_stmt(db, C_LEASE_PUT);
            sqlite3_bind_int64(st, 1, (int64_t)id);
            sqlite3_bind_blob(st, 2, buf, (int)len, SQLITE_STATIC);
        } else {
            st = store_db_stmt(db, C_LEASE_DEL);
            sqlite3_bind_int64(st, 1, (int64_t)id);
        }
        rc = store_db_rc(db, sqlite3_step(st));
        sqlite3_reset(st);
    }
    return store_db_end(db, rc);
}

int
store_child_each(store_db *db, store_child_visit_fn visit, void *ctx)
{
    sqlite3_stmt *st = store_db_stmt(db, C_LEASE_ALL);
    int step = SQLITE_DONE;
    int rc = TALLY_OK;

    while (rc == TALLY_OK && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc = visit(ctx, (uint64_t)sqlite3_column_int64(st, 0), sqlite3_column_blob(st, 1),
                   (size_t)sqlite3_column_bytes(st, 1));
    if (rc == TALLY_OK && step != SQLITE_DONE)
        rc = store_db_rc(db, step);
    sqlite3_reset(st);
    return rc;
}

/*
 * The journal file of a tenant's supervisor: records appended in batches (one transaction per
 * loop turn, synchronous=FULL in strict mode so a grant is on disk before its reply is sent),
 * replaced wholesale by a snapshot (compaction), read back in order at start. The records are
 * bytes to this file; their encoding belongs to the ledger. What this file owns is the format
 * version (user_version, see store_journal.h) and the one-transaction upgrade of a format-1
 * file, whose rows are re-encoded by the ledger's upgrade function.
 */
#include "store_int.h"
#include "store_journal.h"

#include <sqlite3.h>
#include <stdio.h>

static int journal_upgrade(store_db *db, int version, void *ctx);

static const char *const journal_migrations[] = {
    /* 1: raw struct records */
    "CREATE TABLE journal(seq INTEGER PRIMARY KEY, rec BLOB NOT NULL) STRICT",
    /* 2: encoded records, rewritten by journal_upgrade */
    "CREATE TABLE journal_next(seq INTEGER PRIMARY KEY, rec BLOB NOT NULL) STRICT",
};
enum { J_INSERT, J_ALL, J_CLEAR, J__COUNT };
static const char *const journal_statements[J__COUNT] = {
    [J_INSERT] = "INSERT INTO journal(rec) VALUES(?1)",
    [J_ALL] = "SELECT rec FROM journal ORDER BY seq",
    [J_CLEAR] = "DELETE FROM journal",
};
static const struct store_schema journal_schema = {
    "ledger", journal_migrations, STORE_JOURNAL_FORMAT, journal_statements, J__COUNT};

int
store__rows_upgrade(store_db *db, const char *table, int from_format,
                    const struct store_upgrade *up, bool may_drop)
{
    sqlite3 *sql = store_db_handle(db);
    sqlite3_stmt *all = NULL, *put = NULL;
    uint8_t buf[STORE_RECORD_MAX];
    char text[160];
    int step = SQLITE_DONE;
    int rc;

    snprintf(text, sizeof(text), "SELECT rowid, rec FROM %s ORDER BY rowid", table);
    rc = store_db_rc(db, sqlite3_prepare_v2(sql, text, -1, &all, NULL));
    if (rc != TALLY_OK)
        goto out;
    snprintf(text, sizeof(text), "INSERT INTO %s_next(rowid, rec) VALUES(?1, ?2)", table);
    rc = store_db_rc(db, sqlite3_prepare_v2(sql, text, -1, &put, NULL));
    if (rc != TALLY_OK)
        goto out;
    while (rc == TALLY_OK && (step = sqlite3_step(all)) == SQLITE_ROW) {
        size_t len = 0;
        if (up == NULL || up->fn == NULL) {
            rc = TALLY_EINVAL; /* rows of an older format and no codec to read them */
            break;
        }
        rc = up->fn(up->ctx, from_format, sqlite3_column_blob(all, 1),
                    (size_t)sqlite3_column_bytes(all, 1), buf, sizeof(buf), &len);
        if (rc == TALLY_ENOTFOUND && may_drop) {
            rc = TALLY_OK;
            continue;
        }
        if (rc != TALLY_OK)
            break;
        if (NEVER(len == 0 || len > sizeof(buf))) {
            rc = TALLY_EINVAL;
            break;
        }
        sqlite3_bind_int64(put, 1, sqlite3_column_int64(all, 0));
        sqlite3_bind_blob(put, 2, buf, (int)len, SQLITE_STATIC);
        rc = store_db_rc(db, sqlite3_step(put));
        sqlite3_reset(put);
    }
    if (rc == TALLY_OK && step != SQLITE_DONE)
        rc = store_db_rc(db, step);
    /* Finalized before the DROP, which an open statement on the table would block. */
    sqlite3_finalize(all);
    all = NULL;
    if (rc != TALLY_OK)
        goto out;
    snprintf(text, sizeof(text), "DROP TABLE %s; ALTER TABLE %s_next RENAME TO %s", table, table,
             table);
    rc = store_db_exec(db, text);
out:
    sqlite3_finalize(put);
    sqlite3_finalize(all);
    return rc;
}

static int
journal_upgrade(store_db *db, int version, void *ctx)
{
    return version == 2 ? store__rows_upgrade(db, "journal", 1, ctx, false) : TALLY_OK;
}

int
store_journal_warm(void)
{
    return store__image_warm(&journal_schema, journal_upgrade);
}

int
store_journal_pool_fill(unsigned want, unsigned *made)
{
    return store__pool_fill(&journal_schema, journal_upgrade, want, made);
}

/* A store_open_fn: a pool file is at the newest version, no upgrade runs. */
static int
open_pooled(const char *path, unsigned flags, store_db **out)
{
    return store_journal_open(path, flags, NULL, out);
}

int
store_journal_pool_open(unsigned flags, unsigned want, unsigned *made)
{
    return store__pool_open_fill(&journal_schema, journal_upgrade, flags, open_pooled, want, made);
}

int
store_journal_open(const char *path, unsigned flags, const struct store_upgrade *up, store_db **out)
{
    /* The schema's upgrade takes a mutable context; the upgrade never writes through it. */
    return store_db_open_ctx(path, &journal_schema, flags | STORE_OPEN_CREATE, journal_upgrade,
                             (void *)up, out);
}

static int
insert_all(store_db *db, size_t n, store_record_encode_fn enc, void *ctx)
{
    uint8_t buf[STORE_RECORD_MAX];
    size_t i;
    int rc = TALLY_OK;

    for (i = 0; i < n && rc == TALLY_OK; i++) {
        sqlite3_stmt *st;
        size_t len = 0;
        rc = enc(ctx, i, buf, sizeof(buf), &len);
        if (rc != TALLY_OK)
            break;
        if (NEVER(len == 0 || len > sizeof(buf))) {
            rc = TALLY_EINVAL;
            break;
        }
        st = store_db_stmt(db, J_INSERT);
        sqlite3_bind_blob(st, 1, buf, (int)len, SQLITE_STATIC);
        rc = store_db_rc(db, sqlite3_step(st));
        sqlite3_reset(st);
    }
    return rc;
}

int
store_journal_append(store_db *db, size_t n, store_record_encode_fn enc, void *ctx)
{
    int rc = store_db_begin(db);

    if (rc == TALLY_OK)
        rc = insert_all(db, n, enc, ctx);
    return store_db_end(db, rc);
}

int
store_journal_replace(store_db *db, size_t n, store_record_encode_fn enc, void *ctx)
{
    sqlite3_stmt *st;
    int rc = store_db_begin(db);

    if (rc == TALLY_OK) {
        st = store_db_stmt(db, J_CLEAR);
        rc = store_db_rc(db, sqlite3_step(st));
        sqlite3_reset(st);
    }
    if (rc == TALLY_OK)
        rc = insert_all(db, n, enc, ctx);
    return store_db_end(db, rc);
}

int
store_journal_each(store_db *db, store_record_visit_fn visit, void *ctx)
{
    sqlite3_stmt *st = store_db_stmt(db, J_ALL);
    int step = SQLITE_DONE;
    int rc = TALLY_OK;

    while (rc == TALLY_OK && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc = visit(ctx, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
    if (rc == TALLY_OK && step != SQLITE_DONE)
        rc = store_db_rc(db, step);
    sqlite3_reset(st);
    return rc;
}

/*
 * A cluster member's copy of a tenant's journal (store_journal.h): the records the cluster's log
 * commits, written by tallyd into the tenant's ledger.db, in the `journal` table a supervisor
 * replays, exactly as store_journal_append writes them (one row per record, seq in append
 * order). Two more tables live beside it, created when tallyd first opens the file:
 *
 *   cluster_applied(id = 1, n)  the log position of the last record written into this file,
 *                               changed in the transaction that writes the record: a record
 *                               the log hands over again (a restart replays from the last
 *                               snapshot) finds its position at or below n and is skipped;
 *   journal_staging(seq, rec)   a replacement of the journal being assembled, chunk by chunk,
 *                               then put in the journal's place in one transaction.
 *
 * They are additions outside the file's format version (user_version 2 still): a journal
 * reader, the supervisor or an older binary, never looks at them. They are not named
 * journal_next, which the format-1 upgrade creates and renames.
 */
#include "store_int.h"
#include "store_journal.h"

#include <sqlite3.h>

static const char copy_tables[] =
    "CREATE TABLE IF NOT EXISTS cluster_applied("
    "id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL) STRICT;"
    "CREATE TABLE IF NOT EXISTS journal_staging(seq INTEGER PRIMARY KEY, rec BLOB NOT NULL) STRICT";

enum {
    C_APPLIED_GET,
    C_APPLIED_SET,
    C_JOURNAL_ADD,
    C_JOURNAL_CLEAR,
    C_STAGE_ADD,
    C_STAGE_CLEAR,
    C_STAGE_ALL,
    C_SWAP,
    C__COUNT
};
static const char *const copy_statements[C__COUNT] = {
    [C_APPLIED_GET] = "SELECT n FROM cluster_applied WHERE id = 1",
    [C_APPLIED_SET] = ("INSERT INTO cluster_applied(id, n) VALUES(1, ?1) "
                       "ON CONFLICT(id) DO UPDATE SET n = excluded.n"),
    [C_JOURNAL_ADD] = "INSERT INTO journal(rec) VALUES(?1)",
    [C_JOURNAL_CLEAR] = "DELETE FROM journal",
    [C_STAGE_ADD] = "INSERT INTO journal_staging(rec) VALUES(?1)",
    [C_STAGE_CLEAR] = "DELETE FROM journal_staging",
    [C_STAGE_ALL] = "SELECT rec FROM journal_staging ORDER BY seq",
    [C_SWAP] = "INSERT INTO journal(rec) SELECT rec FROM journal_staging ORDER BY seq",
};

/* The journal schema's statements are static to journal.c: these are the copy's own, prepared
 * at first use and finalized before the file closes (store_db_close wants none left). */
struct store_journal_copy {
    store_db *db;
    sqlite3_stmt *st[C__COUNT];
};

static sqlite3_stmt *
stmt(store_journal_copy *c, int idx)
{
    sqlite3_stmt *st = c->st[idx];

    if (st != NULL) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return st;
    }
    if (sqlite3_prepare_v3(store_db_handle(c->db), copy_statements[idx], -1,
                           SQLITE_PREPARE_PERSISTENT, &c->st[idx], NULL) != SQLITE_OK) {
        (void)store_db_rc(c->db, sqlite3_errcode(store_db_handle(c->db)));
        return NULL; /* sqlite3_step answers SQLITE_MISUSE on NULL, mapped to an error */
    }
    return c->st[idx];
}

/* Steps a statement without result rows once. */
static int
run(store_journal_copy *c, int idx)
{
    sqlite3_stmt *st = stmt(c, idx);
    int rc;

    if (st == NULL)
        return TALLY_ESTORE;
    rc = store_db_rc(c->db, sqlite3_step(st));
    sqlite3_reset(st);
    return rc;
}

int
store_journal_copy_open(const char *path, store_journal_copy **out)
{
    store_journal_copy *c = NULL;
    int rc = TALLY_ENOMEM;

    *out = NULL;
    c = tally_calloc(1, sizeof(*c));
    if (c == NULL)
        goto out;
    /* No upgrade: tallyd carries no ledger codec. A file it creates is of the newest format;
     * a format-1 file with records (tally 0.1.0, before clusters) is refused (TALLY_EINVAL).
     * Not private: the tenant's supervisor reads the file while tallyd writes it. */
    rc = store_journal_open(path, STORE_OPEN_PERSIST_WAL, NULL, &c->db);
    if (rc == TALLY_OK)
        rc = store_db_exec(c->db, copy_tables);
    if (rc != TALLY_OK)
        goto out;
    *out = c;
    c = NULL; /* ownership moved to the caller */
out:
    store_journal_copy_close(c); /* NULL-safe */
    return rc;
}

static void
copy_free(store_journal_copy *c, bool keep_wal)
{
    if (c == NULL)
        return;
    for (int i = 0; i < C__COUNT; i++)
        sqlite3_finalize(c->st[i]);
    if (keep_wal)
        store_db_close_keep_wal(c->db);
    else
        store_db_close(c->db);
    tally_free(c);
}

void
store_journal_copy_close(store_journal_copy *c)
{
    copy_free(c, false);
}

void
store_journal_copy_close_keep_wal(store_journal_copy *c)
{
    copy_free(c, true);
}

store_db *
store_journal_copy_db(store_journal_copy *c)
{
    return c->db;
}

int
store_journal_copy_applied(store_journal_copy *c, bool *known, uint64_t *n)
{
    sqlite3_stmt *st = stmt(c, C_APPLIED_GET);
    int step;
    int rc = TALLY_OK;

    *known = false;
    *n = 0;
    if (st == NULL)
        return TALLY_ESTORE;
    step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        int64_t v = sqlite3_column_int64(st, 0);
        *known = true;
        *n = v > 0 ? (uint64_t)v : 0;
    } else {
        rc = store_db_rc(c->db, step);
    }
    sqlite3_reset(st);
    return rc;
}

/* Inserts records 0..count-1 from enc with statement idx (a journal or staging insert). */
static int
insert_all(store_journal_copy *c, int idx, size_t count, store_record_encode_fn enc, void *ctx)
{
    uint8_t buf[STORE_RECORD_MAX];
    int rc = TALLY_OK;

    for (size_t i = 0; i < count && rc == TALLY_OK; i++) {
        sqlite3_stmt *st;
        size_t len = 0;

        rc = enc(ctx, i, buf, sizeof(buf), &len);
        if (rc != TALLY_OK)
            break;
        if (NEVER(len == 0 || len > sizeof(buf)))
            return TALLY_EINVAL;
        st = stmt(c, idx);
        if (st == NULL)
            return TALLY_ESTORE;
        sqlite3_bind_blob(st, 1, buf, (int)len, SQLITE_STATIC);
        rc = store_db_rc(c->db, sqlite3_step(st));
        sqlite3_reset(st);
    }
    return rc;
}

static int
mark(store_journal_copy *c, uint64_t n)
{
    sqlite3_stmt *st = stmt(c, C_APPLIED_SET);
    int rc;

    if (st == NULL)
        return TALLY_ESTORE;
    sqlite3_bind_int64(st, 1, (int64_t)n);
    rc = store_db_rc(c->db, sqlite3_step(st));
    sqlite3_reset(st);
    return rc;
}

enum copy_op { OP_APPEND, OP_STAGE_BEGIN, OP_STAGE, OP_STAGE_END };

static int
write_op(store_journal_copy *c, enum copy_op op, size_t count, store_record_encode_fn enc,
         void *ctx)
{
    int rc = TALLY_OK;

    switch (op) {
    case OP_APPEND:
        return insert_all(c, C_JOURNAL_ADD, count, enc, ctx);
    case OP_STAGE_BEGIN:
        return run(c, C_STAGE_CLEAR);
    case OP_STAGE:
        return insert_all(c, C_STAGE_ADD, count, enc, ctx);
    case OP_STAGE_END:
        rc = run(c, C_JOURNAL_CLEAR);
        if (rc == TALLY_OK)
            rc = run(c, C_SWAP);
        if (rc == TALLY_OK)
            rc = run(c, C_STAGE_CLEAR);
        return rc;
    }
    return TALLY_EINVAL;
}

/* One record of the log at position n, in one transaction with its mark; skipped (TALLY_OK,
 * nothing written) when the file holds position n already. */
static int
apply(store_journal_copy *c, uint64_t n, enum copy_op op, size_t count, store_record_encode_fn enc,
      void *ctx)
{
    bool known = false;
    uint64_t at = 0;
    int rc;

    if (NEVER(n > INT64_MAX))
        return TALLY_EOVERFLOW;
    rc = store_db_begin(c->db);
    if (rc != TALLY_OK)
        return rc;
    rc = store_journal_copy_applied(c, &known, &at); /* read under the writer's lock */
    if (rc == TALLY_OK && known && n <= at) {
        store_db_rollback(c->db);
        return TALLY_OK;
    }
    if (rc == TALLY_OK)
        rc = write_op(c, op, count, enc, ctx);
    if (rc == TALLY_OK)
        rc = mark(c, n);
    return store_db_end(c->db, rc);
}

int
store_journal_copy_append(store_journal_copy *c, uint64_t n, size_t count,
                          store_record_encode_fn enc, void *ctx)
{
    return apply(c, n, OP_APPEND, count, enc, ctx);
}

int
store_journal_copy_stage_begin(store_journal_copy *c, uint64_t n)
{
    return apply(c, n, OP_STAGE_BEGIN, 0, NULL, NULL);
}

int
store_journal_copy_stage(store_journal_copy *c, uint64_t n, size_t count,
                         store_record_encode_fn enc, void *ctx)
{
    return apply(c, n, OP_STAGE, count, enc, ctx);
}

int
store_journal_copy_stage_end(store_journal_copy *c, uint64_t n)
{
    return apply(c, n, OP_STAGE_END, 0, NULL, NULL);
}

int
store_journal_copy_reset(store_journal_copy *c, uint64_t n, size_t count,
                         store_record_encode_fn enc, void *ctx, size_t staged,
                         store_record_encode_fn enc_staged, void *ctx_staged)
{
    int rc;

    if (NEVER(n > INT64_MAX))
        return TALLY_EOVERFLOW;
    rc = store_db_begin(c->db);
    if (rc == TALLY_OK)
        rc = run(c, C_JOURNAL_CLEAR);
    if (rc == TALLY_OK)
        rc = run(c, C_STAGE_CLEAR);
    if (rc == TALLY_OK)
        rc = insert_all(c, C_JOURNAL_ADD, count, enc, ctx);
    if (rc == TALLY_OK)
        rc = insert_all(c, C_STAGE_ADD, staged, enc_staged, ctx_staged);
    if (rc == TALLY_OK)
        rc = mark(c, n);
    return store_db_end(c->db, rc);
}

int
store_journal_copy_each_staged(store_journal_copy *c, store_record_visit_fn visit, void *ctx)
{
    sqlite3_stmt *st = stmt(c, C_STAGE_ALL);
    int step = SQLITE_DONE;
    int rc = TALLY_OK;

    if (st == NULL)
        return TALLY_ESTORE;
    while (rc == TALLY_OK && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc = visit(ctx, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
    if (rc == TALLY_OK && step != SQLITE_DONE)
        rc = store_db_rc(c->db, step);
    sqlite3_reset(st);
    return rc;
}

/*
 * A caller authority's file, DATA/callers/S.db: one row per exact entry
 * (endpoint, keyed hash, the instant it is whole again, its state) and one per
 * sketch cell that was ever charged. Only keyed hashes are stored, never a
 * caller in clear. Entries whole again are deleted as the tables reclaim them, so
 * the file holds at most the live entries of the ceiling plus the sketch's fixed
 * cells. States are written field by field behind a format byte, never as a C
 * struct.
 */
#include "callers_int.h"

#include <sqlite3.h>
#include <string.h>

#include "proto_frame.h"

static const char *const callers_migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE caller("
    "  ep TEXT NOT NULL,"
    "  key BLOB NOT NULL,"
    "  expires_ms INTEGER NOT NULL,"
    "  rec BLOB NOT NULL,"
    "  PRIMARY KEY(ep, key)"
    ") STRICT, WITHOUT ROWID;"
    "CREATE INDEX caller_expires ON caller(expires_ms);"
    "CREATE TABLE sketch("
    "  ep TEXT NOT NULL,"
    "  cell INTEGER NOT NULL,"
    "  rec BLOB NOT NULL,"
    "  PRIMARY KEY(ep, cell)"
    ") STRICT, WITHOUT ROWID;",
};

enum callers_stmt { S_PUT, S_DEL, S_PURGE, S_CELL, S_EACH, S_CELLS, S_DROP, S_DROP_CELLS, S__N };

static const char *const callers_statements[S__N] = {
    [S_PUT] = "INSERT OR REPLACE INTO caller(ep, key, expires_ms, rec) VALUES(?1,?2,?3,?4)",
    [S_DEL] = "DELETE FROM caller WHERE ep=?1 AND key=?2",
    [S_PURGE] = "DELETE FROM caller WHERE expires_ms<=?1",
    [S_CELL] = "INSERT OR REPLACE INTO sketch(ep, cell, rec) VALUES(?1,?2,?3)",
    [S_EACH] = "SELECT ep, key, expires_ms, rec FROM caller",
    [S_CELLS] = "SELECT ep, cell, rec FROM sketch",
    [S_DROP] = "DELETE FROM caller WHERE ep=?1",
    [S_DROP_CELLS] = "DELETE FROM sketch WHERE ep=?1",
};

static const struct store_schema callers_schema = {
    .name = "callers",
    .migrations = callers_migrations,
    .n_migrations = 1,
    .statements = callers_statements,
    .n_statements = S__N,
};

int
callers_file_open(const char *path, bool strict, store_db **out)
{
    return store_db_open(
        path, &callers_schema,
        STORE_OPEN_CREATE | STORE_OPEN_PRIVATE | (strict ? STORE_OPEN_SYNC_FULL : 0), out);
}

size_t
callers_rec_encode(enum tenant_algorithm alg, const union tenant_callers_state *st,
                   uint8_t out[CALLERS_REC_MAX])
{
    struct proto_writer w;

    proto_writer_init(&w, out, CALLERS_REC_MAX);
    proto_put_u8(&w, CALLERS_REC_FORMAT);
    proto_put_u8(&w, (uint8_t)alg);
    for (unsigned i = 0; i < TENANT_MAX_WINDOWS; i++) {
        if (alg == TENANT_ALG_GCRA) {
            proto_put_i64(&w, st->gcra.period_ms[i]);
            proto_put_i64(&w, st->gcra.n[i]);
            proto_put_i64(&w, st->gcra.tat_ms[i]);
            proto_put_i64(&w, st->gcra.tat_frac[i]);
        } else {
            proto_put_i64(&w, st->window.period_ms[i]);
            proto_put_i64(&w, st->window.window_id[i]);
            proto_put_i64(&w, st->window.used[i]);
        }
    }
    proto_put_i64(&w, alg == TENANT_ALG_GCRA ? st->gcra.last_now_ms : st->window.last_now_ms);
    return w.bad ? 0 : w.at;
}

int
callers_rec_decode(const uint8_t *p, size_t len, enum tenant_algorithm *alg,
                   union tenant_callers_state *st)
{
    struct proto_cursor c;
    uint8_t a;

    memset(st, 0, sizeof(*st));
    proto_cursor_init(&c, p, len);
    if (proto_get_u8(&c) != CALLERS_REC_FORMAT)
        return TALLY_ECORRUPT;
    a = proto_get_u8(&c);
    if (a > 1)
        return TALLY_ECORRUPT;
    *alg = a == 1 ? TENANT_ALG_GCRA : TENANT_ALG_WINDOW;
    for (unsigned i = 0; i < TENANT_MAX_WINDOWS; i++) {
        if (a == 1) {
            st->gcra.period_ms[i] = proto_get_i64(&c);
            st->gcra.n[i] = proto_get_i64(&c);
            st->gcra.tat_ms[i] = proto_get_i64(&c);
            st->gcra.tat_frac[i] = proto_get_i64(&c);
        } else {
            st->window.period_ms[i] = proto_get_i64(&c);
            st->window.window_id[i] = proto_get_i64(&c);
            st->window.used[i] = proto_get_i64(&c);
        }
    }
    if (a == 1)
        st->gcra.last_now_ms = proto_get_i64(&c);
    else
        st->window.last_now_ms = proto_get_i64(&c);
    return proto_cursor_done(&c) ? TALLY_OK : TALLY_ECORRUPT;
}

static int
step_done(store_db *db, sqlite3_stmt *st)
{
    int rc = store_db_rc(db, sqlite3_step(st));

    sqlite3_reset(st);
    return rc;
}

int
callers_file_put(store_db *db, const char *ep, enum tenant_algorithm alg,
                 const struct tenant_callers_entry *e)
{
    sqlite3_stmt *st = store_db_stmt(db, S_PUT);
    uint8_t rec[CALLERS_REC_MAX];
    size_t n = callers_rec_encode(alg, &e->st, rec);

    if (n == 0)
        return TALLY_EINVAL;
    sqlite3_bind_text(st, 1, ep, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, e->key, TENANT_CALLER_KEY_BYTES, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, e->expires_ms);
    sqlite3_bind_blob(st, 4, rec, (int)n, SQLITE_TRANSIENT);
    return step_done(db, st);
}

int
callers_file_del(store_db *db, const char *ep, const unsigned char key[TENANT_CALLER_KEY_BYTES])
{
    sqlite3_stmt *st = store_db_stmt(db, S_DEL);

    sqlite3_bind_text(st, 1, ep, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, key, TENANT_CALLER_KEY_BYTES, SQLITE_STATIC);
    return step_done(db, st);
}

int
callers_file_put_cell(store_db *db, const char *ep, enum tenant_algorithm alg, uint32_t cell,
                      const union tenant_callers_state *s)
{
    sqlite3_stmt *st = store_db_stmt(db, S_CELL);
    uint8_t rec[CALLERS_REC_MAX];
    size_t n = callers_rec_encode(alg, s, rec);

    if (n == 0)
        return TALLY_EINVAL;
    sqlite3_bind_text(st, 1, ep, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, cell);
    sqlite3_bind_blob(st, 3, rec, (int)n, SQLITE_TRANSIENT);
    return step_done(db, st);
}

int
callers_file_purge(store_db *db, int64_t now_ms)
{
    sqlite3_stmt *st = store_db_stmt(db, S_PURGE);

    sqlite3_bind_int64(st, 1, now_ms);
    return step_done(db, st);
}

int
callers_file_drop(store_db *db, const char *ep)
{
    sqlite3_stmt *st = store_db_stmt(db, S_DROP);
    int rc;

    sqlite3_bind_text(st, 1, ep, -1, SQLITE_STATIC);
    rc = step_done(db, st);
    if (rc != TALLY_OK)
        return rc;
    st = store_db_stmt(db, S_DROP_CELLS);
    sqlite3_bind_text(st, 1, ep, -1, SQLITE_STATIC);
    return step_done(db, st);
}

static int
load_entries(store_db *db, callers_entry_fn fn, void *ctx)
{
    sqlite3_stmt *st = store_db_stmt(db, S_EACH);
    int step = SQLITE_DONE;
    int rc = TALLY_OK;

    while (rc == TALLY_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        struct tenant_callers_entry e;
        enum tenant_algorithm alg;
        const char *ep = (const char *)sqlite3_column_text(st, 0);
        memset(&e, 0, sizeof(e));
        if (ep == NULL || !tenant_name_valid(ep) ||
            sqlite3_column_bytes(st, 1) != TENANT_CALLER_KEY_BYTES) {
            rc = TALLY_ECORRUPT;
            break;
        }
        memcpy(e.key, sqlite3_column_blob(st, 1), TENANT_CALLER_KEY_BYTES);
        e.expires_ms = sqlite3_column_int64(st, 2);
        rc = callers_rec_decode(sqlite3_column_blob(st, 3), (size_t)sqlite3_column_bytes(st, 3),
                                &alg, &e.st);
        if (rc == TALLY_OK)
            rc = fn(ctx, ep, alg, &e);
    }
    if (rc == TALLY_OK && step != SQLITE_DONE)
        rc = store_db_rc(db, step);
    sqlite3_reset(st);
    return rc;
}

static int
load_cells(store_db *db, callers_cell_fn fn, void *ctx)
{
    sqlite3_stmt *st = store_db_stmt(db, S_CELLS);
    int step = SQLITE_DONE;
    int rc = TALLY_OK;

    while (rc == TALLY_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        union tenant_callers_state s;
        enum tenant_algorithm alg;
        const char *ep = (const char *)sqlite3_column_text(st, 0);
        int64_t cell = sqlite3_column_int64(st, 1);
        if (ep == NULL || !tenant_name_valid(ep) || cell < 0 ||
            cell >= TENANT_CALLERS_SKETCH_CELLS) {
            rc = TALLY_ECORRUPT;
            break;
        }
        rc = callers_rec_decode(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2),
                                &alg, &s);
        if (rc == TALLY_OK)
            rc = fn(ctx, ep, alg, (uint32_t)cell, &s);
    }
    if (rc == TALLY_OK && step != SQLITE_DONE)
        rc = store_db_rc(db, step);
    sqlite3_reset(st);
    return rc;
}

int
callers_file_load(store_db *db, callers_entry_fn on_entry, callers_cell_fn on_cell, void *ctx)
{
    int rc = load_entries(db, on_entry, ctx);

    return rc == TALLY_OK ? load_cells(db, on_cell, ctx) : rc;
}

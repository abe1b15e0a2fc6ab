/*
 * tally.db in a cluster (store_config.h): a change command's transaction is captured, not
 * committed, and every member applies the changes the log committed, in log order.
 *
 * Capture uses SQLite's session extension: a session attached to every table from the
 * transaction's BEGIN records each row changed (cascades included) with its old values,
 * and the COMMIT hands over its changeset and rolls back. Applying uses
 * sqlite3changeset_apply inside the caller's transaction, together with the record's
 * index in table cluster_applied: a file says which records it holds, so a record is never
 * applied twice (the log replays from its last snapshot at each start). The conflict
 * handler decides from the record and the file alone, so every member, holding the same
 * file, ends with the same file.
 *
 * A new member gets its first tally.db as a copy (sqlite3_serialize of one read
 * transaction, which reads the applied index too) and puts it in place atomically.
 */
#define SQLITE_ENABLE_SESSION
#define SQLITE_ENABLE_PREUPDATE_HOOK
#include "config_int.h"
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct store_capture {
    store_config_commit_fn fn;
    void *ctx;
    sqlite3_session *session; /* while a transaction records */
};

int
store_config_capture(store_db *db, store_config_commit_fn fn, void *ctx)
{
    if (db->capture == NULL && (db->capture = tally_calloc(1, sizeof(*db->capture))) == NULL)
        return TALLY_ENOMEM;
    db->capture->fn = fn;
    db->capture->ctx = ctx;
    return TALLY_OK;
}

int
store__capture_begin(store_db *db)
{
    struct store_capture *c = db->capture;
    int rc;

    store__capture_drop(db);
    rc = sqlite3session_create(db->sql, "main", &c->session);
    if (rc == SQLITE_OK)
        rc = sqlite3session_attach(c->session, NULL); /* every table, those made later too */
    if (rc != SQLITE_OK) {
        store__capture_drop(db);
        return store_db_rc(db, rc);
    }
    return TALLY_OK;
}

void
store__capture_drop(store_db *db)
{
    if (db->capture != NULL && db->capture->session != NULL) {
        sqlite3session_delete(db->capture->session);
        db->capture->session = NULL;
    }
}

int
store__capture_commit(store_db *db)
{
    struct store_capture *c = db->capture;
    void *changes = NULL;
    int n = 0, rc;

    if (NEVER(c->session == NULL)) { /* a COMMIT without our BEGIN */
        store_db_rollback(db);
        return TALLY_ESTORE;
    }
    rc = store_db_rc(db, sqlite3session_changeset(c->session, &n, &changes));
    store_db_rollback(db); /* drops the session: this file changes only by the log */
    if (rc == TALLY_OK && n > 0)
        rc = c->fn(c->ctx, db, changes, (size_t)n);
    sqlite3_free(changes);
    return rc;
}

/* ---- applying a record ---- */

/* Decided from the kind of conflict alone, so the same on every member. An INSERT of a key
 * that exists keeps the row there: replacing would delete it first, and deleting a tenant
 * deletes its links (ON DELETE CASCADE). An UPDATE or DELETE of a row whose values differ
 * applies anyway (the later change wins). */
static int
on_conflict(void *ctx, int kind, sqlite3_changeset_iter *it)
{
    struct store_config_outcome *o = ctx;

    (void)it;
    switch (kind) {
    case SQLITE_CHANGESET_DATA:
        o->replaced++;
        return SQLITE_CHANGESET_REPLACE;
    case SQLITE_CHANGESET_FOREIGN_KEY: /* a link of a tenant that is gone, say */
        o->aborted = true;
        return SQLITE_CHANGESET_ABORT;
    default: /* CONFLICT, NOTFOUND, CONSTRAINT */
        o->omitted++;
        return SQLITE_CHANGESET_OMIT;
    }
}

int
store_config_applied(store_db *db, uint64_t *out)
{
    sqlite3_stmt *st = store_db_stmt(db, S_APPLIED_GET);
    int rc = store__step_row(db, st);

    *out = 0;
    if (rc == TALLY_OK)
        *out = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc == TALLY_ENOTFOUND ? TALLY_OK : rc;
}

static int
applied_put(store_db *db, uint64_t index)
{
    sqlite3_stmt *st = store_db_stmt(db, S_APPLIED_PUT);

    sqlite3_bind_int64(st, 1, (sqlite3_int64)index);
    return store__step_change(db, st);
}

int
store_config_apply(store_db *db, uint64_t index, const uint8_t *changeset, size_t len,
                   struct store_config_outcome *out)
{
    uint64_t applied = 0;
    int rc, src;

    memset(out, 0, sizeof(*out));
    rc = store_config_applied(db, &applied);
    if (rc != TALLY_OK)
        return rc;
    if (index <= applied) {
        out->skipped = true;
        return TALLY_OK;
    }
    if (len > INT32_MAX)
        src = SQLITE_CORRUPT;
    else
        src = sqlite3changeset_apply(db->sql, (int)len, (void *)changeset, NULL, on_conflict, out);
    switch (src & 0xff) {
    case SQLITE_OK:
        break;
    case SQLITE_ABORT:      /* on_conflict said so: rolled back to its own savepoint */
    case SQLITE_CONSTRAINT: /* the same after the foreign keys were checked, at its end */
        if (!out->aborted && (src & 0xff) == SQLITE_CONSTRAINT)
            return store_db_rc(db, src);
        out->aborted = true;
        break;
    case SQLITE_CORRUPT: /* the record's bytes, not the file: the same everywhere */
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
    case SQLITE_SCHEMA:
        out->malformed = true;
        break;
    default: /* the file or the machine (full, I/O, memory): the caller tries again */
        return store_db_rc(db, src);
    }
    return applied_put(db, index);
}

/* ---- a copy for a new member ---- */

static int
page_bytes(store_db *db, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int64_t count = 0, size = 0;
    int rc = store_db_rc(db, sqlite3_prepare_v2(db->sql,
                                                "SELECT page_count, page_size FROM "
                                                "pragma_page_count(), pragma_page_size()",
                                                -1, &st, NULL));

    if (rc == TALLY_OK && sqlite3_step(st) == SQLITE_ROW) {
        count = sqlite3_column_int64(st, 0);
        size = sqlite3_column_int64(st, 1);
    } else if (rc == TALLY_OK) {
        rc = store_db_rc(db, sqlite3_errcode(db->sql));
    }
    sqlite3_finalize(st);
    *out = count * size;
    return rc;
}

int
store_config_copy(store_db *db, size_t max, uint8_t **bytes, size_t *len, uint64_t *index)
{
    sqlite3_int64 n = 0;
    unsigned char *p = NULL;
    int64_t need = 0;
    int rc;

    *bytes = NULL;
    *len = 0;
    *index = 0;
    /* One read transaction: the index and the pages are of the same commit. */
    rc = store_db_exec(db, "BEGIN");
    if (rc != TALLY_OK)
        return rc;
    rc = store_config_applied(db, index);
    if (rc == TALLY_OK)
        rc = page_bytes(db, &need);
    if (rc == TALLY_OK && (uint64_t)need > max) {
        *len = (size_t)need;
        rc = TALLY_ETOOBIG;
    }
    if (rc == TALLY_OK && (p = sqlite3_serialize(db->sql, "main", &n, 0)) == NULL) {
        rc = store_db_rc(db, sqlite3_errcode(db->sql)); /* a page unreadable */
        rc = rc != TALLY_OK ? rc : TALLY_ENOMEM;
    }
    store_db_rollback(db); /* it read only */
    if (rc == TALLY_OK && (size_t)n > max) {
        *len = (size_t)n;
        rc = TALLY_ETOOBIG;
    }
    if (rc == TALLY_OK && (*bytes = tally_malloc((size_t)n > 0 ? (size_t)n : 1)) == NULL)
        rc = TALLY_ENOMEM;
    if (rc == TALLY_OK) {
        memcpy(*bytes, p, (size_t)n);
        *len = (size_t)n;
    }
    sqlite3_free(p);
    return rc;
}

/* bytes into a new file `path` (0600), synced. */
static int
write_synced(const char *path, const uint8_t *bytes, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    size_t off = 0;
    int rc = TALLY_OK;

    if (fd < 0)
        return TALLY_EIO;
    while (off < len && rc == TALLY_OK) {
        ssize_t w = write(fd, bytes + off, len - off);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno != EINTR)
            rc = errno == ENOSPC ? TALLY_EFULL : TALLY_EIO;
    }
    if (rc == TALLY_OK && (fchmod(fd, 0600) != 0 || fsync(fd) != 0))
        rc = TALLY_EIO;
    close(fd);
    return rc;
}

/* The copy at `tmp` opened as a tally.db (refused if newer, migrated if older), checked
 * page by page, and given its applied index; closed, its WAL checkpointed into it. */
static int
check_copy(const char *tmp, uint64_t index)
{
    store_db *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = store_db_open(tmp, store__config_schema(), STORE_OPEN_SYNC_FULL, &db);

    if (rc == TALLY_OK)
        rc = store_db_rc(db, sqlite3_prepare_v2(db->sql, "PRAGMA quick_check", -1, &st, NULL));
    if (rc == TALLY_OK && (sqlite3_step(st) != SQLITE_ROW ||
                           strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0))
        rc = TALLY_ECORRUPT;
    sqlite3_finalize(st);
    if (rc == TALLY_OK)
        rc = store_db_begin(db);
    if (rc == TALLY_OK)
        rc = store_db_end(db, applied_put(db, index));
    store_db_close(db);
    return rc;
}

static void
unlink_with_wal(const char *path)
{
    char side[STORE_PATH_MAX + 32];
    size_t n = strlen(path);

    (void)unlink(path);
    if (n + 5 > sizeof(side))
        return; /* no such path is ever made (paths are at most STORE_PATH_MAX) */
    memcpy(side, path, n);
    memcpy(side + n, "-wal", 5);
    (void)unlink(side);
    memcpy(side + n, "-shm", 5);
    (void)unlink(side);
}

int
store_config_install(const char *dir, const uint8_t *bytes, size_t len, uint64_t index)
{
    char path[STORE_PATH_MAX], tmp[STORE_PATH_MAX + 16], side[STORE_PATH_MAX + 8];
    int rc;

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, STORE_CONFIG_FILE) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s-copy", path) >= sizeof(tmp))
        return TALLY_ETOOBIG;
    unlink_with_wal(tmp); /* a copy an earlier attempt left */
    rc = write_synced(tmp, bytes, len);
    if (rc == TALLY_OK)
        rc = check_copy(tmp, index);
    if (rc == TALLY_OK) {
        /* The WAL of the file replaced would be replayed into the copy. */
        snprintf(side, sizeof(side), "%s-wal", path);
        (void)unlink(side);
        snprintf(side, sizeof(side), "%s-shm", path);
        (void)unlink(side);
        if (rename(tmp, path) != 0)
            rc = TALLY_EIO;
    }
    if (rc != TALLY_OK) {
        unlink_with_wal(tmp);
        return rc;
    }
    return store__dir_fsync(dir);
}

/* PRAGMA user_version of `schema` on h, or -1. */
static int
user_version(sqlite3 *h)
{
    sqlite3_stmt *st = NULL;
    int v = -1;

    if (sqlite3_prepare_v2(h, "PRAGMA main.user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

int
store_config_restore(store_db *db, const uint8_t *bytes, size_t len, uint64_t index)
{
    sqlite3 *mem = NULL;
    sqlite3_backup *b;
    unsigned char *copy;
    uint64_t have = 0;
    int rc = store_config_applied(db, &have);

    if (rc != TALLY_OK || have >= index)
        return rc; /* this file is there already, or further on */
    if (len < 100 || sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        sqlite3_close(mem);
        return len < 100 ? TALLY_ECORRUPT : TALLY_ENOMEM;
    }
    copy = sqlite3_malloc64(len);
    if (copy == NULL) {
        sqlite3_close(mem);
        return TALLY_ENOMEM;
    }
    memcpy(copy, bytes, len);
    copy[18] = copy[19] = 1; /* a WAL file's header: read as a rollback journal's in memory */
    if (sqlite3_deserialize(mem, "main", copy, (sqlite3_int64)len, (sqlite3_int64)len,
                            SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE) !=
            SQLITE_OK ||
        user_version(mem) < 0) {
        sqlite3_close(mem);
        return TALLY_ECORRUPT;
    }
    if (user_version(mem) != user_version(store_db_handle(db))) {
        sqlite3_close(mem);
        return TALLY_ESCHEMA; /* another binary's file: this one cannot take it as it is */
    }
    /* In place, page by page under the file's locks: every process that holds tally.db open
     * (tallyd's front, supervisors) reads the new content, which a rename would not give. */
    b = sqlite3_backup_init(store_db_handle(db), "main", mem, "main");
    rc = b == NULL ? SQLITE_ERROR : sqlite3_backup_step(b, -1);
    if (b != NULL && sqlite3_backup_finish(b) != SQLITE_OK && rc == SQLITE_DONE)
        rc = SQLITE_ERROR;
    sqlite3_close(mem);
    return rc == SQLITE_DONE ? TALLY_OK : TALLY_ESTORE;
}

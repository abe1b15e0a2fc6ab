/*
 * One SQLite file: open in WAL mode with a busy timeout, migrate forward by
 * user_version, prepare the schema's statements once (persistent), translate
 * SQLite's result codes into tally's. Files are created 0600 whatever the
 * umask, because a counter or ledger file names links and tenants.
 */
#include "store.h"
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_BUSY_TIMEOUT_MS 5000
/* A WAL is checkpointed once it holds this many pages (4 KiB each: about 800 KiB)
 * and cut back to journal_size_limit (1 MiB) afterwards, so a file in steady use keeps at
 * most about 1 MiB of WAL next to it whatever it has written. Closing the last
 * connection checkpoints and removes the WAL (empties it, with STORE_OPEN_PERSIST_WAL). */
#define STORE_WAL_AUTOCHECKPOINT_PAGES 200

/* Detail of the last failed open on this thread: the handle that held it is gone.
 * Per thread, because child files are opened on libuv's thread pool. */
static _Thread_local char open_errmsg[STORE_PATH_MAX + 512];
/* The VFS of files opened with STORE_OPEN_PRIVATE; NULL: SQLite's default. */
static const char *private_vfs;

/* Sets db's error message (dropped when no buffer can be had: the result code still says
 * what failed). */
void
store__db_errf(store_db *db, const char *fmt, ...)
{
    va_list ap;

    if (db->errmsg == NULL && (db->errmsg = tally_malloc(ERRMSG_CAP)) == NULL)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(db->errmsg, ERRMSG_CAP, fmt, ap);
    va_end(ap);
}

int
store_db_rc(store_db *db, int sqlite_rc)
{
    int rc;

    switch (sqlite_rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return TALLY_OK;
    case SQLITE_NOMEM:
        rc = TALLY_ENOMEM;
        break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        rc = TALLY_EBUSY;
        break;
    case SQLITE_FULL:
        rc = TALLY_EFULL;
        break;
    case SQLITE_READONLY:
    case SQLITE_PERM:
        rc = TALLY_EREADONLY;
        break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        rc = TALLY_ECORRUPT;
        break;
    case SQLITE_CONSTRAINT:
        rc = TALLY_EEXIST;
        break;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
        rc = TALLY_EIO;
        break;
    default:
        rc = TALLY_ESTORE;
        break;
    }
    if (db != NULL) {
        const char *detail = db->sql != NULL ? sqlite3_errmsg(db->sql) : sqlite3_errstr(sqlite_rc);
        store__db_errf(db, "%s: %s", db->path, detail);
    }
    return rc;
}

const char *
store_open_errmsg(void)
{
    return open_errmsg[0] != '\0' ? open_errmsg : "no detail";
}

const char *
store_db_errmsg(const store_db *db)
{
    return db != NULL && db->errmsg != NULL && db->errmsg[0] != '\0' ? db->errmsg : "no detail";
}

struct sqlite3 *
store_db_handle(store_db *db)
{
    return db->sql;
}

int
store_db_exec(store_db *db, const char *sql)
{
    return store_db_rc(db, sqlite3_exec(db->sql, sql, NULL, NULL, NULL));
}

/* Steps a prepared BEGIN or COMMIT once. */
static int
step_once(store_db *db, sqlite3_stmt *st)
{
    int rc = store_db_rc(db, sqlite3_step(st));

    sqlite3_reset(st);
    return rc;
}

int
store_db_begin(store_db *db)
{
    /* Migrations run before the statements are prepared. */
    int rc = db->begin != NULL ? step_once(db, db->begin) : store_db_exec(db, "BEGIN IMMEDIATE");

    if (rc == TALLY_OK && db->capture != NULL) {
        rc = store__capture_begin(db);
        if (rc != TALLY_OK)
            store_db_rollback(db);
    }
    return rc;
}

/* The directory of a file linked into place (store__db_moved), synced after its first durable
 * commit: its names (file and WAL) durable with it. */
static int
dir_sync(store_db *db)
{
    char dir[STORE_PATH_MAX];
    const char *slash = strrchr(db->path, '/');
    size_t len = slash == NULL ? 0 : (size_t)(slash - db->path);
    int rc;

    if (slash == NULL)
        memcpy(dir, ".", 2);
    else if (len == 0)
        memcpy(dir, "/", 2);
    else if (len < sizeof(dir)) {
        memcpy(dir, db->path, len);
        dir[len] = '\0';
    } else
        return TALLY_ETOOBIG;
    rc = store__dir_fsync(dir);
    if (rc != TALLY_OK)
        store__db_errf(db, "%s: cannot sync its directory: %s", db->path, strerror(errno));
    else
        db->dir_due = false;
    return rc;
}

int
store__dir_fsync(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = TALLY_OK;

    if (fd < 0 || fsync(fd) != 0)
        rc = TALLY_EIO;
    if (fd >= 0) {
        int e = errno;

        close(fd);
        errno = e;
    }
    return rc;
}

int
store_db_commit(store_db *db)
{
    int rc;

    if (db->capture != NULL)
        return store__capture_commit(db); /* the change goes elsewhere: nothing commits here */
    rc = db->commit != NULL ? step_once(db, db->commit) : store_db_exec(db, "COMMIT");

    if (rc != TALLY_OK)
        store_db_rollback(db);
    else if (db->dir_due && db->sync_full)
        rc = dir_sync(db);
    return rc;
}

void
store_db_rollback(store_db *db)
{
    store__capture_drop(db);
    if (!sqlite3_get_autocommit(db->sql))
        (void)sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
}

int
store_db_end(store_db *db, int rc)
{
    if (rc == TALLY_OK)
        return store_db_commit(db);
    store_db_rollback(db);
    return rc;
}

/* xSync on the WAL file makes every frame written so far durable: all commits
 * up to now survive an OS crash (with synchronous=NORMAL SQLite syncs the WAL
 * only at checkpoints). SQLITE_FCNTL_JOURNAL_POINTER hands out the WAL's
 * sqlite3_file; before the first write it has no methods and nothing to sync. */
int
store_db_sync(store_db *db)
{
    sqlite3_file *f = NULL;
    int rc = sqlite3_file_control(db->sql, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f);

    if (rc != SQLITE_OK)
        return store_db_rc(db, rc);
    if (f == NULL || f->pMethods == NULL)
        return TALLY_OK;
    rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL);
    if (rc != SQLITE_OK) {
        int trc = store_db_rc(db, rc);
        store__db_errf(db, "%s-wal: %s", db->path, sqlite3_errstr(rc));
        return trc;
    }
    return db->dir_due ? dir_sync(db) : TALLY_OK;
}

sqlite3_stmt *
store_db_stmt(store_db *db, int idx)
{
    sqlite3_stmt *st;

    if (NEVER(idx < 0 || idx >= db->schema->n_statements))
        return NULL;
    st = db->stmts[idx];
    if (st == NULL) {
        /* Prepared on first use: a process that opens a file for two queries (a supervisor
         * reading its configuration) parses two statements, not the schema's every one. */
        if (sqlite3_prepare_v3(db->sql, db->schema->statements[idx], -1, SQLITE_PREPARE_PERSISTENT,
                               &db->stmts[idx], NULL) != SQLITE_OK) {
            store__db_errf(db, "%s: %s", db->path, sqlite3_errmsg(db->sql));
            return NULL; /* sqlite3_bind and sqlite3_step answer SQLITE_MISUSE on NULL */
        }
        return db->stmts[idx];
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

static int
pragma_int(store_db *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = store_db_rc(db, sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL));

    if (rc != TALLY_OK)
        return rc;
    if (sqlite3_step(st) == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        rc = store_db_rc(db, sqlite3_errcode(db->sql));
    sqlite3_finalize(st);
    return rc;
}

static int
configure(store_db *db, unsigned flags)
{
    sqlite3_stmt *st = NULL;
    int rc;

    rc = store_db_rc(db, sqlite3_prepare_v2(db->sql, "PRAGMA journal_mode=WAL", -1, &st, NULL));
    if (rc != TALLY_OK)
        return rc;
    if (sqlite3_step(st) != SQLITE_ROW ||
        strcmp((const char *)sqlite3_column_text(st, 0), "wal") != 0) {
        rc = store_db_rc(db, sqlite3_errcode(db->sql));
        if (rc == TALLY_OK) {
            store__db_errf(db, "%s: WAL mode refused", db->path);
            rc = TALLY_ESTORE;
        }
    }
    sqlite3_finalize(st);
    if (rc != TALLY_OK)
        return rc;
    rc = store_db_exec(db, (flags & STORE_OPEN_SYNC_FULL) ? "PRAGMA synchronous=FULL"
                                                          : "PRAGMA synchronous=NORMAL");
    if (rc == TALLY_OK)
        rc = store_db_exec(db, "PRAGMA foreign_keys=ON");
    if (rc == TALLY_OK)
        rc = store_db_exec(db, "PRAGMA journal_size_limit=1048576");
    if (rc == TALLY_OK)
        (void)sqlite3_wal_autocheckpoint(db->sql, STORE_WAL_AUTOCHECKPOINT_PAGES);
    return rc;
}

/* Refuses a file written by a newer binary before anything can write to it: the
 * version is read before WAL mode is asked for (which rewrites the header of a
 * rollback-journal file), and the connection does not checkpoint when it closes
 * (which would copy a newer binary's WAL into the file). */
static int
version_check(store_db *db, int64_t *version)
{
    int rc;

    sqlite3_busy_timeout(db->sql, STORE_BUSY_TIMEOUT_MS);
    (void)sqlite3_db_config(db->sql, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    rc = pragma_int(db, "PRAGMA user_version", version);
    if (rc != TALLY_OK)
        return rc;
    if (*version > db->schema->n_migrations) {
        store__db_errf(db,
                       "%s: %s file format %lld is newer than this binary's %d (written by a newer "
                       "tally; left as it is)",
                       db->path, db->schema->name, (long long)*version, db->schema->n_migrations);
        return TALLY_ESCHEMA;
    }
    (void)sqlite3_db_config(db->sql, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);
    return TALLY_OK;
}

/* Forward migrations with their version bump (and the caller's step after each),
 * all pending ones in one transaction: a file is at its old version or at the
 * newest, never between, and a new file costs one commit (one fsync in strict
 * mode) however many steps its schema has. */
int
store__migrate(store_db *db, int64_t version, store_migrate_fn step, void *ctx)
{
    char bump[64];
    int rc;

    if (version >= db->schema->n_migrations)
        return TALLY_OK;
    rc = store_db_begin(db);
    if (rc != TALLY_OK)
        return rc;
    for (; version < db->schema->n_migrations && rc == TALLY_OK; version++) {
        rc = store_db_exec(db, db->schema->migrations[version]);
        if (rc == TALLY_OK && step != NULL)
            rc = step(db, (int)version + 1, ctx);
    }
    snprintf(bump, sizeof(bump), "PRAGMA user_version=%lld", (long long)version);
    if (rc == TALLY_OK)
        rc = store_db_exec(db, bump);
    return store_db_end(db, rc);
}

/* Every process here holds many small files open: no page cache is allocated ahead per
 * connection (SQLite's default takes 20 pages, about 70 kB, at a file's first read; ours need
 * a few). Set once, before the process's first connection (store__sqlite_setup). */
static pthread_once_t sqlite_once = PTHREAD_ONCE_INIT;

static void
sqlite_setup(void)
{
    /* Refused (SQLITE_MISUSE, harmless) if something initialised SQLite already. */
    (void)sqlite3_config(SQLITE_CONFIG_PAGECACHE, NULL, 0, 0);
    (void)sqlite3_initialize();
}

void
store__sqlite_setup(void)
{
    (void)pthread_once(&sqlite_once, sqlite_setup);
}

/* A new file is its schema's image (store/image.c) written under a temporary name with mode 0600
 * (the caller's umask never decides who can read counters; WAL and SHM files inherit the
 * mode), made durable with one fdatasync, and linked into place (never over a file another
 * process made meanwhile): the file appears whole, in WAL mode at its newest version, for one
 * fsync and no SQL. Its directory is not synced here: the file is in WAL mode, so its first
 * commit writes a new WAL, and SQLite syncs the directory of a WAL it creates at that WAL's
 * first sync (under synchronous FULL and NORMAL alike), before the commit returns. Nothing
 * in the file counts before a commit, so a crash that loses the new entry loses nothing. */
static int
create_fresh(store_db *db, const char *path, store_migrate_fn step, void *ctx)
{
    char tmp[STORE_PATH_MAX + 32], tmp_wal[STORE_PATH_MAX + 40], wal[STORE_PATH_MAX + 8];
    bool pooled;
    int rc;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s-new-%ld", path, (long)getpid()) >= sizeof(tmp) ||
        (size_t)snprintf(tmp_wal, sizeof(tmp_wal), "%s-wal", tmp) >= sizeof(tmp_wal) ||
        (size_t)snprintf(wal, sizeof(wal), "%s-wal", path) >= sizeof(wal))
        return TALLY_EINVAL;
    (void)unlink(tmp);
    (void)unlink(tmp_wal);
    /* A pool file was written and synced when the pool was filled: only its name is new. */
    pooled = store__pool_take(db->schema, tmp);
    rc = pooled ? TALLY_OK : store__image_write(db->schema, step, ctx, db, tmp);
    if (rc == TALLY_OK) {
        if (link(tmp, path) == 0) {
            /* A pooled WAL follows its file (the first commit's directory sync makes both
             * names durable); none, and the first commit starts one. Another process that
             * linked the file first keeps its own. */
            if (pooled && rename(tmp_wal, wal) != 0 && errno != ENOENT)
                (void)unlink(wal); /* never a WAL that is not this file's */
        } else if (errno != EEXIST) {
            rc = TALLY_EIO;
        }
    }
    (void)unlink(tmp_wal);
    (void)unlink(tmp);
    if (rc != TALLY_OK && db->errmsg == NULL)
        store__db_errf(db, "%s: cannot create: %s", path, strerror(errno));
    return rc;
}

static int
prepare_all(store_db *db)
{
    int rc;

    /* The schema's statements are prepared on first use (store_db_stmt). */
    db->stmts = tally_calloc((size_t)db->schema->n_statements + 1, sizeof(*db->stmts));
    if (db->stmts == NULL)
        return TALLY_ENOMEM;
    rc = store_db_rc(db, sqlite3_prepare_v3(db->sql, "BEGIN IMMEDIATE", -1,
                                            SQLITE_PREPARE_PERSISTENT, &db->begin, NULL));
    if (rc == TALLY_OK)
        rc = store_db_rc(db, sqlite3_prepare_v3(db->sql, "COMMIT", -1, SQLITE_PREPARE_PERSISTENT,
                                                &db->commit, NULL));
    return rc;
}

int
store_db_open(const char *path, const struct store_schema *schema, unsigned flags, store_db **out)
{
    return store_db_open_ctx(path, schema, flags, NULL, NULL, out);
}

int
store_db_open_ctx(const char *path, const struct store_schema *schema, unsigned flags,
                  store_migrate_fn step, void *ctx, store_db **out)
{
    store_db *db = NULL;
    const char *vfs;
    struct stat sb;
    int64_t version = 0;
    int rc = TALLY_ENOMEM;

    *out = NULL;
    store__sqlite_setup();
    db = tally_calloc(1, sizeof(*db) + strlen(path) + 1);
    if (db == NULL)
        goto out;
    db->schema = schema;
    db->path = memcpy(db + 1, path, strlen(path) + 1);
    if (stat(path, &sb) != 0) {
        if (!(flags & STORE_OPEN_CREATE)) {
            store__db_errf(db, "%s: no such file", path);
            rc = TALLY_ENOTFOUND;
            goto out;
        }
        /* A connection opened ahead, when one of this schema and these flags is held. */
        rc = store__pool_take_open(schema, flags, path, out);
        if (rc == TALLY_OK || rc == TALLY_EEXIST) {
            tally_free(db);
            return rc == TALLY_OK ? rc : store_db_open_ctx(path, schema, flags, step, ctx, out);
        }
        rc = create_fresh(db, path, step, ctx);
        if (rc != TALLY_OK)
            goto out;
    }
    vfs = (flags & STORE_OPEN_PRIVATE) ? private_vfs : NULL;
    rc = store_db_rc(
        db, sqlite3_open_v2(path, &db->sql, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, vfs));
    if (rc != TALLY_OK)
        goto out;
    sqlite3_extended_result_codes(db->sql, 0);
    /* A file only this process opens keeps its WAL index in memory: no -shm file to
     * create, map and keep open (one descriptor less per open file). Set before the
     * first read, which is when SQLite decides. */
    if (flags & STORE_OPEN_EXCLUSIVE)
        rc = store_db_exec(db, "PRAGMA locking_mode=EXCLUSIVE");
    /* Creating and deleting two files per open and close costs more than the files: on
     * ext4 without a journal every new inode skips the recently freed ones one by one. */
    if (rc == TALLY_OK && (flags & STORE_OPEN_PERSIST_WAL)) {
        int one = 1;
        (void)sqlite3_file_control(db->sql, "main", SQLITE_FCNTL_PERSIST_WAL, &one);
    }
    if (rc == TALLY_OK)
        rc = version_check(db, &version);
    db->sync_full = (flags & STORE_OPEN_SYNC_FULL) != 0;
    if (rc == TALLY_OK)
        rc = configure(db, flags);
    if (rc == TALLY_OK)
        rc = store__migrate(db, version, step, ctx);
    if (rc == TALLY_OK)
        rc = prepare_all(db);
    if (rc != TALLY_OK)
        goto out;
    *out = db;
    db = NULL; /* ownership moved to the caller */
out:
    if (db != NULL)
        snprintf(open_errmsg, sizeof(open_errmsg), "%s", db->errmsg != NULL ? db->errmsg : "");
    store_db_close(db);
    return rc;
}

void
store_private_vfs_set(const char *name)
{
    private_vfs = name;
}

void
store_db_close_keep_wal(store_db *db)
{
    if (db != NULL && db->sql != NULL)
        (void)sqlite3_db_config(db->sql, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    store_db_close(db);
}

void
store_db_close(store_db *db)
{
    int i;

    if (db == NULL)
        return;
    store__capture_drop(db);
    tally_free(db->capture);
    if (db->stmts != NULL) {
        for (i = 0; i < db->schema->n_statements; i++)
            sqlite3_finalize(db->stmts[i]);
        tally_free(db->stmts);
    }
    sqlite3_finalize(db->begin);
    sqlite3_finalize(db->commit);
    /* SQLite skips the checkpoint of a close for a file whose name moved since its open: the
     * same checkpoint here (the WAL emptied, kept with PERSIST_WAL as a close would). */
    if (db->moved != NULL && db->sql != NULL) {
        int keep = 0;

        (void)sqlite3_db_config(db->sql, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, -1, &keep);
        if (!keep)
            (void)sqlite3_wal_checkpoint_v2(db->sql, "main", SQLITE_CHECKPOINT_TRUNCATE, NULL,
                                            NULL);
    }
    if (db->sql != NULL) {
        int rc = sqlite3_close(db->sql);
        assert(rc == SQLITE_OK);
        (void)rc;
    }
    tally_free(db->errmsg);
    tally_free(db->moved);
    tally_free(db);
}

int
store__db_moved(store_db *db, const char *path)
{
    size_t len = strlen(path) + 1;
    char *p = tally_malloc(len);

    if (p == NULL)
        return TALLY_ENOMEM;
    memcpy(p, path, len);
    tally_free(db->moved);
    db->moved = p;
    db->path = p;
    db->dir_due = true;
    return TALLY_OK;
}

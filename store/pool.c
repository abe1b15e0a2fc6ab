/*
 * Files made ahead (store_pool_use). A pool directory holds a few new files per schema, each
 * its image already written and synced (`NAME-K.db`, K < STORE_POOL_FILES). A file created
 * while the pool has one is that file renamed into place (store/db.c, create_fresh): no write
 * and no fdatasync on the way to the first commit. Taking is a rename to the caller's
 * temporary name, so two takers never get the same file; the pool must be on the data dir's
 * filesystem (a rename across filesystems fails and the image is written as without a pool).
 * Set once per process, before any file is created.
 *
 * Files are pooled with their WAL started (`NAME-K.db-wal`): one commit that changes nothing,
 * synced and checkpointed, the WAL kept with its header and that frame, inside zeros written
 * to STORE_POOL_WAL_FRAMES frames (wal_zeros). A new file's first
 * commit (a new ledger's on its supervisor's first answer, a new child file's incarnation,
 * which that answer waits for in tallyd) then appends to a WAL that exists: one fdatasync and
 * a directory sync, instead of the new WAL's header and its fdatasync before them. Every pool file
 * of a schema holds the same pages, so a WAL that meets another pool file's image (a taker and a
 * filler crossing) still describes it exactly.
 */
#include "store.h"
#include "store_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_paths.h"

#define STORE_POOL_FILES 8
/* A pool file's WAL is written this many frames long (its own included): a new ledger's first
 * turn or a new child file's incarnation commits one or two, which fit in it. */
#define STORE_POOL_WAL_FRAMES 4
static char pool_dir[STORE_PATH_MAX];

void
store_pool_use(const char *dir)
{
    if (dir == NULL || (size_t)snprintf(pool_dir, sizeof(pool_dir), "%s", dir) >= sizeof(pool_dir))
        pool_dir[0] = '\0';
}

/* True when a file of `schema` was moved from the pool to `tmp`. */
bool
store__pool_take(const struct store_schema *schema, const char *tmp)
{
    char src[STORE_PATH_MAX + 64];

    if (pool_dir[0] == '\0')
        return false;
    for (unsigned k = 0; k < STORE_POOL_FILES; k++) {
        if ((size_t)snprintf(src, sizeof(src), "%s/%s-%u.db", pool_dir, schema->name, k) >=
            sizeof(src))
            return false;
        if (rename(src, tmp) == 0) {
            char src_wal[sizeof(src) + 8], tmp_wal[STORE_PATH_MAX + 128];

            /* Its WAL along, if it has one (store/db.c moves it into place). */
            if ((size_t)snprintf(src_wal, sizeof(src_wal), "%s-wal", src) < sizeof(src_wal) &&
                (size_t)snprintf(tmp_wal, sizeof(tmp_wal), "%s-wal", tmp) < sizeof(tmp_wal) &&
                rename(src_wal, tmp_wal) != 0)
                (void)unlink(tmp_wal);
            return true;
        }
        if (errno != ENOENT)
            return false; /* EXDEV and the like: no pool for this file */
    }
    return false;
}

int
store_pool_clean(const char *dir)
{
    DIR *d;
    struct dirent *e;
    char path[STORE_PATH_MAX + 300];

    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return errno == EROFS ? TALLY_EREADONLY : TALLY_EIO;
    d = opendir(dir);
    if (d == NULL)
        return TALLY_EIO;
    while ((e = readdir(d)) != NULL) {
        /* Temporary names start with a dot; "." and ".." are not files. */
        if (e->d_name[0] != '.' || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < sizeof(path))
            (void)unlink(path);
    }
    closedir(d);
    return TALLY_OK;
}

/* Starts the WAL of the new file `tmp` (see above): the schema's user_version written again
 * in a commit of its own (synchronous FULL), checkpointed by the close, the WAL kept. */
static int
wal_start(const char *tmp)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char sql[64];
    int one = 1, rc;

    rc = sqlite3_open_v2(tmp, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &one);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st) == SQLITE_ROW ? SQLITE_OK : SQLITE_ERROR;
    if (rc == SQLITE_OK)
        snprintf(sql, sizeof(sql), "PRAGMA user_version=%lld",
                 (long long)sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (sqlite3_close(db) != SQLITE_OK && rc == SQLITE_OK)
        rc = SQLITE_ERROR;
    return rc == SQLITE_OK ? TALLY_OK : TALLY_EIO;
}

/* Creates the WAL of the new file `path` as STORE_POOL_WAL_FRAMES frames of zeros (the page
 * size read from the file's header), unsynced: the commit that starts the WAL writes its
 * header and frame inside it and syncs the whole. The first commits of the file then write
 * within the WAL's size, and their fdatasyncs flush data with no metadata to journal. Zeros
 * are no WAL header (SQLite starts one) and no frame (their salts do not match): a WAL of
 * zeros past its frames recovers as those frames. */
static int
wal_zeros(const char *path)
{
    static const char zeros[4096];
    char wal[STORE_PATH_MAX + 128];
    unsigned char hdr[2];
    off_t end = 0, page;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = TALLY_EIO;

    /* The page size: big-endian at byte 16 of the database header, 1 meaning 65536. */
    if (fd >= 0 && pread(fd, hdr, sizeof(hdr), 16) == (ssize_t)sizeof(hdr))
        rc = TALLY_OK;
    if (fd >= 0)
        close(fd);
    if (rc != TALLY_OK)
        return rc;
    page = (off_t)hdr[0] << 8 | hdr[1];
    end = 32 + STORE_POOL_WAL_FRAMES * (24 + (page == 1 ? 65536 : page));
    if ((size_t)snprintf(wal, sizeof(wal), "%s-wal", path) >= sizeof(wal))
        return TALLY_ETOOBIG;
    fd = open(wal, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return TALLY_EIO;
    for (off_t at = 0; at < end && rc == TALLY_OK;) {
        size_t len = end - at < (off_t)sizeof(zeros) ? (size_t)(end - at) : sizeof(zeros);
        ssize_t n = pwrite(fd, zeros, len, at);

        if (n <= 0)
            rc = TALLY_EIO;
        else
            at += n;
    }
    close(fd);
    if (rc != TALLY_OK)
        (void)unlink(wal);
    return rc;
}

int
store__pool_fill(const struct store_schema *schema, store_migrate_fn step, unsigned want,
                 unsigned *made)
{
    char dst[STORE_PATH_MAX + 64], tmp[STORE_PATH_MAX + 96];
    struct stat sb;
    int rc = TALLY_OK;

    *made = 0;
    if (pool_dir[0] == '\0')
        return TALLY_OK;
    if (want > STORE_POOL_FILES)
        want = STORE_POOL_FILES;
    if (mkdir(pool_dir, 0700) != 0 && errno != EEXIST)
        rc = TALLY_EIO;
    for (unsigned k = 0; k < want && rc == TALLY_OK; k++) {
        if ((size_t)snprintf(dst, sizeof(dst), "%s/%s-%u.db", pool_dir, schema->name, k) >=
                sizeof(dst) ||
            (size_t)snprintf(tmp, sizeof(tmp), "%s/.%s-%u.db.%ld", pool_dir, schema->name, k,
                             (long)getpid()) >= sizeof(tmp))
            return TALLY_ETOOBIG;
        if (stat(dst, &sb) == 0)
            continue;
        rc = store__image_write(schema, step, NULL, NULL, tmp);
        if (rc == TALLY_OK) {
            char tmp_wal[sizeof(tmp) + 8], dst_wal[sizeof(dst) + 8];

            snprintf(tmp_wal, sizeof(tmp_wal), "%s-wal", tmp);
            snprintf(dst_wal, sizeof(dst_wal), "%s-wal", dst);
            /* The WAL goes first: a file in the pool never has a WAL that is not its own. */
            (void)unlink(tmp_wal);
            rc = wal_zeros(tmp);
            if (rc == TALLY_OK)
                rc = wal_start(tmp);
            if (rc == TALLY_OK && rename(tmp_wal, dst_wal) != 0)
                rc = TALLY_EIO;
            if (rc != TALLY_OK) {
                (void)unlink(tmp_wal);
                (void)unlink(tmp);
            }
        }
        /* Replaces a file another process put there meanwhile: the same bytes. */
        if (rc == TALLY_OK && rename(tmp, dst) != 0) {
            (void)unlink(tmp);
            rc = TALLY_EIO;
        }
        if (rc == TALLY_OK)
            (*made)++;
    }
    return rc;
}

/* ---- connections opened ahead ----
 *
 * A process that makes new files on a latency path (tallyd: a tenant's first ledger and child
 * files) keeps a few new files open as well: each made as a pool file is, under a temporary
 * name in the pool, and opened as its creator will open it, the store_db handle configured
 * and its WAL started by that connection (its directory sync, which SQLite does once per
 * new WAL handle, spent on the pool's directory). A create that matches
 * one's schema and flags links it into place and moves its WAL beside it: no SQLite open on
 * the way. The directory is synced right after the first commit is made durable (store/db.c),
 * as SQLite syncs it after the first sync of a WAL it creates. SQLite reads neither name again
 * after the open in WAL mode (nor rewrites a rollback journal, which it would refuse for a moved
 * file); it skips its checkpoint at close for a file whose name moved, so store_db_close makes that
 * checkpoint itself. */

#define STORE_POOL_OPEN_MAX 8

struct pool_open {
    const struct store_schema *schema;
    unsigned flags; /* without STORE_OPEN_CREATE */
    store_db *db;
    char held[STORE_PATH_MAX + 96];
};

static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pool_open open_v[STORE_POOL_OPEN_MAX];
static unsigned open_n, open_seq;

/* Closes a held connection and removes its names. */
static void
held_drop(struct pool_open *po)
{
    char wal[sizeof(po->held) + 8];

    store_db_close_keep_wal(po->db);
    snprintf(wal, sizeof(wal), "%s-wal", po->held);
    (void)unlink(wal);
    (void)unlink(po->held);
}

/* Keeps `po` for a later take; dropped when the list is full. */
static void
held_put(const struct pool_open *po)
{
    bool kept = false;

    pthread_mutex_lock(&open_mu);
    if (open_n < STORE_POOL_OPEN_MAX) {
        open_v[open_n++] = *po;
        kept = true;
    }
    pthread_mutex_unlock(&open_mu);
    if (!kept) {
        struct pool_open copy = *po;
        held_drop(&copy);
    }
}

int
store__pool_open_fill(const struct store_schema *schema, store_migrate_fn step, unsigned flags,
                      store_open_fn open, unsigned want, unsigned *made)
{
    unsigned have = 0;
    int rc = TALLY_OK;

    *made = 0;
    flags &= ~(unsigned)STORE_OPEN_CREATE;
    if (pool_dir[0] == '\0')
        return TALLY_OK;
    pthread_mutex_lock(&open_mu);
    for (unsigned i = 0; i < open_n; i++)
        have += open_v[i].schema == schema && open_v[i].flags == flags;
    pthread_mutex_unlock(&open_mu);
    while (have + *made < want && rc == TALLY_OK) {
        struct pool_open po = {schema, flags, NULL, ""};
        char sql[48];
        unsigned seq;

        pthread_mutex_lock(&open_mu);
        seq = open_seq++;
        pthread_mutex_unlock(&open_mu);
        /* A temporary name: cleaned at the next start if this process dies holding it. */
        if ((size_t)snprintf(po.held, sizeof(po.held), "%s/.open-%s-%ld-%u.db", pool_dir,
                             schema->name, (long)getpid(), seq) >= sizeof(po.held))
            return TALLY_ETOOBIG;
        /* Made here as a pool file is (the image, a WAL of zeros), then opened, and its WAL
         * started by this connection: one commit that changes nothing, synced, which spends
         * SQLite's sync of the new WAL's directory (the pool's) here, not on a request's path. */
        rc = store__image_write(schema, step, NULL, NULL, po.held);
        if (rc == TALLY_OK)
            rc = wal_zeros(po.held);
        if (rc == TALLY_OK)
            rc = open(po.held, flags, &po.db);
        snprintf(sql, sizeof(sql), "PRAGMA user_version=%d", schema->n_migrations);
        if (rc == TALLY_OK)
            rc = store_db_exec(po.db, sql);
        if (rc == TALLY_OK && !(flags & STORE_OPEN_SYNC_FULL))
            rc = store_db_sync(po.db);
        if (rc != TALLY_OK) {
            held_drop(&po);
            break;
        }
        held_put(&po);
        (*made)++;
    }
    return rc;
}

int
store__pool_take_open(const struct store_schema *schema, unsigned flags, const char *path,
                      store_db **out)
{
    struct pool_open po;
    char held_wal[sizeof(po.held) + 8], wal[STORE_PATH_MAX + 8];
    bool found = false;
    int rc;

    *out = NULL;
    flags &= ~(unsigned)STORE_OPEN_CREATE;
    pthread_mutex_lock(&open_mu);
    for (unsigned i = 0; i < open_n && !found; i++) {
        if (open_v[i].schema == schema && open_v[i].flags == flags) {
            po = open_v[i];
            open_v[i] = open_v[--open_n];
            found = true;
        }
    }
    pthread_mutex_unlock(&open_mu);
    if (!found)
        return TALLY_ENOTFOUND;
    if ((size_t)snprintf(held_wal, sizeof(held_wal), "%s-wal", po.held) >= sizeof(held_wal) ||
        (size_t)snprintf(wal, sizeof(wal), "%s-wal", path) >= sizeof(wal)) {
        held_put(&po);
        return TALLY_ETOOBIG;
    }
    /* Never over a file another process made meanwhile; then the WAL the connection writes
     * follows (a WAL left at the new name is a removed file's: never this one's). */
    if (link(po.held, path) != 0) {
        rc = errno == EEXIST ? TALLY_EEXIST : TALLY_EIO;
        held_put(&po);
        return rc;
    }
    if (rename(held_wal, wal) != 0) {
        (void)unlink(path);
        held_put(&po);
        return TALLY_EIO;
    }
    (void)unlink(po.held);
    /* Both names durable with the first commit made durable (store/db.c), as SQLite does for a
     * WAL it creates: it synced the pool's directory, not this one. */
    rc = store__db_moved(po.db, path);
    if (rc != TALLY_OK) {
        store_db_close(po.db); /* an empty file at its place: nothing in it counts */
        return rc;
    }
    *out = po.db;
    return TALLY_OK;
}

void
store_pool_open_drop(void)
{
    for (;;) {
        struct pool_open po;

        pthread_mutex_lock(&open_mu);
        if (open_n == 0) {
            pthread_mutex_unlock(&open_mu);
            return;
        }
        po = open_v[--open_n];
        pthread_mutex_unlock(&open_mu);
        held_drop(&po);
    }
}

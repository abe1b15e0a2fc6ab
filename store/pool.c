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
 * synced and checkpointed, the WAL kept with its header and that frame. A new file's first
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
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_paths.h"

#define STORE_POOL_FILES 8
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

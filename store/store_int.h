/*
 * Internals shared by the files of store/ (never included from outside the folder).
 */
#ifndef STORE_INT_H
#define STORE_INT_H

#include <sqlite3.h>
#include <stdbool.h>

#include "store.h"
#include "store_record.h"

/* tallyd holds a thousand child files open: a handle carries its path and no message
 * buffer until it has something to say (two fixed buffers made it 8.7 kB per file). */
#define ERRMSG_CAP (STORE_PATH_MAX + 512)
struct store_db {
    sqlite3 *sql;
    const struct store_schema *schema;
    sqlite3_stmt **stmts;
    sqlite3_stmt *begin, *commit;  /* prepared once: a supervisor commits every loop turn */
    const char *path;              /* the bytes after the struct, or borrowed (store/image.c) */
    char *errmsg;                  /* ERRMSG_CAP bytes, allocated at the first error */
    struct store_capture *capture; /* tally.db in a cluster: changes captured, not committed */
    char *moved;                   /* opened ahead and linked here (store/pool.c): its path */
    bool sync_full;                /* opened with STORE_OPEN_SYNC_FULL */
    bool dir_due;                  /* moved: its directory is synced at the next durable commit */
};

/* Sets db's error message (dropped when no buffer can be had: the result code still says
 * what failed). */
void store__db_errf(store_db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs the schema's migrations from `version` to the newest in one transaction (store/db.c). */
int store__migrate(store_db *db, int64_t version, store_migrate_fn step, void *ctx);
/* Configures SQLite for this process, once, before its first connection (store/db.c). */
void store__sqlite_setup(void);

/* Capture (store/config_changes.c), on a handle given store_config_capture(): a transaction
 * records its changes from its BEGIN; its COMMIT rolls it back and hands the changes over
 * instead (the result is the commit's); a ROLLBACK or the close drops them. */
int store__capture_begin(store_db *db);
int store__capture_commit(store_db *db);
void store__capture_drop(store_db *db);

/* Re-encodes every row of `table` (key INTEGER PRIMARY KEY, rec BLOB) from file format
 * `from_format` with `up` into `table`_next (created by the migration step), then puts
 * `table`_next in its place. Runs inside the migration's transaction. `may_drop`: a row
 * the upgrade answers TALLY_ENOTFOUND is left out instead of failing the step. */
int store__rows_upgrade(store_db *db, const char *table, int from_format,
                        const struct store_upgrade *up, bool may_drop);

/* Makes the image a new file of `schema` is written from (store/image.c), if not made yet: the
 * migrations with `step` run once on an in-memory database. */
int store__image_warm(const struct store_schema *schema, store_migrate_fn step);

/* Writes the image of `schema` (made on first use, with `step` and `ctx`; a failure to make
 * it is told in err's errmsg, err may be NULL) into the new file `tmp`, mode 0600, synced.
 * `tmp` is removed again on failure (errno says why). */
int store__image_write(const struct store_schema *schema, store_migrate_fn step, void *ctx,
                       store_db *err, const char *tmp);
/* True when a pool file of `schema` was moved to `tmp` (store/pool.c); its WAL, when it has
 * one, to `tmp`-wal. */
bool store__pool_take(const struct store_schema *schema, const char *tmp);
/* Fills the pool (store_pool_use) with up to `want` new files of `schema`, each written
 * and synced under a temporary name, with its WAL started (one synced commit that changes
 * nothing) and pooled beside it, then renamed to its place; *made counts them. Nothing to do
 * without a pool. */
int store__pool_fill(const struct store_schema *schema, store_migrate_fn step, unsigned want,
                     unsigned *made);
/* Opens the existing file `path` of one schema with `flags` (store_child_open and the like). */
typedef int (*store_open_fn)(const char *path, unsigned flags, store_db **out);
/* Keeps up to `want` new files of `schema` open with `flags` (`open` opens them, made with
 * `step` as pool files are); *made counts the new ones. */
int store__pool_open_fill(const struct store_schema *schema, store_migrate_fn step, unsigned flags,
                          store_open_fn open, unsigned want, unsigned *made);
/* A connection opened ahead (store__pool_open_fill) of `schema` and `flags`, its file linked
 * to `path` (never over one), its WAL moved beside it and the directory synced: TALLY_OK and
 * *out, TALLY_ENOTFOUND when none is held, TALLY_EEXIST when `path` exists. */
int store__pool_take_open(const struct store_schema *schema, unsigned flags, const char *path,
                          store_db **out);
/* fsync of the directory `dir` (its entries durable): TALLY_OK or TALLY_EIO (errno says why). */
int store__dir_fsync(const char *dir);
/* Tells db its file is now at `path` (store/db.c): errors name it, the close checkpoints, and
 * the directory is synced once a commit is durable (under synchronous FULL at the commit,
 * otherwise at store_db_sync). */
int store__db_moved(store_db *db, const char *path);

#endif /* STORE_INT_H */

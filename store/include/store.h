/*
 * store: every SQLite file tally keeps, behind one small interface. A file is
 * opened with a schema (forward migrations by PRAGMA user_version and the
 * statements prepared once per connection, indexed by the schema's enum), in
 * WAL mode with a busy timeout, created with mode 0600. SQLite result codes
 * never leave this folder: they become tally result codes, with the detail
 * kept for one clear error line.
 *
 * Header-wide rule: one connection per file per process, used by the thread
 * that opened it; strings passed in are borrowed for the call.
 */
#ifndef STORE_H
#define STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "tally_common.h"
#include "tenant.h"

typedef struct store_db store_db;
typedef struct sqlite3_stmt sqlite3_stmt;

enum store_open_flags {
    STORE_OPEN_CREATE = 1 << 0,     /* create the file (mode 0600) if missing */
    STORE_OPEN_SYNC_FULL = 1 << 1,  /* synchronous=FULL (strict); NORMAL otherwise */
    STORE_OPEN_PRIVATE = 1 << 2,    /* only this process writes the file (a journal, a child
                                       file): store_private_vfs_set() may name its VFS */
    STORE_OPEN_EXCLUSIVE = 1 << 3,  /* no other process even reads it (a child file): locked
                                       exclusively while open, its WAL index in memory (no
                                       -shm file, one descriptor less) */
    STORE_OPEN_PERSIST_WAL = 1 << 4 /* the -wal and -shm files stay when it closes (the WAL
                                       emptied by the last checkpoint): a file opened and
                                       closed over and over (a ledger, at each supervisor
                                       start) creates and deletes no file each time */
};

struct store_schema {
    const char *name;              /* for messages: "config", "ledger", ... */
    const char *const *migrations; /* migrations[i] moves user_version i to i + 1 */
    int n_migrations;
    const char *const *statements; /* SQL text, indexed by the schema's own enum */
    int n_statements;
};

/* A migration step SQL alone cannot take (records re-encoded by their owner's codec): runs
 * right after migrations[version - 1], inside its transaction. A non-OK result rolls the step
 * back and fails the open. */
typedef int (*store_migrate_fn)(store_db *db, int version, void *ctx);

/** Opens `path` with `schema` (borrowed, must outlive the handle), migrating it
 *  forward. *out is owned by the caller, release with store_db_close(). A file
 *  whose version is newer than the schema is TALLY_ESCHEMA and is left byte for
 *  byte as it was (read, never written or checkpointed); a damaged file is
 *  TALLY_ECORRUPT. Opening thread only. */
TALLY_MUST_CHECK int store_db_open(const char *path, const struct store_schema *schema,
                                   unsigned flags, store_db **out /* OUT */);
/** store_db_open() that also calls `step` (may be NULL) with `ctx` (borrowed for the call)
 *  after each migration. */
TALLY_MUST_CHECK int store_db_open_ctx(const char *path, const struct store_schema *schema,
                                       unsigned flags, store_migrate_fn step, void *ctx,
                                       store_db **out /* OUT */);
/** Finalizes the statements and closes the file. NULL is a no-op. */
void store_db_close(store_db *db);

/** Closes db without the checkpoint a last close does: the WAL stays next to the
 *  file as it is (every commit in it already durable) and the next open reads it
 *  back. For a file closed for a while and opened again soon: no copy into the
 *  file, no fsync, no WAL removed and created again with its directory synced. */
void store_db_close_keep_wal(store_db *db);
/** Names the SQLite VFS (registered by the caller, e.g. a shim over the default one) for the
 *  files opened from now on with STORE_OPEN_PRIVATE, which no other process opens and so may
 *  see writes that other processes would not; NULL (the default) is SQLite's default VFS.
 *  `name` is borrowed for the life of the process. Call from the main thread before the
 *  first open. */
void store_private_vfs_set(const char *name);
/** Names the pool of files made ahead for this process (DATA/pool): from now on a new ledger
 *  or child file is taken from it when it holds one (renamed into place, already written and
 *  synced). NULL: none. Call before the first file is created. */
void store_pool_use(const char *dir);
/** Removes what a fill interrupted by a crash left in the pool (its temporary names), and
 *  creates the directory. Run by tallyd at start, before anything fills it. */
int store_pool_clean(const char *dir);
/** Closes the pool's files kept open (store_child_pool_open, store_journal_pool_open) and
 *  removes them. Call when no other thread creates files. */
void store_pool_open_drop(void);
/** The statement numbered `idx` of the schema, reset and unbound, valid until close. */
sqlite3_stmt *store_db_stmt(store_db *db, int idx);
/** Maps a SQLite result code to a tally result code, keeping the detail for
 *  store_db_errmsg(). SQLITE_OK/ROW/DONE map to TALLY_OK. */
int store_db_rc(store_db *db, int sqlite_rc);
/** Transactions: BEGIN IMMEDIATE (the writer lock at once), COMMIT, ROLLBACK. */
TALLY_MUST_CHECK int store_db_begin(store_db *db);
TALLY_MUST_CHECK int store_db_commit(store_db *db);
void store_db_rollback(store_db *db);
/** Ends a transaction: commits when rc is TALLY_OK (and returns the commit's result), rolls
 *  back otherwise (and returns rc). */
TALLY_MUST_CHECK int store_db_end(store_db *db, int rc);
/** Makes every commit so far durable (fsync of the WAL file): what a commit
 *  under synchronous=FULL does, for a file opened with NORMAL. */
TALLY_MUST_CHECK int store_db_sync(store_db *db);
/** Runs SQL text with no result rows (setup, tests). */
TALLY_MUST_CHECK int store_db_exec(store_db *db, const char *sql);
/** The last error's detail ("disk I/O error: tally.db"), static until the next call. */
const char *store_db_errmsg(const store_db *db);
/** The detail of the last failed store_db_open() in this process (static storage). */
const char *store_open_errmsg(void);
/** The raw SQLite handle, for code inside store/ and tests. */
struct sqlite3 *store_db_handle(store_db *db);

/* --- the data directory -------------------------------------------------- */

#define STORE_PATH_MAX 4096

/** Resolves the data dir: `arg` if not NULL, else $TALLY_DATA, else `fallback`. */
const char *store_datadir_pick(const char *arg, const char *fallback);
/** Creates `dir` (0700) with a fresh deployment key (secret.key, 0600) and the
 *  config database (tally.db, 0600). An initialised dir is TALLY_EEXIST and is
 *  left untouched. */
TALLY_MUST_CHECK int store_datadir_init(const char *dir);
/** As store_datadir_init with `key` (TENANT_KEY_BYTES, borrowed) as its key rather than a
 *  random one: a host joining a cluster gets the cluster's. */
TALLY_MUST_CHECK int store_datadir_init_key(const char *dir, const unsigned char *key);
/** TALLY_OK when `dir` holds a key and a config database, else TALLY_ENODATA. */
TALLY_MUST_CHECK int store_datadir_check(const char *dir);
/** Loads the deployment key into sodium_malloc'd memory made read-only.
 *  *out is owned by the caller, release with store_key_free(). */
TALLY_MUST_CHECK int store_key_load(const char *dir, unsigned char **out /* OUT */);
/** Wipes and frees a key from store_key_load(). NULL is a no-op. */
void store_key_free(unsigned char *key);
/** Keeps this process's memory (the key, tokens in flight) out of core files and
 *  away from ptrace by other users: prctl(PR_SET_DUMPABLE, 0). $TALLY_DUMPABLE=1
 *  skips it, for debugging with gdb or a core file: then *kept_dumpable is set and
 *  the result is TALLY_OK. An error (prctl failed: the process may be dumpable) is
 *  for the caller to report. Call once, early in main. */
TALLY_MUST_CHECK int store_process_private(bool *kept_dumpable /* OUT */);
/** TALLY_OK when the directory that will hold socket `path` (borrowed) is not
 *  writable by others (who could replace the socket or squat its name);
 *  TALLY_EPERM when it is, TALLY_ENODATA when it does not exist. */
TALLY_MUST_CHECK int store_socket_dir_check(const char *path);

#endif /* STORE_H */

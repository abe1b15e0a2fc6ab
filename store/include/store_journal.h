/*
 * store_journal: a tenant's journal file (tenants/T/ledger.db), the supervisor's ordered list of
 * records. The store keeps each record as opaque bytes, encoded and decoded by the ledger's codec
 * (supervisor/ledger/journal_codec.c), and owns the file's format version:
 *
 *   PRAGMA user_version 1: table journal(seq, rec) of raw struct bytes (tally 0.1.0);
 *   PRAGMA user_version 2: the same table, each rec a versioned field-by-field encoding.
 *
 * A format-1 file is upgraded in place when opened, in one transaction, by the codec's upgrade
 * function; a file of a newer format is refused with TALLY_ESCHEMA and left untouched.
 * Header-wide rules: one thread per handle (the supervisor's loop); buffers are borrowed.
 */
#ifndef STORE_JOURNAL_H
#define STORE_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "store_record.h"

#define STORE_JOURNAL_FORMAT 2 /* the format this binary writes (and the newest it reads) */

/* Fills record `i` of a batch into buf (cap bytes, STORE_RECORD_MAX): TALLY_OK with *len set;
 * any other result aborts the batch (nothing is written). */
typedef int (*store_record_encode_fn)(void *ctx, size_t i, uint8_t *buf, size_t cap,
                                      size_t *len /* OUT */);
/* Visits one stored record (rec, len: valid during the call). Non-OK stops and is returned. */
typedef int (*store_record_visit_fn)(void *ctx, const uint8_t *rec, size_t len);

/** Makes, once per process, the image a new journal file is written from (the schema's
 *  migrations run on an in-memory database): a process that forks the journals' writers calls
 *  it first, so each of them writes its new file without running a migration. */
int store_journal_warm(void);
/** Puts up to `want` new ledgers in this process's pool (store_pool_use), each written and
 *  synced with its WAL started; *made counts them. */
int store_journal_pool_fill(unsigned want, unsigned *made);
/** Keeps up to `want` of the pool's ledgers open with `flags` (as store_child_pool_open). */
int store_journal_pool_open(unsigned flags, unsigned want, unsigned *made);

/** Opens (creating, 0600) the journal at `path`, upgrading a format-1 file with `up` (borrowed
 *  for the call). flags: STORE_OPEN_SYNC_FULL for strict durability, STORE_OPEN_PRIVATE. *out
 *  is owned by the caller, release with store_db_close(). TALLY_ESCHEMA for a newer file (the
 *  detail in store_open_errmsg()), TALLY_ECORRUPT, or the upgrade's error. */
TALLY_MUST_CHECK int store_journal_open(const char *path, unsigned flags,
                                        const struct store_upgrade *up, store_db **out /* OUT */);
/** Appends records 0..n-1 from `enc` in one transaction: all or none. */
TALLY_MUST_CHECK int store_journal_append(store_db *db, size_t n, store_record_encode_fn enc,
                                          void *ctx);
/** Replaces every record by records 0..n-1 from `enc` in one transaction (compaction). */
TALLY_MUST_CHECK int store_journal_replace(store_db *db, size_t n, store_record_encode_fn enc,
                                           void *ctx);
/** Calls `visit` for every record in append order. */
TALLY_MUST_CHECK int store_journal_each(store_db *db, store_record_visit_fn visit, void *ctx);

/* A cluster member's copy of a journal (store/journal_copy.c), written by tallyd from the
 * records the cluster's log commits: the same `journal` table, and beside it the log position
 * n of the last record written (changed in that record's transaction: a write whose n is at
 * or below the file's is skipped, TALLY_OK and nothing written) and a staging table, a
 * replacement of the journal assembled chunk by chunk and swapped in at once. */
typedef struct store_journal_copy store_journal_copy;

/** Opens (creating, 0600) the copy at `path`: a journal file not private to one process
 *  (the supervisor reads it too), synchronous=NORMAL, its WAL kept. *out is owned by the
 *  caller, release with store_journal_copy_close(). Errors as store_journal_open. */
TALLY_MUST_CHECK int store_journal_copy_open(const char *path, store_journal_copy **out /* OUT */);
/** Closes the copy (the last connection checkpoints its WAL). NULL is a no-op. */
void store_journal_copy_close(store_journal_copy *c);
/** Closes the copy without a checkpoint (store_db_close_keep_wal): no fsync. */
void store_journal_copy_close_keep_wal(store_journal_copy *c);
/** The journal file underneath (store_journal_each reads the records), valid until close. */
store_db *store_journal_copy_db(store_journal_copy *c);
/** The log position of the last record written: *known false (and *n 0) when none was. */
TALLY_MUST_CHECK int store_journal_copy_applied(store_journal_copy *c, bool *known /* OUT */,
                                                uint64_t *n /* OUT */);
/** Position n: appends records 0..count-1 from `enc` to the journal. */
TALLY_MUST_CHECK int store_journal_copy_append(store_journal_copy *c, uint64_t n, size_t count,
                                               store_record_encode_fn enc, void *ctx);
/** Position n: empties the staging table. */
TALLY_MUST_CHECK int store_journal_copy_stage_begin(store_journal_copy *c, uint64_t n);
/** Position n: appends records 0..count-1 from `enc` to the staging table. */
TALLY_MUST_CHECK int store_journal_copy_stage(store_journal_copy *c, uint64_t n, size_t count,
                                              store_record_encode_fn enc, void *ctx);
/** Position n: the journal's records become the staging table's, in order; staging emptied. */
TALLY_MUST_CHECK int store_journal_copy_stage_end(store_journal_copy *c, uint64_t n);
/** Sets the whole copy, whatever its position (a cluster snapshot restored): the journal is
 *  records 0..count-1 of `enc`, the staging table records 0..staged-1 of `enc_staged`, the
 *  position n. One transaction. */
TALLY_MUST_CHECK int store_journal_copy_reset(store_journal_copy *c, uint64_t n, size_t count,
                                              store_record_encode_fn enc, void *ctx, size_t staged,
                                              store_record_encode_fn enc_staged, void *ctx_staged);
/** Calls `visit` for every record of the staging table in order. */
TALLY_MUST_CHECK int store_journal_copy_each_staged(store_journal_copy *c,
                                                    store_record_visit_fn visit, void *ctx);

#endif /* STORE_JOURNAL_H */

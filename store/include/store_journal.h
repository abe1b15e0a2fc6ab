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
 *  synced; *made counts them. */
int store_journal_pool_fill(unsigned want, unsigned *made);

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

#endif /* STORE_JOURNAL_H */

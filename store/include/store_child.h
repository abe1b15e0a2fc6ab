/*
 * store_child: a child counter's file (tenants/T/endpoints/E.db): its incarnation counter and
 * its lease rows, each row opaque bytes keyed by lease id, encoded and decoded by the child's
 * codec (supervisor/child/child_codec.c). The store owns the file's format version:
 *
 *   PRAGMA user_version 1: tables meta(k, v) and lease(id, rec) of raw struct bytes (0.1.0);
 *   PRAGMA user_version 2: the same tables, each rec a versioned field-by-field encoding.
 *
 * A format-1 file is upgraded in place when opened, in one transaction (rows the codec cannot
 * read are dropped: they were skipped before, and their leases expire as spent at the
 * supervisor); a file of a newer format is refused with TALLY_ESCHEMA and left untouched.
 * Header-wide rules: one thread at a time per handle (the loop at open, then one batch at a
 * time on the thread pool); buffers are borrowed.
 */
#ifndef STORE_CHILD_H
#define STORE_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "store_record.h"

#define STORE_CHILD_FORMAT 2 /* the format this binary writes (and the newest it reads) */

/* Fills write `i` of a batch: *id, and the row's bytes into buf (cap bytes, STORE_RECORD_MAX)
 * with *len set, or *len = 0 to delete row *id. Any other result than TALLY_OK aborts the
 * batch (nothing is written). */
typedef int (*store_child_write_fn)(void *ctx, size_t i, uint64_t *id /* OUT */, uint8_t *buf,
                                    size_t cap, size_t *len /* OUT */);
/* Visits one row (rec, len: valid during the call). Non-OK stops and is returned. */
typedef int (*store_child_visit_fn)(void *ctx, uint64_t id, const uint8_t *rec, size_t len);

/** Opens (creating, 0600) the child file at `path`, upgrading a format-1 file with `up`
 *  (borrowed for the call). *out is owned by the caller, release with store_db_close().
 *  TALLY_ESCHEMA for a newer file, TALLY_ECORRUPT, or the upgrade's error. */
TALLY_MUST_CHECK int store_child_open(const char *path, unsigned flags,
                                      const struct store_upgrade *up, store_db **out /* OUT */);
/** Puts up to `want` new child files in this process's pool (store_pool_use), each written
 *  and synced with its WAL started; *made counts them. */
int store_child_pool_fill(unsigned want, unsigned *made);
/** Keeps up to `want` of the pool's child files open with `flags` (those of store_child_open
 *  calls that will create files): such a create links one into place instead of opening a
 *  file (store_pool_open_drop). *made counts the new ones; none when the pool is empty. */
int store_child_pool_open(unsigned flags, unsigned want, unsigned *made);
/** Adds one to the stored incarnation (0 when none) and returns it in *out, durably under
 *  STORE_OPEN_SYNC_FULL (otherwise call store_db_sync()). With `limits` non-NULL, also swaps
 *  meta "limits" in the same transaction: *limits (today's fingerprint of the limits over the
 *  child's path) is stored, and the one stored before (by the last start, or by the idle
 *  close that parked leases) comes back in *limits, *limits_found saying whether there was
 *  one. */
TALLY_MUST_CHECK int store_child_incarnation_next(store_db *db, uint64_t *out /* OUT */,
                                                  int64_t *limits /* IN/OUT, may be NULL */,
                                                  bool *limits_found /* OUT */);
/** The stored incarnation (0 when none) in *out, read only: the one store_child_incarnation_next
 *  makes next is *out + 1. */
TALLY_MUST_CHECK int store_child_incarnation_peek(store_db *db, uint64_t *out /* OUT */);
/** Stores incarnation `inc` and meta "limits" = `limits` in one transaction, durably under
 *  STORE_OPEN_SYNC_FULL (otherwise call store_db_sync()): what store_child_incarnation_next
 *  does for a file whose incarnation was read by store_child_incarnation_peek (and written by
 *  nothing since), made again as often as it fails. */
TALLY_MUST_CHECK int store_child_incarnation_set(store_db *db, uint64_t inc, int64_t limits);
/** Sets meta value `key` (borrowed) to v, in a transaction of its own. */
TALLY_MUST_CHECK int store_child_meta_put(store_db *db, const char *key, int64_t v);
/** Writes rows 0..n-1 from `write` (upsert by id, or delete) in one transaction. */
TALLY_MUST_CHECK int store_child_write(store_db *db, size_t n, store_child_write_fn write,
                                       void *ctx);
/** Calls `visit` for every row in id order. */
TALLY_MUST_CHECK int store_child_each(store_db *db, store_child_visit_fn visit, void *ctx);

#endif /* STORE_CHILD_H */

/*
 * Internals shared by the files of store/ (never included from outside the folder).
 */
#ifndef STORE_INT_H
#define STORE_INT_H

#include <stdbool.h>

#include "store.h"
#include "store_record.h"

/* Re-encodes every row of `table` (key INTEGER PRIMARY KEY, rec BLOB) from file format
 * `from_format` with `up` into `table`_next (created by the migration step), then puts
 * `table`_next in its place. Runs inside the migration's transaction. `may_drop`: a row
 * the upgrade answers TALLY_ENOTFOUND is left out instead of failing the step. */
int store__rows_upgrade(store_db *db, const char *table, int from_format,
                        const struct store_upgrade *up, bool may_drop);

/* Makes the image a new file of `schema` is written from (store/db.c), if not made yet: the
 * migrations with `step` run once on an in-memory database. */
int store__image_warm(const struct store_schema *schema, store_migrate_fn step);

/* Writes the image of `schema` (made on first use, with `step` and `ctx`; a failure to make
 * it is told in err's errmsg, err may be NULL) into the new file `tmp`, mode 0600, synced.
 * `tmp` is removed again on failure (errno says why). */
int store__image_write(const struct store_schema *schema, store_migrate_fn step, void *ctx,
                       store_db *err, const char *tmp);
/* True when a pool file of `schema` was moved to `tmp` (store/pool.c). */
bool store__pool_take(const struct store_schema *schema, const char *tmp);
/* Fills the pool (store_pool_use) with up to `want` new files of `schema`, each written
 * and synced under a temporary name, then renamed to its place; *made counts them. Nothing
 * to do without a pool. */
int store__pool_fill(const struct store_schema *schema, store_migrate_fn step, unsigned want,
                     unsigned *made);

#endif /* STORE_INT_H */

/*
 * Inside a caller authority (sup_callers.h): its file and its loop.
 */
#ifndef CALLERS_INT_H
#define CALLERS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"
#include "tenant_callers.h"

/* Format of a stored entry or sketch cell (the first byte of each rec). */
#define CALLERS_REC_FORMAT 1
#define CALLERS_REC_MAX    (2 + TENANT_MAX_WINDOWS * 4 * 8 + 8)

/** Opens (creating) the authority's file at `path`. */
TALLY_MUST_CHECK int callers_file_open(const char *path, bool strict, store_db **out /* OUT */);

/** Field by field: format, algorithm, then the state's integers, big-endian. */
size_t callers_rec_encode(enum tenant_algorithm alg, const union tenant_callers_state *st,
                          uint8_t out[CALLERS_REC_MAX]);
/** TALLY_OK, or TALLY_ECORRUPT for a rec that is not one. */
TALLY_MUST_CHECK int callers_rec_decode(const uint8_t *p, size_t len,
                                        enum tenant_algorithm *alg /* OUT */,
                                        union tenant_callers_state *st /* OUT */);

/* Rows: call between store_db_begin() and store_db_end(). */
TALLY_MUST_CHECK int callers_file_put(store_db *db, const char *ep, enum tenant_algorithm alg,
                                      const struct tenant_callers_entry *e);
TALLY_MUST_CHECK int callers_file_del(store_db *db, const char *ep,
                                      const unsigned char key[TENANT_CALLER_KEY_BYTES]);
TALLY_MUST_CHECK int callers_file_put_cell(store_db *db, const char *ep, enum tenant_algorithm alg,
                                           uint32_t cell, const union tenant_callers_state *st);
/** Deletes the entries whole again at now_ms (what the tables reclaimed). */
TALLY_MUST_CHECK int callers_file_purge(store_db *db, int64_t now_ms);
/** Deletes every row of endpoint `ep` (its algorithm changed: its counts mean nothing). */
TALLY_MUST_CHECK int callers_file_drop(store_db *db, const char *ep);

/* Reading back at start. A callback's non-zero return stops and is returned. */
typedef int (*callers_entry_fn)(void *ctx, const char *ep, enum tenant_algorithm alg,
                                const struct tenant_callers_entry *e);
typedef int (*callers_cell_fn)(void *ctx, const char *ep, enum tenant_algorithm alg, uint32_t cell,
                               const union tenant_callers_state *st);
TALLY_MUST_CHECK int callers_file_load(store_db *db, callers_entry_fn on_entry,
                                       callers_cell_fn on_cell, void *ctx);

#endif /* CALLERS_INT_H */

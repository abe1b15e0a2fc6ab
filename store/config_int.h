/*
 * Internals shared by config.c (schema, plans, endpoints, links) and config_tenant.c (tenants):
 * the statement indexes of the configuration schema and the row helpers. Not installed.
 */
#ifndef STORE_CONFIG_INT_H
#define STORE_CONFIG_INT_H

#include <sqlite3.h>

#include "store_config.h"

enum config_stmt {
    S_PLAN_PUT,
    S_PLAN_GET,
    S_PLAN_DELETE,
    S_PLAN_EACH,
    S_PLAN_USERS,
    S_EP_PUT,
    S_EP_GET,
    S_EP_DELETE,
    S_EP_DELETE_PLAN,
    S_EP_EACH,
    S_TENANT_ADD,
    S_TENANT_GET,
    S_TENANT_SET_PLAN,
    S_TENANT_REMOVE,
    S_TENANT_EACH,
    S_TENANT_SET_DAY,
    S_TENANT_SET_OVR,
    S_LINK_INSERT,
    S_LINK_BY_HASH,
    S_LINK_BY_ID,
    S_LINK_REVOKE,
    S_LINK_EACH,
    S_LINK_LIVE_COUNT,
    S_EP_NAMES_COUNT,
    S_EP_KEY_OTHER,
    S_APPLIED_GET,
    S_APPLIED_PUT,
    S__COUNT
};

/** The schema of tally.db (for a copy checked before it is put in place). */
const struct store_schema *store__config_schema(void);
/** Steps a bound statement that reads at most one row: TALLY_OK with the row ready,
 *  TALLY_ENOTFOUND when there is none, else the error. The caller reads and resets. */
int store__step_row(store_db *db, sqlite3_stmt *st);
/** Runs a statement expected to change rows; TALLY_ENOTFOUND when none changed. */
int store__step_change(store_db *db, sqlite3_stmt *st);
/** Copies text column `col` ("" when NULL) into dst of `len` bytes. */
void store__copy_text(char *dst, size_t len, sqlite3_stmt *st, int col);
/** Parses limits column `col`: TALLY_OK or TALLY_ECORRUPT. */
int store__limits_col(sqlite3_stmt *st, int col, struct tenant_limits *out /* OUT */);
/** Binds the canonical text of `ls` to parameter `idx`. */
void store__bind_limits(sqlite3_stmt *st, int idx, const struct tenant_limits *ls);

/* Steps statement `idx` (bound to `arg` unless NULL), calling cb with each row read by row_fn;
 * returns from the calling function with the result. */
#define EACH_ROWS(db, idx, arg, type, row_fn, cb, ctx)                                             \
    do {                                                                                           \
        sqlite3_stmt *st_ = store_db_stmt((db), (idx));                                            \
        type item_;                                                                                \
        int step_;                                                                                 \
        int rc_ = TALLY_OK;                                                                        \
        if ((arg) != NULL)                                                                         \
            sqlite3_bind_text(st_, 1, (arg), -1, SQLITE_STATIC);                                   \
        while (rc_ == TALLY_OK && (step_ = sqlite3_step(st_)) == SQLITE_ROW) {                     \
            rc_ = row_fn(st_, &item_);                                                             \
            if (rc_ == TALLY_OK)                                                                   \
                rc_ = (cb)((ctx), &item_);                                                         \
        }                                                                                          \
        if (rc_ == TALLY_OK && step_ != SQLITE_DONE)                                               \
            rc_ = store_db_rc((db), step_);                                                        \
        sqlite3_reset(st_);                                                                        \
        return rc_;                                                                                \
    } while (0)

#endif /* STORE_CONFIG_INT_H */

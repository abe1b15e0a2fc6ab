/*
 * Tenants in the configuration database: which plan each has, its billing day (the day its
 * months start) and the values it overrides of its plan (a custom contract: NULL columns take
 * the plan's). store_tenant_effective() is the one place where a plan becomes a tenant's.
 */
#include "config_int.h"

#include <stdio.h>
#include <string.h>

int
store_tenant_add(store_db *db, const char *id, const char *plan, int64_t now_ms)
{
    struct tenant_plan p;
    sqlite3_stmt *st;
    int rc = store_plan_get(db, plan, &p);

    if (rc != TALLY_OK)
        return rc;
    st = store_db_stmt(db, S_TENANT_ADD);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, plan, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, now_ms);
    sqlite3_bind_int64(st, 4, 1); /* store_tenant_set_billing_day() changes it */
    return store__step_change(db, st);
}

int
store_tenant_set_plan(store_db *db, const char *id, const char *plan)
{
    struct tenant_plan p;
    sqlite3_stmt *st;
    int rc = store_plan_get(db, plan, &p);

    if (rc != TALLY_OK)
        return rc;
    st = store_db_stmt(db, S_TENANT_SET_PLAN);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, plan, -1, SQLITE_STATIC);
    return store__step_change(db, st);
}

static int
tenant_row(sqlite3_stmt *st, struct store_tenant *out)
{
    int rc = TALLY_OK;

    memset(out, 0, sizeof(*out));
    store__copy_text(out->id, sizeof(out->id), st, 0);
    store__copy_text(out->plan, sizeof(out->plan), st, 1);
    out->created_ms = sqlite3_column_int64(st, 2);
    out->links_live = sqlite3_column_int64(st, 3);
    out->billing_day = sqlite3_column_int64(st, 4);
    if (out->billing_day < 1 || out->billing_day > TENANT_BILLING_DAY_MAX)
        rc = TALLY_ECORRUPT;
    if (rc == TALLY_OK && sqlite3_column_type(st, 5) != SQLITE_NULL) {
        out->overrides |= STORE_OVR_LIMITS;
        rc = store__limits_col(st, 5, &out->limits);
    }
    if (rc == TALLY_OK && sqlite3_column_type(st, 6) != SQLITE_NULL) {
        out->overrides |= STORE_OVR_LINK_LIMITS;
        rc = store__limits_col(st, 6, &out->link_limits);
    }
    if (rc == TALLY_OK && sqlite3_column_type(st, 7) != SQLITE_NULL) {
        out->overrides |= STORE_OVR_CONCURRENCY;
        out->concurrency = sqlite3_column_int64(st, 7);
        if (out->concurrency < 0 || out->concurrency > TENANT_CONCURRENCY_MAX)
            rc = TALLY_ECORRUPT;
    }
    return rc;
}

int
store_tenant_set_billing_day(store_db *db, const char *id, int64_t day)
{
    sqlite3_stmt *st;

    if (day < 1 || day > TENANT_BILLING_DAY_MAX)
        return TALLY_EINVAL;
    st = store_db_stmt(db, S_TENANT_SET_DAY);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, day);
    return store__step_change(db, st);
}

int
store_tenant_set_overrides(store_db *db, const struct store_tenant *t)
{
    sqlite3_stmt *st = store_db_stmt(db, S_TENANT_SET_OVR);

    sqlite3_bind_text(st, 1, t->id, -1, SQLITE_STATIC);
    if (t->overrides & STORE_OVR_LIMITS)
        store__bind_limits(st, 2, &t->limits);
    else
        sqlite3_bind_null(st, 2);
    if (t->overrides & STORE_OVR_LINK_LIMITS)
        store__bind_limits(st, 3, &t->link_limits);
    else
        sqlite3_bind_null(st, 3);
    if (t->overrides & STORE_OVR_CONCURRENCY)
        sqlite3_bind_int64(st, 4, t->concurrency);
    else
        sqlite3_bind_null(st, 4);
    return store__step_change(db, st);
}

void
store_tenant_effective(const struct store_tenant *t, const struct tenant_plan *plan,
                       struct tenant_plan *out)
{
    *out = *plan;
    if (t->overrides & STORE_OVR_LIMITS)
        out->limits = t->limits;
    if (t->overrides & STORE_OVR_LINK_LIMITS)
        out->link_limits = t->link_limits;
    if (t->overrides & STORE_OVR_CONCURRENCY)
        out->concurrency = t->concurrency;
    tenant_limits_bind_month(&out->limits, t->billing_day);
    tenant_limits_bind_month(&out->link_limits, t->billing_day);
}

int
store_tenant_get(store_db *db, const char *id, struct store_tenant *out)
{
    sqlite3_stmt *st = store_db_stmt(db, S_TENANT_GET);
    int rc;

    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc = store__step_row(db, st);
    if (rc == TALLY_OK)
        rc = tenant_row(st, out);
    sqlite3_reset(st);
    return rc;
}

int
store_tenant_remove(store_db *db, const char *id)
{
    sqlite3_stmt *st = store_db_stmt(db, S_TENANT_REMOVE);

    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    return store__step_change(db, st);
}

int
store_tenant_each(store_db *db, store_tenant_cb cb, void *ctx)
{
    const char *none = NULL;
    EACH_ROWS(db, S_TENANT_EACH, none, struct store_tenant, tenant_row, cb, ctx);
}

/*
 * The configuration database: schema, migrations and the statements behind
 * store_config.h. Limits are stored in their canonical text ("600/1m,36000/1h")
 * and parsed back with the same strict parser the command line uses, so the
 * file and the CLI can never disagree on what a limit means.
 */
#include "config_int.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

static const char *const config_migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE plan("
    "  name TEXT PRIMARY KEY,"
    "  limits TEXT NOT NULL,"
    "  link_limits TEXT NOT NULL DEFAULT '',"
    "  concurrency INTEGER NOT NULL DEFAULT 0"
    ") STRICT;"
    "CREATE TABLE endpoint("
    "  plan TEXT NOT NULL DEFAULT '',"
    "  name TEXT NOT NULL,"
    "  limits TEXT NOT NULL,"
    "  tenant_limits TEXT NOT NULL DEFAULT '',"
    "  degraded_limits TEXT NOT NULL DEFAULT '',"
    "  algorithm INTEGER NOT NULL DEFAULT 0,"
    "  on_unavailable INTEGER NOT NULL DEFAULT 0,"
    "  cost INTEGER NOT NULL DEFAULT 1,"
    "  expensive INTEGER NOT NULL DEFAULT 0,"
    "  shadow INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY(plan, name)"
    ") STRICT;"
    "CREATE TABLE tenant("
    "  id TEXT PRIMARY KEY,"
    "  plan TEXT NOT NULL REFERENCES plan(name),"
    "  created_ms INTEGER NOT NULL"
    ") STRICT;"
    "CREATE TABLE link("
    "  id TEXT PRIMARY KEY,"
    "  tenant TEXT NOT NULL REFERENCES tenant(id) ON DELETE CASCADE,"
    "  hash BLOB NOT NULL UNIQUE,"
    "  endpoints TEXT NOT NULL DEFAULT '',"
    "  created_ms INTEGER NOT NULL,"
    "  expires_ms INTEGER NOT NULL DEFAULT 0,"
    "  revoked_ms INTEGER NOT NULL DEFAULT 0"
    ") STRICT;"
    "CREATE INDEX link_tenant ON link(tenant);",
    /* 1 -> 2: a plan's cap on live links per tenant (0 = TENANT_MAX_LINKS) */
    "ALTER TABLE plan ADD COLUMN max_links INTEGER NOT NULL DEFAULT 0;",
    /* 2 -> 3: endpoints keyed by caller (key 1) and their exact-table ceiling */
    ("ALTER TABLE endpoint ADD COLUMN key INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE endpoint ADD COLUMN max_callers INTEGER NOT NULL DEFAULT 0;"),
    /* 3 -> 4: a tenant's billing day (its months start there) and its own limits, which
     * override the plan's (NULL: the plan's) */
    "ALTER TABLE tenant ADD COLUMN billing_day INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE tenant ADD COLUMN limits TEXT;"
    "ALTER TABLE tenant ADD COLUMN link_limits TEXT;"
    "ALTER TABLE tenant ADD COLUMN concurrency INTEGER;",
    /* 4 -> 5: in a cluster, the log record the file reflects (store/config_changes.c): the
     * index of the last CONFIG record applied, one row (none: nothing applied yet) */
    "CREATE TABLE cluster_applied("
    "  id INTEGER PRIMARY KEY CHECK(id = 1),"
    "  idx INTEGER NOT NULL"
    ") STRICT;",
};

#define LINK_COLS "id, tenant, hash, endpoints, created_ms, expires_ms, revoked_ms"
#define EP_COLS                                                                                    \
    "plan, name, limits, tenant_limits, degraded_limits, algorithm, on_unavailable, cost, "        \
    "expensive, shadow, key, max_callers"
#define TENANT_COLS                                                                                \
    "id, plan, created_ms, (SELECT count(*) FROM link WHERE link.tenant = tenant.id AND "          \
    "revoked_ms = 0), billing_day, limits, link_limits, concurrency"

static const char *const config_statements[S__COUNT] = {
    [S_PLAN_PUT] = "INSERT INTO plan(name, limits, link_limits, concurrency, max_links)"
                   " VALUES(?1,?2,?3,?4,?5) ON CONFLICT(name) DO UPDATE SET limits=?2,"
                   " link_limits=?3, concurrency=?4, max_links=?5",
    [S_PLAN_GET] =
        "SELECT name, limits, link_limits, concurrency, max_links FROM plan WHERE name=?1",
    [S_PLAN_DELETE] = "DELETE FROM plan WHERE name=?1",
    [S_PLAN_EACH] =
        "SELECT name, limits, link_limits, concurrency, max_links FROM plan ORDER BY name",
    [S_PLAN_USERS] = "SELECT count(*) FROM tenant WHERE plan=?1",
    [S_EP_PUT] = "INSERT OR REPLACE INTO endpoint(" EP_COLS
                 ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
    [S_EP_GET] = "SELECT " EP_COLS " FROM endpoint WHERE plan=?1 AND name=?2",
    [S_EP_DELETE] = "DELETE FROM endpoint WHERE plan=?1 AND name=?2",
    [S_EP_DELETE_PLAN] = "DELETE FROM endpoint WHERE plan=?1",
    [S_EP_EACH] = "SELECT " EP_COLS " FROM endpoint ORDER BY plan, name",
    [S_TENANT_ADD] = "INSERT INTO tenant(id, plan, created_ms, billing_day) VALUES(?1,?2,?3,?4)",
    [S_TENANT_GET] = "SELECT " TENANT_COLS " FROM tenant WHERE id=?1",
    [S_TENANT_SET_PLAN] = "UPDATE tenant SET plan=?2 WHERE id=?1",
    [S_TENANT_REMOVE] = "DELETE FROM tenant WHERE id=?1",
    [S_TENANT_EACH] = "SELECT " TENANT_COLS " FROM tenant ORDER BY id",
    [S_TENANT_SET_DAY] = "UPDATE tenant SET billing_day=?2 WHERE id=?1",
    [S_TENANT_SET_OVR] = "UPDATE tenant SET limits=?2, link_limits=?3, concurrency=?4 WHERE id=?1",
    [S_LINK_INSERT] = "INSERT INTO link(" LINK_COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7)",
    [S_LINK_BY_HASH] = "SELECT " LINK_COLS " FROM link WHERE hash=?1",
    [S_LINK_BY_ID] = "SELECT " LINK_COLS " FROM link WHERE id=?1",
    [S_LINK_REVOKE] = "UPDATE link SET revoked_ms=?2 WHERE id=?1 AND revoked_ms=0",
    [S_LINK_EACH] = "SELECT " LINK_COLS " FROM link WHERE tenant=?1 ORDER BY created_ms, id",
    [S_LINK_LIVE_COUNT] = ("SELECT count(*) FROM link WHERE tenant=?1 AND revoked_ms=0"
                           " AND (expires_ms=0 OR expires_ms>?2)"),
    [S_EP_NAMES_COUNT] = "SELECT count(DISTINCT name) FROM endpoint",
    [S_EP_KEY_OTHER] = "SELECT count(*) FROM endpoint WHERE name=?1 AND key<>?2 AND plan<>?3",
    [S_APPLIED_GET] = "SELECT idx FROM cluster_applied WHERE id=1",
    [S_APPLIED_PUT] = "INSERT INTO cluster_applied(id, idx) VALUES(1, ?1)"
                      " ON CONFLICT(id) DO UPDATE SET idx=?1",
};

static const struct store_schema config_schema = {
    .name = "config",
    .migrations = config_migrations,
    .n_migrations = (int)(sizeof(config_migrations) / sizeof(config_migrations[0])),
    .statements = config_statements,
    .n_statements = S__COUNT,
};

const struct store_schema *
store__config_schema(void)
{
    return &config_schema;
}

int
store_config_open(const char *dir, bool create, store_db **out)
{
    char path[STORE_PATH_MAX];

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, STORE_CONFIG_FILE) >= sizeof(path))
        return TALLY_ETOOBIG;
    return store_db_open(path, &config_schema,
                         create ? STORE_OPEN_CREATE | STORE_OPEN_SYNC_FULL : STORE_OPEN_SYNC_FULL,
                         out);
}

/* Runs a statement expected to change rows; TALLY_ENOTFOUND when none changed. */
int
store__step_row(store_db *db, sqlite3_stmt *st)
{
    int step = sqlite3_step(st);

    if (step == SQLITE_ROW)
        return TALLY_OK;
    return step == SQLITE_DONE ? TALLY_ENOTFOUND : store_db_rc(db, step);
}

int
store__step_change(store_db *db, sqlite3_stmt *st)
{
    int rc = store_db_rc(db, sqlite3_step(st));

    if (rc == TALLY_OK && sqlite3_changes(store_db_handle(db)) == 0)
        rc = TALLY_ENOTFOUND;
    sqlite3_reset(st);
    return rc;
}

void
store__copy_text(char *dst, size_t len, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);

    snprintf(dst, len, "%s", t != NULL ? (const char *)t : "");
}

int
store__limits_col(sqlite3_stmt *st, int col, struct tenant_limits *out)
{
    return tenant_limits_parse((const char *)sqlite3_column_text(st, col), out) == TALLY_OK
               ? TALLY_OK
               : TALLY_ECORRUPT;
}

void
store__bind_limits(sqlite3_stmt *st, int idx, const struct tenant_limits *ls)
{
    char text[TENANT_MAX_WINDOWS * TENANT_LIMIT_TEXT_MAX];

    tenant_limits_format(ls, text, sizeof(text));
    sqlite3_bind_text(st, idx, text, -1, SQLITE_TRANSIENT);
}

/* ---- plans ---- */

int
store_plan_put(store_db *db, const struct tenant_plan *p)
{
    sqlite3_stmt *st = store_db_stmt(db, S_PLAN_PUT);

    sqlite3_bind_text(st, 1, p->name, -1, SQLITE_STATIC);
    store__bind_limits(st, 2, &p->limits);
    store__bind_limits(st, 3, &p->link_limits);
    sqlite3_bind_int64(st, 4, p->concurrency);
    sqlite3_bind_int64(st, 5, p->max_links);
    return store__step_change(db, st);
}

static int
plan_row(sqlite3_stmt *st, struct tenant_plan *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    store__copy_text(out->name, sizeof(out->name), st, 0);
    rc = store__limits_col(st, 1, &out->limits);
    if (rc == TALLY_OK)
        rc = store__limits_col(st, 2, &out->link_limits);
    out->concurrency = sqlite3_column_int64(st, 3);
    out->max_links = sqlite3_column_int64(st, 4);
    return rc;
}

int
store_plan_get(store_db *db, const char *name, struct tenant_plan *out)
{
    sqlite3_stmt *st = store_db_stmt(db, S_PLAN_GET);
    int rc;

    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = store__step_row(db, st);
    if (rc == TALLY_OK)
        rc = plan_row(st, out);
    sqlite3_reset(st);
    return rc;
}

static int64_t
count_query(store_db *db, int idx, const char *arg)
{
    sqlite3_stmt *st = store_db_stmt(db, idx);
    int64_t n = -1;

    sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return n;
}

int
store_plan_delete(store_db *db, const char *name)
{
    sqlite3_stmt *st;
    int64_t users = count_query(db, S_PLAN_USERS, name);
    int rc;

    if (users != 0)
        return users < 0 ? TALLY_ESTORE : TALLY_EINUSE;
    st = store_db_stmt(db, S_EP_DELETE_PLAN);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = store_db_rc(db, sqlite3_step(st));
    sqlite3_reset(st);
    if (rc != TALLY_OK)
        return rc;
    st = store_db_stmt(db, S_PLAN_DELETE);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    return store__step_change(db, st);
}

/* Iterates rows of statement `idx` bound with `arg` (or nothing when NULL). */

int
store_plan_each(store_db *db, store_plan_cb cb, void *ctx)
{
    const char *none = NULL;
    EACH_ROWS(db, S_PLAN_EACH, none, struct tenant_plan, plan_row, cb, ctx);
}

/* ---- endpoints ---- */

int
store_endpoint_put(store_db *db, const struct tenant_endpoint *e)
{
    sqlite3_stmt *st = store_db_stmt(db, S_EP_PUT);

    sqlite3_bind_text(st, 1, e->plan, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, e->name, -1, SQLITE_STATIC);
    store__bind_limits(st, 3, &e->limits);
    store__bind_limits(st, 4, &e->tenant_limits);
    store__bind_limits(st, 5, &e->degraded_limits);
    sqlite3_bind_int(st, 6, (int)e->algorithm);
    sqlite3_bind_int(st, 7, (int)e->on_unavailable);
    sqlite3_bind_int64(st, 8, e->cost);
    sqlite3_bind_int(st, 9, e->expensive ? 1 : 0);
    sqlite3_bind_int(st, 10, e->shadow ? 1 : 0);
    sqlite3_bind_int(st, 11, (int)e->key);
    sqlite3_bind_int64(st, 12, e->max_callers);
    return store__step_change(db, st);
}

static int
endpoint_row(sqlite3_stmt *st, struct tenant_endpoint *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    store__copy_text(out->plan, sizeof(out->plan), st, 0);
    store__copy_text(out->name, sizeof(out->name), st, 1);
    rc = store__limits_col(st, 2, &out->limits);
    if (rc == TALLY_OK)
        rc = store__limits_col(st, 3, &out->tenant_limits);
    if (rc == TALLY_OK)
        rc = store__limits_col(st, 4, &out->degraded_limits);
    out->algorithm = sqlite3_column_int(st, 5) == 1 ? TENANT_ALG_GCRA : TENANT_ALG_WINDOW;
    out->on_unavailable =
        sqlite3_column_int(st, 6) == 1 ? TENANT_UNAVAIL_OPEN : TENANT_UNAVAIL_CLOSED;
    out->cost = sqlite3_column_int64(st, 7);
    out->expensive = sqlite3_column_int(st, 8) != 0;
    out->shadow = sqlite3_column_int(st, 9) != 0;
    out->key = sqlite3_column_int(st, 10) == 1 ? TENANT_KEY_CALLER : TENANT_KEY_TOKEN;
    out->max_callers = sqlite3_column_int64(st, 11);
    if (out->max_callers < 0 || out->max_callers > TENANT_MAX_CALLERS_MAX)
        rc = TALLY_ECORRUPT;
    return rc;
}

int
store_endpoint_get(store_db *db, const char *plan, const char *name, struct tenant_endpoint *out)
{
    sqlite3_stmt *st = store_db_stmt(db, S_EP_GET);
    int rc;

    sqlite3_bind_text(st, 1, plan, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    rc = store__step_row(db, st);
    if (rc == TALLY_OK)
        rc = endpoint_row(st, out);
    sqlite3_reset(st);
    return rc;
}

int
store_endpoint_resolve(store_db *db, const char *plan, const char *name,
                       struct tenant_endpoint *out)
{
    int rc = store_endpoint_get(db, plan, name, out);

    if (rc == TALLY_ENOTFOUND)
        rc = store_endpoint_get(db, "", name, out);
    return rc;
}

int
store_endpoint_delete(store_db *db, const char *plan, const char *name)
{
    sqlite3_stmt *st = store_db_stmt(db, S_EP_DELETE);

    sqlite3_bind_text(st, 1, plan, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    return store__step_change(db, st);
}

int
store_endpoint_each(store_db *db, store_endpoint_cb cb, void *ctx)
{
    const char *none = NULL;
    EACH_ROWS(db, S_EP_EACH, none, struct tenant_endpoint, endpoint_row, cb, ctx);
}

int
store_endpoint_key_other(store_db *db, const struct tenant_endpoint *e, int64_t *out)
{
    sqlite3_stmt *st = store_db_stmt(db, S_EP_KEY_OTHER);
    int step;
    int rc;

    sqlite3_bind_text(st, 1, e->name, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, (int)e->key);
    sqlite3_bind_text(st, 3, e->plan, -1, SQLITE_STATIC);
    step = sqlite3_step(st);
    rc = step == SQLITE_ROW ? TALLY_OK : store_db_rc(db, step);
    *out = rc == TALLY_OK ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return rc;
}

int
store_endpoint_names(store_db *db, int64_t *out)
{
    sqlite3_stmt *st = store_db_stmt(db, S_EP_NAMES_COUNT);
    int step = sqlite3_step(st);
    int rc = step == SQLITE_ROW ? TALLY_OK : store_db_rc(db, step);

    *out = rc == TALLY_OK ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return rc;
}

/* ---- links ---- */

int
store_link_live_count(store_db *db, const char *tenant, int64_t now_ms, int64_t *out)
{
    sqlite3_stmt *st = store_db_stmt(db, S_LINK_LIVE_COUNT);
    int step;
    int rc;

    sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now_ms);
    step = sqlite3_step(st);
    rc = step == SQLITE_ROW ? TALLY_OK : store_db_rc(db, step);
    *out = rc == TALLY_OK ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return rc;
}

int
store_link_insert(store_db *db, const struct store_link *l)
{
    sqlite3_stmt *st = store_db_stmt(db, S_LINK_INSERT);

    sqlite3_bind_text(st, 1, l->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, l->tenant, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, l->hash, TENANT_HASH_BYTES, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, l->endpoints, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, l->created_ms);
    sqlite3_bind_int64(st, 6, l->expires_ms);
    sqlite3_bind_int64(st, 7, l->revoked_ms);
    return store__step_change(db, st);
}

static int
link_row(sqlite3_stmt *st, struct store_link *out)
{
    const void *hash = sqlite3_column_blob(st, 2);

    memset(out, 0, sizeof(*out));
    store__copy_text(out->id, sizeof(out->id), st, 0);
    store__copy_text(out->tenant, sizeof(out->tenant), st, 1);
    if (hash == NULL || sqlite3_column_bytes(st, 2) != TENANT_HASH_BYTES)
        return TALLY_ECORRUPT;
    memcpy(out->hash, hash, TENANT_HASH_BYTES);
    store__copy_text(out->endpoints, sizeof(out->endpoints), st, 3);
    out->created_ms = sqlite3_column_int64(st, 4);
    out->expires_ms = sqlite3_column_int64(st, 5);
    out->revoked_ms = sqlite3_column_int64(st, 6);
    return TALLY_OK;
}

static int
link_lookup(store_db *db, int idx, const void *key, int key_len, struct store_link *out)
{
    sqlite3_stmt *st = store_db_stmt(db, idx);
    int rc;

    if (key_len < 0)
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    else
        sqlite3_bind_blob(st, 1, key, key_len, SQLITE_STATIC);
    rc = store__step_row(db, st);
    if (rc == TALLY_OK)
        rc = link_row(st, out);
    sqlite3_reset(st);
    return rc;
}

int
store_link_by_hash(store_db *db, const unsigned char hash[TENANT_HASH_BYTES],
                   struct store_link *out)
{
    return link_lookup(db, S_LINK_BY_HASH, hash, TENANT_HASH_BYTES, out);
}

int
store_link_by_id(store_db *db, const char *id, struct store_link *out)
{
    return link_lookup(db, S_LINK_BY_ID, id, -1, out);
}

int
store_link_revoke(store_db *db, const char *id, int64_t now_ms)
{
    struct store_link l;
    sqlite3_stmt *st;
    int rc = store_link_by_id(db, id, &l);

    if (rc != TALLY_OK || l.revoked_ms != 0)
        return rc;
    st = store_db_stmt(db, S_LINK_REVOKE);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now_ms);
    return store__step_change(db, st);
}

int
store_link_each(store_db *db, const char *tenant, store_link_cb cb, void *ctx)
{
    EACH_ROWS(db, S_LINK_EACH, tenant, struct store_link, link_row, cb, ctx);
}

bool
store_link_allows(const struct store_link *l, const char *endpoint, int64_t now_ms)
{
    if (l->revoked_ms != 0 || (l->expires_ms != 0 && now_ms >= l->expires_ms))
        return false;
    return l->endpoints[0] == '\0' || tenant_name_list_has(l->endpoints, endpoint);
}

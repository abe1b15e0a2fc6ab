/*
 * The in-memory configuration of store_snapshot.h. Links live in one array
 * indexed by an open-addressing table keyed by the token hash (keyed BLAKE2b:
 * uniformly random, so its first bytes are a fine bucket index and an
 * attacker cannot aim collisions without the deployment key). Everything is
 * allocated at load; lookups only probe.
 */
#include "store_snapshot.h"

#include "tenant_index.h"

#include <sodium.h>
#include <sqlite3.h>
#include <string.h>

struct store_snapshot {
    struct tenant_plan *plans;
    size_t n_plans, cap_plans;
    struct tenant_endpoint *endpoints;
    size_t n_endpoints, cap_endpoints;
    struct store_snap_tenant *tenants;
    size_t n_tenants, cap_tenants;
    struct tenant_plan *own; /* plans of tenants that differ from theirs (store_tenant_effective) */
    size_t n_own, cap_own;
    size_t *own_of; /* during load only: per tenant, index into own + 1, 0 = the shared plan */
    size_t cap_own_of;
    struct store_snap_link *links;
    size_t n_links, cap_links;
    char **tenant_of_link; /* during load only: tenant id per link */
    char *pool;            /* endpoint restriction strings */
    size_t pool_len, pool_cap;
    uint32_t *table; /* link index + 1, 0 = empty; size mask + 1 */
    uint32_t *by_id; /* the same, keyed by link id */
    size_t mask;
    struct tenant_index tenant_ix; /* tenant id -> index into tenants */
    int64_t version;
};

static int
grow(void **items, size_t *cap, size_t n, size_t size)
{
    size_t want;
    void *p;

    if (n < *cap)
        return TALLY_OK;
    want = *cap == 0 ? 16 : *cap * 2;
    p = tally_realloc(*items, want * size);
    if (p == NULL)
        return TALLY_ENOMEM;
    *items = p;
    *cap = want;
    return TALLY_OK;
}

static int
add_plan(void *ctx, const struct tenant_plan *p)
{
    store_snapshot *s = ctx;
    int rc = grow((void **)&s->plans, &s->cap_plans, s->n_plans, sizeof(*s->plans));

    if (rc == TALLY_OK)
        s->plans[s->n_plans++] = *p;
    return rc;
}

static int
add_endpoint(void *ctx, const struct tenant_endpoint *e)
{
    store_snapshot *s = ctx;
    int rc = grow((void **)&s->endpoints, &s->cap_endpoints, s->n_endpoints, sizeof(*s->endpoints));

    if (rc == TALLY_OK)
        s->endpoints[s->n_endpoints++] = *e;
    return rc;
}

static const struct tenant_plan *
find_plan(const store_snapshot *s, const char *name)
{
    size_t i;

    for (i = 0; i < s->n_plans; i++) {
        if (strcmp(s->plans[i].name, name) == 0)
            return &s->plans[i];
    }
    return NULL;
}

static int
add_tenant(void *ctx, const struct store_tenant *t)
{
    store_snapshot *s = ctx;
    int rc = grow((void **)&s->tenants, &s->cap_tenants, s->n_tenants, sizeof(*s->tenants));
    struct store_snap_tenant *st;

    if (rc != TALLY_OK)
        return rc;
    rc = grow((void **)&s->own_of, &s->cap_own_of, s->n_tenants, sizeof(*s->own_of));
    if (rc != TALLY_OK)
        return rc;
    st = &s->tenants[s->n_tenants];
    snprintf(st->id, sizeof(st->id), "%s", t->id);
    st->plan = find_plan(s, t->plan);
    st->billing_day = t->billing_day;
    st->overrides = t->overrides;
    if (st->plan == NULL)
        return TALLY_ECORRUPT; /* the foreign key forbids it */
    s->own_of[s->n_tenants] = 0;
    /* Pointers into `own` are set once it stops moving (own_plans_fix). */
    if (t->overrides != 0 ||
        (t->billing_day != 1 && (tenant_limits_have_month(&st->plan->limits) ||
                                 tenant_limits_have_month(&st->plan->link_limits)))) {
        rc = grow((void **)&s->own, &s->cap_own, s->n_own, sizeof(*s->own));
        if (rc != TALLY_OK)
            return rc;
        store_tenant_effective(t, st->plan, &s->own[s->n_own++]);
        s->own_of[s->n_tenants] = s->n_own;
    }
    s->n_tenants++;
    return TALLY_OK;
}

static void
own_plans_fix(store_snapshot *s)
{
    for (size_t i = 0; i < s->n_tenants; i++) {
        if (s->own_of[i] != 0)
            s->tenants[i].plan = &s->own[s->own_of[i] - 1];
    }
    tally_free(s->own_of);
    s->own_of = NULL;
}

/* Pool offsets are stored in the endpoints pointer until the pool stops moving. */
static int
pool_add(store_snapshot *s, const char *str, size_t *off)
{
    size_t n = strlen(str) + 1;

    while (s->pool_len + n > s->pool_cap) {
        size_t want = s->pool_cap == 0 ? 4096 : s->pool_cap * 2;
        char *p = tally_realloc(s->pool, want);
        if (p == NULL)
            return TALLY_ENOMEM;
        s->pool = p;
        s->pool_cap = want;
    }
    memcpy(s->pool + s->pool_len, str, n);
    *off = s->pool_len;
    s->pool_len += n;
    return TALLY_OK;
}

struct link_load {
    store_snapshot *s;
    size_t tenant;      /* index of the tenant whose links are loading */
    size_t *tenant_idx; /* per link: index into tenants */
    size_t cap_idx;
    size_t *pool_off;
    size_t cap_off;
};

static int
add_link(void *ctx, const struct store_link *l)
{
    struct link_load *ld = ctx;
    store_snapshot *s = ld->s;
    struct store_snap_link *sl;
    int rc = grow((void **)&s->links, &s->cap_links, s->n_links, sizeof(*s->links));

    if (rc == TALLY_OK)
        rc = grow((void **)&ld->tenant_idx, &ld->cap_idx, s->n_links, sizeof(size_t));
    if (rc == TALLY_OK)
        rc = grow((void **)&ld->pool_off, &ld->cap_off, s->n_links, sizeof(size_t));
    if (rc != TALLY_OK)
        return rc;
    sl = &s->links[s->n_links];
    memset(sl, 0, sizeof(*sl));
    memcpy(sl->hash, l->hash, TENANT_HASH_BYTES);
    snprintf(sl->id, sizeof(sl->id), "%s", l->id);
    sl->expires_ms = l->expires_ms;
    sl->revoked = l->revoked_ms != 0;
    ld->tenant_idx[s->n_links] = ld->tenant;
    rc = pool_add(s, l->endpoints, &ld->pool_off[s->n_links]);
    if (rc != TALLY_OK)
        return rc;
    s->n_links++;
    return TALLY_OK;
}

static uint64_t
hash_index(const unsigned char *h)
{
    uint64_t v;

    memcpy(&v, h, sizeof(v));
    return v;
}

/* FNV-1a of a link id: ids are random hex, so any mixing hash spreads them. */
static uint64_t
id_index(const char *id)
{
    uint64_t h = 1469598103934665603ULL;

    for (; *id != '\0'; id++)
        h = (h ^ (unsigned char)*id) * 1099511628211ULL;
    return h;
}

static int
build_table(store_snapshot *s)
{
    size_t size = 16;
    size_t i;

    while (size < s->n_links * 2)
        size *= 2;
    s->table = tally_calloc(size, sizeof(*s->table));
    s->by_id = tally_calloc(size, sizeof(*s->by_id));
    if (s->table == NULL || s->by_id == NULL)
        return TALLY_ENOMEM;
    s->mask = size - 1;
    for (i = 0; i < s->n_links; i++) {
        size_t at = (size_t)hash_index(s->links[i].hash) & s->mask;
        while (s->table[at] != 0)
            at = (at + 1) & s->mask;
        s->table[at] = (uint32_t)(i + 1);
        at = (size_t)id_index(s->links[i].id) & s->mask;
        while (s->by_id[at] != 0)
            at = (at + 1) & s->mask;
        s->by_id[at] = (uint32_t)(i + 1);
    }
    return TALLY_OK;
}

static const char *
tenant_key(const void *ctx, uint32_t item)
{
    const store_snapshot *s = ctx;

    return s->tenants[item].id;
}

/* Tenants by id in O(1): a reload compares every child's tenant, and a request may look its
 * tenant up; a scan would cost O(tenants) each time. */
static int
index_tenants(store_snapshot *s)
{
    size_t i;
    int rc = tenant_index_init(&s->tenant_ix, (uint32_t)(s->n_tenants > 0 ? s->n_tenants : 1));

    for (i = 0; rc == TALLY_OK && i < s->n_tenants; i++)
        tenant_index_set(&s->tenant_ix, s->tenants[i].id, (uint32_t)i, tenant_key, s);
    return rc;
}

int64_t
store_data_version(store_db *db)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;

    if (sqlite3_prepare_v2(store_db_handle(db), "PRAGMA data_version", -1, &st, NULL) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* A supervisor's snapshot: its own tenant only, however many there are (a start must not
 * read every tenant of the deployment). A missing tenant leaves the list empty. */
static int
add_one_tenant(store_db *db, store_snapshot *s, const char *tenant)
{
    struct store_tenant t;
    int rc = store_tenant_get(db, tenant, &t);

    if (rc == TALLY_ENOTFOUND)
        return TALLY_OK;
    return rc == TALLY_OK ? add_tenant(s, &t) : rc;
}

static int
load_links(store_db *db, store_snapshot *s, const char *tenant)
{
    struct link_load ld = {s, 0, NULL, 0, NULL, 0};
    size_t i;
    int rc = TALLY_OK;

    for (i = 0; i < s->n_tenants && rc == TALLY_OK; i++) {
        ld.tenant = i;
        s->tenants[i].links_at = s->n_links;
        if (tenant == NULL || strcmp(s->tenants[i].id, tenant) == 0)
            rc = store_link_each(db, s->tenants[i].id, add_link, &ld);
        s->tenants[i].n_links = s->n_links - s->tenants[i].links_at;
    }
    for (i = 0; rc == TALLY_OK && i < s->n_links; i++) {
        s->links[i].tenant = &s->tenants[ld.tenant_idx[i]];
        s->links[i].endpoints = s->pool + ld.pool_off[i];
    }
    tally_free(ld.tenant_idx);
    tally_free(ld.pool_off);
    return rc;
}

int
store_snapshot_load(store_db *db, const char *tenant, store_snapshot **out)
{
    store_snapshot *s = NULL;
    bool in_tx = false;
    int rc = TALLY_ENOMEM;

    *out = NULL;
    s = tally_calloc(1, sizeof(*s));
    if (s == NULL)
        goto out;
    s->version = store_data_version(db);
    rc = store_db_exec(db, "BEGIN");
    in_tx = rc == TALLY_OK;
    if (rc == TALLY_OK)
        rc = store_plan_each(db, add_plan, s);
    if (rc == TALLY_OK)
        rc = store_endpoint_each(db, add_endpoint, s);
    if (rc == TALLY_OK)
        rc = tenant != NULL ? add_one_tenant(db, s, tenant) : store_tenant_each(db, add_tenant, s);
    if (rc == TALLY_OK)
        own_plans_fix(s);
    if (rc == TALLY_OK)
        rc = load_links(db, s, tenant);
    if (rc == TALLY_OK)
        rc = build_table(s);
    if (rc == TALLY_OK)
        rc = index_tenants(s);
    if (rc != TALLY_OK)
        goto out;
    *out = s;
    s = NULL; /* ownership moved to the caller */
out:
    if (in_tx)
        store_db_rollback(db);
    store_snapshot_free(s);
    return rc;
}

void
store_snapshot_free(store_snapshot *s)
{
    if (s == NULL)
        return;
    tally_free(s->plans);
    tally_free(s->endpoints);
    tally_free(s->tenants);
    tally_free(s->own);
    tally_free(s->own_of);
    tally_free(s->links);
    tally_free(s->pool);
    tally_free(s->table);
    tally_free(s->by_id);
    tenant_index_release(&s->tenant_ix);
    tally_free(s);
}

const struct store_snap_link *
store_snapshot_link(const store_snapshot *s, const unsigned char hash[TENANT_HASH_BYTES])
{
    size_t at = (size_t)hash_index(hash) & s->mask;

    while (s->table[at] != 0) {
        const struct store_snap_link *l = &s->links[s->table[at] - 1];
        /* The first 8 bytes sort out the other entries of the probe run; the whole hash is
         * then compared in constant time. (They are keyed hashes: which bytes match says
         * nothing about a token.) */
        if (memcmp(l->hash, hash, 8) == 0 && sodium_memcmp(l->hash, hash, TENANT_HASH_BYTES) == 0)
            return l;
        at = (at + 1) & s->mask;
    }
    return NULL;
}

const struct store_snap_link *
store_snapshot_link_by_id(const store_snapshot *s, const char *id)
{
    size_t at = (size_t)id_index(id) & s->mask;

    while (s->by_id[at] != 0) {
        const struct store_snap_link *l = &s->links[s->by_id[at] - 1];
        if (strcmp(l->id, id) == 0)
            return l;
        at = (at + 1) & s->mask;
    }
    return NULL;
}

bool
store_snap_link_allows(const struct store_snap_link *l, const char *endpoint, int64_t now_ms)
{
    if (l->revoked || (l->expires_ms != 0 && now_ms >= l->expires_ms))
        return false;
    return l->endpoints[0] == '\0' || tenant_name_list_has(l->endpoints, endpoint);
}

const struct store_snap_tenant *
store_snapshot_tenant(const store_snapshot *s, const char *id)
{
    int64_t i;

    if (s->tenant_ix.slot == NULL)
        return NULL;
    i = tenant_index_find(&s->tenant_ix, id, tenant_key, s);
    return i >= 0 ? &s->tenants[i] : NULL;
}

const struct tenant_endpoint *
store_snapshot_endpoint(const store_snapshot *s, const char *plan, const char *endpoint)
{
    const struct tenant_endpoint *dflt = NULL;
    size_t i;

    for (i = 0; i < s->n_endpoints; i++) {
        const struct tenant_endpoint *e = &s->endpoints[i];
        if (strcmp(e->name, endpoint) != 0)
            continue;
        if (strcmp(e->plan, plan) == 0)
            return e;
        if (e->plan[0] == '\0')
            dflt = e;
    }
    return dflt;
}

const struct tenant_endpoint *
store_snapshot_endpoints(const store_snapshot *s, size_t *n)
{
    *n = s->n_endpoints;
    return s->endpoints;
}

const struct store_snap_link *
store_snapshot_tenant_links(const store_snapshot *s, const struct store_snap_tenant *t, size_t *n)
{
    *n = t->n_links;
    return t->n_links > 0 ? &s->links[t->links_at] : NULL;
}

size_t
store_snapshot_link_count(const store_snapshot *s)
{
    return s->n_links;
}

int64_t
store_snapshot_version(const store_snapshot *s)
{
    return s->version;
}

void
store_endpoint_bind_month(struct tenant_endpoint *e, int64_t billing_day)
{
    tenant_limits_bind_month(&e->limits, billing_day);
    tenant_limits_bind_month(&e->tenant_limits, billing_day);
    tenant_limits_bind_month(&e->degraded_limits, billing_day);
}

bool
store_snapshot_endpoint_for(const store_snapshot *s, const struct store_snap_tenant *t,
                            const char *endpoint, struct tenant_endpoint *out)
{
    const struct tenant_endpoint *e = store_snapshot_endpoint(s, t->plan->name, endpoint);

    if (e == NULL)
        return false;
    *out = *e;
    store_endpoint_bind_month(out, t->billing_day);
    return true;
}

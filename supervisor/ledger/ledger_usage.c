/*
 * `tally usage` (sup_usage.h): a tenant's journal replayed into a ledger of its current
 * configuration, then each budget's cells read out per window. The configuration is the
 * supervisor's (store snapshot of the tenant: its plan with overrides, its policies with months
 * on its billing day), so the cells match by period exactly as in the running supervisor. The
 * current window of a limit is its cell's when that is the window holding now, else empty; the
 * previous one is the cell's window or its history (sup_cell.prev_*), whichever is the window
 * before now's.
 */
#include "sup_lease_int.h"
#include "sup_usage.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "store_journal.h"
#include "store_paths.h"
#include "store_snapshot.h"
#include "sup_journal_codec.h"

static const struct store_upgrade usage_upgrade = {sup_record_upgrade, NULL};

struct usage {
    sup_ledger *l;
    int64_t now_ms;
    bool previous;
    sup_usage_fn cb;
    void *ctx;
};

static int
replay_one(void *ctx, const uint8_t *p, size_t len)
{
    struct sup_record rec;
    int rc = sup_record_decode(p, len, &rec);

    if (rc == TALLY_OK)
        rc = sup_ledger_replay(ctx, &rec);
    return rc;
}

/* G - C + D of the window `want` of cell c (0 when c counted nothing then). */
static int64_t
cell_admitted(const struct sup_cell *c, int64_t want)
{
    int64_t v = 0;

    if (c == NULL)
        return 0;
    if (c->window_id == want)
        v = c->granted - c->credited + c->debt;
    else if (c->prev_window_id == want && (c->prev_granted != 0 || c->prev_debt != 0))
        v = c->prev_granted - c->prev_credited + c->prev_debt;
    return v > 0 ? v : 0;
}

static int
emit_budget(struct usage *u, struct sup_budget *b, enum tenant_scope scope, const char *endpoint,
            const char *link, const struct tenant_limits *ls)
{
    for (uint32_t i = 0; i < ls->count; i++) {
        const struct tenant_limit *lim = &ls->v[i];
        struct sup_usage_row row;
        int64_t id = tenant_window_id(u->now_ms, lim->period_ms);
        int rc;

        if (u->previous)
            id--;
        if (id < 0)
            continue;
        memset(&row, 0, sizeof(row));
        row.scope = scope;
        row.endpoint = endpoint;
        row.link = link;
        row.limit = *lim;
        row.start_ms = id > 0 ? tenant_window_end_ms(id - 1, lim->period_ms) : 0;
        row.end_ms = tenant_window_end_ms(id, lim->period_ms);
        row.admitted = cell_admitted(b != NULL ? sup__cell_find(b, lim->period_ms) : NULL, id);
        row.leases_out = b != NULL ? b->leases_out : 0;
        rc = u->cb(u->ctx, &row);
        if (rc != 0)
            return rc;
    }
    return TALLY_OK;
}

static int
emit_all(struct usage *u)
{
    sup_ledger *l = u->l;
    int rc = emit_budget(u, &l->plan_b, TENANT_SCOPE_PLAN, "", "", &l->plan.limits);

    for (size_t i = 0; rc == TALLY_OK && i < l->ep_count; i++) {
        struct sup_endpoint *ep = &l->eps[i];

        if (ep->policy.algorithm == TENANT_ALG_WINDOW)
            rc = emit_budget(u, &ep->b, TENANT_SCOPE_ENDPOINT_TENANT, ep->policy.name, "",
                             &ep->policy.tenant_limits);
    }
    for (uint32_t i = 0; rc == TALLY_OK && i < l->links_cap; i++) {
        struct sup_link *k = l->links[i];

        if (k == NULL)
            continue;
        rc = emit_budget(u, &k->b, TENANT_SCOPE_LINK, "", k->id, &l->plan.link_limits);
        for (struct sup_pair *p = k->pairs; rc == TALLY_OK && p != NULL; p = p->next) {
            const struct sup_endpoint *ep = sup__endpoint_find(l, p->endpoint);

            if (ep != NULL && ep->policy.algorithm == TENANT_ALG_WINDOW)
                rc = emit_budget(u, &p->b, TENANT_SCOPE_ENDPOINT_LINK, p->endpoint, k->id,
                                 &ep->policy.limits);
        }
    }
    return rc;
}

/* The tenant's policies as its supervisor has them (process.c does the same). */
static int
tenant_config(const store_snapshot *snap, const struct store_snap_tenant *t,
              struct sup_ledger_config *cfg, struct tenant_endpoint **eps)
{
    size_t n = 0;
    const struct tenant_endpoint *all = store_snapshot_endpoints(snap, &n);

    *eps = tally_calloc(n + 1, sizeof(**eps));
    if (*eps == NULL)
        return TALLY_ENOMEM;
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->tenant, sizeof(cfg->tenant), "%s", t->id);
    cfg->plan = *t->plan;
    for (size_t i = 0; i < n; i++) {
        if (store_snapshot_endpoint(snap, t->plan->name, all[i].name) != &all[i])
            continue;
        (*eps)[cfg->endpoint_count] = all[i];
        store_endpoint_bind_month(&(*eps)[cfg->endpoint_count++], t->billing_day);
    }
    cfg->endpoints = *eps;
    return TALLY_OK;
}

int
sup_usage_read(const char *data, const char *tenant, int64_t now_ms, bool previous, sup_usage_fn cb,
               void *ctx)
{
    char path[STORE_PATH_MAX];
    struct sup_ledger_config cfg;
    struct tenant_endpoint *eps = NULL;
    const struct store_snap_tenant *t;
    store_snapshot *snap = NULL;
    store_db *config = NULL, *journal = NULL;
    struct usage u = {NULL, now_ms, previous, cb, ctx};
    struct stat st;
    int rc = store_config_open(data, false, &config);

    if (rc == TALLY_OK)
        rc = store_snapshot_load(config, tenant, &snap);
    if (rc != TALLY_OK)
        goto out;
    t = store_snapshot_tenant(snap, tenant);
    rc = t == NULL ? TALLY_ENOTFOUND : tenant_config(snap, t, &cfg, &eps);
    if (rc == TALLY_OK)
        rc = sup_ledger_open(&cfg, &u.l);
    if (rc == TALLY_OK)
        rc = store_path_tenant(data, tenant, "ledger.db", path, sizeof(path));
    /* No journal yet: the tenant never made a request, every figure is 0. */
    if (rc == TALLY_OK && stat(path, &st) == 0) {
        rc = store_journal_open(path, 0, &usage_upgrade, &journal);
        if (rc == TALLY_OK)
            rc = store_journal_each(journal, replay_one, u.l);
    }
    if (rc == TALLY_OK)
        rc = emit_all(&u);
out:
    store_db_close(journal);
    sup_ledger_close(u.l);
    tally_free(eps);
    store_snapshot_free(snap);
    store_db_close(config);
    return rc;
}

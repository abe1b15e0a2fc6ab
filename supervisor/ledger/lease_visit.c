/*
 * Visitors over the ledger's cells and leases (sup_lease.h), for the suites'
 * invariant checks only: compiled into the suites that link
 * tally_ledger_internal, never into tallyd (tests stay out of production).
 */
#include "sup_lease_int.h"

static int64_t
limit_of(const struct tenant_limits *ls, int64_t period_ms)
{
    for (uint32_t i = 0; ls != NULL && i < ls->count; i++) {
        if (ls->v[i].period_ms == period_ms)
            return ls->v[i].n;
    }
    return 0;
}

static int
visit_budget(const struct sup_budget *b, enum tenant_scope scope, const char *endpoint,
             const char *link, const struct tenant_limits *ls,
             int (*cb)(void *ctx, const struct sup_cell_info *c), void *ctx)
{
    for (int i = 0; i < TENANT_MAX_WINDOWS; i++) {
        const struct sup_cell *c = &b->cells[i];
        struct sup_cell_info info;
        int rc;

        if (c->period_ms == 0)
            continue;
        info.scope = scope;
        info.endpoint = endpoint;
        info.link = link;
        info.limit = limit_of(ls, c->period_ms);
        info.period_ms = c->period_ms;
        info.window_id = c->window_id;
        info.granted = c->granted;
        info.credited = c->credited;
        info.debt = c->debt;
        info.prev_window_id = c->prev_window_id;
        info.prev_granted = c->prev_granted;
        info.prev_credited = c->prev_credited;
        info.prev_debt = c->prev_debt;
        info.next_window_id = c->next_window_id;
        info.next_granted = c->next_granted;
        info.next_credited = c->next_credited;
        info.leases_out = b->leases_out;
        rc = cb(ctx, &info);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int
sup_ledger_each_cell(const sup_ledger *l, int (*cb)(void *ctx, const struct sup_cell_info *c),
                     void *ctx)
{
    int rc = visit_budget(&l->plan_b, TENANT_SCOPE_PLAN, "", "", &l->plan.limits, cb, ctx);

    for (size_t i = 0; i < l->ep_count && rc == 0; i++) {
        const struct sup_endpoint *ep = &l->eps[i];

        if (ep->policy.algorithm == TENANT_ALG_WINDOW)
            rc = visit_budget(&ep->b, TENANT_SCOPE_ENDPOINT_TENANT, ep->policy.name, "",
                              &ep->policy.tenant_limits, cb, ctx);
    }
    for (uint32_t i = 0; i < l->links_cap && rc == 0; i++) {
        const struct sup_link *k = l->links[i];

        if (k == NULL)
            continue;
        rc = visit_budget(&k->b, TENANT_SCOPE_LINK, "", k->id, &l->plan.link_limits, cb, ctx);
        for (const struct sup_pair *p = k->pairs; p != NULL && rc == 0; p = p->next) {
            const struct sup_endpoint *ep = sup__endpoint_find(l, p->endpoint);

            if (ep != NULL && ep->policy.algorithm == TENANT_ALG_WINDOW)
                rc = visit_budget(&p->b, TENANT_SCOPE_ENDPOINT_LINK, p->endpoint, k->id,
                                  &ep->policy.limits, cb, ctx);
        }
    }
    return rc;
}

int
sup_ledger_each_lease(const sup_ledger *l, int (*cb)(void *ctx, const struct sup_lease_info *lease),
                      void *ctx)
{
    for (uint32_t i = 0; i < l->lease_hw; i++) {
        const struct sup_lease *s = &l->leases[i];
        struct sup_lease_info info;
        int rc;

        if (s->id == 0)
            continue;
        info.id = s->id;
        info.child = s->peer < l->peer_count ? l->peers[s->peer]->name : "";
        info.endpoint = s->endpoint;
        info.link = s->link->id;
        info.incarnation = s->incarnation;
        info.n = s->n;
        info.granted_ms = s->granted_ms;
        info.deadline_ms = s->deadline_ms;
        rc = cb(ctx, &info);
        if (rc != 0)
            return rc;
    }
    return 0;
}

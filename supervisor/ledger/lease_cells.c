/*
 * Ledger cells: per (budget, period, window id) the tokens granted G, credited C and charged as
 * degraded debt D, so that remaining = N - (G - C) - D (docs/LEASE-PROTOCOL.md §2). A cell rolls to
 * a new window when something is charged in a later one (window ids come from tenant_window_id and
 * the ledger's high-water clock, so they never go back: I8); a credit lands only in the window
 * its lease reserved in. Decisions never read cells directly: sup__budget_view turns a budget
 * into a tenant_budget whose counts are G - C + D, and tenant_path_decide does the arithmetic,
 * the scope that fired and the exact Retry-After, exactly as for a request decided alone.
 */
#include "sup_lease_int.h"

#include <string.h>

static const enum tenant_scope kind_scope[SUP_BUDGETS] = {
    [SUP_B_PLAN] = TENANT_SCOPE_PLAN,
    [SUP_B_LINK] = TENANT_SCOPE_LINK,
    [SUP_B_EP] = TENANT_SCOPE_ENDPOINT_TENANT,
    [SUP_B_EPLINK] = TENANT_SCOPE_ENDPOINT_LINK,
};

struct sup_cell *
sup__cell_find(struct sup_budget *b, int64_t period_ms)
{
    for (int i = 0; i < TENANT_MAX_WINDOWS; i++) {
        if (b->cells[i].period_ms == period_ms && period_ms != 0)
            return &b->cells[i];
    }
    return NULL;
}

struct sup_cell *
sup__cell_find_kind(struct sup_budget *b, int64_t period_ms)
{
    struct sup_cell *c = sup__cell_find(b, period_ms);

    for (int i = 0; c == NULL && period_ms != 0 && i < TENANT_MAX_WINDOWS; i++) {
        if (b->cells[i].period_ms != 0 && tenant_periods_match(b->cells[i].period_ms, period_ms))
            c = &b->cells[i];
    }
    return c;
}

void
sup__cell_rekey(struct sup_cell *c, int64_t period_ms, int64_t now_ms)
{
    int64_t window_id = tenant_window_carry(c->period_ms, c->window_id, period_ms, now_ms);

    if (c->period_ms == period_ms)
        return;
    if (window_id < 0) {
        memset(c, 0, sizeof(*c));
        window_id = 0;
    }
    c->period_ms = period_ms;
    c->window_id = window_id;
    /* History under another period says nothing about the new one's windows. */
    c->prev_window_id = c->prev_granted = c->prev_credited = c->prev_debt = 0;
    c->next_window_id = c->next_granted = c->next_credited = 0;
}

void
sup__cells_match(struct sup_budget *b, const struct tenant_limits *ls, int64_t now_ms)
{
    struct sup_cell next[TENANT_MAX_WINDOWS];

    memset(next, 0, sizeof(next));
    for (uint32_t i = 0; i < ls->count; i++) {
        const struct sup_cell *c = sup__cell_find_kind(b, ls->v[i].period_ms);

        if (c != NULL)
            next[i] = *c;
        /* A month on a new billing day keeps what the running month counted. */
        sup__cell_rekey(&next[i], ls->v[i].period_ms, now_ms);
    }
    memcpy(b->cells, next, sizeof(next));
}

struct sup_cell *
sup__cell_roll(struct sup_budget *b, const struct tenant_limit *lim, int64_t now_ms)
{
    struct sup_cell *c = sup__cell_find(b, lim->period_ms);
    int64_t window_id = tenant_window_id(now_ms, lim->period_ms);

    if (NEVER(c == NULL))
        return NULL;
    if (c->window_id < window_id) {
        bool ahead = c->next_window_id == window_id;

        if (c->granted != 0 || c->credited != 0 || c->debt != 0) {
            c->prev_window_id = c->window_id;
            c->prev_granted = c->granted;
            c->prev_credited = c->credited;
            c->prev_debt = c->debt;
        }
        c->window_id = window_id;
        /* What NEXT leases reserved for this window counts from its start; reserved for a
         * window already over, it is spent and forgotten. */
        c->granted = ahead ? c->next_granted : 0;
        c->credited = ahead ? c->next_credited : 0;
        c->debt = 0;
        if (c->next_window_id <= window_id)
            c->next_window_id = c->next_granted = c->next_credited = 0;
    }
    return c;
}

bool
sup__lease_on_path(const struct sup_lease *lease, const struct sup_path *p, int kind)
{
    switch (kind) {
    case SUP_B_PLAN:
        return true;
    case SUP_B_LINK:
        return lease->link == p->link;
    case SUP_B_EP:
        return p->ep != NULL && strcmp(lease->endpoint, p->ep->policy.name) == 0;
    default:
        return lease->link == p->link && p->ep != NULL &&
               strcmp(lease->endpoint, p->ep->policy.name) == 0;
    }
}

/* Tokens of `credit` that land on the cell of `period_ms` in window `window_id`. */
static int64_t
credit_on(const struct sup_lease *lease, const struct sup_path *p, int kind, int64_t period_ms,
          int64_t window_id, int64_t credit)
{
    if (lease == NULL || credit == 0 || !sup__lease_on_path(lease, p, kind))
        return 0;
    for (int i = 0; i < TENANT_MAX_WINDOWS; i++) {
        if (lease->periods[kind][i] == period_ms &&
            tenant_window_id(lease->granted_ms, period_ms) == window_id)
            return credit;
    }
    return 0;
}

int
sup__budget_view(const struct sup_path *p, int kind, int64_t eval_ms, const struct sup_lease *lease,
                 int64_t credit, int64_t extra, struct tenant_budget *out)
{
    const struct tenant_limits *ls = p->ls[kind];
    const struct sup_budget *b = p->b[kind];
    struct tenant_window_state *st;
    int rc = tenant_budget_init(out, kind_scope[kind], p->alg[kind], ls);

    if (rc != TALLY_OK)
        return rc;
    if (p->alg[kind] == TENANT_ALG_GCRA) {
        if (b != NULL)
            out->st.gcra = b->gcra;
        if (extra > 0)
            rc = tenant_gcra_charge(ls, out->burst, &out->st.gcra, eval_ms, extra);
        return rc;
    }
    st = &out->st.window;
    st->last_now_ms = eval_ms;
    for (uint32_t i = 0; i < ls->count; i++) {
        int64_t period_ms = ls->v[i].period_ms;
        int64_t window_id = tenant_window_id(eval_ms, period_ms);
        const struct sup_cell *c =
            b != NULL ? sup__cell_find((struct sup_budget *)b, period_ms) : NULL;
        int64_t used = extra;

        if (c != NULL && c->window_id == window_id) {
            used += c->granted - c->credited + c->debt;
            used -= credit_on(lease, p, kind, period_ms, window_id, credit);
        } else if (c != NULL && window_id > c->window_id && c->next_window_id == window_id) {
            used += c->next_granted - c->next_credited; /* a NEXT decision, at the boundary */
            used -= credit_on(lease, p, kind, period_ms, window_id, credit);
        }
        st->period_ms[i] = period_ms;
        st->window_id[i] = window_id;
        st->used[i] = used > 0 ? used : 0;
    }
    return TALLY_OK;
}

int
sup__path_charge_debt(sup_ledger *l, struct sup_path *p, int64_t now_ms, int64_t d)
{
    (void)l;
    for (int kind = 0; kind < SUP_BUDGETS; kind++) {
        struct sup_budget *b = p->b[kind];
        const struct tenant_limits *ls = p->ls[kind];

        if (b == NULL || ls == NULL || ls->count == 0)
            continue;
        if (p->alg[kind] == TENANT_ALG_GCRA) {
            int rc = tenant_gcra_charge(ls, NULL, &b->gcra, now_ms, d);

            if (rc != TALLY_OK)
                return rc;
            continue;
        }
        for (uint32_t i = 0; i < ls->count; i++) {
            struct sup_cell *c = sup__cell_roll(b, &ls->v[i], now_ms);

            if (c != NULL)
                c->debt += d;
        }
    }
    return TALLY_OK;
}

bool
sup__cell_counted(const struct sup_cell *c)
{
    return c->period_ms != 0 &&
           (c->granted != 0 || c->credited != 0 || c->debt != 0 || c->prev_granted != 0 ||
            c->prev_credited != 0 || c->prev_debt != 0 || c->next_granted != 0 ||
            c->next_credited != 0);
}

bool
sup__cell_live(const struct sup_cell *c, int64_t now_ms)
{
    int64_t end_ms;

    if (c->period_ms != 0 && (c->next_granted != 0 || c->next_credited != 0))
        return true; /* reserved ahead: live until it is the current window, then as above */
    if (c->period_ms == 0 || (c->granted == 0 && c->credited == 0 && c->debt == 0))
        return false;
    end_ms = tenant_window_end_ms(c->window_id, c->period_ms);
    return end_ms < 0 || end_ms > now_ms;
}

bool
sup__gcra_live(const struct tenant_gcra_state *g, int i, int64_t now_ms)
{
    return g->period_ms[i] != 0 &&
           (g->tat_ms[i] > now_ms || (g->tat_ms[i] == now_ms && g->tat_frac[i] > 0));
}

bool
sup__budget_idle(const struct sup_budget *b, int64_t now_ms)
{
    if (b->leases_out != 0)
        return false;
    for (int i = 0; i < TENANT_MAX_WINDOWS; i++) {
        if (sup__cell_live(&b->cells[i], now_ms) || sup__gcra_live(&b->gcra, i, now_ms))
            return false;
    }
    return true;
}

bool
sup__link_idle(const struct sup_link *k, int64_t now_ms)
{
    if (k->leases != 0 || !sup__budget_idle(&k->b, now_ms))
        return false;
    if (k->slot_v != NULL && tenant_slot_held(&k->slots, now_ms) != 0)
        return false;
    for (const struct sup_pair *p = k->pairs; p != NULL; p = p->next) {
        if (!sup__budget_idle(&p->b, now_ms))
            return false;
    }
    return true;
}

void
sup__path_note(sup_ledger *l, struct sup_path *p, struct sup_lease *lease)
{
    (void)l;
    for (int kind = 0; kind < SUP_BUDGETS; kind++) {
        const struct tenant_limits *ls = p->ls[kind];

        if (p->b[kind] == NULL)
            continue;
        p->b[kind]->leases_out++;
        if (lease->keep)
            p->b[kind]->keeps_out++;
        for (uint32_t i = 0; ls != NULL && p->alg[kind] == TENANT_ALG_WINDOW && i < ls->count; i++)
            lease->periods[kind][i] = ls->v[i].period_ms;
    }
}

int
sup__path_reserve(sup_ledger *l, struct sup_path *p, struct sup_lease *lease, int64_t now_ms)
{
    int64_t roll_ms = now_ms < lease->granted_ms ? now_ms : lease->granted_ms;

    (void)l;
    for (int kind = 0; kind < SUP_BUDGETS; kind++) {
        struct sup_budget *b = p->b[kind];
        const struct tenant_limits *ls = p->ls[kind];

        if (b == NULL)
            continue;
        b->leases_out++;
        if (lease->keep)
            b->keeps_out++;
        if (ls == NULL || ls->count == 0)
            continue;
        if (p->alg[kind] == TENANT_ALG_GCRA) {
            /* GCRA has nothing to give back: the lease is charged once, like a request. */
            int rc = tenant_gcra_charge(ls, NULL, &b->gcra, lease->granted_ms, lease->n);

            if (rc != TALLY_OK)
                return rc;
            continue;
        }
        for (uint32_t i = 0; i < ls->count; i++) {
            struct sup_cell *c = sup__cell_roll(b, &ls->v[i], roll_ms);
            int64_t window_id = tenant_window_id(lease->granted_ms, ls->v[i].period_ms);

            if (c == NULL)
                continue;
            if (window_id > c->window_id) {
                /* A NEXT lease: counted in the window it starts in, ahead of the cell. */
                if (c->next_window_id != window_id) {
                    c->next_window_id = window_id;
                    c->next_granted = c->next_credited = 0;
                }
                c->next_granted += lease->n;
            } else {
                c->granted += lease->n;
            }
            lease->periods[kind][i] = ls->v[i].period_ms;
        }
    }
    return TALLY_OK;
}

/* The budget of `lease` of `kind`, as it exists now (NULL when gone). */
static struct sup_budget *
lease_budget(sup_ledger *l, const struct sup_lease *lease, int kind)
{
    struct sup_endpoint *ep;
    struct sup_pair *pair;

    switch (kind) {
    case SUP_B_PLAN:
        return &l->plan_b;
    case SUP_B_LINK:
        return &lease->link->b;
    case SUP_B_EP:
        ep = sup__endpoint_find(l, lease->endpoint);
        return ep != NULL ? &ep->b : NULL;
    default:
        pair = sup__pair_find(lease->link, lease->endpoint);
        return pair != NULL ? &pair->b : NULL;
    }
}

void
sup__lease_keep_drop(sup_ledger *l, const struct sup_lease *lease)
{
    for (int kind = 0; kind < SUP_BUDGETS; kind++) {
        struct sup_budget *b = lease_budget(l, lease, kind);

        if (b != NULL && b->keeps_out > 0)
            b->keeps_out--;
    }
}

void
sup__lease_release_cells(sup_ledger *l, const struct sup_lease *lease, int64_t credit)
{
    for (int kind = 0; kind < SUP_BUDGETS; kind++) {
        struct sup_budget *b = lease_budget(l, lease, kind);

        if (b == NULL)
            continue;
        if (b->leases_out > 0)
            b->leases_out--;
        if (lease->keep && !lease->recalled && b->keeps_out > 0)
            b->keeps_out--;
        for (int i = 0; i < TENANT_MAX_WINDOWS && credit > 0; i++) {
            int64_t period_ms = lease->periods[kind][i];
            struct sup_cell *c = period_ms != 0 ? sup__cell_find(b, period_ms) : NULL;

            int64_t window_id = tenant_window_id(lease->granted_ms, period_ms);

            /* A credit after the window rolled over has nothing left to give back (and cannot
             * come: no lease outlives its window, one returned later is spent). A NEXT lease
             * returned before its window started gives back to the cell's next counts. */
            if (c != NULL && c->window_id == window_id)
                c->credited += credit;
            else if (c != NULL && c->next_window_id == window_id && window_id > c->window_id)
                c->next_credited += credit;
        }
    }
}

/*
 * Snapshots for journal compaction (sup_ledger_snapshot): the ledger's durable state written as
 * records that rebuild it from nothing. First the clock, epoch and lease counter, then the
 * children in table order, the cells of windows not yet over and the GCRA entries still ahead
 * (what has run out equals a fresh state), the outstanding leases (their counts on budgets are
 * recomputed, the cells are restored as they are), held slots, and last copies of the records in
 * each child's dedupe window (flagged
 * CACHED: they rebuild the replies a retransmission must get, nothing else). Replaying a
 * snapshot into a fresh ledger with the same configuration gives the same sup_ledger_digest, so
 * the process layer may replace its journal by a snapshot in one transaction at any time.
 */
#include "sup_lease_int.h"

#include <stdio.h>
#include <string.h>

/* Counts records (out == NULL) or writes them. */
struct snap {
    struct sup_records *out;
    size_t n;
};

static struct sup_record *
next(struct snap *s, struct sup_record *scratch, uint32_t kind)
{
    struct sup_record *r = s->out != NULL ? &s->out->v[s->out->count++] : scratch;

    s->n++;
    memset(r, 0, sizeof(*r));
    r->version = SUP_RECORD_VERSION;
    r->kind = kind;
    return r;
}

/* The next record, naming one budget's slot of one period (a cell, its previous or next window,
 * a GCRA entry). */
static struct sup_record *
next_scoped(struct snap *s, struct sup_record *scratch, uint32_t kind, enum tenant_scope scope,
            const char *endpoint, const char *link, int64_t period_ms)
{
    struct sup_record *r = next(s, scratch, kind);

    r->scope = scope;
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
    snprintf(r->link, sizeof(r->link), "%s", link);
    r->period_ms = period_ms;
    return r;
}

static void
snap_budget(struct snap *s, const struct sup_budget *b, enum tenant_scope scope,
            const char *endpoint, const char *link, int64_t now_ms)
{
    struct sup_record scratch, *r;

    for (int i = 0; i < TENANT_MAX_WINDOWS; i++) {
        const struct sup_cell *c = &b->cells[i];

        /* Ended windows too: what they counted is the history `tally usage` reads. */
        if (!sup__cell_live(c, now_ms) && !sup__cell_counted(c))
            continue;
        r = next_scoped(s, &scratch, SUP_REC_SNAP_CELL, scope, endpoint, link, c->period_ms);
        r->v[0] = c->window_id;
        r->v[1] = c->granted;
        r->v[2] = c->credited;
        r->v[3] = c->debt;
        if (c->next_granted != 0 || c->next_credited != 0) {
            r = next_scoped(s, &scratch, SUP_REC_SNAP_NEXT, scope, endpoint, link, c->period_ms);
            r->v[0] = c->next_window_id;
            r->v[1] = c->next_granted;
            r->v[2] = c->next_credited;
        }
        if (c->prev_granted == 0 && c->prev_credited == 0 && c->prev_debt == 0)
            continue;
        r = next_scoped(s, &scratch, SUP_REC_SNAP_PREV, scope, endpoint, link, c->period_ms);
        r->v[0] = c->prev_window_id;
        r->v[1] = c->prev_granted;
        r->v[2] = c->prev_credited;
        r->v[3] = c->prev_debt;
    }
    for (uint32_t i = 0; i < TENANT_MAX_WINDOWS; i++) {
        if (!sup__gcra_live(&b->gcra, (int)i, now_ms))
            continue;
        r = next_scoped(s, &scratch, SUP_REC_SNAP_GCRA, scope, endpoint, link,
                        b->gcra.period_ms[i]);
        r->count = i;
        r->v[0] = b->gcra.n[i];
        r->v[1] = b->gcra.tat_ms[i];
        r->v[2] = b->gcra.tat_frac[i];
        r->v[3] = b->gcra.last_now_ms;
    }
}

static void
snap_link(struct snap *s, const struct sup_link *k, int64_t now_ms)
{
    struct sup_record scratch, *r;

    snap_budget(s, &k->b, TENANT_SCOPE_LINK, "", k->id, now_ms);
    for (const struct sup_pair *p = k->pairs; p != NULL; p = p->next)
        snap_budget(s, &p->b, TENANT_SCOPE_ENDPOINT_LINK, p->endpoint, k->id, now_ms);
    for (int64_t i = 0; k->slot_v != NULL && i < k->slot_cap; i++) {
        if (k->slot_v[i].id == 0 || k->slot_v[i].expires_ms <= now_ms)
            continue;
        r = next(s, &scratch, SUP_REC_SNAP_SLOT);
        snprintf(r->link, sizeof(r->link), "%s", k->id);
        r->slot_id = k->slot_v[i].id;
        r->v[0] = k->slot_v[i].expires_ms;
    }
}

static void
snap_all(const sup_ledger *l, struct snap *s)
{
    struct sup_record scratch, *r;

    r = next(s, &scratch, SUP_REC_SNAP_LEDGER);
    r->now_ms = l->now_ms;
    r->epoch = l->epoch;
    r->lease_id = l->next_lease_id;
    r->v[0] = l->slot_seq;
    for (uint32_t i = 0; i < l->peer_count; i++) {
        r = next(s, &scratch, SUP_REC_SNAP_PEER);
        snprintf(r->origin.child, sizeof(r->origin.child), "%s", l->peers[i]->name);
        r->origin.incarnation = l->peers[i]->incarnation;
        r->origin.seq = l->peers[i]->hwm_durable;
    }
    snap_budget(s, &l->plan_b, TENANT_SCOPE_PLAN, "", "", l->now_ms);
    for (size_t i = 0; i < l->ep_count; i++)
        snap_budget(s, &l->eps[i].b, TENANT_SCOPE_ENDPOINT_TENANT, l->eps[i].policy.name, "",
                    l->now_ms);
    for (uint32_t i = 0; i < l->links_cap; i++) {
        if (l->links[i] != NULL && !sup__link_idle(l->links[i], l->now_ms))
            snap_link(s, l->links[i], l->now_ms);
    }
    for (uint32_t i = 0; i < l->lease_hw; i++) {
        const struct sup_lease *lease = &l->leases[i];

        if (lease->id == 0)
            continue;
        r = next(s, &scratch, SUP_REC_SNAP_LEASE);
        r->lease_id = lease->id;
        snprintf(r->origin.child, sizeof(r->origin.child), "%s", l->peers[lease->peer]->name);
        r->origin.incarnation = lease->incarnation;
        snprintf(r->endpoint, sizeof(r->endpoint), "%s", lease->endpoint);
        snprintf(r->link, sizeof(r->link), "%s", lease->link->id);
        r->n = lease->n;
        /* A NEXT lease starts after the ledger's clock: its start goes in v[0], so that the
         * record does not move the clock forward. */
        r->now_ms = lease->granted_ms <= l->now_ms ? lease->granted_ms : l->now_ms;
        r->v[0] = lease->granted_ms > l->now_ms ? lease->granted_ms : 0;
        r->deadline_ms = lease->deadline_ms;
        r->flags = lease->keep ? SUP_RECF_KEEP : 0;
    }
    for (uint32_t i = 0; i < l->peer_count; i++) {
        for (int j = 0; j < SUP_DEDUPE; j++) {
            const struct sup_record *c = &l->peers[i]->durable[j];

            if (c->origin.seq == 0)
                continue;
            r = next(s, &scratch, c->kind);
            *r = *c;
            r->flags |= SUP_RECF_CACHED;
        }
    }
}

int
sup_ledger_snapshot(const sup_ledger *l, struct sup_records *out, size_t *needed)
{
    struct snap s = {NULL, 0};

    if (l == NULL || out == NULL || needed == NULL)
        return TALLY_EINVAL;
    snap_all(l, &s);
    *needed = s.n;
    if (out->v == NULL || out->cap < out->count || out->cap - out->count < s.n)
        return TALLY_ETOOBIG;
    s.out = out;
    s.n = 0;
    snap_all(l, &s);
    return TALLY_OK;
}

/* ---- applying ---- */

/* The budget a SNAP_CELL/SNAP_GCRA record names, created as needed; NULL when its endpoint is
 * no longer configured (*rc TALLY_OK) or on failure (*rc set). */
static struct sup_budget *
snap_budget_get(sup_ledger *l, const struct sup_record *rec, int *rc)
{
    struct sup_endpoint *ep = NULL;
    struct sup_link *k = NULL;
    struct sup_pair *pair;

    *rc = TALLY_OK;
    if (rec->scope == TENANT_SCOPE_PLAN)
        return &l->plan_b;
    if (rec->scope == TENANT_SCOPE_ENDPOINT_TENANT || rec->scope == TENANT_SCOPE_ENDPOINT_LINK) {
        ep = sup__endpoint_find(l, rec->endpoint);
        if (ep == NULL)
            return NULL;
        if (rec->scope == TENANT_SCOPE_ENDPOINT_TENANT)
            return &ep->b;
    }
    if (rec->scope != TENANT_SCOPE_LINK && rec->scope != TENANT_SCOPE_ENDPOINT_LINK) {
        *rc = TALLY_EINVAL;
        return NULL;
    }
    k = sup__link_get(l, rec->link, rc);
    if (k == NULL)
        return NULL;
    if (rec->scope == TENANT_SCOPE_LINK)
        return &k->b;
    pair = sup__pair_get(k, rec->endpoint);
    if (pair == NULL) {
        *rc = TALLY_ENOMEM;
        return NULL;
    }
    sup__cells_match(&pair->b, &ep->policy.limits, l->now_ms);
    return &pair->b;
}

static int
apply_budget_state(sup_ledger *l, const struct sup_record *rec)
{
    int rc;
    struct sup_budget *b = snap_budget_get(l, rec, &rc);
    struct sup_cell *c;
    uint32_t i = rec->count;

    if (b == NULL)
        return rc;
    if (rec->kind == SUP_REC_SNAP_NEXT) {
        c = sup__cell_find(b, rec->period_ms);
        if (c != NULL) {
            c->next_window_id = rec->v[0];
            c->next_granted = rec->v[1];
            c->next_credited = rec->v[2];
        }
        return TALLY_OK;
    }
    if (rec->kind == SUP_REC_SNAP_PREV) {
        c = sup__cell_find(b, rec->period_ms);
        if (c != NULL) {
            c->prev_window_id = rec->v[0];
            c->prev_granted = rec->v[1];
            c->prev_credited = rec->v[2];
            c->prev_debt = rec->v[3];
        }
        return TALLY_OK;
    }
    if (rec->kind == SUP_REC_SNAP_CELL) {
        c = sup__cell_find_kind(b, rec->period_ms);
        if (c != NULL) { /* a limit since removed has nothing to restore */
            int64_t period_ms = c->period_ms;

            c->period_ms = rec->period_ms;
            c->window_id = rec->v[0];
            c->granted = rec->v[1];
            c->credited = rec->v[2];
            c->debt = rec->v[3];
            sup__cell_rekey(c, period_ms, l->now_ms); /* a billing day changed meanwhile */
        }
        return TALLY_OK;
    }
    if (i >= TENANT_MAX_WINDOWS)
        return TALLY_EINVAL;
    b->gcra.period_ms[i] = rec->period_ms;
    b->gcra.n[i] = rec->v[0];
    b->gcra.tat_ms[i] = rec->v[1];
    b->gcra.tat_frac[i] = rec->v[2];
    b->gcra.last_now_ms = rec->v[3];
    return TALLY_OK;
}

static int
apply_lease(sup_ledger *l, const struct sup_record *rec)
{
    int pi = sup__peer_find(l, rec->origin.child);
    struct sup_lease *lease = NULL;
    struct sup_path p;
    int rc;

    if (pi < 0 || sup__lease_find(l, rec->lease_id) != NULL)
        return TALLY_EINVAL;
    if (l->lease_count >= l->max_leases && sup__leases_grow(l) != TALLY_OK)
        return TALLY_EFULL;
    lease = sup__lease_free_entry(l);
    if (lease == NULL)
        return TALLY_EFULL;
    rc = sup__path_get(l, rec->endpoint, rec->link, &p);
    if (rc != TALLY_OK)
        return rc;
    lease->id = rec->lease_id;
    lease->peer = (uint32_t)pi;
    lease->incarnation = rec->origin.incarnation;
    snprintf(lease->endpoint, sizeof(lease->endpoint), "%s", rec->endpoint);
    lease->link = p.link;
    lease->n = rec->n;
    lease->granted_ms = rec->v[0] > 0 ? rec->v[0] : rec->now_ms;
    lease->deadline_ms = rec->deadline_ms;
    lease->keep = (rec->flags & SUP_RECF_KEEP) != 0;
    sup__lease_opened(l, lease);
    sup__path_note(l, &p, lease);
    p.link->leases++;
    l->peers[pi]->leases++;
    l->lease_count++;
    if (rec->lease_id > l->next_lease_id)
        l->next_lease_id = rec->lease_id;
    return TALLY_OK;
}

static int
apply_slot(sup_ledger *l, const struct sup_record *rec)
{
    int rc;
    struct sup_link *k = sup__link_get(l, rec->link, &rc);

    if (k == NULL)
        return rc;
    rc = sup__slots_ready(l, k);
    if (rc != TALLY_OK)
        return rc;
    if (rec->slot_id < 1)
        return TALLY_EINVAL;
    for (int64_t i = 0; i < k->slot_cap; i++) {
        if (k->slot_v[i].id == 0) {
            k->slot_v[i].id = rec->slot_id;
            k->slot_v[i].expires_ms = rec->v[0];
            return TALLY_OK;
        }
    }
    return TALLY_EFULL;
}

int
sup__apply_snapshot(sup_ledger *l, const struct sup_record *rec)
{
    struct sup_peer *peer;
    int pi, rc;

    if (rec->flags & SUP_RECF_CACHED) {
        pi = sup__peer_find(l, rec->origin.child);
        if (pi < 0 || l->peers[pi]->incarnation != rec->origin.incarnation)
            return TALLY_EINVAL;
        sup__cache_durable(l, l->peers[pi], rec);
        return TALLY_OK;
    }
    switch (rec->kind) {
    case SUP_REC_SNAP_LEDGER:
        l->now_ms = rec->now_ms;
        l->epoch = rec->epoch;
        l->next_lease_id = rec->lease_id;
        l->slot_seq = rec->v[0];
        return TALLY_OK;
    case SUP_REC_SNAP_PEER:
        if (sup__peer_find(l, rec->origin.child) >= 0)
            return TALLY_EINVAL;
        rc = sup__peer_room(l);
        if (rc != TALLY_OK)
            return rc;
        peer = tally_calloc(1, sizeof(*peer));
        if (peer == NULL)
            return TALLY_ENOMEM;
        snprintf(peer->name, sizeof(peer->name), "%s", rec->origin.child);
        peer->incarnation = rec->origin.incarnation;
        peer->hwm_durable = rec->origin.seq;
        l->peers[l->peer_count++] = peer;
        return TALLY_OK;
    case SUP_REC_SNAP_CELL:
    case SUP_REC_SNAP_PREV:
    case SUP_REC_SNAP_NEXT:
    case SUP_REC_SNAP_GCRA:
        return apply_budget_state(l, rec);
    case SUP_REC_SNAP_LEASE:
        return apply_lease(l, rec);
    case SUP_REC_SNAP_SLOT:
        return apply_slot(l, rec);
    default:
        return TALLY_EINVAL;
    }
}

/*
 * Reading the ledger without changing it: counters for metrics, slots held per link, and a digest
 * of the durable state. The digest hashes what the state means at the ledger's clock (windows that
 * ended, GCRA entries in the past, expired slots and idle links count as absent), each entity on
 * its own, adding the hashes up so that table order does not matter; a live ledger, its replay and
 * a snapshot's replay must agree on it.
 */
#include "sup_lease_int.h"

#include <string.h>

void
sup_ledger_stats(const sup_ledger *l, struct sup_ledger_stats *out)
{
    *out = l->stats;
    out->leases = l->lease_count;
    out->links = l->link_count;
    out->children = l->peer_count;
}

int64_t
sup_ledger_now_ms(const sup_ledger *l)
{
    return l->now_ms;
}

int64_t
sup_ledger_slots_held(const sup_ledger *l, const char *link, int64_t now_ms)
{
    const struct sup_link *k = sup__link_find(l, link);

    if (k == NULL || k->slot_v == NULL)
        return 0;
    return tenant_slot_held(&k->slots, sup__eval_ms(l, now_ms));
}

/* ---- digest ---- */

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static uint64_t
fnv_i64(uint64_t h, int64_t v)
{
    return fnv(h, &v, sizeof(v));
}

#define FNV_START 14695981039346656037ULL

/* What a budget means at now_ms: live cells and GCRA entries (an ended window or a TAT in the
 * past equals a fresh one), and its lease count. */
static uint64_t
budget_hash(uint64_t h, const struct sup_budget *b, int64_t now_ms)
{
    for (int i = 0; i < TENANT_MAX_WINDOWS; i++) {
        const struct sup_cell *c = &b->cells[i];

        struct sup_cell cur = *c;
        bool ahead = c->period_ms != 0 && (c->next_granted != 0 || c->next_credited != 0);

        cur.next_granted = cur.next_credited = 0; /* the current window alone */
        if (sup__cell_live(&cur, now_ms)) {
            h = fnv_i64(h, c->period_ms);
            h = fnv_i64(h, c->window_id);
            h = fnv_i64(h, c->granted);
            h = fnv_i64(h, c->credited);
            h = fnv_i64(h, c->debt);
        }
        if (ahead) {
            h = fnv_i64(h, c->period_ms);
            h = fnv_i64(h, c->next_window_id);
            h = fnv_i64(h, c->next_granted);
            h = fnv_i64(h, c->next_credited);
        }
        if (sup__gcra_live(&b->gcra, i, now_ms)) {
            h = fnv_i64(h, b->gcra.period_ms[i]);
            h = fnv_i64(h, b->gcra.n[i]);
            h = fnv_i64(h, b->gcra.tat_ms[i]);
            h = fnv_i64(h, b->gcra.tat_frac[i]);
        }
    }
    return fnv_i64(h, b->leases_out);
}

static uint64_t
link_hash_state(const struct sup_link *k, int64_t now_ms)
{
    uint64_t h = fnv(FNV_START, k->id, strlen(k->id)), sum = 0;

    h = budget_hash(h, &k->b, now_ms);
    h = fnv_i64(h, k->leases);
    for (const struct sup_pair *p = k->pairs; p != NULL; p = p->next) {
        if (!sup__budget_idle(&p->b, now_ms))
            sum += budget_hash(fnv(FNV_START, p->endpoint, strlen(p->endpoint)), &p->b, now_ms);
    }
    h = fnv_i64(h, (int64_t)sum);
    sum = 0;
    for (int64_t i = 0; k->slot_v != NULL && i < k->slot_cap; i++) {
        if (k->slot_v[i].id != 0 && k->slot_v[i].expires_ms > now_ms)
            sum += fnv_i64(fnv_i64(FNV_START, k->slot_v[i].id), k->slot_v[i].expires_ms);
    }
    return fnv_i64(h, (int64_t)sum);
}

static uint64_t
lease_hash(const sup_ledger *l, const struct sup_lease *s)
{
    uint64_t h = fnv_i64(FNV_START, (int64_t)s->id);
    const char *peer = s->peer < l->peer_count ? l->peers[s->peer]->name : "";

    h = fnv(h, peer, strlen(peer));
    h = fnv_i64(h, (int64_t)s->incarnation);
    h = fnv(h, s->endpoint, strlen(s->endpoint));
    h = fnv(h, s->link->id, strlen(s->link->id));
    h = fnv_i64(h, s->n);
    h = fnv_i64(h, s->granted_ms);
    h = fnv_i64(h, s->deadline_ms);
    h = fnv_i64(h, s->keep ? 1 : 0);
    return fnv(h, s->periods, sizeof(s->periods));
}

static uint64_t
peer_hash(const struct sup_peer *p)
{
    uint64_t h = fnv(FNV_START, p->name, strlen(p->name));

    h = fnv_i64(h, (int64_t)p->incarnation);
    h = fnv_i64(h, (int64_t)p->hwm_durable);
    h = fnv_i64(h, p->leases);
    /* Cached records are zero-filled plain data, so bytes compare. */
    for (int i = 0; i < SUP_DEDUPE; i++) {
        if (p->durable[i].origin.seq != 0)
            h = fnv(h, &p->durable[i], sizeof(p->durable[i]));
    }
    return h;
}

uint64_t
sup_ledger_digest(const sup_ledger *l)
{
    uint64_t h = FNV_START, sum = 0;

    h = fnv_i64(h, l->now_ms);
    h = fnv_i64(h, (int64_t)l->epoch);
    h = fnv_i64(h, (int64_t)l->next_lease_id);
    h = fnv_i64(h, l->slot_seq);
    h = fnv_i64(h, l->lease_count);
    h = budget_hash(h, &l->plan_b, l->now_ms);
    for (size_t i = 0; i < l->ep_count; i++)
        h = budget_hash(fnv(h, l->eps[i].policy.name, strlen(l->eps[i].policy.name)), &l->eps[i].b,
                        l->now_ms);
    /* An idle link equals no link at all: evicting it, or not recreating it, changes nothing. */
    for (uint32_t i = 0; i < l->links_cap; i++) {
        if (l->links[i] != NULL && !sup__link_idle(l->links[i], l->now_ms))
            sum += link_hash_state(l->links[i], l->now_ms);
    }
    h = fnv_i64(h, (int64_t)sum);
    sum = 0;
    for (uint32_t i = 0; i < l->lease_hw; i++) {
        if (l->leases[i].id != 0)
            sum += lease_hash(l, &l->leases[i]);
    }
    h = fnv_i64(h, (int64_t)sum);
    for (uint32_t i = 0; i < l->peer_count; i++)
        h = fnv_i64(h, (int64_t)peer_hash(l->peers[i]));
    return h;
}

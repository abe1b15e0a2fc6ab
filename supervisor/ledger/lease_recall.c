/*
 * Recalling kept leases (docs/LEASE-PROTOCOL.md §2 "Recall"). A KEEP grant lives up to
 * keep_ttl_ms because every budget of its path was plentiful when it was made; when an ACQUIRE
 * finds a budget of its path no longer plentiful (rem < keep_factor * P * l_keep, P the leases
 * outstanding on it), every kept lease on that budget not recalled yet gets a RECALL, pushed to
 * its holder after the batch's replies. The holder stops using the lease and reports it, so the
 * supervisor credits what it did not use. A RECALL changes nothing durable (no record): lost, it
 * only leaves the lease to its deadline, as before; a duplicate is ignored by the holder (I7).
 * Each budget counts its kept leases not yet recalled (keeps_out), so the check is O(path) and a
 * scan of the lease table happens only when a recall is due; each lease is recalled once per
 * supervisor run.
 */
#include "sup_lease_int.h"

#include <stdio.h>
#include <string.h>

/* True iff a window of budget `kind` of `p` has too little left for kept leases at eval_ms. */
static bool
budget_short(const sup_ledger *l, const struct sup_path *p, int kind, int64_t eval_ms)
{
    struct sup_budget *b = p->b[kind];
    const struct tenant_limits *ls = p->ls[kind];
    int64_t P = b->leases_out > 0 ? b->leases_out : 1;

    if (ls == NULL || p->alg[kind] != TENANT_ALG_WINDOW)
        return false;
    for (uint32_t i = 0; i < ls->count; i++) {
        const struct sup_cell *c = sup__cell_find(b, ls->v[i].period_ms);
        int64_t rem = ls->v[i].n;

        if (c != NULL && c->window_id == tenant_window_id(eval_ms, ls->v[i].period_ms))
            rem -= c->granted - c->credited + c->debt;
        if (rem < 0 || rem / l->keep_factor < P * l->l_keep)
            return true;
    }
    return false;
}

static void
recall_queue(sup_ledger *l, struct sup_lease *lease)
{
    if (l->recall_len == SUP_RECALL_QUEUE)
        return; /* full: not marked, found again by a later check */
    l->recall_q[(l->recall_head + l->recall_len) % SUP_RECALL_QUEUE] = lease->id;
    l->recall_len++;
    sup__lease_keep_drop(l, lease);
    lease->recalled = true;
    l->stats.recalls++;
}

void
sup__recall_check(sup_ledger *l, const char *endpoint, const char *link, int64_t eval_ms)
{
    struct sup_path p;

    if (l->plan_b.keeps_out == 0)
        return; /* every kept lease counts on the plan's budget: none to recall */
    sup__path_find(l, endpoint, link, &p);
    for (int kind = 0; kind < SUP_BUDGETS; kind++) {
        if (p.b[kind] == NULL || p.b[kind]->keeps_out == 0 || !budget_short(l, &p, kind, eval_ms))
            continue;
        for (uint32_t i = 0; i < l->lease_hw && p.b[kind]->keeps_out > 0; i++) {
            struct sup_lease *lease = &l->leases[i];

            if (lease->id != 0 && lease->keep && !lease->recalled &&
                sup__lease_on_path(lease, &p, kind))
                recall_queue(l, lease);
        }
    }
}

int
sup_ledger_next_recall(sup_ledger *l, struct proto_lease_msg *out)
{
    memset(out, 0, sizeof(*out));
    while (l->recall_len > 0) {
        uint64_t id = l->recall_q[l->recall_head];
        const struct sup_lease *lease = sup__lease_find(l, id);

        l->recall_head = (l->recall_head + 1) % SUP_RECALL_QUEUE;
        l->recall_len--;
        if (lease == NULL || lease->peer >= l->peer_count)
            continue; /* closed since: nothing to recall */
        out->type = PROTO_LEASE_RECALL;
        snprintf(out->origin.child, sizeof(out->origin.child), "%s", l->peers[lease->peer]->name);
        out->origin.incarnation = lease->incarnation;
        out->origin.seq = lease->id;
        snprintf(out->recall.endpoint, sizeof(out->recall.endpoint), "%s", lease->endpoint);
        snprintf(out->recall.link, sizeof(out->recall.link), "%s", lease->link->id);
        out->recall.lease_id = lease->id;
        return TALLY_OK;
    }
    return TALLY_ENOTFOUND;
}

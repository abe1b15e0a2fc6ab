/*
 * The supervisor grant rule (docs/LEASE-PROTOCOL.md §2), one atomic step per ACQUIRE:
 *   1. roll the windows: views are taken at max(now, ledger clock), so window ids never go back;
 *   2. apply the report (credit n - used of a lease of this incarnation still live, or close it
 *      as spent when past deadline + margin) and the reported degraded debt;
 *   3. decide the path all or nothing with tenant_path_decide at cost max(need, 1): a refusal
 *      names the scope that fired and the longest Retry-After (never when the cost exceeds a
 *      limit), and charges nothing anywhere;
 *   4. size: per window bound, rem = what remains and P = leases outstanding on its budget + 1;
 *      pass-through when rem < 2 * P * l_min on any bound, when a GCRA budget is on the path, or
 *      when a window of the path ends within T_lease / 10 (grant exactly `need`, short TTL; a
 *      prefetch with need 0 is refused with the PASS flag);
 *      otherwise n = max(need, min(want, l_max, l_cap)) with l_cap = min floor(rem / (2 * P));
 *      keep: when every bound has rem >= keep_factor * P * l_keep (plenty) and
 *      n <= share = min floor(rem / (keep_factor * P)), the grant is flagged KEEP (kept to its
 *      deadline when idle; recalled if a budget runs short): it holds max(need, min(share,
 *      l_max, l_cap)) and lives life = min(keep_ttl, window ends);
 *   5. ttl = min(T_lease, T_pass or the keep life, window end - now) over every window of the
 *      path (I3).
 * Steps 2 and 4 go into one ACQUIRE record, applied at once; nothing here writes state.
 */
#include "sup_lease_int.h"

#include <stdio.h>
#include <string.h>

/* What step 2 will do, worked out before anything changes. */
struct report_plan {
    struct sup_lease *lease; /* the reported lease when it is credited */
    uint32_t flags;          /* SUP_RECF_REPORT_* */
    int64_t credit;
};

static void
report_plan(const sup_ledger *l, int pi, int64_t eval_ms, const struct proto_lease_msg *in,
            struct report_plan *out)
{
    const struct proto_lease_acquire *a = &in->acquire;
    struct sup_lease *lease = sup__lease_find(l, a->report_lease);

    memset(out, 0, sizeof(*out));
    /* Credit only on proof from the child that holds it: the incarnation it was granted to,
     * or a later one that resumed it from its row (docs/LEASE-PROTOCOL.md §2). */
    if (lease == NULL || !sup__lease_reportable(lease, pi, &in->origin))
        return;
    if (eval_ms > lease->deadline_ms + l->margin_ms) {
        out->flags = SUP_RECF_REPORT_SPENT;
        return;
    }
    out->lease = lease;
    out->flags = SUP_RECF_REPORT_CREDIT;
    out->credit = lease->n - (a->report_used < lease->n ? a->report_used : lease->n);
}

static void
deny_from(struct sup_record *rec, const struct tenant_decision *d)
{
    rec->scope = d->scope;
    rec->retry_after_ms = d->never ? TENANT_RETRY_NEVER : d->retry_after_ms;
    rec->deny_flags = d->never ? PROTO_LEASE_DENY_NEVER : 0;
    rec->limit = d->limit > 0 && d->limit <= PROTO_LEASE_N_MAX ? d->limit : 0;
}

/* max(need, min(ask, l_max, cap)): what an ask becomes (step 4). */
static int64_t
grant_size(const sup_ledger *l, int64_t ask, int64_t cap, int64_t need)
{
    int64_t n = ask < l->l_max ? ask : l->l_max;

    n = n < cap ? n : cap;
    return n > need ? n : need;
}

/* Steps 4 and 5 for an admitted path: fills the grant (or the pass-through refusal) of rec. */
static void
size_grant(const sup_ledger *l, const struct sup_path *p, const int *kinds, uint32_t count,
           const struct tenant_decision *d, int64_t eval_ms, const struct proto_lease_acquire *a,
           int64_t cost, struct sup_record *rec)
{
    bool next = (a->flags & PROTO_LEASE_ACQ_NEXT) != 0;
    int64_t cap = l->l_max, ttl_cap = INT64_MAX, ttl_last = 0, holders = 1, n, ttl;
    int64_t share = PROTO_LEASE_N_MAX; /* a holder's share of what remains; grant_size caps it */
    bool pass = false, plenty = l->l_keep > 0;

    for (uint32_t i = 0; i < count; i++) {
        const struct sup_budget *b = p->b[kinds[i]];
        const struct tenant_verdict *v = &d->budget[i];
        int64_t P = (b != NULL ? b->leases_out : 0) + 1;

        if (p->alg[kinds[i]] == TENANT_ALG_GCRA) {
            pass = true; /* a GCRA budget cannot take leased tokens back */
            continue;
        }
        if (P > holders)
            holders = P;
        for (uint32_t j = 0; j < v->count; j++) {
            int64_t rem = v->v[j].remaining + cost; /* remaining before this request */

            if (rem < 2 * P * l->l_min)
                pass = true;
            if (rem / l->keep_factor < P * l->l_keep)
                plenty = false;
            if (rem / l->keep_factor / P < share)
                share = rem / l->keep_factor / P; /* all holders keep <= 1/16 of rem */
            if (rem / (2 * P) < cap)
                cap = rem / (2 * P);
            if (v->v[j].reset_ms - eval_ms < ttl_cap)
                ttl_cap = v->v[j].reset_ms - eval_ms;
            if (v->v[j].reset_ms - eval_ms > ttl_last)
                ttl_last = v->v[j].reset_ms - eval_ms;
        }
    }
    rec->holders = (uint32_t)(holders < PROTO_LEASE_COUNT_MAX ? holders : PROTO_LEASE_COUNT_MAX);
    /* Just before a window ends a lease would live a few ms: act as near exhaustion. */
    if (ttl_cap < l->lease_ttl_ms / 10)
        pass = true;
    if (pass && a->need == 0) {
        /* Near exhaustion a lease is only worth what a waiting request needs. */
        rec->flags |= SUP_RECF_PASS;
        rec->deny_flags = PROTO_LEASE_DENY_PASS;
        rec->scope = TENANT_SCOPE_NONE;
        return;
    }
    if (pass) {
        n = a->need;
        ttl = l->pass_ttl_ms;
        rec->flags |= SUP_RECF_PASS;
    } else {
        n = grant_size(l, a->want, cap, a->need);
        ttl = l->lease_ttl_ms;
        if (next && !(plenty && share >= n)) {
            /* A lease ahead of its window is only worth it for a quiet link's kept share. */
            rec->flags |= SUP_RECF_PASS;
            rec->deny_flags = PROTO_LEASE_DENY_PASS;
            rec->scope = TENANT_SCOPE_NONE;
            return;
        }
        if (plenty && share >= n) {
            /* While every budget of the path is plentiful, a grant within the per-holder share
             * (1/keep_factor of what remains per holder) is kept instead: it holds that whole
             * share and lives up to keep_ttl_ms (cut at the end of every window of the path);
             * its holder keeps it when the link goes quiet and renews it before it runs out.
             * The share does not depend on the rate the link was seen at: a link first seen
             * while its tenant's traffic is still arriving (a cold start, a slow client) would
             * otherwise ask again as soon as that traffic picks up. A link then asks its
             * supervisor once per share of traffic, at a window end, or when a budget runs
             * short (RECALL): quiet tenants decide locally and their supervisors may sleep. A
             * link asking for more than the share (a burst) gets the ordinary lease. */
            n = grant_size(l, share, cap, a->need);
            ttl = l->keep_ttl_ms < ttl_cap ? l->keep_ttl_ms : ttl_cap;
            rec->flags |= SUP_RECF_KEEP;
        }
    }
    /* No lease spans a window boundary (I3); the boundary is after eval_ms, so ttl >= 1. A
     * lease that ends at one says so: renewing it by age would only get the same end again. */
    if (ttl >= ttl_cap) {
        ttl = ttl_cap;
        rec->flags |= SUP_RECF_EDGE;
        /* Every window of the path ends there too: what is left of the lease then is worth
         * nothing (the next windows start whole), so its holder does not report it, and a
         * quiet tenant's supervisor is not started at each window end to hear it. */
        if (ttl_last == ttl_cap)
            rec->flags |= SUP_RECF_LAST;
    }
    rec->flags |= SUP_RECF_GRANTED | (next ? SUP_RECF_NEXT : 0);
    rec->lease_id = l->next_lease_id + 1;
    rec->n = n;
    rec->ttl_ms = ttl;
    rec->deadline_ms = eval_ms + ttl;
}

/* The instant a NEXT lease of path `p` would start at: the earliest end, after eval_ms, of a
 * window of the path; 0 when the path has no window budget or has a GCRA one (nothing to ask
 * ahead for). */
static int64_t
next_start(const struct sup_path *p, int64_t eval_ms)
{
    int64_t start = 0;

    for (int kind = 0; kind < SUP_BUDGETS; kind++) {
        const struct tenant_limits *ls = p->ls[kind];

        if (ls == NULL || ls->count == 0)
            continue;
        if (p->alg[kind] == TENANT_ALG_GCRA)
            return 0;
        for (uint32_t i = 0; i < ls->count; i++) {
            int64_t end = tenant_window_end_ms(tenant_window_id(eval_ms, ls->v[i].period_ms),
                                               ls->v[i].period_ms);

            if (end > eval_ms && (start == 0 || end < start))
                start = end;
        }
    }
    return start;
}

bool
sup__decide_acquire(sup_ledger *l, int pi, int64_t now_ms, const struct proto_lease_msg *in,
                    struct sup_record *rec, struct proto_lease_msg *reply)
{
    const struct proto_lease_acquire *a = &in->acquire;
    int64_t eval_ms = sup__eval_ms(l, now_ms), cost = a->need > 0 ? a->need : 1, view_ms;
    struct tenant_budget views[SUP_BUDGETS];
    struct tenant_decision d;
    struct tenant_path tp;
    struct report_plan rp;
    struct sup_path p;
    int kinds[SUP_BUDGETS];
    uint16_t error = 0;
    int rc = TALLY_OK;

    /* Room first, before any lease pointer is taken: a full table grows. */
    if (l->lease_count >= l->max_leases)
        (void)sup__leases_grow(l);
    sup__record_init(l, rec, SUP_REC_ACQUIRE, in, now_ms);
    snprintf(rec->endpoint, sizeof(rec->endpoint), "%s", a->endpoint);
    snprintf(rec->link, sizeof(rec->link), "%s", a->link);
    report_plan(l, pi, eval_ms, in, &rp);
    rec->flags = rp.flags;
    rec->report_lease = rp.flags != 0 ? a->report_lease : 0;
    rec->report_used = rp.flags != 0 ? a->report_used : 0;
    rec->credited = rp.credit;
    rec->debt = a->debt;

    sup__path_find(l, a->endpoint, a->link, &p);
    if (p.ep == NULL)
        error = PROTO_LEASE_E_ENDPOINT;
    else if (l->link_allows != NULL && !l->link_allows(l->link_ctx, a->link, a->endpoint, now_ms))
        error = PROTO_LEASE_E_LINK;
    else if (l->lease_count >= l->max_leases || !sup__link_available(l, a->link))
        error = PROTO_LEASE_E_BUSY;
    /* A NEXT ACQUIRE is decided as at the start of the windows it asks for. */
    view_ms = eval_ms;
    if (error == 0 && (a->flags & PROTO_LEASE_ACQ_NEXT)) {
        /* Not while the wall clock is behind the ledger's (stepped back): the ledger's windows
         * then start when the wall gets there, later than the wait a grant would name. */
        view_ms = now_ms >= eval_ms ? next_start(&p, eval_ms) : 0;
        if (view_ms == 0 || view_ms - eval_ms > SUP_NEXT_AHEAD_MS) {
            rec->flags |= SUP_RECF_PASS;
            rec->deny_flags = PROTO_LEASE_DENY_PASS;
            rec->scope = TENANT_SCOPE_NONE;
            if (rp.flags != 0 || a->debt > 0)
                return true; /* the report and the debt still count */
            sup__record_reply(l, rec, reply);
            return false;
        }
    }

    memset(&tp, 0, sizeof(tp));
    for (int kind = 0; kind < SUP_BUDGETS && error == 0; kind++) {
        if (p.ls[kind] == NULL || p.ls[kind]->count == 0)
            continue; /* empty limit lists are skipped */
        rc = sup__budget_view(&p, kind, view_ms, rp.lease, rp.credit, a->debt, &views[tp.count]);
        if (rc != TALLY_OK)
            break;
        kinds[tp.count] = kind;
        tp.budgets[tp.count] = &views[tp.count];
        tp.count++;
    }
    if (error == 0 && rc == TALLY_OK)
        rc = tenant_path_decide(&tp, view_ms > now_ms ? view_ms : now_ms, cost, &d);
    if (error == 0 && rc != TALLY_OK)
        error = PROTO_LEASE_E_INVALID;

    if (error != 0) {
        rec->error = error;
        rec->retry_after_ms = error == PROTO_LEASE_E_BUSY ? 100 : 1000;
    } else if (!d.admitted) {
        deny_from(rec, &d);
    } else {
        size_grant(l, &p, kinds, tp.count, &d, view_ms, a, cost, rec);
    }
    if ((rec->flags & SUP_RECF_GRANTED) || rp.flags != 0 || a->debt > 0)
        return true;
    /* Nothing changes: answer without a record. */
    sup__record_reply(l, rec, reply);
    return false;
}

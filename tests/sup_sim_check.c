/*
 * Ground truth and invariants for the simulation (sup_sim.h). The children's admissions are the
 * truth: each non-degraded admission is charged to the windows its lease reserved in (the lease
 * as the journal recorded it), each degraded one to the windows of the host clock's high-water
 * mark. Checked as things happen:
 *   I1  every durable cell: G - C <= N; the cells of a grant have G - C + D <= N right after;
 *   I2  non-degraded admissions per budget window <= N;
 *   I3  per lease: admitted <= n, and only before grant time + ttl in true time (the child's
 *       deadline comes first whatever its drift), which keeps a lease inside its window; a
 *       LAST lease extended by a NEXT grant, only before its windows' end on the host's clock;
 *   I4  at each plan refusal: stranded tokens (sup_sim_strand.c);
 *   I5  per window, admitted <= N + the degraded allowance (per incarnation: it lives in the
 *       child's memory); debt charged once per admission;
 *   I6  slots held per link <= K, in the ledger and in truth (operations holding a granted slot
 *       whose TTL has not run out), restarts included;
 *   I7  a request answered with a record, delivered again, appends nothing, changes nothing
 *       (equal digests) and gets the same reply;
 *   I8  window ids of every durable cell never go back, whatever the wall clock does;
 * and at the end, a replay of the journal equals the live ledger.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sup_sim_int.h"

void
sim_fail(const struct sim_world *w, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fail_msg("seed %llu, t=%lld ms: %s", (unsigned long long)w->p.seed, (long long)w->t, msg);
}

struct sim_map_entry *
sim_map_get(struct sim_map_entry *m, const int64_t k[5], bool create)
{
    uint64_t h = 1469598103934665603ULL;

    for (int i = 0; i < 5; i++)
        h = (h ^ (uint64_t)k[i]) * 1099511628211ULL;
    for (uint64_t i = h & (SIM_MAP_CAP - 1), n = 0; n < SIM_MAP_CAP;
         i = (i + 1) & (SIM_MAP_CAP - 1), n++) {
        struct sim_map_entry *e = &m[i];

        if (e->used && memcmp(e->k, k, sizeof(e->k)) == 0)
            return e;
        if (!e->used) {
            if (!create)
                return NULL;
            e->used = true;
            memcpy(e->k, k, sizeof(e->k));
            return e;
        }
    }
    fail_msg("simulation map full");
    return NULL;
}

/* The window limits of budget `kind` on the path (ep, link); NULL for none or GCRA. */
const struct tenant_limits *
sim_path_limits(const struct sim_world *w, int kind, int ep)
{
    const struct tenant_endpoint *e = ep >= 0 ? &w->eps[ep] : NULL;

    switch (kind) {
    case K_PLAN:
        return &w->plan.limits;
    case K_LINK:
        return &w->plan.link_limits;
    case K_EP:
        return e != NULL && e->algorithm == TENANT_ALG_WINDOW ? &e->tenant_limits : NULL;
    default:
        return e != NULL && e->algorithm == TENANT_ALG_WINDOW ? &e->limits : NULL;
    }
}

void
sim_cell_key(int64_t k[5], int kind, int ep, int link, int64_t period, int64_t window)
{
    k[0] = kind;
    k[1] = kind == K_EP || kind == K_EPLINK ? ep : -1;
    k[2] = kind == K_LINK || kind == K_EPLINK ? link : -1;
    k[3] = period;
    k[4] = window;
}

/* ---- events ---- */

void
sim_on_persisted(struct sim_world *w, const struct sup_record *rec, int64_t t_handled)
{
    int child = sim_ep_index(w, rec->origin.child);
    int64_t debt = rec->kind == SUP_REC_ACQUIRE ? rec->debt : 0;

    for (uint32_t e = 0; rec->kind == SUP_REC_DEBT && e < rec->count; e++)
        debt += rec->e[e].debt;
    if (debt > 0 && child >= 0 && rec->origin.incarnation < SIM_INC_MAX)
        w->debt_charged[child][rec->origin.incarnation] += debt;
    if (rec->kind == SUP_REC_ACQUIRE && (rec->flags & SUP_RECF_GRANTED)) {
        struct sim_lease *l;

        while (rec->lease_id >= w->cap_leases) {
            w->leases = realloc(w->leases, 2 * w->cap_leases * sizeof(*w->leases));
            assert_non_null(w->leases);
            memset(w->leases + w->cap_leases, 0, w->cap_leases * sizeof(*w->leases));
            w->cap_leases *= 2;
        }
        l = &w->leases[rec->lease_id];
        if (l->known)
            sim_fail(w, "lease %llu granted twice", (unsigned long long)rec->lease_id);
        l->known = true;
        l->child = sim_ep_index(w, rec->origin.child);
        l->inc = rec->origin.incarnation;
        l->link = sim_link_index(w, rec->link);
        l->ep = sim_ep_index(w, rec->endpoint);
        l->n = rec->n;
        /* As the child sees it: from the send, and for a NEXT lease its wait included; its
         * admissions count in the windows of its start. */
        l->ttl_ms = rec->deadline_ms - rec->now_ms;
        l->start_ms = l->ttl_ms - rec->ttl_ms;
        l->eval_ms = rec->deadline_ms - rec->ttl_ms;
        l->deadline_ms = rec->deadline_ms;
        l->last = (rec->flags & SUP_RECF_LAST) != 0;
        w->r->next_grants += (rec->flags & SUP_RECF_NEXT) != 0;
        l->t_grant = t_handled;
        {
            int64_t k[5] = {K_SENT, l->child, (int64_t)l->inc, (int64_t)rec->origin.seq, 0};
            struct sim_map_entry *e = sim_map_get(w->windows, k, false);

            if (e == NULL)
                sim_fail(w, "lease %llu granted to a request never sent",
                         (unsigned long long)rec->lease_id);
            l->t_send = e->v[0];
        }
        w->r->grants++;
        if (rec->flags & SUP_RECF_KEEP) {
            int64_t t_lease =
                w->lcfg.lease_ttl_ms > 0 ? w->lcfg.lease_ttl_ms : SUP_LEASE_TTL_MS_DEFAULT;

            w->r->kept_grants++;
            w->r->kept_long += rec->ttl_ms > t_lease;
            if (rec->ttl_ms > w->r->kept_ttl_max)
                w->r->kept_ttl_max = rec->ttl_ms;
        }
    } else if (rec->kind == SUP_REC_ACQUIRE) {
        w->r->denies++;
    }
    if ((rec->kind == SUP_REC_ACQUIRE || rec->kind == SUP_REC_RETURN) &&
        (rec->flags & SUP_RECF_REPORT_CREDIT) && rec->report_lease < w->cap_leases) {
        struct sim_lease *l = &w->leases[rec->report_lease];

        /* Credited: the child must never have admitted, nor admit later, more than it said. */
        l->reported = true;
        l->reported_used = rec->report_used;
        if (l->admitted > rec->report_used)
            sim_fail(w, "I2: lease %llu reported %lld used after %lld admissions",
                     (unsigned long long)rec->report_lease, (long long)rec->report_used,
                     (long long)l->admitted);
    }
    if (rec->kind == SUP_REC_SLOT_GRANT) {
        int64_t k[5] = {K_SLOT, sim_link_index(w, rec->link), rec->slot_id, 0, 0};

        sim_map_get(w->windows, k, true)->v[0] = rec->now_ms;
    }
}

void
sim_on_admit(struct sim_world *w, int i, int link, int64_t cost, const struct sup_admit *a)
{
    struct sim_child *ch = &w->ch[i];
    struct sim_lease *l;
    int64_t k[5];

    w->r->admitted++;
    w->r->late_admitted += w->t >= w->p.duration_ms / 2 && !w->draining;
    if (a->degraded) {
        w->r->degraded++;
        ch->degraded_by_inc[ch->inc] += cost;
        for (int kind = K_PLAN; kind <= K_EPLINK; kind++) {
            const struct tenant_limits *ls = sim_path_limits(w, kind, i);

            for (uint32_t b = 0; ls != NULL && b < ls->count; b++) {
                sim_cell_key(k, kind, i, link, ls->v[b].period_ms, w->wall_hw / ls->v[b].period_ms);
                sim_map_get(w->counts, k, true)->v[1] += cost;
            }
        }
        return;
    }
    if (a->lease_id >= w->cap_leases || !w->leases[a->lease_id].known)
        sim_fail(w, "child %d admitted on lease %llu that was never durably granted", i,
                 (unsigned long long)a->lease_id);
    l = &w->leases[a->lease_id];
    if (l->child != i || l->link != link)
        sim_fail(w, "child %d used lease %llu of child %d link %d", i,
                 (unsigned long long)a->lease_id, l->child, l->link);
    l->admitted += cost;
    if (l->reported && l->admitted > l->reported_used)
        sim_fail(w, "I2: lease %llu admits %lld after its report of %lld used was credited",
                 (unsigned long long)a->lease_id, (long long)l->admitted,
                 (long long)l->reported_used);
    if (l->admitted > l->n)
        sim_fail(w, "I3: lease %llu admitted %lld > n %lld", (unsigned long long)a->lease_id,
                 (long long)l->admitted, (long long)l->n);
    /* A NEXT lease starts no earlier than its windows: the child waits from the grant's arrival,
     * after the decision, lengthened by the drift bound. */
    if (w->t < l->t_grant + l->start_ms)
        sim_fail(w, "I3: lease %llu used at t=%lld, before its windows start at %lld",
                 (unsigned long long)a->lease_id, (long long)w->t,
                 (long long)(l->t_grant + l->start_ms));
    /* Gray & Cheriton: the child stops before send time + ttl in true time, whatever its drift
     * (<= its epsilon), hence before the supervisor's grant time + ttl. A LAST lease whose end a
     * NEXT grant moved is held to its windows' end instead, on the supervisor's clock (the
     * host's high-water wall clock): the NEXT grant measured that end from its later ask, and
     * after a step back of the host's clock it lies later in true time than send + ttl. The
     * supervisor neither expires the lease nor starts the next windows before it. */
    if (w->t >= l->t_send + l->ttl_ms && !(l->last && w->wall_hw < l->deadline_ms))
        sim_fail(w, "I3: lease %llu used at t=%lld, asked for at %lld with ttl %lld",
                 (unsigned long long)a->lease_id, (long long)w->t, (long long)l->t_send,
                 (long long)l->ttl_ms);
    for (int kind = K_PLAN; kind <= K_EPLINK; kind++) {
        const struct tenant_limits *ls = sim_path_limits(w, kind, l->ep);

        for (uint32_t b = 0; ls != NULL && b < ls->count; b++) {
            struct sim_map_entry *e;

            sim_cell_key(k, kind, l->ep, link, ls->v[b].period_ms, l->eval_ms / ls->v[b].period_ms);
            e = sim_map_get(w->counts, k, true);
            e->v[0] += cost;
            if (e->v[0] > sim_window_bound(w, kind, k[3], k[4], ls->v[b].n, false))
                sim_fail(w, "I2: budget %d ep %d link %d window %lld/%lld: admitted %lld > %lld",
                         kind, l->ep, link, (long long)k[4], (long long)k[3], (long long)e->v[0],
                         (long long)sim_window_bound(w, kind, k[3], k[4], ls->v[b].n, false));
        }
    }
}

int64_t
sim_slot_granted_at(struct sim_world *w, int link, int64_t slot)
{
    int64_t k[5] = {K_SLOT, link, slot, 0, 0};
    struct sim_map_entry *e = sim_map_get(w->windows, k, false);

    if (e == NULL)
        sim_fail(w, "I6: slot %lld of link %d held but never durably granted", (long long)slot,
                 link);
    return e->v[0];
}

void
sim_on_sent(struct sim_world *w, int i, const struct proto_lease_msg *m)
{
    int64_t k[5] = {K_SENT, i, (int64_t)m->origin.incarnation, (int64_t)m->origin.seq, 0};
    struct sim_map_entry *e;

    if (m->type != PROTO_LEASE_ACQUIRE)
        return;
    e = sim_map_get(w->windows, k, true);
    if (e->v[1] == 0) {
        e->v[0] = w->t;
        e->v[1] = 1;
    }
}

void
sim_on_refund(struct sim_world *w, int i, int link, uint64_t lease, int64_t cost)
{
    struct sim_lease *l = &w->leases[lease];
    int64_t k[5];

    (void)i;
    l->admitted -= cost;
    w->r->admitted--;
    for (int kind = K_PLAN; kind <= K_EPLINK; kind++) {
        const struct tenant_limits *ls = sim_path_limits(w, kind, l->ep);

        for (uint32_t b = 0; ls != NULL && b < ls->count; b++) {
            sim_cell_key(k, kind, l->ep, link, ls->v[b].period_ms, l->eval_ms / ls->v[b].period_ms);
            sim_map_get(w->counts, k, true)->v[0] -= cost;
        }
    }
}

/* ---- around a handle ---- */

static uint64_t
reply_hash(const struct proto_lease_msg *m)
{
    uint8_t b[SIM_FRAME_MAX];
    size_t len;
    uint64_t h = 1469598103934665603ULL;

    if (proto_lease_encode(m, 0, b, sizeof(b), &len) != TALLY_OK)
        return 0;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static void
replied_key(const struct sim_world *w, const struct proto_lease_msg *in, int64_t k[5])
{
    k[0] = sim_ep_index(w, in->origin.child);
    k[1] = (int64_t)in->origin.incarnation;
    k[2] = (int64_t)in->origin.seq;
    k[3] = 0;
    k[4] = 0;
}

/* The first reply given with a record to `in`: durable, or in the batch not yet persisted. */
static struct sim_map_entry *
replied_entry(struct sim_world *w, const struct proto_lease_msg *in)
{
    int64_t k[5];

    replied_key(w, in, k);
    for (size_t i = 0; i < w->npending; i++) {
        if (memcmp(w->pending[i].k, k, sizeof(k)) == 0)
            return &w->pending[i];
    }
    return sim_map_get(w->replied, k, false);
}

void
sim_batch_done(struct sim_world *w, bool durable)
{
    for (size_t i = 0; durable && i < w->npending; i++)
        sim_map_get(w->replied, w->pending[i].k, true)->v[0] = w->pending[i].v[0];
    w->npending = 0;
}

uint64_t
sim_before_handle(struct sim_world *w, const struct proto_lease_msg *in)
{
    /* The ledger changes only through records, checked for every duplicate; the full digest,
     * which costs a walk of the whole state, for every 8th. */
    if (replied_entry(w, in) == NULL || w->dup_seen++ % 8 != 0)
        return 0;
    return sup_ledger_digest(w->sup);
}

struct cell_walk {
    struct sim_world *w;
    const struct sup_record *grant; /* check only the cells this grant reserved on */
};

static bool
on_path(const struct sup_cell_info *c, const struct sup_record *g)
{
    bool ep = strcmp(c->endpoint, g->endpoint) == 0, link = strcmp(c->link, g->link) == 0;

    switch (c->scope) {
    case TENANT_SCOPE_PLAN:
        return true;
    case TENANT_SCOPE_LINK:
        return link;
    case TENANT_SCOPE_ENDPOINT_TENANT:
        return ep;
    default:
        return ep && link;
    }
}

/* I1 right after a grant: every cell it reserved on has G - C + D <= N. A NEXT grant reserved
 * in the windows that start at its start (deadline - ttl), in each cell's next-window slot: the
 * running windows' counts say nothing of it (debt reported since may have taken them past N, as
 * I5 allows), and the slot is checked when it becomes the counts, at the roll (cell_i1). */
static int
cell_granted(void *ctx, const struct sup_cell_info *c)
{
    struct cell_walk *cw = ctx;
    const struct sup_record *g = cw->grant;
    int64_t at = (g->flags & SUP_RECF_NEXT) ? g->deadline_ms - g->ttl_ms : g->now_ms;

    if (on_path(c, cw->grant) && c->window_id == tenant_window_id(at, c->period_ms) &&
        c->granted - c->credited + c->debt > c->limit)
        sim_fail(cw->w, "I1: granted %lld into a cell with G %lld - C %lld + D %lld > N %lld",
                 (long long)cw->grant->n, (long long)c->granted, (long long)c->credited,
                 (long long)c->debt, (long long)c->limit);
    return 0;
}

static int
cell_i1(void *ctx, const struct sup_cell_info *c)
{
    struct cell_walk *cw = ctx;
    struct sim_world *w = cw->w;
    int64_t k[5];
    struct sim_map_entry *e;

    if (c->granted - c->credited >
        sim_window_bound(w, (int)c->scope - 1, c->period_ms, c->window_id, c->limit, true))
        sim_fail(w, "I1: scope %d %s/%s period %lld: G %lld - C %lld > N %lld", c->scope,
                 c->endpoint, c->link, (long long)c->period_ms, (long long)c->granted,
                 (long long)c->credited, (long long)c->limit);
    if (c->credited > c->granted || c->credited < 0 || c->debt < 0)
        sim_fail(w, "I1: scope %d: C %lld > G %lld", c->scope, (long long)c->credited,
                 (long long)c->granted);
    if (c->granted == 0 && c->credited == 0 && c->debt == 0)
        return 0; /* a fresh cell (or a new one after its link was evicted) holds nothing */
    sim_cell_key(k, (int)c->scope - 1, sim_ep_index(w, c->endpoint), sim_link_index(w, c->link),
                 c->period_ms, 0);
    e = sim_map_get(w->cells, k, true);
    /* I8: windows never go back. */
    if (c->window_id < e->v[0])
        sim_fail(w, "I8: scope %d %s/%s period %lld: window went back from %lld to %lld", c->scope,
                 c->endpoint, c->link, (long long)c->period_ms, (long long)e->v[0],
                 (long long)c->window_id);
    e->v[0] = c->window_id;
    e->v[1] = c->granted;
    return 0;
}

int64_t
sim_window_bound(const struct sim_world *w, int kind, int64_t period, int64_t window, int64_t n,
                 bool granted)
{
    if (!w->lowered || kind != K_PLAN || period != w->lower_period)
        return n;
    if (window < w->lower_win[1])
        return w->lower_old_n > n ? w->lower_old_n : n; /* over before the change */
    for (int i = 0; i < 2; i++) {
        int64_t before = granted ? w->lower_granted[i] : w->lower_admit[i];

        if (window == w->lower_win[i] && before > n)
            return before;
    }
    return n;
}

void
sim_after_handle(struct sim_world *w, const struct proto_lease_msg *in,
                 const struct proto_lease_msg *reply, const struct sup_record *added,
                 size_t n_added, uint64_t digest_before)
{
    struct sim_map_entry *e = replied_entry(w, in);
    struct cell_walk cw = {w, NULL};

    if (e != NULL) {
        /* I7: already answered with a record. */
        w->r->duplicates++;
        if (n_added != 0)
            sim_fail(w, "I7: duplicate %s appended %zu records", proto_lease_type_name(in->type),
                     n_added);
        if (digest_before != 0 && sup_ledger_digest(w->sup) != digest_before)
            sim_fail(w, "I7: duplicate %s changed the ledger", proto_lease_type_name(in->type));
        if (!(reply->type == PROTO_LEASE_ERROR && reply->error.code == PROTO_LEASE_E_STALE) &&
            reply_hash(reply) != (uint64_t)e->v[0])
            sim_fail(w, "I7: duplicate %s got another reply (%s)", proto_lease_type_name(in->type),
                     proto_lease_type_name(reply->type));
        return;
    }
    if (n_added > 0) {
        if (added[0].origin.seq != in->origin.seq)
            sim_fail(w, "record origin mismatch");
        assert_true(w->npending < SIM_BATCH_MAX);
        e = &w->pending[w->npending++];
        replied_key(w, in, e->k);
        e->used = true;
        e->v[0] = (int64_t)reply_hash(reply);
        cw.grant = added;
        if (added->kind == SUP_REC_ACQUIRE && (added->flags & SUP_RECF_GRANTED))
            (void)sup_ledger_each_cell(w->sup, cell_granted, &cw);
    }
}

/* ---- every step ---- */

struct mark_scan {
    struct sim_world *w;
    int child;
};

/* Strict: what a child admitted on a lease is covered by a durable mark (so a crash at any
 * instant resumes it at used := mark >= what was admitted), or, before its first row is
 * durable, by the mark that row carries (a crash before leaves no row: nothing resumes it). */
static int
scan_marks(void *ctx, const struct sup_child_lease_info *l)
{
    struct mark_scan *ms = ctx;

    if (l->live && !l->row_durable && l->used > l->mark_first)
        sim_fail(ms->w, "I2: child %d lease %llu used %lld beyond its first row's mark %lld",
                 ms->child, (unsigned long long)l->lease_id, (long long)l->used,
                 (long long)l->mark_first);
    if (l->live && l->row_durable && l->used > l->mark)
        sim_fail(ms->w, "I2: child %d lease %llu used %lld beyond its durable mark %lld", ms->child,
                 (unsigned long long)l->lease_id, (long long)l->used, (long long)l->mark);
    return 0;
}

struct slot_count {
    int64_t held[SIM_MAX_LINKS];
};

void
sim_check_step(struct sim_world *w)
{
    struct cell_walk cw = {w, NULL};
    struct slot_count sc;
    int64_t now;

    for (int i = 0; w->p.strict && i < w->p.children; i++) {
        struct mark_scan ms = {w, i};

        if (w->ch[i].c != NULL)
            (void)sup_child_each_lease(w->ch[i].c, scan_marks, &ms);
    }
    if (w->sup == NULL)
        return;
    /* Cells change only through records. */
    if (w->nj != w->checked_nj) {
        (void)sup_ledger_each_cell(w->sup, cell_i1, &cw);
        w->checked_nj = w->nj;
    }
    now = sup_ledger_now_ms(w->sup) > sim_wall(w) ? sup_ledger_now_ms(w->sup) : sim_wall(w);
    memset(&sc, 0, sizeof(sc));
    for (int i = 0; i < w->p.children; i++) {
        for (int k = 0; w->ch[i].c != NULL && k < SIM_OPS_MAX; k++) {
            const struct sim_op *op = &w->ch[i].ops[k];
            if (op->state == 2 && now < op->sup_from + sim_slot_ttl(w))
                sc.held[op->link]++;
        }
    }
    for (int l = 0; l < w->p.links; l++) {
        int64_t held = sup_ledger_slots_held(w->sup, w->links[l], sim_wall(w));

        if (held > w->plan.concurrency)
            sim_fail(w, "I6: ledger holds %lld slots on link %d > K %lld", (long long)held, l,
                     (long long)w->plan.concurrency);
        if (sc.held[l] > w->plan.concurrency)
            sim_fail(w, "I6: %lld operations hold a live slot on link %d > K %lld",
                     (long long)sc.held[l], l, (long long)w->plan.concurrency);
    }
}

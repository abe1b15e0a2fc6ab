/*
 * A simulated world's configuration (sup_sim.h), drawn from its seed: the host's wall clock, the
 * plan and endpoints (random small limits that run out, or a roomy plan for the steady run), when
 * a reload lowers the plan's limit (and the lowering itself: what was admitted and granted
 * before it, which the checks then allow), the links, and the ledger's settings.
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
#include "test_support.h"

uint64_t
sim_mix(uint64_t x)
{
    return test_rand(&x);
}

int
sim_schedules(int fallback)
{
    const char *env = getenv("TALLY_SIM_SCHEDULES");
    int n = env != NULL ? atoi(env) : 0;

    return n > 0 ? n : fallback;
}

void
sim_draw_params(uint64_t s, const struct sim_draw *d, struct sim_params *p)
{
    uint64_t r = sim_mix(s);

    p->seed = s;
    p->children = 2 + (int)(r % 5);
    r = sim_mix(r);
    p->links = 1 + (int)(r % 4);
    r = sim_mix(r);
    p->duration_ms = d->duration_min_ms + (int64_t)(r % (uint64_t)d->duration_span_ms);
    r = sim_mix(r);
    p->strict = r % 4 != 0;
    p->faults = true;
    r = sim_mix(r);
    p->loss_pct = (int)(r % (uint64_t)d->loss_span);
    r = sim_mix(r);
    p->dup_pct = (int)(r % (uint64_t)d->loss_span);
    r = sim_mix(r);
    p->delay_max_ms = 1 + (int)(r % 6);
    r = sim_mix(r);
    p->sup_crash_per_100k = (int)(r % (uint64_t)d->sup_crash_span);
    r = sim_mix(r);
    p->child_crash_per_100k = (int)(r % (uint64_t)d->child_crash_span);
    r = sim_mix(r);
    p->write_max_ms = (int)(r % 16);
    r = sim_mix(r);
    p->crash_after_report_pct = r % 3 == 0 ? (int)(r % 20) : 0;
    r = sim_mix(r);
    p->partition_per_100k = (int)(r % (uint64_t)d->sup_crash_span);
    r = sim_mix(r);
    p->clock_step_per_100k = (int)(r % 80);
    r = sim_mix(r);
    p->compact_per_100k = (int)(r % (uint64_t)d->compact_span);
    r = sim_mix(r);
    p->idle_close_per_100k = r % 3 == 0 ? 0 : (int)(r % 400);
    r = sim_mix(r);
    p->demand_pct = 30 + (int)(r % 300);
    r = sim_mix(r);
    p->first_turn = r % 2 == 0;
    r = sim_mix(r);
    p->handover_per_100k = r % 3 == 0 ? 0 : (int)(r % 150);
}

static void
limits_set(struct tenant_limits *ls, int64_t n1, int64_t p1, int64_t n2, int64_t p2)
{
    memset(ls, 0, sizeof(*ls));
    if (n1 > 0)
        ls->v[ls->count++] = (struct tenant_limit){n1, p1};
    if (n2 > 0)
        ls->v[ls->count++] = (struct tenant_limit){n2, p2};
}

void
sim_configure(struct sim_world *w)
{
    bool roomy = w->p.steady;

    w->wall_off = 1700000000000LL + sim_range(w, 0, 999999);
    /* The steady run measures lease sizing: it starts with the plan's 60 s window, so no window
     * end (where every lease ends and the last T_lease / 10 passes through) falls inside it. */
    if (roomy)
        w->wall_off -= w->wall_off % 60000;
    w->wall_hw = sim_wall(w);

    memset(&w->plan, 0, sizeof(w->plan));
    strcpy(w->plan.name, "pro");
    if (roomy) {
        limits_set(&w->plan.limits, 1000000, 60000, 0, 0);
    } else {
        limits_set(&w->plan.limits, sim_range(w, 25, 60), 1000, sim_range(w, 90, 220), 5000);
        /* Now and then only a longer window, so that kept leases may live past T_lease. */
        if (sim_range(w, 0, 2) == 0)
            limits_set(&w->plan.limits, sim_range(w, 90, 220), sim_range(w, 0, 1) ? 5000 : 20000, 0,
                       0);
        if (sim_range(w, 0, 1))
            limits_set(&w->plan.link_limits, sim_range(w, 12, 30), 1000, 0, 0);
    }
    /* A third of the schedules lower the plan's first limit once, as a reload would. */
    w->lower_at = -1;
    if (!roomy && sim_range(w, 0, 2) == 0) {
        w->lower_at = sim_range(w, 100, w->p.duration_ms - 100);
        w->lower_pct = (int)sim_range(w, 20, 80);
    }
    w->plan.concurrency = 2;
    for (int i = 0; i < w->p.children; i++) {
        struct tenant_endpoint *e = &w->eps[i];

        memset(e, 0, sizeof(*e));
        snprintf(e->name, sizeof(e->name), "ep%d", i);
        e->cost = 1;
        e->algorithm = TENANT_ALG_WINDOW;
        e->on_unavailable = i % 2 == 0 ? TENANT_UNAVAIL_OPEN : TENANT_UNAVAIL_CLOSED;
        limits_set(&e->degraded_limits, 4, 1000, 0, 0);
        if (!roomy) {
            if (sim_range(w, 0, 2) > 0)
                limits_set(&e->limits, sim_range(w, 8, 20), 1000, 0, 0);
            if (sim_range(w, 0, 2) == 0)
                limits_set(&e->tenant_limits, sim_range(w, 15, 40), 1000, 0, 0);
            if (i == 3 && sim_range(w, 0, 1)) {
                e->algorithm = TENANT_ALG_GCRA;
                limits_set(&e->limits, sim_range(w, 5, 15), 1000, 0, 0);
                memset(&e->tenant_limits, 0, sizeof(e->tenant_limits));
            }
        }
        if (i == SIM_EXPENSIVE) {
            e->expensive = true;
            e->on_unavailable = TENANT_UNAVAIL_CLOSED;
        }
    }
    /* Busy streams (two thirds of the time) at an average cost of 2 ask for demand_pct of the
     * plan's first limit in all. */
    if (w->p.steady)
        w->p10k = w->p.load_pct * 100;
    else
        w->p10k = w->p.demand_pct * w->plan.limits.v[0].n * 10000 / 100 * 3 / 2 / 2 /
                  (w->plan.limits.v[0].period_ms * w->p.children * w->p.links);
    if (w->p10k < 1)
        w->p10k = 1;
    for (int i = 0; i < w->p.links; i++)
        snprintf(w->links[i], sizeof(w->links[i]), "lnk_%016llx",
                 (unsigned long long)(0xa11ce00ULL + (uint64_t)i * 0x1111));

    memset(&w->lcfg, 0, sizeof(w->lcfg));
    strcpy(w->lcfg.tenant, "acme");
    w->lcfg.plan = w->plan;
    w->lcfg.endpoints = w->eps;
    w->lcfg.endpoint_count = (size_t)w->p.children;
    w->lcfg.max_links = 3; /* fewer than the links: idle links get evicted */
    if (w->p.links <= 3 || roomy)
        w->lcfg.max_links = 8;
    w->lcfg.max_leases = 256;
    w->lcfg.keep_ttl_ms = w->p.keep_ttl_ms;
    w->r->keep_ttl_ms = w->p.keep_ttl_ms > 0 ? w->p.keep_ttl_ms : SUP_KEEP_TTL_MS_DEFAULT;
    if (w->p.realistic)
        return; /* the defaults */
    /* Kept leases: none, or small grants raised to 1, 2 or 4 tokens while 1, 4 or 16 times
     * that for every holder remains (1 keeps leases far closer to exhaustion than the default). */
    w->lcfg.l_keep = (int64_t[]){-1, 1, 2, 4}[sim_range(w, 0, 3)];
    w->lcfg.keep_factor = (int64_t[]){1, 4, 16}[sim_range(w, 0, 2)];
    /* The life of a kept lease: T_lease (300 ms here, 5 s by default), 12 times that (60 s by
     * default), or up to the end of its windows (1 s and 5 s here). */
    w->lcfg.keep_ttl_ms = (int64_t[]){300, 3600, PROTO_LEASE_MS_MAX}[sim_range(w, 0, 2)];
    if (w->p.keep_ttl_ms > 0) {
        /* Asked for: kept leases of that life whenever the plan is plentiful. */
        w->lcfg.l_keep = 1;
        w->lcfg.keep_factor = 16;
        w->lcfg.keep_ttl_ms = w->p.keep_ttl_ms;
    }
    w->r->keep_ttl_ms = w->lcfg.keep_ttl_ms;
    w->lcfg.lease_ttl_ms = 300;
    w->lcfg.margin_ms = 100;
    w->lcfg.pass_ttl_ms = 100;
    w->lcfg.slot_ttl_ms = 1500;
    w->lcfg.heartbeat_ms = 100;
}

/* ---- a lowered limit ---- */

static int
cell_plan_gc(void *ctx, const struct sup_cell_info *c)
{
    struct sim_world *w = ctx;

    for (int i = 0; i < 2; i++) {
        if (c->scope == TENANT_SCOPE_PLAN && c->period_ms == w->lower_period &&
            c->window_id == w->lower_win[i])
            w->lower_granted[i] = c->granted - c->credited;
    }
    return 0;
}

void
sim_lower_limit(struct sim_world *w)
{
    struct tenant_limit *lim = &w->plan.limits.v[0];
    int64_t slack = 0;

    w->lowered = true;
    w->lower_period = lim->period_ms;
    w->lower_win[0] = w->wall_hw / lim->period_ms;
    w->lower_win[1] = w->lower_win[0] - 1;
    /* Rows a crashed child may still resume (at used := mark) were granted under the old limit:
     * they may admit n - mark more after the change. */
    for (int i = 0; i < w->p.children; i++) {
        for (int r = 0; r < w->ch[i].nrows; r++)
            slack += w->ch[i].rows[r].n - w->ch[i].rows[r].mark;
    }
    for (int i = 0; i < 2; i++) {
        int64_t k[5];
        const struct sim_map_entry *e;

        sim_cell_key(k, K_PLAN, 0, 0, lim->period_ms, w->lower_win[i]);
        e = sim_map_get(w->counts, k, false);
        w->lower_admit[i] = (e != NULL ? e->v[0] : 0) + slack;
        w->lower_granted[i] = 0;
    }
    if (w->sup != NULL) {
        (void)sup_ledger_each_cell(w->sup, cell_plan_gc, w);
    } else {
        sup_ledger *durable = NULL; /* down: what its journal holds is what it will start with */

        sim_replay(w, &durable);
        (void)sup_ledger_each_cell(durable, cell_plan_gc, w);
        sup_ledger_close(durable);
    }
    w->lower_old_n = lim->n;
    lim->n = lim->n * w->lower_pct / 100 > 0 ? lim->n * w->lower_pct / 100 : 1;
    w->lcfg.plan = w->plan;
    if (w->sup != NULL &&
        sup_ledger_configure(w->sup, &w->plan, w->eps, (size_t)w->p.children) != TALLY_OK)
        sim_fail(w, "reconfigure failed");
    for (int i = 0; i < w->p.children; i++) {
        if (w->ch[i].c != NULL)
            sup_child_recall(w->ch[i].c, sim_child_time(w, i));
    }
    w->r->limit_changes++;
}

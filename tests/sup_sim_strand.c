/*
 * I4 for the simulation (sup_sim.h): at each plan refusal, the tokens leased but unused by the
 * other children, measured against (P-1) * l_max and against the holders (a child's stream on
 * one link) times l_max; the documented bound, 2 * holders * l_max (docs/LEASE-PROTOCOL.md §6),
 * is asserted, and what each child holds is printed when it fails.
 */
#include <stdio.h>
#include <string.h>

#include "sup_sim_int.h"

struct lease_scan {
    const struct sim_world *w;
    int64_t l_max;
    int holders;
};

static int
scan_lease(void *ctx, const struct sup_lease_info *lease)
{
    struct lease_scan *s = ctx;

    if (lease->n > s->l_max)
        s->l_max = lease->n;
    s->holders++;
    return 0;
}

struct strand_scan {
    const struct sim_world *w;
    int64_t unused;
    bool all_pass;
    int live;
    int64_t n_max;
    bool stream[SIM_MAX_LINKS]; /* links of the child scanned holding a live lease */
};

static int
scan_child_lease(void *ctx, const struct sup_child_lease_info *l)
{
    struct strand_scan *s = ctx;
    int link = sim_link_index(s->w, l->link);

    if (!l->live)
        return 0;
    s->unused += l->n - l->used;
    s->all_pass = s->all_pass && l->pass;
    s->live++;
    if (l->n > s->n_max)
        s->n_max = l->n;
    if (link >= 0)
        s->stream[link] = true;
    return 0;
}

static int
print_lease(void *ctx, const struct sup_child_lease_info *l)
{
    (void)ctx;
    fprintf(stderr, "  link %s id %llu n %lld used %lld live %d pass %d foreign %d dl %lld\n",
            l->link, (unsigned long long)l->lease_id, (long long)l->n, (long long)l->used, l->live,
            l->pass, l->foreign, (long long)l->deadline_mono_ms);
    return 0;
}

int
sim_ledger_leases(struct sim_world *w)
{
    struct lease_scan ls = {w, 0, 0};

    (void)sup_ledger_each_lease(w->sup, scan_lease, &ls);
    return ls.holders;
}

void
sim_on_plan_refusal(struct sim_world *w, int i, bool pass)
{
    struct lease_scan ls = {w, 0, 0};
    struct strand_scan ss;
    int64_t bound, streams = 0;

    (void)pass;
    if (w->sup == NULL)
        return;
    memset(&ss, 0, sizeof(ss));
    ss.w = w;
    ss.all_pass = true;
    w->r->plan_refusals++;
    (void)sup_ledger_each_lease(w->sup, scan_lease, &ls);
    for (int j = 0; j < w->p.children; j++) {
        if (j == i || w->ch[j].c == NULL)
            continue;
        memset(ss.stream, 0, sizeof(ss.stream));
        (void)sup_child_each_lease(w->ch[j].c, scan_child_lease, &ss);
        for (int l = 0; l < SIM_MAX_LINKS; l++)
            streams += ss.stream[l];
    }
    /* l_max: the largest lease outstanding, as the ledger or the children see it (a resumed
     * lease the ledger closed as spent is still being used). */
    if (ss.n_max > ls.l_max)
        ls.l_max = ss.n_max;
    /* Per lease holder: a (child, link) stream holds its lease and at most one prefetched. */
    if (streams > 0 && ls.l_max > 0 &&
        (double)ss.unused / (double)(streams * ls.l_max) > w->r->stream_ratio_max)
        w->r->stream_ratio_max = (double)ss.unused / (double)(streams * ls.l_max);
    bound = (int64_t)(w->p.children - 1) * ls.l_max;
    if (ss.unused > w->r->stranded_max)
        w->r->stranded_max = ss.unused;
    if (bound > 0 && (double)ss.unused / (double)bound > w->r->stranded_ratio_max) {
        w->r->stranded_ratio_max = (double)ss.unused / (double)bound;
        w->r->stranded_bound_max = bound;
    }
    if (ss.all_pass && ss.live > 0 && ss.unused > w->r->stranded_pass_max)
        w->r->stranded_pass_max = ss.unused;
    /* The documented bound (docs/LEASE-PROTOCOL.md §6): per other lease holder (a child's
     * stream on one link) at most its lease and one prefetched, each at most l_max. */
    if (ss.unused > 2 * streams * ls.l_max) {
        for (int j = 0; j < w->p.children; j++) { /* what each child holds, for the diagnosis */
            if (j != i && w->ch[j].c != NULL) {
                fprintf(stderr, "child %d:\n", j);
                (void)sup_child_each_lease(w->ch[j].c, print_lease, NULL);
            }
        }
        sim_fail(w, "I4: stranded %lld > 2 * %lld holders * l_max %lld", (long long)ss.unused,
                 (long long)streams, (long long)ls.l_max);
    }
}

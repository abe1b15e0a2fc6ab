/*
 * The end of a simulated schedule (sup_sim.h): after the quiet drain every lease has been
 * returned or has expired, the journal (or the snapshot that replaced part of it) replays to the
 * live ledger, degraded debt was charged at most once per admission and exactly once for every
 * child alive to report it (I5), and every window admitted at most N plus the degraded
 * allowance (I5).
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

static int64_t
degraded_allowance(const struct sim_world *w, int64_t period)
{
    int64_t sum = 0;

    for (int i = 0; i < w->p.children; i++) {
        const struct tenant_limits *d = &w->eps[i].degraded_limits;
        int64_t incs = 0;

        if (w->eps[i].on_unavailable != TENANT_UNAVAIL_OPEN || d->count == 0)
            continue;
        /* Windows of the degraded limit that overlap one window of `period`, for each
         * incarnation that admitted degraded: the allowance lives in the child's memory, so a
         * crashed child's successor starts a new one (README, "Failure modes": D per process). */
        for (uint64_t inc = 1; inc <= w->ch[i].inc; inc++)
            incs += w->ch[i].degraded_by_inc[inc] > 0;
        sum += d->v[0].n * ((period + d->v[0].period_ms - 1) / d->v[0].period_ms + 1) *
               (incs > 1 ? incs : 1);
    }
    return sum;
}

void
sim_replay(struct sim_world *w, sup_ledger **out)
{
    int rc = sup_ledger_open(&w->lcfg, out);

    if (rc != TALLY_OK)
        sim_fail(w, "ledger open: %s", tally_strerror(rc));
    for (size_t i = 0; i < w->nj; i++) {
        rc = sup_ledger_replay(*out, &w->journal[i]);
        if (rc != TALLY_OK)
            sim_fail(w, "replay of record %zu (kind %u): %s", i, w->journal[i].kind,
                     tally_strerror(rc));
    }
    w->r->replays++;
}

void
sim_check_end(struct sim_world *w)
{
    sup_ledger *again = NULL;

    /* Replay equals the live state. */
    assert_non_null(w->sup);
    {
        struct sup_ledger_stats st;
        int visible = sim_ledger_leases(w);

        /* After the quiet drain every lease has been returned or has expired. */
        sup_ledger_stats(w->sup, &st);
        if (st.leases != 0 || visible != 0)
            sim_fail(w, "%u leases (%d visible) still outstanding after the drain", st.leases,
                     visible);
    }
    sim_replay(w, &again);
    if (sup_ledger_digest(again) != sup_ledger_digest(w->sup))
        sim_fail(w, "replay of %zu records differs from the live ledger", w->nj);
    sup_ledger_close(again);

    /* Debt: charged at most once per degraded admission, and exactly once when the child lived
     * to report it (the drain lets every report through). */
    for (int i = 0; i < w->p.children; i++) {
        for (uint64_t inc = 1; inc <= w->ch[i].inc; inc++) {
            int64_t had = w->ch[i].degraded_by_inc[inc], charged = w->debt_charged[i][inc];

            w->r->debt_reported += had;
            w->r->debt_charged += charged;
            if (charged > had || (inc == w->ch[i].inc && w->ch[i].c != NULL && charged != had))
                sim_fail(w, "I5: child %d incarnation %llu: %lld degraded, %lld charged", i,
                         (unsigned long long)inc, (long long)had, (long long)charged);
        }
    }

    /* I5: admitted per window within N plus the degraded allowance. */
    for (size_t s = 0; s < SIM_MAP_CAP; s++) {
        const struct sim_map_entry *e = &w->counts[s];
        const struct tenant_limits *ls;
        int64_t n = 0, over;

        if (!e->used)
            continue;
        ls = sim_path_limits(w, (int)e->k[0], (int)e->k[1]);
        for (uint32_t b = 0; ls != NULL && b < ls->count; b++) {
            if (ls->v[b].period_ms == e->k[3])
                n = ls->v[b].n;
        }
        n = sim_window_bound(w, (int)e->k[0], e->k[3], e->k[4], n, false);
        over = e->v[0] + e->v[1] - n;
        if (over > w->r->over_degraded_max)
            w->r->over_degraded_max = over;
        if (over > degraded_allowance(w, e->k[3]))
            sim_fail(w, "I5: window %lld/%lld of budget %lld: %lld + %lld degraded > %lld + %lld",
                     (long long)e->k[4], (long long)e->k[3], (long long)e->k[0], (long long)e->v[0],
                     (long long)e->v[1], (long long)n, (long long)degraded_allowance(w, e->k[3]));
    }
}

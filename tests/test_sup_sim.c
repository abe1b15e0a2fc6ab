/*
 * The deterministic simulation (sup_sim.h) as a test: thousands of seeded schedules with 2-6
 * children, 1-4 links, strict and batched children, loss, duplication, reordering and delay,
 * supervisor and child crashes, clean handovers to a new writer (a first turn's), unreachable
 * periods, clock drift and backward steps, checking
 * I1-I8 after every step; then a clean steady run that measures lease round trips per 1,000
 * admissions. TALLY_SEED replays a run (each schedule's seed is derived from it and printed on
 * failure, and TALLY_SIM_SCHEDULE=that seed runs that schedule alone); TALLY_SIM_SCHEDULES raises
 * the count for long runs.
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

#include "sup_sim.h"
#include "test_support.h"

#define SCHEDULES_DEFAULT 1500

static uint64_t seed;

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

static void
random_params(uint64_t s, struct sim_params *p)
{
    static const struct sim_draw d = {.duration_min_ms = 1000,
                                      .duration_span_ms = 2000,
                                      .loss_span = 12,
                                      .sup_crash_span = 60,
                                      .child_crash_span = 120,
                                      .compact_span = 100};

    sim_draw_params(s, &d, p);
    p->steady = false;
}

static void
test_sim_random_schedules(void **state)
{
    struct sim_result total = {0}, r;
    const char *only = getenv("TALLY_SIM_SCHEDULE");
    int lives[3] = {0, 0, 0};
    int n = only != NULL ? 1 : sim_schedules(SCHEDULES_DEFAULT);

    (void)state;
    for (int k = 0; k < n; k++) {
        struct sim_params p = {0};

        /* A failure names its schedule's seed: TALLY_SIM_SCHEDULE=that runs it alone. */
        random_params(only != NULL ? strtoull(only, NULL, 0) : sim_mix(seed + (uint64_t)k), &p);
        p.verbose = only != NULL;
        sim_run(&p, &r);
        total.admitted += r.admitted;
        total.degraded += r.degraded;
        total.refused += r.refused;
        total.unavailable += r.unavailable;
        total.acquires += r.acquires;
        total.grants += r.grants;
        total.kept_grants += r.kept_grants;
        total.kept_long += r.kept_long;
        total.next_grants += r.next_grants;
        total.recalls += r.recalls;
        total.limit_changes += r.limit_changes;
        total.lease_recalls += r.lease_recalls;
        total.warms += r.warms;
        total.crash_lost_total += r.crash_lost_total;
        if (r.kept_ttl_max > total.kept_ttl_max)
            total.kept_ttl_max = r.kept_ttl_max;
        if (r.crash_lost_max > total.crash_lost_max)
            total.crash_lost_max = r.crash_lost_max;
        if (r.crash_lost_life_max > total.crash_lost_life_max)
            total.crash_lost_life_max = r.crash_lost_life_max;
        for (int c = 0; c < 3; c++)
            lives[c] += r.keep_ttl_ms == (int64_t[]){300, 3600, PROTO_LEASE_MS_MAX}[c];
        total.plan_refusals += r.plan_refusals;
        total.sup_crashes += r.sup_crashes;
        total.child_crashes += r.child_crashes;
        total.idle_closes += r.idle_closes;
        total.leases_parked += r.leases_parked;
        total.partitions += r.partitions;
        total.clock_steps += r.clock_steps;
        total.duplicates += r.duplicates;
        total.slot_grants += r.slot_grants;
        total.compactions += r.compactions;
        total.handovers += r.handovers;
        total.debt_reported += r.debt_reported;
        total.debt_charged += r.debt_charged;
        if (r.stranded_max > total.stranded_max)
            total.stranded_max = r.stranded_max;
        if (r.stranded_ratio_max > total.stranded_ratio_max) {
            total.stranded_ratio_max = r.stranded_ratio_max;
            total.stranded_bound_max = r.stranded_bound_max;
        }
        if (r.stream_ratio_max > total.stream_ratio_max)
            total.stream_ratio_max = r.stream_ratio_max;
        if (r.stranded_pass_max > total.stranded_pass_max)
            total.stranded_pass_max = r.stranded_pass_max;
        if (r.over_degraded_max > total.over_degraded_max)
            total.over_degraded_max = r.over_degraded_max;
    }
    printf("sim: %d schedules: %llu admitted (%llu degraded), %llu refused, %llu unavailable, "
           "%llu ACQUIREs, %llu grants (%llu kept)\n",
           n, (unsigned long long)total.admitted, (unsigned long long)total.degraded,
           (unsigned long long)total.refused, (unsigned long long)total.unavailable,
           (unsigned long long)total.acquires, (unsigned long long)total.grants,
           (unsigned long long)total.kept_grants);
    printf("sim: faults: %llu supervisor crashes, %llu child crashes, %llu partitions, %llu clock "
           "steps back, %llu duplicate requests re-answered, %llu slots granted, %llu journal "
           "compactions\n",
           (unsigned long long)total.sup_crashes, (unsigned long long)total.child_crashes,
           (unsigned long long)total.partitions, (unsigned long long)total.clock_steps,
           (unsigned long long)total.duplicates, (unsigned long long)total.slot_grants,
           (unsigned long long)total.compactions);
    printf("sim: I4: %llu plan refusals; stranded max %lld tokens; max stranded/((P-1)*l_max) = "
           "%.2f (bound then %lld); max stranded/(holders*l_max) = %.2f; in pass-through max "
           "%lld\n",
           (unsigned long long)total.plan_refusals, (long long)total.stranded_max,
           total.stranded_ratio_max, (long long)total.stranded_bound_max, total.stream_ratio_max,
           (long long)total.stranded_pass_max);
    printf("sim: kept leases: life capped at T_lease in %d schedules, 12 T_lease in %d, the "
           "window end in %d; %llu kept grants lived longer than T_lease (longest %lld ms); "
           "%llu RECALLs pushed, %llu leases retired by one; %llu schedules lowered the plan's "
           "limit on the way; %llu leases granted ahead of their windows (NEXT)\n",
           lives[0], lives[1], lives[2], (unsigned long long)total.kept_long,
           (long long)total.kept_ttl_max, (unsigned long long)total.recalls,
           (unsigned long long)total.lease_recalls, (unsigned long long)total.limit_changes,
           (unsigned long long)total.next_grants);
    printf("sim: stranded by child crashes (tokens no row resumes, lost to their window, never "
           "over-admitted): %lld in all, at most %lld at one crash, with at most %lld ms left "
           "to live\n",
           (long long)total.crash_lost_total, (long long)total.crash_lost_max,
           (long long)total.crash_lost_life_max);
    printf("sim: %llu leases asked ahead for a link while another waited for its grant\n",
           (unsigned long long)total.warms);
    printf("sim: %llu clean handovers after a turn (a first turn's, an idle exit), replayed by "
           "the next writer\n",
           (unsigned long long)total.handovers);
    printf("sim: %llu idle closes parked %llu kept leases, resumed at the next open\n",
           (unsigned long long)total.idle_closes, (unsigned long long)total.leases_parked);
    printf("sim: I5: degraded %llu admitted, %llu charged as debt; worst window over N by %lld\n",
           (unsigned long long)total.debt_reported, (unsigned long long)total.debt_charged,
           (long long)total.over_degraded_max);
    assert_true(total.admitted > 0);
    /* Each feature was exercised (a handful of schedules, e.g. one replayed, may miss some). */
    if (only == NULL && n >= 100) {
        assert_true(total.plan_refusals > 0); /* scarcity */
        assert_true(total.kept_grants > 0);   /* kept leases */
        assert_true(total.kept_long > 0);     /* long-lived ones */
        assert_true(total.next_grants > 0);   /* and ones asked ahead of their windows */
        assert_true(total.recalls > 0);       /* and their recall */
        assert_true(total.limit_changes > 0); /* lowered limits */
        assert_true(total.leases_parked > 0); /* idle closes that parked leases */
        assert_true(total.handovers > 0);     /* first turns handed over */
    }
}

/* Steady load without faults: how many lease round trips per 1,000 admissions. */
static void
test_sim_steady_round_trips(void **state)
{
    struct sim_params p = {0};
    struct sim_result r;
    double per_k, late_k;

    (void)state;
    p.seed = sim_mix(seed ^ 0x57eadULL);
    p.children = 4;
    p.links = 2;
    p.duration_ms = 20000;
    p.strict = true;
    p.faults = false;
    p.load_pct = 5; /* 50 requests/s per stream, 400/s in all */
    p.steady = true;
    p.realistic = true;
    sim_run(&p, &r);
    per_k = 1000.0 * (double)r.acquires / (double)(r.admitted > 0 ? r.admitted : 1);
    late_k = 1000.0 * (double)r.late_acquires / (double)(r.late_admitted > 0 ? r.late_admitted : 1);
    printf("sim: steady: %llu admitted, %llu ACQUIREs: %.1f round trips per 1,000 admissions "
           "(%.1f after the first 10 s of slow start), %llu requests waited\n",
           (unsigned long long)r.admitted, (unsigned long long)r.acquires, per_k, late_k,
           (unsigned long long)r.waited);
    assert_true(r.refused == 0 && r.degraded == 0);
    /* The run lies inside one window of the plan (sup_sim.c), so once slow start is over a link
     * asks again only when a kept lease runs out: 0 over 20 seeds. A window end inside the run
     * would add one ACQUIRE per request over its last T_lease / 10 (pass-through), 17 to 42 per
     * 1,000 here; 4-token leases throughout would give 250. */
    assert_true(late_k < 2.0);
}

/* Quiet links (each used about once every 5 s, 16 of them) on a plentiful plan, with the default
 * timers: lease round trips per 1,000 admissions when a kept lease lives T_lease (5 s) and when
 * it lives up to 60 s (the default). */
static void
test_sim_quiet_round_trips(void **state)
{
    double per_k[2];
    struct sim_result r[2];

    (void)state;
    for (int k = 0; k < 2; k++) {
        struct sim_params p = {0};

        p.seed = sim_mix(seed ^ 0x9e1e7ULL);
        p.children = 4;
        p.links = 4;
        p.duration_ms = 180000;
        p.strict = true;
        p.faults = false;
        p.steady = true;
        p.realistic = true;
        p.quiet_p100k = 20; /* one request per 5 s per stream */
        p.keep_ttl_ms = k == 0 ? SUP_LEASE_TTL_MS_DEFAULT : 0;
        sim_run(&p, &r[k]);
        per_k[k] = 1000.0 * (double)r[k].acquires / (double)(r[k].admitted > 0 ? r[k].admitted : 1);
        assert_true(r[k].refused == 0 && r[k].degraded == 0 && r[k].admitted > 0);
    }
    printf("sim: quiet links (16 streams, one request per 5 s each): kept leases of 5 s: %llu "
           "admitted, %.0f round trips per 1,000 admissions, %llu requests waited; of up to "
           "60 s: %llu admitted, %.0f per 1,000, %llu waited\n",
           (unsigned long long)r[0].admitted, per_k[0], (unsigned long long)r[0].waited,
           (unsigned long long)r[1].admitted, per_k[1], (unsigned long long)r[1].waited);
    /* The point of long kept leases: far fewer round trips, and fewer requests that wait. */
    assert_true(per_k[1] * 2 < per_k[0]);
    assert_true(r[1].waited * 2 < r[0].waited);
}

/* Kept leases living to their window's end (60 s, T_lease 300 ms here) held by children whose
 * clocks run 0.09 % slow, just inside the 0.1 % bound past a lease's first T_lease: no lease is
 * used past its grant time + ttl in true time (sup_sim_check.c), across the window's end. The
 * 2 % bound over the first T_lease alone (6 ms) would not cover the 54 ms such a clock loses over
 * a minute. */
static void
test_sim_long_leases_slow_clocks(void **state)
{
    struct sim_params p = {0};
    struct sim_result r;

    (void)state;
    p.seed = sim_mix(seed ^ 0xd21f7ULL);
    p.children = 4;
    p.links = 2;
    p.duration_ms = 90000; /* the run starts on a minute: one window end inside it */
    p.strict = true;
    p.faults = false;
    p.steady = true;
    p.quiet_p100k = 2000; /* 20 requests a second per stream */
    p.keep_ttl_ms = PROTO_LEASE_MS_MAX;
    p.drift_ppm = SUP_CHILD_EPSILON_LONG_PPM_DEFAULT * 9 / 10;
    sim_run(&p, &r);
    printf("sim: slow clocks (%lld ppm), kept leases to the window's end: %llu admitted, %llu kept "
           "grants, longest %lld ms\n",
           (long long)p.drift_ppm, (unsigned long long)r.admitted,
           (unsigned long long)r.kept_grants, (long long)r.kept_ttl_max);
    assert_true(r.admitted > 0 && r.refused == 0);
    assert_true(r.kept_ttl_max > 30000); /* leases long enough for the bound to matter */
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_steady_round_trips),
        cmocka_unit_test(test_sim_quiet_round_trips),
        cmocka_unit_test(test_sim_long_leases_slow_clocks),
        cmocka_unit_test(test_sim_random_schedules),
    };

    return cmocka_run_group_tests_name("sup_sim", tests, group_setup, NULL);
}

/*
 * The raft mode of the deterministic simulation (sup_sim_raft.h) as a test: hundreds of seeded
 * schedules of one tenant's children and a supervisor whose journal is libraft's in-memory
 * cluster of 3 voters, and some of 5. Beside the world's faults (loss, duplication, reordering,
 * supervisor and child crashes, unreachable periods, clock steps), each schedule draws leaders
 * and followers cut off and healed, members killed and revived, leaders deposed, the leader's
 * disk failing, and journal compactions through the log. After every step I1-I8 hold, with the
 * committed log as the durable journal: a child that admits on a lease whose grant is not
 * committed, or a supervisor that forgets a committed grant, fails the run. Every command applied
 * anywhere is the one committed at its index; a new leader's copy holds every committed batch
 * once its barrier is applied; no reply leaves before its batch is committed and applied on the
 * supervisor's member; at the end every live member's copy is the same, the final log holds
 * every batch any reply waited for, and its replay equals the live ledger.
 * TALLY_SEED replays a run; a failure names its schedule's seed, and TALLY_SIM_SCHEDULE=that
 * seed runs that schedule alone (in both tests) with the cluster's events and the records
 * traced; TALLY_SIM_SCHEDULES=N runs N schedules of 3 voters and N/5 of 5.
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

#include "sup_sim_raft.h"
#include "test_support.h"

#define SCHEDULES_DEFAULT 500

static uint64_t seed;

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

/* The world: as test_sup_sim's random schedules, shorter; its journal compactions go through
 * the log (BEGIN, CHUNKs, END). */
static void
world_params(uint64_t s, struct sim_params *p)
{
    static const struct sim_draw d = {.duration_min_ms = 800,
                                      .duration_span_ms = 1200,
                                      .loss_span = 8,
                                      .sup_crash_span = 40,
                                      .child_crash_span = 100,
                                      .compact_span = 200};

    sim_draw_params(s, &d, p);
}

/* The cluster: timers ten times faster than cluster mode's defaults, as the world's are. */
static void
raft_params(uint64_t s, unsigned voters, struct sim_raft_params *rp)
{
    uint64_t r = sim_mix(s ^ 0x4a77ULL);

    rp->voters = voters;
    rp->election_ms = 50 + (unsigned)(r % 71);
    r = sim_mix(r);
    rp->snapshot_every = 8 + (unsigned)(r % 57);
    r = sim_mix(r);
    rp->leader_cut_per_100k = (int)(r % 150);
    r = sim_mix(r);
    rp->follower_cut_per_100k = (int)(r % 150);
    r = sim_mix(r);
    rp->kill_per_100k = (int)(r % 150);
    r = sim_mix(r);
    rp->depose_per_100k = (int)(r % 100);
    r = sim_mix(r);
    rp->disk_fault_per_100k = r % 2 == 0 ? 0 : (int)(r % 150);
}

static void
add(struct sim_result *total, const struct sim_result *r)
{
    total->admitted += r->admitted;
    total->degraded += r->degraded;
    total->refused += r->refused;
    total->unavailable += r->unavailable;
    total->grants += r->grants;
    total->kept_grants += r->kept_grants;
    total->sup_crashes += r->sup_crashes;
    total->child_crashes += r->child_crashes;
    total->partitions += r->partitions;
    total->clock_steps += r->clock_steps;
    total->duplicates += r->duplicates;
    total->recalls += r->recalls;
    total->limit_changes += r->limit_changes;
    total->debt_reported += r->debt_reported;
    total->debt_charged += r->debt_charged;
}

static void
run_schedules(unsigned voters, int n)
{
    struct sim_result total = {0}, r;
    struct sim_raft_result rr = {0};
    const char *only = getenv("TALLY_SIM_SCHEDULE");

    if (only != NULL)
        n = 1;
    for (int k = 0; k < n; k++) {
        struct sim_params p = {0};
        struct sim_raft_params rp = {0};
        /* A failure names its schedule's seed: TALLY_SIM_SCHEDULE=that runs it alone. */
        uint64_t s =
            only != NULL ? strtoull(only, NULL, 0) : sim_mix(seed + voters * 1000003ULL + k);

        world_params(s, &p);
        raft_params(s, voters, &rp);
        p.verbose = only != NULL;
        sim_raft_run(&p, &rp, &r, &rr);
        add(&total, &r);
    }
    printf("sim raft, %u voters: %d schedules: %llu admitted (%llu degraded), %llu refused, "
           "%llu unavailable, %llu grants (%llu kept), %llu RECALLs; %llu schedules lowered the "
           "plan's limit on the way\n",
           voters, n, (unsigned long long)total.admitted, (unsigned long long)total.degraded,
           (unsigned long long)total.refused, (unsigned long long)total.unavailable,
           (unsigned long long)total.grants, (unsigned long long)total.kept_grants,
           (unsigned long long)total.recalls, (unsigned long long)total.limit_changes);
    printf("sim raft, %u voters: %llu batches to the log, %llu committed (%llu after their "
           "supervisor had gone, never answered), %llu applies failed; %llu replies and "
           "RECALLs released after their commit\n",
           voters, (unsigned long long)rr.batches, (unsigned long long)rr.committed,
           (unsigned long long)rr.orphans, (unsigned long long)rr.failed_applies,
           (unsigned long long)rr.released);
    printf("sim raft, %u voters: %llu leader changes, %llu supervisors rebuilt from a member's "
           "copy after a barrier; max %lld ms without a leader, %lld ms without a supervisor\n",
           voters, (unsigned long long)rr.leader_changes, (unsigned long long)rr.supervisor_starts,
           (long long)rr.leaderless_max_ms, (long long)rr.unserved_max_ms);
    printf("sim raft, %u voters: %llu compactions on the log: %llu ended (every copy's journal "
           "replaced at once), %llu cut short after their BEGIN (every copy kept its journal)\n",
           voters, (unsigned long long)rr.replacements_begun, (unsigned long long)rr.replacements,
           (unsigned long long)(rr.replacements_begun - rr.replacements));
    printf(
        "sim raft, %u voters: faults: leader cut off %llu, followers cut off %llu, %llu kills, "
        "%llu leaders deposed, %llu disk faults (after which libraft stopped %llu members), %llu "
        "snapshots taken by the members' FSMs; %llu supervisor crashes, %llu child crashes, %llu "
        "partitions "
        "from the children, %llu clock steps, %llu duplicates re-answered\n",
        voters, (unsigned long long)rr.leader_cuts, (unsigned long long)rr.follower_cuts,
        (unsigned long long)rr.kills, (unsigned long long)rr.deposes,
        (unsigned long long)rr.disk_faults, (unsigned long long)rr.members_broken,
        (unsigned long long)rr.snapshots, (unsigned long long)total.sup_crashes,
        (unsigned long long)total.child_crashes, (unsigned long long)total.partitions,
        (unsigned long long)total.clock_steps, (unsigned long long)total.duplicates);
    assert_true(total.admitted > 0 && rr.committed > 0);
    /* Each fault was drawn and each path taken (a handful of schedules may miss some). */
    if (only == NULL && n >= 50) {
        assert_true(rr.leader_changes > 0 && rr.leader_cuts > 0 && rr.follower_cuts > 0);
        assert_true(rr.kills > 0 && rr.deposes > 0 && rr.disk_faults > 0);
        assert_true(rr.orphans > 0 && rr.failed_applies > 0 && rr.snapshots > 0);
        assert_true(rr.replacements > 0);
        assert_true(rr.supervisor_starts > (uint64_t)n);
    }
}

static void
test_sim_raft_three_voters(void **state)
{
    (void)state;
    run_schedules(3, sim_schedules(SCHEDULES_DEFAULT));
}

static void
test_sim_raft_five_voters(void **state)
{
    (void)state;
    run_schedules(5, sim_schedules(SCHEDULES_DEFAULT) / 5 > 0 ? sim_schedules(SCHEDULES_DEFAULT) / 5
                                                              : 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_raft_three_voters),
        cmocka_unit_test(test_sim_raft_five_voters),
    };

    return cmocka_run_group_tests_name("sup_sim_raft", tests, group_setup, NULL);
}

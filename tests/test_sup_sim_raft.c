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

/* One draw of test_rand from x: a schedule's seed from the run's and its index. */
static uint64_t
mix(uint64_t x)
{
    return test_rand(&x);
}

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

static int
schedules(void)
{
    const char *env = getenv("TALLY_SIM_SCHEDULES");
    int n = env != NULL ? atoi(env) : 0;

    return n > 0 ? n : SCHEDULES_DEFAULT;
}

/* The world: as test_sup_sim's random schedules, shorter; its journal compactions go through
 * the log (BEGIN, CHUNKs, END). */
static void
world_params(uint64_t s, struct sim_params *p)
{
    uint64_t r = mix(s);

    p->seed = s;
    p->children = 2 + (int)(r % 5);
    r = mix(r);
    p->links = 1 + (int)(r % 4);
    r = mix(r);
    p->duration_ms = 800 + (int64_t)(r % 1200);
    r = mix(r);
    p->strict = r % 4 != 0;
    p->faults = true;
    r = mix(r);
    p->loss_pct = (int)(r % 8);
    r = mix(r);
    p->dup_pct = (int)(r % 8);
    r = mix(r);
    p->delay_max_ms = 1 + (int)(r % 6);
    r = mix(r);
    p->sup_crash_per_100k = (int)(r % 40);
    r = mix(r);
    p->child_crash_per_100k = (int)(r % 100);
    r = mix(r);
    p->write_max_ms = (int)(r % 16);
    r = mix(r);
    p->crash_after_report_pct = r % 3 == 0 ? (int)(r % 20) : 0;
    r = mix(r);
    p->partition_per_100k = (int)(r % 40);
    r = mix(r);
    p->clock_step_per_100k = (int)(r % 80);
    r = mix(r);
    p->compact_per_100k = (int)(r % 200);
    r = mix(r);
    p->idle_close_per_100k = r % 3 == 0 ? 0 : (int)(r % 400);
    r = mix(r);
    p->demand_pct = 30 + (int)(r % 300);
}

/* The cluster: timers ten times faster than cluster mode's defaults, as the world's are. */
static void
raft_params(uint64_t s, unsigned voters, struct sim_raft_params *rp)
{
    uint64_t r = mix(s ^ 0x4a77ULL);

    rp->voters = voters;
    rp->election_ms = 50 + (unsigned)(r % 71);
    r = mix(r);
    rp->snapshot_every = 8 + (unsigned)(r % 57);
    r = mix(r);
    rp->leader_cut_per_100k = (int)(r % 150);
    r = mix(r);
    rp->follower_cut_per_100k = (int)(r % 150);
    r = mix(r);
    rp->kill_per_100k = (int)(r % 150);
    r = mix(r);
    rp->depose_per_100k = (int)(r % 100);
    r = mix(r);
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
        uint64_t s = only != NULL ? strtoull(only, NULL, 0) : mix(seed + voters * 1000003ULL + k);

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
    run_schedules(3, schedules());
}

static void
test_sim_raft_five_voters(void **state)
{
    (void)state;
    run_schedules(5, schedules() / 5 > 0 ? schedules() / 5 : 1);
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

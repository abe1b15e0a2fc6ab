/*
 * The raft mode of the simulation (docs/LEASE-PROTOCOL.md §7): the supervisor's journal is
 * libraft's in-memory cluster (raft_fixture, a virtual clock kept in step with the world's) of 3
 * or 5 voters, as in cluster mode (docs/DESIGN.md §13, docs/LEASE-PROTOCOL.md §5). Each turn's
 * records are one command on the leader; the turn's replies and RECALLs leave once that command's
 * apply callback says it is committed and applied there. Every member's FSM appends the commands
 * it applies to its own copy of the journal (snapshots carry the copy). A new leader's supervisor
 * first commits a barrier, then is rebuilt from that member's copy. The cluster is partitioned
 * (the leader or followers cut off, then healed), members are killed and revived, leaders
 * deposed and disks made to fail, alongside the world's own faults; I1-I8 are checked after every
 * step, and at the end every live member's copy equals the others', and every reply that left
 * belongs to a batch in the final log.
 */
#ifndef SUP_SIM_RAFT_H
#define SUP_SIM_RAFT_H

#include <stdint.h>

#include "sup_sim.h"

#define SIM_RAFT_VOTERS_MAX 5

struct sim_raft_params {
    unsigned voters;         /* 3 or 5 */
    unsigned election_ms;    /* libraft's election timeout; heartbeats every tenth of it */
    unsigned snapshot_every; /* libraft's snapshot threshold, a quarter of it kept behind */
    /* Chances per ms, in 1/100000: the leader (with a follower of five) cut off from the
     * others, one or two followers cut off, a member killed (frozen by the fixture: no ticks, no
     * messages) and revived later, the followers' answers to the leader dropped until it steps
     * down, the leader's next write failing (raft_fixture_io_fault). */
    int leader_cut_per_100k, follower_cut_per_100k, kill_per_100k, depose_per_100k;
    int disk_fault_per_100k;
};

struct sim_raft_result {
    uint64_t batches;           /* turns handed to the log */
    uint64_t committed;         /* of those, committed */
    uint64_t orphans;           /* committed after their supervisor had gone: never answered */
    uint64_t released;          /* replies and RECALLs that left, once their batch committed */
    uint64_t failed_applies;    /* apply callbacks (or raft_apply) that failed */
    uint64_t leader_changes;    /* elections after the first */
    uint64_t supervisor_starts; /* barriers committed and supervisors rebuilt from a copy */
    uint64_t leader_cuts, follower_cuts, kills, deposes, disk_faults, members_broken;
    uint64_t snapshots;          /* libraft snapshots the members' FSMs took */
    uint64_t replacements_begun; /* compactions on the log: BEGIN committed */
    uint64_t replacements;       /* and END committed: every copy replaced at once */
    int64_t leaderless_max_ms;   /* the longest stretch without a leader, after the first */
    int64_t unserved_max_ms;     /* the longest without a supervisor, after the first */
};

/** Runs one schedule of the world `p` on a cluster `rp`; fails the current cmocka test on the
 *  first violated invariant, with the schedule's seed and the instant. Adds to *rr. */
void sim_raft_run(const struct sim_params *p, const struct sim_raft_params *rp,
                  struct sim_result *r /* OUT */, struct sim_raft_result *rr /* IN/OUT */);

#endif /* SUP_SIM_RAFT_H */

/*
 * The deterministic simulation of the lease protocol (docs/LEASE-PROTOCOL.md §7): one supervisor
 * ledger and P child counters of one tenant, driven by a virtual clock in 1 ms steps, over a seeded
 * network that loses, duplicates, delays and reorders encoded frames; supervisor crashes (rebuilt
 * from the journal, records persisted before their replies leave), child crashes (memory lost,
 * lease rows kept), unreachable periods, clock drift and backward steps of the supervisor's wall
 * clock. sup_sim.c runs the world and the supervisor, sup_sim_child.c the children and their
 * applications, sup_sim_check.c keeps the ground truth and checks I1-I8 after every step and
 * every admission, sup_sim_end.c the end of a schedule. A violation fails the cmocka test with the
 * schedule's seed and the instant.
 */
#ifndef SUP_SIM_H
#define SUP_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "sup_child_host.h"
#include "sup_lease.h"

#define SIM_MAX_CHILDREN 6
#define SIM_MAX_LINKS    4
#define SIM_FRAME_MAX    512
#define SIM_NET_MAX      1024
#define SIM_BATCH_MAX    256
#define SIM_ROWS_MAX     64
#define SIM_PQ_MAX       256
#define SIM_PARK_MAX     64
#define SIM_OPS_MAX      16
#define SIM_INC_MAX      64

struct sim_params {
    uint64_t seed;
    int children;        /* 2..SIM_MAX_CHILDREN */
    int links;           /* 1..SIM_MAX_LINKS */
    int64_t duration_ms; /* faults and load; then a quiet drain */
    bool strict;         /* children persist marks */
    bool faults;         /* false: a clean steady run (round-trip measurement) */
    int loss_pct, dup_pct, delay_max_ms;
    int write_max_ms; /* a child's row write completes 0..this ms after it is handed out */
    int crash_after_report_pct; /* chance a child dies a few ms after it reports a lease */
    int sup_crash_per_100k, child_crash_per_100k, partition_per_100k, clock_step_per_100k;
    int compact_per_100k;    /* replace the journal by a snapshot of the ledger */
    int idle_close_per_100k; /* a child with nothing waiting parks its kept leases and closes */
    /* The writer ends cleanly after a turn (its records durable, its replies out) and the next
     * replays the journal: the first turn that decides anything, as tallyd's first turn for a
     * new tenant hands over to its supervisor; and at any later turn, this often. */
    bool first_turn;
    int handover_per_100k;
    int load_pct;        /* steady: chance per ms per stream of a request */
    int demand_pct;      /* random: demand in busy phases, in % of the plan's first limit */
    bool steady;         /* constant load, no idle phases, roomy limits */
    bool realistic;      /* the library's default timers (5 s leases...) and 1 min windows */
    int quiet_p100k;     /* steady: chance per ms per stream in 1/100000 instead (quiet links) */
    int64_t keep_ttl_ms; /* the ledger's keep_ttl_ms (0 = its default; drawn when not realistic) */
    int64_t drift_ppm;   /* without faults: every child's clock this much slower than true time */
    bool verbose;
};

struct sim_result {
    uint64_t admitted, degraded, refused, unavailable, waited, acquires, grants, denies;
    uint64_t kept_grants;   /* grants flagged KEEP */
    uint64_t kept_long;     /* of those, living longer than T_lease */
    uint64_t next_grants;   /* grants flagged NEXT (asked ahead of a window end) */
    int64_t keep_ttl_ms;    /* the schedule's cap on a kept lease's life */
    int64_t kept_ttl_max;   /* longest kept grant */
    uint64_t recalls;       /* RECALLs the supervisor pushed */
    uint64_t limit_changes; /* schedules whose plan limit was lowered during the run */
    uint64_t lease_recalls; /* leases the children retired on a RECALL */
    uint64_t warms;         /* leases asked ahead for another link (sup_child_warm) */
    /* A child crash (tallyd killed): tokens of its live leases that no row resumes, lost to the
     * rest of their window (never over-admitted), the most at one crash and in all, and the
     * longest a lost lease had left to live. */
    int64_t crash_lost_max, crash_lost_total, crash_lost_life_max;
    uint64_t plan_refusals, sup_crashes, child_crashes, partitions, clock_steps, duplicates;
    uint64_t idle_closes, leases_parked; /* closes of idle children, kept leases they parked */
    uint64_t slot_grants, slot_denies, replays, compactions;
    uint64_t handovers;         /* clean ends of the writer after a turn, replayed by the next */
    int64_t stranded_max;       /* leased but unused elsewhere at a plan refusal */
    int64_t stranded_bound_max; /* (P-1) * l_max at that moment */
    double stranded_ratio_max;  /* stranded / ((P-1) * l_max) */
    double stream_ratio_max;    /* stranded / (other lease-holding streams * l_max) */
    int64_t stranded_pass_max;  /* the same in pass-through */
    int64_t over_degraded_max;  /* admitted - N in a window, when positive */
    int64_t debt_reported, debt_charged;
    uint64_t late_admitted, late_acquires; /* in the second half of the run (after warm-up) */
};

/** Runs one schedule; fails the current cmocka test on the first violated invariant. */
void sim_run(const struct sim_params *p, struct sim_result *r /* OUT */);

/* The ranges a random schedule is drawn from (sim_draw_params); every draw takes the same
 * steps, so a seed names the same schedule whatever the ranges. */
struct sim_draw {
    int64_t duration_min_ms, duration_span_ms;
    int loss_span;        /* loss and duplication: 0 .. span-1 % */
    int sup_crash_span;   /* supervisor crashes and partitions: 0 .. span-1 per 100k ms */
    int child_crash_span; /* per 100k ms */
    int compact_span;     /* per 100k ms */
};

/** One draw of test_rand from x: a schedule's seed from the run's and its index. */
uint64_t sim_mix(uint64_t x);
/** TALLY_SIM_SCHEDULES when set to a positive number, else `fallback`. */
int sim_schedules(int fallback);
/** A random schedule of seed s within the ranges d (faults on, the random load). */
void sim_draw_params(uint64_t s, const struct sim_draw *d, struct sim_params *p);

#endif /* SUP_SIM_H */

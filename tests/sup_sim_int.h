/*
 * The simulated world shared by sup_sim.c (the world) and sup_sim_check.c (ground truth and
 * invariants). Test code: bounded arrays, plain structs, no frees on the hot loop.
 */
#ifndef SUP_SIM_INT_H
#define SUP_SIM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sup_sim.h"

#define SIM_MAP_CAP   8192 /* power of two */
#define SIM_SETTLE_MS 5000 /* after the drain, the longest a log may take to settle */

/* A small map from a 5-int key to 2 values (ground-truth counters). */
struct sim_map_entry {
    bool used;
    int64_t k[5];
    int64_t v[2];
};

/* What the simulation knows of a durable grant. */
struct sim_lease {
    bool known;
    int child;
    uint64_t inc;
    int link, ep;
    int64_t n, ttl_ms, eval_ms, t_grant; /* t_grant: true time the supervisor granted it */
    int64_t start_ms;    /* a NEXT lease: how long after its decision its windows start */
    int64_t t_send;      /* true time its ACQUIRE was first sent */
    bool last;           /* LAST: every window of its path ends at its deadline */
    int64_t deadline_ms; /* on the supervisor's clock: for a LAST lease, its windows' end */
    bool reported;       /* credited n - reported_used */
    int64_t reported_used;
    int64_t admitted;
};

struct sim_park {
    int link;
    int64_t cost, give_up;
};

/* An expensive operation: tokens admitted, then a slot asked for, held, released (or not). */
struct sim_op {
    uint64_t op;
    int link;
    uint64_t lease;
    int64_t cost;
    int64_t slot;      /* granted slot id, 0 none */
    int64_t until;     /* true time to release; -1 never (the TTL reclaims it) */
    int64_t held_from; /* true time the slot was granted */
    int64_t sup_from;  /* ledger time of the grant */
    int state;         /* 0 free, 1 waiting, 2 holding */
};

struct sim_child {
    sup_child *c; /* NULL while crashed */
    struct tenant_endpoint ep;
    uint64_t inc;
    int64_t down_until;
    int64_t crash_at;      /* a crash planned just after a report (0 = none) */
    int64_t closing_until; /* parked and draining its writes until closed (0 = not closing) */
    int64_t mono0, drift_ppm;
    struct sup_child_lease_rec rows[SIM_ROWS_MAX]; /* its file */
    int nrows;
    struct {
        struct sup_child_persist p;
        int64_t at;
    } pq[SIM_PQ_MAX]; /* writes in progress */
    int npq;
    struct sim_park park[SIM_PARK_MAX];
    int npark;
    bool ev_link[SIM_MAX_LINKS];
    struct sim_op ops[SIM_OPS_MAX];
    int64_t degraded_by_inc[SIM_INC_MAX];
    int64_t phase_until[SIM_MAX_LINKS];
    bool busy[SIM_MAX_LINKS];
};

struct sim_msg {
    int64_t at;
    uint64_t order;
    int child;
    bool to_sup;
    uint16_t len;
    uint8_t b[SIM_FRAME_MAX];
};

struct sim_reply {
    int child;
    uint16_t len;
    uint8_t b[SIM_FRAME_MAX];
};

struct sim_world;

/* A replicated log in place of the journal (sup_sim_raft.c). The supervisor's records go to it
 * at the end of each turn and its replies leave when the log says they may; the log also says
 * where and when a supervisor starts, and from which copy of the journal it is rebuilt. A world
 * without one keeps the journal of sup_sim.c (persist, then reply, in the same step). */
struct sim_log {
    void *ctx;
    /** Each step, before the frames are delivered: the log's clock and faults, the replies it
     *  releases, and a supervisor started (sim_sup_start) or crashed (sim_sup_crash). */
    void (*step)(struct sim_world *w);
    /** The end of a supervisor's turn: the records in w->batch, the replies in w->replies and
     *  the ledger's RECALLs are the log's (w->nb and w->nrep are to be emptied). */
    void (*turn)(struct sim_world *w);
    /** The supervisor process died: what it handed over and did not answer is never answered. */
    void (*crashed)(struct sim_world *w);
    /** True when a supervisor runs and the log has committed all it handed over: its live
     *  ledger is the durable one (in flight, a credit lost with its batch would leave the
     *  durable G - C above the live one). */
    bool (*caught_up)(struct sim_world *w);
    /** After the drain: true once nothing waits for the log and the log's copies agree. */
    bool (*settled)(struct sim_world *w);
    /** The log's own checks at the end, before sim_check_end (which replays w->journal). */
    void (*end)(struct sim_world *w);
};

struct sim_world {
    struct sim_params p;
    struct sim_result *r;
    const struct sim_log *log; /* NULL: the journal below is the supervisor's own */
    uint64_t rng;
    int64_t t;            /* true time, ms from the start */
    int64_t wall_off;     /* supervisor (and host) wall clock = t + wall_off */
    int64_t wall_hw;      /* its high-water mark */
    int64_t eps_long_ppm; /* the children's drift bound past a lease's first T_lease */
    bool draining;        /* faults over, letting reports flow */
    bool handed_over;     /* the first turn's writer has ended (sim_params.first_turn) */
    int64_t p10k;         /* chance per ms per stream of a request, in 1/10000 */
    struct tenant_plan plan;
    struct tenant_endpoint eps[SIM_MAX_CHILDREN];
    char links[SIM_MAX_LINKS][PROTO_LEASE_LINK_BUF];
    struct sup_ledger_config lcfg;

    sup_ledger *sup; /* NULL while down */
    int64_t sup_down_until;
    bool crash_at_persist;
    /* The durable journal; with a log, what the log has committed, in its order. */
    struct sup_record *journal;
    size_t nj, capj;
    struct sup_record batch[SIM_BATCH_MAX];
    int64_t batch_t[SIM_BATCH_MAX];
    size_t nb;
    struct sim_reply replies[SIM_BATCH_MAX];
    size_t nrep;

    struct sim_msg *net;
    size_t nnet;
    uint64_t order;
    int64_t partition_until;

    struct sim_child ch[SIM_MAX_CHILDREN];
    int64_t debt_charged[SIM_MAX_CHILDREN][SIM_INC_MAX]; /* durable debt per incarnation */
    uint64_t compactions;

    struct sim_lease *leases; /* by lease id */
    size_t cap_leases;
    struct sim_map_entry *counts;  /* (kind, ep, link, period, window) -> admitted, degraded */
    struct sim_map_entry *windows; /* (kind, ep, link, period) -> highest window id seen */
    struct sim_map_entry *replied; /* (child, inc, seq) -> hash of the durable reply */
    struct sim_map_entry pending[SIM_BATCH_MAX]; /* the same for the batch not yet durable */
    size_t npending;
    struct sim_map_entry *cells; /* I1 snapshot: (kind, ep, link, period) -> G, window */
    size_t checked_nj;           /* journal length at the last cell check */
    uint64_t dup_seen;           /* duplicates handled: every 8th gets a digest check */

    /* A lowered plan limit (a reload): at lower_at the plan's first limit drops to lower_pct %,
     * the ledger is reconfigured and every child recalls its leases, as tallyd's front does. In
     * the windows open then, the bounds are what was admitted (or granted) before the change, if
     * more than the new limit. */
    int64_t lower_at; /* true time, -1 = never */
    int lower_pct;
    bool lowered;
    int64_t lower_period, lower_old_n;
    int64_t lower_win[2];     /* the windows open at the change (the clock may step back) */
    int64_t lower_admit[2];   /* admitted before the change in them, plus what rows may resume */
    int64_t lower_granted[2]; /* G - C of the plan cell then */
};

#define SIM_EXPENSIVE 1 /* index of the child of the expensive endpoint */

/* sup_sim.c */
/** Runs one schedule with `log` (borrowed; NULL: the in-memory journal) as the journal. */
void sim_run_log(const struct sim_params *p, const struct sim_log *log,
                 struct sim_result *r /* OUT */);
/** Starts the supervisor: replays w->journal, then sup_ledger_start (its EPOCH in w->batch). */
void sim_sup_start(struct sim_world *w);
/** The supervisor process dies now: its ledger, its turn's records and replies are lost; it may
 *  start again at `down_until`. Tells the log (crashed). */
void sim_sup_crash(struct sim_world *w, int64_t down_until);
void sim_net_push(struct sim_world *w, bool to_sup, int child, const uint8_t *b, size_t len);
void sim_encode(const struct proto_lease_msg *m, uint8_t *b, size_t *len);
void sim_decode(const uint8_t *b, size_t len, struct proto_lease_msg *m);

/* sup_sim_child.c */
void sim_child_open(struct sim_world *w, int i);
void sim_child_crash(struct sim_world *w, int i);
void sim_child_idle_close(struct sim_world *w, int i);
void sim_child_event(struct sim_world *w, int i, const struct sup_child_event *ev);
void sim_child_step(struct sim_world *w, int i);

/* sup_sim_config.c: the world's clock and configuration, drawn from its seed. */
void sim_configure(struct sim_world *w);
uint64_t sim_rand(struct sim_world *w);
int64_t sim_range(struct sim_world *w, int64_t lo, int64_t hi);
struct sup_time sim_child_time(const struct sim_world *w, int i);
int64_t sim_wall(const struct sim_world *w);
int64_t sim_slot_ttl(const struct sim_world *w);
int sim_link_index(const struct sim_world *w, const char *link);
int sim_ep_index(const struct sim_world *w, const char *name);

/* sup_sim_check.c */
struct sim_map_entry *sim_map_get(struct sim_map_entry *m, const int64_t k[5], bool create);
/** The kinds of the count map's keys: a budget's window (plan, link, endpoint, endpoint of a
 *  link), a slot, a send. */
enum { K_PLAN = 0, K_LINK = 1, K_EP = 2, K_EPLINK = 3, K_SLOT = 100, K_SENT = 101 };
/** The count map's key of budget `kind`'s window `window` of `period` (ep, link where the kind
 *  has them). */
void sim_cell_key(int64_t k[5], int kind, int ep, int link, int64_t period, int64_t window);
void sim_fail(const struct sim_world *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** A durable grant (or anything) in the journal: ground truth about leases and slots. */
void sim_on_persisted(struct sim_world *w, const struct sup_record *rec, int64_t t_handled);
/** Child i sent request `m` (the first send of a seq is remembered for I3). */
void sim_on_sent(struct sim_world *w, int i, const struct proto_lease_msg *m);
/** Child i admitted `cost` on `link` (verdict OK): lease containment and counts. */
void sim_on_admit(struct sim_world *w, int i, int link, int64_t cost, const struct sup_admit *a);
/** Ledger time of the durable grant of `slot` on `link` (the latest with that id). */
int64_t sim_slot_granted_at(struct sim_world *w, int link, int64_t slot);
/** Child i gave back `cost` admitted on `lease` (an operation got no slot): not admitted. */
void sim_on_refund(struct sim_world *w, int i, int link, uint64_t lease, int64_t cost);
/** The batch became durable (true) or died with the supervisor (false). */
void sim_batch_done(struct sim_world *w, bool durable);
/** Around one supervisor handle of `in`: I1 for grants, I7 for duplicates (a request already
 *  answered with a record must change nothing and get the same reply). */
uint64_t sim_before_handle(struct sim_world *w, const struct proto_lease_msg *in);
void sim_after_handle(struct sim_world *w, const struct proto_lease_msg *in,
                      const struct proto_lease_msg *reply, const struct sup_record *added,
                      size_t n_added, uint64_t digest_before);
/** A plan refusal reached child i: measure stranded capacity (I4). */
void sim_on_plan_refusal(struct sim_world *w, int i, bool pass);
/** After every step: I1 on every cell, I6 slots, I8 windows. */
void sim_check_step(struct sim_world *w);
/** The window limits of budget `kind` (0 plan, 1 link, 2 endpoint, 3 endpoint of a link) on
 *  endpoint `ep`'s path; NULL for none or GCRA. */
const struct tenant_limits *sim_path_limits(const struct sim_world *w, int kind, int ep);
/** The bound on budget `kind`'s window `window` of `period` whose limit is `n` now: n, or for
 *  the plan's windows open at a lowered limit, max(n, what was admitted before) (`granted`:
 *  max(n, G - C before), for I1). */
int64_t sim_window_bound(const struct sim_world *w, int kind, int64_t period, int64_t window,
                         int64_t n, bool granted);
/** Lowers the plan's first limit now (see lower_at; sup_sim_config.c). */
void sim_lower_limit(struct sim_world *w);
/** Outstanding leases the ledger shows. */
int sim_ledger_leases(struct sim_world *w);

/* sup_sim_end.c */
/** At the end: every lease closed, replay equals live, debt charged exactly once, I5 per window. */
void sim_check_end(struct sim_world *w);
/** Replays the durable journal into a fresh ledger; *out owned by the caller. */
void sim_replay(struct sim_world *w, sup_ledger **out);

#endif /* SUP_SIM_INT_H */

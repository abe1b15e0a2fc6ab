/*
 * Struct layouts and internals shared by the lease_*.c files (the supervisor's ledger). Not
 * installed. Ownership: the ledger owns every table below; links, pairs and children are
 * allocated when they first appear and freed at close (links also when evicted idle).
 *
 * Two pairs of files call each other on purpose. lease_ledger.c (the tables) and lease_cells.c
 * (the counts in them): evicting an idle link asks the cells whether its windows are over, and
 * a cell's budget is found through the tables. lease_apply.c (records) and lease_snapshot.c
 * (compaction): applying a SNAPSHOT record is the snapshot's own inverse, and the snapshot
 * copies the durable reply cache that applying builds. Each pair is one concept with its data
 * on one side and its operations on the other.
 */
#ifndef SUP_LEASE_INT_H
#define SUP_LEASE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "sup_lease.h"
#include "tenant_index.h"

/* The budgets on a path, in order (widest first), and the number of them. */
enum sup_budget_kind { SUP_B_PLAN = 0, SUP_B_LINK = 1, SUP_B_EP = 2, SUP_B_EPLINK = 3 };
#define SUP_BUDGETS 4

#define SUP_NO_EP UINT32_MAX

/* One window of one limit: granted G, credited C and debt D in window `window_id`, and the same
 * for the last earlier window that counted anything (history for `tally usage`: decisions
 * never read it). */
struct sup_cell {
    int64_t period_ms; /* 0 = unused */
    int64_t window_id;
    int64_t granted, credited, debt;
    int64_t prev_window_id; /* 0 with prev_* 0: none */
    int64_t prev_granted, prev_credited, prev_debt;
    /* Reserved ahead by NEXT leases in a later window (the one starting at the earliest end of
     * a window of their path): moved to the current counts when the cell rolls to it. */
    int64_t next_window_id; /* 0 with next_* 0: none */
    int64_t next_granted, next_credited;
};

/* One budget: cells matched to the limits by period, or a GCRA state. */
struct sup_budget {
    struct sup_cell cells[TENANT_MAX_WINDOWS];
    struct tenant_gcra_state gcra;
    uint32_t leases_out; /* outstanding leases reserving on this budget */
    uint32_t keeps_out;  /* of those, kept leases not yet recalled (volatile: not hashed) */
};

/* The endpoint budget of one link ("ep:E:L"), created by its first lease or debt. */
struct sup_pair {
    struct sup_pair *next;
    char endpoint[TENANT_NAME_MAX + 1];
    struct sup_budget b;
};

struct sup_link {
    char id[PROTO_LEASE_LINK_BUF];
    struct sup_budget b; /* "link:L" */
    struct sup_pair *pairs;
    struct tenant_slot_table slots;
    struct tenant_slot *slot_v; /* slot_cap entries; NULL until a slot is first taken */
    int64_t slot_cap;
    uint32_t leases; /* outstanding leases on the link */
};

struct sup_endpoint {
    struct tenant_endpoint policy;
    struct sup_budget b; /* "ep:E" */
};

/* A cached reply for the dedupe window. */
struct sup_cached {
    uint64_t seq; /* 0 = empty */
    struct proto_lease_msg reply;
};

struct sup_peer { /* the ledger's view of one child counter */
    char name[TENANT_NAME_MAX + 1];
    uint64_t incarnation;
    uint64_t hwm_durable;                    /* highest seq with a record */
    uint64_t hwm_volatile;                   /* highest seq answered without one */
    struct sup_record durable[SUP_DEDUPE];   /* records of the last seqs, for their replies */
    struct sup_cached volatile_[SUP_DEDUPE]; /* replies without: lost on restart */
    uint32_t leases;
};

struct sup_lease {
    uint64_t id;   /* 0 = free entry */
    uint32_t peer; /* index in peers */
    uint64_t incarnation;
    char endpoint[TENANT_NAME_MAX + 1];
    struct sup_link *link;
    int64_t n;
    int64_t granted_ms;  /* ledger clock at the grant: window ids of its cells */
    int64_t deadline_ms; /* granted_ms + ttl */
    int64_t periods[SUP_BUDGETS][TENANT_MAX_WINDOWS]; /* cells reserved on, 0 = none */
    bool keep;                                        /* granted KEEP (durable: from its record) */
    bool recalled; /* a RECALL was queued for it (volatile: a restart may queue another) */
};

struct sup_expiry {
    int64_t at; /* the lease's deadline_ms */
    uint64_t id;
    uint32_t index;
};

struct sup_ledger {
    char tenant[TENANT_NAME_MAX + 1];
    struct tenant_plan plan;
    struct sup_endpoint *eps;
    size_t ep_count;
    sup_link_allows_fn link_allows;
    void *link_ctx;
    int64_t lease_ttl_ms, margin_ms, pass_ttl_ms, slot_ttl_ms, heartbeat_ms, l_min, l_max, l_keep;
    int64_t keep_factor, keep_ttl_ms;

    int64_t now_ms; /* high-water mark of recorded times */
    uint64_t epoch;
    uint64_t next_lease_id; /* last id handed out */
    int64_t slot_seq;       /* last slot id handed out, for every link: ids never repeat */

    struct sup_budget plan_b;
    struct sup_link **links; /* links_cap entries, NULL = free */
    /* links_cap: entries allocated, from LINKS_INITIAL up; max_links: past it an idle link
     * makes room for a new one before the table grows again. */
    uint32_t links_cap, max_links, link_count;
    struct tenant_index link_index; /* link id -> index into links */
    struct sup_lease *leases;       /* max_leases entries */
    uint32_t max_leases, lease_count;
    uint32_t lease_hw; /* leases[lease_hw..] are all free */
    /* lease_ids.c: id -> entry + 1 (open addressing), free entries, expiry heap */
    uint32_t *id_slot, id_cap;
    uint32_t *free_v, free_len;
    struct sup_expiry *exp;
    uint32_t exp_len, exp_cap;
    bool exp_lost;           /* a push failed (no memory): next expiry by scan from then on */
    struct sup_peer **peers; /* peers_cap entries, in order of first HELLO */
    uint32_t max_peers, peer_count, peers_cap;
    uint64_t recall_q[SUP_RECALL_QUEUE]; /* lease ids to push a RECALL for (a ring) */
    uint32_t recall_head, recall_len;

    struct sup_ledger_stats stats;
};

/* The budgets of one (endpoint, link) path as found now; any pointer may be NULL. */
struct sup_path {
    struct sup_endpoint *ep;
    struct sup_link *link;
    struct sup_pair *pair;
    struct sup_budget *b[SUP_BUDGETS];
    const struct tenant_limits *ls[SUP_BUDGETS];
    enum tenant_algorithm alg[SUP_BUDGETS];
};

/* lease_ledger.c: tables */
struct sup_endpoint *sup__endpoint_find(const sup_ledger *l, const char *name);
struct sup_link *sup__link_find(const sup_ledger *l, const char *id);
/** Finds or creates link `id`, evicting an idle link when the table is full. NULL when full of
 *  busy links (*rc TALLY_EFULL) or out of memory (*rc TALLY_ENOMEM). */
struct sup_link *sup__link_get(sup_ledger *l, const char *id, int *rc);
/** True iff sup__link_get would succeed without evicting a busy link (ignoring memory). */
bool sup__link_available(const sup_ledger *l, const char *id);
struct sup_pair *sup__pair_find(const struct sup_link *k, const char *endpoint);
struct sup_pair *sup__pair_get(struct sup_link *k, const char *endpoint);
int sup__peer_find(const sup_ledger *l, const char *name);
/** Room for one more peer (the table grown if needed): TALLY_OK, TALLY_EFULL (max_peers
 *  known) or TALLY_ENOMEM. */
int sup__peer_room(sup_ledger *l);
void sup__path_find(const sup_ledger *l, const char *endpoint, const char *link,
                    struct sup_path *p /* OUT */);
/* Finds or makes the link and its pair with `endpoint`, then sup__path_find. When the link
 * cannot be made (TALLY_EFULL: no room in the link table; TALLY_ENOMEM) *p still holds the
 * budgets wider than it (plan, endpoint), where a debt lands. */
int sup__path_get(sup_ledger *l, const char *endpoint, const char *link,
                  struct sup_path *p /* OUT */);
/** Makes sure link `k` has a slot table of at least the plan's K entries. */
int sup__slots_ready(sup_ledger *l, struct sup_link *k);

/* lease_cells.c: window cells */
/** The cell of `b` for `period_ms`, NULL when none. */
struct sup_cell *sup__cell_find(struct sup_budget *b, int64_t period_ms);
/** The cell of `b` for `period_ms`, else its cell of a month on another billing day. */
struct sup_cell *sup__cell_find_kind(struct sup_budget *b, int64_t period_ms);
/** Gives cell `c` the period `period_ms`: a month on a new billing day keeps the running month's
 *  counts in the new day's month at now_ms (tenant_window_carry), anything else starts fresh. */
void sup__cell_rekey(struct sup_cell *c, int64_t period_ms, int64_t now_ms);
/** Rematches the cells of `b` to the limits `ls` by period (dropping cells of removed limits);
 *  a month on a new billing day is rekeyed at now_ms (sup__cell_rekey). */
void sup__cells_match(struct sup_budget *b, const struct tenant_limits *ls, int64_t now_ms);
/** Rolls the cell for limit `lim` of `b` to the window of now_ms and returns it. */
struct sup_cell *sup__cell_roll(struct sup_budget *b, const struct tenant_limit *lim,
                                int64_t now_ms);
/** True iff `lease` reserved on budget `kind` of path `p`. */
bool sup__lease_on_path(const struct sup_lease *lease, const struct sup_path *p, int kind);
/** Builds a tenant budget equal to budget `kind` of `p` at eval_ms, counting each cell as
 *  G - C + D, plus `extra` (debt about to be charged), minus `credit` on the cells `lease` (may
 *  be NULL) reserved on. */
int sup__budget_view(const struct sup_path *p, int kind, int64_t eval_ms,
                     const struct sup_lease *lease, int64_t credit, int64_t extra,
                     struct tenant_budget *out /* OUT */);
/** Charges debt `d` to every budget of path `p` at now_ms (cells roll first). */
int sup__path_charge_debt(sup_ledger *l, struct sup_path *p, int64_t now_ms, int64_t d);
/** Counts `lease` on every budget of `p` and notes its cells, charging nothing (a snapshot
 *  restores the counts themselves). */
void sup__path_note(sup_ledger *l, struct sup_path *p, struct sup_lease *lease);
/** Reserves lease->n on every budget of `p` in the windows of lease->granted_ms (cells roll to
 *  now_ms first; a NEXT lease's later window goes to the cells' next counts), noting the cells in
 *  lease->periods and counting the lease on each budget. */
int sup__path_reserve(sup_ledger *l, struct sup_path *p, struct sup_lease *lease, int64_t now_ms);
/** Uncounts kept `lease` from the kept leases of its budgets (it is being recalled). */
void sup__lease_keep_drop(sup_ledger *l, const struct sup_lease *lease);
/** Queues RECALLs for the kept leases on every budget of path (endpoint, link) that is no
 *  longer plentiful at eval_ms (live only, after an ACQUIRE is answered; never in replay). */
void sup__recall_check(sup_ledger *l, const char *endpoint, const char *link, int64_t eval_ms);
/** Uncounts `lease` from its budgets and credits `credit` on the cells it reserved, where their
 *  window has not rolled over. */
void sup__lease_release_cells(sup_ledger *l, const struct sup_lease *lease, int64_t credit);

/* lease_apply.c: records */
/* lease_ids.c */
struct sup_lease *sup__lease_find(const sup_ledger *l, uint64_t id);

/* A report of `lease` from `o` (child index pi) may credit it: from the incarnation it was
 * granted to, or from a later one of the same child, which resumed it from its row with its
 * durable mark as used (at least what was admitted on it) and has deleted that row first. */
static inline bool
sup__lease_reportable(const struct sup_lease *lease, int pi, const struct proto_lease_origin *o)
{
    return lease->peer == (uint32_t)pi && lease->incarnation <= o->incarnation;
}
/** (Re)builds the id index and the free list for max_leases entries. TALLY_OK, TALLY_ENOMEM
 *  (then the old ones stay, covering the entries they covered). */
int sup__lease_tables_build(sup_ledger *l);
void sup__lease_tables_free(sup_ledger *l);
/** A free entry (not taken until sup__lease_opened), NULL when none. */
struct sup_lease *sup__lease_free_entry(const sup_ledger *l);
/** Files entry `lease`, just given its id and deadline. */
void sup__lease_opened(sup_ledger *l, struct sup_lease *lease);
/** Unfiles `lease` before it is cleared. */
void sup__lease_closing(sup_ledger *l, struct sup_lease *lease);
/** The live lease with the earliest deadline (stale heap entries dropped), NULL when none. */
struct sup_lease *sup__expiry_top(sup_ledger *l);
void sup__expiry_pop(sup_ledger *l);
/** Earliest deadline_ms of a live lease, maybe earlier (a closed lease's), INT64_MAX if none. */
int64_t sup__expiry_next(const sup_ledger *l);
/* Doubles the lease table (entries move: call it only while no lease pointer is held).
 * TALLY_OK, TALLY_EFULL at the hard maximum, TALLY_ENOMEM (nothing changed). */
int sup__leases_grow(sup_ledger *l);
/** Applies one record, live or replayed: the only writer of durable state. */
int sup__apply(sup_ledger *l, const struct sup_record *rec);
/** Caches `rec` (borrowed, copied) in its child's durable window. */
void sup__cache_durable(sup_ledger *l, struct sup_peer *peer, const struct sup_record *rec);
/** Applies a SNAP_* record or a cached copy (lease_snapshot.c). */
int sup__apply_snapshot(sup_ledger *l, const struct sup_record *rec);
/** True iff cell `c` holds any count, current or history. */
bool sup__cell_counted(const struct sup_cell *c);
/** True iff cell `c` counts something in a window not over at now_ms. */
bool sup__cell_live(const struct sup_cell *c, int64_t now_ms);
/** True iff GCRA entry `i` of `g` is still ahead of now_ms (else it equals a fresh one). */
bool sup__gcra_live(const struct tenant_gcra_state *g, int i, int64_t now_ms);
/** True iff `b` holds nothing that matters at now_ms: no lease, no live cell or GCRA entry. */
bool sup__budget_idle(const struct sup_budget *b, int64_t now_ms);
/** True iff forgetting `k` at now_ms loses nothing: idle budgets, no lease, no held slot. */
bool sup__link_idle(const struct sup_link *k, int64_t now_ms);
/** Applies `rec` and appends it to `out` (which must have room). */
int sup__commit(sup_ledger *l, const struct sup_record *rec, struct sup_records *out);
/** Builds the reply a record answers with (ACQUIRE, RETURN, HELLO, DEBT, SLOT_*). */
void sup__record_reply(const sup_ledger *l, const struct sup_record *rec,
                       struct proto_lease_msg *reply /* OUT */);
/** Starts a zeroed record of `kind` for request `in` (may be NULL) at the ledger's eval time. */
void sup__record_init(const sup_ledger *l, struct sup_record *rec, uint32_t kind,
                      const struct proto_lease_msg *in, int64_t now_ms);

/* lease_grant.c: the grant rule */
/** Decides an ACQUIRE from peer `pi`: fills *rec (kind ACQUIRE) when something changes and
 *  returns true, or fills *reply directly (a DENY or ERROR that changes nothing) and returns
 *  false. */
bool sup__decide_acquire(sup_ledger *l, int pi, int64_t now_ms, const struct proto_lease_msg *in,
                         struct sup_record *rec /* OUT */, struct proto_lease_msg *reply /* OUT */);

/* Small helpers. */
static inline int64_t
sup__eval_ms(const sup_ledger *l, int64_t now_ms)
{
    return now_ms > l->now_ms ? now_ms : l->now_ms;
}

void sup__reply_error(struct proto_lease_msg *reply, const struct proto_lease_msg *in,
                      uint16_t code, int64_t retry_after_ms);

#endif /* SUP_LEASE_INT_H */

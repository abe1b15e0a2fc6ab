/*
 * sup_lease: the supervisor's lease ledger for one tenant (docs/LEASE-PROTOCOL.md),
 * a pure state machine. It is fed decoded lease messages (proto_lease.h) with the time, and
 * answers each with exactly one reply plus the journal records that express every state change.
 * It never reads a clock, never does I/O and allocates only at setup or when a new link, child or
 * link/endpoint pair first appears.
 *
 * Driving it (one tenant, one thread, e.g. the supervisor's libuv loop):
 *   start:   sup_ledger_open(); for every stored record in order: sup_ledger_replay();
 *            then sup_ledger_start(now); the EPOCH record it appends is persisted with the
 *            first batch, before any reply (a crash before that commit answered nothing
 *            under the new epoch, so the next start may take the same number).
 *   message: sup_ledger_handle(now, msg, &reply, &records); keep the reply with the batch.
 *   timer:   at sup_ledger_next_expiry_ms(): sup_ledger_expire(now, &records).
 *   batch:   at the end of a loop turn (uv_check), persist the batch's records in one
 *            transaction (fsync in strict mode), THEN send the batch's replies (output gate).
 *            A crash before the commit loses records and replies together, which is safe: the
 *            children retransmit with the same origin.
 *   reload:  sup_ledger_configure() with the new plan and policies.
 *   compact: now and then, between batches: sup_ledger_snapshot(), and in one transaction
 *            replace the stored journal by the snapshot's records.
 * Replaying the journal from the start rebuilds exactly the state the live ledger had (the same
 * sup_ledger_digest()), duplicate-reply cache of state-changing replies included, as long as the
 * configuration is the same; after a configuration change, records are charged to the windows
 * of the current limits (matched by period, like tenant_window).
 *
 * Header-wide rules: handles are single-threaded; pointers passed in are borrowed for the call;
 * times are wall-clock ms of the supervisor's clock, which may step backwards (a high-water mark
 * keeps window ids monotone, I8). A refusal is a reply (DENY, SLOT_DENY), not an error.
 */
#ifndef SUP_LEASE_H
#define SUP_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_lease.h"
#include "tally_common.h"
#include "tenant.h"
#include "tenant_count.h"

typedef struct sup_ledger sup_ledger;

/* Defaults (docs/LEASE-PROTOCOL.md §4). */
#define SUP_LEASE_TTL_MS_DEFAULT 5000 /* T_lease */
#define SUP_MARGIN_MS_DEFAULT    1000 /* a lease is live until deadline + margin */
#define SUP_PASS_TTL_MS_DEFAULT  1000 /* pass-through leases */
#define SUP_HEARTBEAT_MS_DEFAULT 1000
#define SUP_L_MIN_DEFAULT        1
#define SUP_L_MAX_DEFAULT        ((int64_t)1 << 20)
/* Kept leases: while every bound of a path has at least SUP_KEEP_FACTOR * P * l_keep left, a
 * grant is flagged KEEP: its holder keeps it to its deadline when idle instead of returning it
 * after 1 s, so a quiet link's next request is local. It lives up to the keep life (cut at the
 * end of every window of its path) and holds the holder's share, min rem / (SUP_KEEP_FACTOR * P)
 * over every bound, when the child's ask is within it. When a budget runs short the supervisor
 * pushes a RECALL for the kept leases on it (docs/LEASE-PROTOCOL.md §2, §6). */
#define SUP_L_KEEP_DEFAULT      4
#define SUP_KEEP_FACTOR         16
#define SUP_KEEP_TTL_MS_DEFAULT 3600000
/* A NEXT ACQUIRE is answered only this close to the window end it would start at. */
#define SUP_NEXT_AHEAD_MS 600000
#define SUP_RECALL_QUEUE  256 /* RECALLs waiting to be sent; more are found again later */
#define SUP_DEDUPE        64  /* replies kept per child (and window of live seqs) */
#define SUP_MAX_ENDPOINTS 256
/* Child counters a tenant's ledger knows (every endpoint on every host that asked, kept for
 * their dedupe windows): TENANT_MAX_ENDPOINTS on each of CLUSTER_MEMBERS_MAX hosts. The table
 * grows as they come (SUP_PEERS_FIRST, then doubling). */
#define SUP_MAX_CHILDREN 4096
#define SUP_PEERS_FIRST  16

/** Tells whether link `link_id` is live at now_ms and may call `endpoint` (both borrowed). Called
 *  for ACQUIRE and SLOT_ACQUIRE only, never during replay. May read a cache the caller refreshes
 *  from SQLite on reload; must not call back into the ledger. */
typedef bool (*sup_link_allows_fn)(void *ctx, const char *link_id, const char *endpoint,
                                   int64_t now_ms);

struct sup_ledger_config {
    char tenant[TENANT_NAME_MAX + 1];
    struct tenant_plan plan;
    const struct tenant_endpoint *endpoints; /* borrowed for the call, copied */
    size_t endpoint_count;                   /* 0..SUP_MAX_ENDPOINTS */
    sup_link_allows_fn link_allows;          /* NULL: every link is allowed */
    void *link_ctx;
    uint32_t max_links;    /* 0 = 4096; past it an idle link is evicted to make room */
    uint32_t max_leases;   /* the lease table's first size, 0 = 64; it doubles when full */
    uint32_t max_children; /* 0 = SUP_MAX_CHILDREN, at most SUP_MAX_CHILDREN */
    int64_t lease_ttl_ms;  /* 0 = defaults above, likewise the rest */
    int64_t margin_ms;
    int64_t pass_ttl_ms;
    int64_t slot_ttl_ms; /* 0 = TENANT_SLOT_TTL_MS_DEFAULT */
    int64_t heartbeat_ms;
    int64_t l_min;
    int64_t l_max;
    int64_t l_keep;      /* 0 = SUP_L_KEEP_DEFAULT, negative = no kept leases */
    int64_t keep_factor; /* 0 = SUP_KEEP_FACTOR */
    int64_t keep_ttl_ms; /* 0 = SUP_KEEP_TTL_MS_DEFAULT; life of kept leases, >= lease_ttl_ms */
};

/* Journal records: fixed-size plain old data, zero-filled (padding included) so two records
 * compare byte for byte. On disk a record is encoded field by field behind a format byte
 * (sup_journal_codec.h), never as this struct's bytes: a field added here changes the codec
 * and its format number. One record per state-changing request or timer event; nothing else
 * changes the durable state. */
enum sup_record_kind {
    SUP_REC_HELLO = 1,        /* child (re)registered: older incarnation's leases spent */
    SUP_REC_ACQUIRE = 2,      /* report credited or spent, debt charged, lease granted or not */
    SUP_REC_RETURN = 3,       /* lease closed: credited, or spent when past its deadline */
    SUP_REC_DEBT = 4,         /* HEARTBEAT debt charged */
    SUP_REC_SLOT_GRANT = 5,   /* slot taken */
    SUP_REC_SLOT_RELEASE = 6, /* slot freed */
    SUP_REC_EXPIRE = 7,       /* lease closed as spent by the timer */
    SUP_REC_EPOCH = 8,        /* supervisor (re)started */
    /* A snapshot (sup_ledger_snapshot) rebuilds the state with these, in this order: */
    SUP_REC_SNAP_LEDGER = 9, /* clock (now_ms), epoch, last lease id (lease_id), last slot id
                                (v[0]) */
    SUP_REC_SNAP_PEER = 10,  /* a child: origin = (name, incarnation, highest recorded seq) */
    SUP_REC_SNAP_CELL = 11,  /* scope, endpoint, link, period_ms; v = window, G, C, D */
    SUP_REC_SNAP_GCRA = 12,  /* scope, endpoint, link, entry `count`, period_ms; v = n, tat_ms,
                                tat_frac, last_now_ms */
    SUP_REC_SNAP_LEASE = 13, /* lease_id, origin (holder), endpoint, link, n, now_ms (granted),
                                deadline_ms */
    SUP_REC_SNAP_SLOT = 14,  /* a held slot: link, slot_id; v[0] = expires */
    SUP_REC_SNAP_PREV = 15,  /* after its SNAP_CELL: the cell's history, v = window, G, C, D */
    SUP_REC_SNAP_NEXT = 16,  /* after its SNAP_CELL: reserved ahead, v = window, G, C */
};
#define SUP_RECORD_VERSION 1

enum sup_record_flags {
    SUP_RECF_GRANTED = 1 << 0,       /* ACQUIRE: a lease was granted */
    SUP_RECF_PASS = 1 << 1,          /* ACQUIRE: pass-through grant or prefetch refusal */
    SUP_RECF_REPORT_CREDIT = 1 << 2, /* ACQUIRE/RETURN: the report credited n - used */
    SUP_RECF_REPORT_SPENT = 1 << 3,  /* ACQUIRE/RETURN: the lease was past its deadline: spent */
    SUP_RECF_CACHED = 1 << 4,        /* snapshot: a copy of a record kept only for its reply */
    SUP_RECF_KEEP = 1 << 5,          /* ACQUIRE: a small grant while plentiful, kept when idle */
    SUP_RECF_EDGE = 1 << 6,          /* ACQUIRE: the grant's TTL ends at a window boundary */
    SUP_RECF_LAST = 1 << 7,          /* ACQUIRE: ... and so does every window of its path */
    SUP_RECF_NEXT = 1 << 8, /* ACQUIRE: a lease from deadline_ms - ttl_ms on, in the windows
                               starting then (asked for ahead of a window end) */
};

struct sup_record {
    uint32_t version;                 /* SUP_RECORD_VERSION */
    uint32_t kind;                    /* enum sup_record_kind */
    uint32_t flags;                   /* enum sup_record_flags */
    uint32_t holders;                 /* GRANT: P used for the scarcity cap; HELLO/DEBT: children */
    int64_t now_ms;                   /* the ledger's clock (high-water mark) when it happened */
    struct proto_lease_origin origin; /* the request; seq 0 for EXPIRE and EPOCH */
    char endpoint[TENANT_NAME_MAX + 1];
    char link[PROTO_LEASE_LINK_BUF];
    uint64_t lease_id;     /* ACQUIRE granted, RETURN, EXPIRE */
    int64_t n;             /* ACQUIRE: lease size */
    int64_t ttl_ms;        /* ACQUIRE: lease TTL; SLOT_GRANT: slot TTL */
    int64_t deadline_ms;   /* ACQUIRE: now_ms + ttl_ms on the ledger's clock */
    uint64_t report_lease; /* ACQUIRE: reported lease (RETURN: lease_id) */
    int64_t report_used;
    int64_t credited;       /* tokens given back by the report or RETURN */
    int64_t debt;           /* ACQUIRE: degraded admissions charged */
    uint64_t epoch;         /* EPOCH: the new epoch; others: the epoch then */
    int64_t retry_after_ms; /* ACQUIRE denied */
    int64_t limit;
    uint32_t scope;      /* ACQUIRE denied: enum tenant_scope */
    uint32_t deny_flags; /* enum proto_lease_deny_flags */
    int64_t slot_id;     /* SLOT_GRANT, SLOT_RELEASE */
    uint32_t count;      /* DEBT: entries; SNAP_GCRA: entry index */
    uint32_t error;      /* ACQUIRE answered with ERROR: enum proto_lease_error_code */
    int64_t period_ms;   /* SNAP_CELL, SNAP_GCRA */
    int64_t v[4];        /* SNAP_*: values, as listed with the kinds */
    struct {
        char link[PROTO_LEASE_LINK_BUF];
        int64_t debt;
    } e[PROTO_LEASE_HB_MAX];
};

/* A caller-owned record buffer: the ledger appends at v[count] while count < cap. */
struct sup_records {
    struct sup_record *v;
    size_t count;
    size_t cap;
};

/* Counters for metrics and tests (monotone since open or replay start). */
struct sup_ledger_stats {
    uint64_t grants, grant_tokens, pass_grants, denies, credits, credit_tokens, spent, expired;
    uint64_t debt_tokens, slot_grants, slot_denies, slot_releases, duplicates, stale, errors;
    uint64_t records;
    uint64_t recalls; /* RECALLs queued (kept leases on a budget that ran short) */
    uint32_t leases, links, children;
};

/* One ledger cell, as visited by sup_ledger_each_cell. */
struct sup_cell_info {
    enum tenant_scope scope;
    const char *endpoint; /* borrowed, valid during the callback; "" for plan and link */
    const char *link;     /* "" for plan and endpoint */
    int64_t limit, period_ms, window_id, granted, credited, debt;
    int64_t prev_window_id, prev_granted, prev_credited, prev_debt; /* history */
    int64_t next_window_id, next_granted, next_credited; /* reserved ahead by NEXT leases */
    uint32_t leases_out;                                 /* outstanding leases on the budget */
};

/* One outstanding lease, as visited by sup_ledger_each_lease. */
struct sup_lease_info {
    uint64_t id;
    const char *child, *endpoint, *link; /* borrowed, valid during the callback */
    uint64_t incarnation;
    int64_t n, granted_ms, deadline_ms;
};

/** Opens a ledger for `cfg` (borrowed; endpoints copied). *out is owned by the caller, release
 *  with sup_ledger_close(). TALLY_OK, TALLY_EINVAL/TALLY_ECONFIG for a bad configuration,
 *  TALLY_ENOMEM. */
TALLY_MUST_CHECK int sup_ledger_open(const struct sup_ledger_config *cfg,
                                     sup_ledger **out /* OUT */);
/** Frees the ledger; NULL is a no-op. */
void sup_ledger_close(sup_ledger *l);
/** Replaces the plan and endpoint policies (borrowed, copied): budgets are matched by endpoint
 *  name and by period, so counts of unchanged limits carry over. TALLY_OK, TALLY_ECONFIG,
 *  TALLY_ENOMEM (then nothing changed). */
TALLY_MUST_CHECK int sup_ledger_configure(sup_ledger *l, const struct tenant_plan *plan,
                                          const struct tenant_endpoint *endpoints, size_t count);
/** Re-applies a stored record (borrowed). Records must be replayed in the order they were
 *  appended. TALLY_OK, TALLY_EINVAL for a record this ledger cannot have written, TALLY_ENOMEM. */
TALLY_MUST_CHECK int sup_ledger_replay(sup_ledger *l, const struct sup_record *rec);
/** Appends to `out` the records that rebuild the ledger's durable state from nothing: replayed
 *  alone, in order, into a fresh ledger with the same configuration, they give the same
 *  sup_ledger_digest (cached replies included). For journal compaction: in one transaction,
 *  delete the journal and store these. TALLY_OK, or TALLY_ETOOBIG with *needed set (nothing
 *  appended) when `out` has fewer than *needed free entries. */
TALLY_MUST_CHECK int sup_ledger_snapshot(const sup_ledger *l, struct sup_records *out,
                                         size_t *needed /* OUT */);
/** Starts a new epoch after replay: appends one EPOCH record to `out` (needs one free entry). */
TALLY_MUST_CHECK int sup_ledger_start(sup_ledger *l, int64_t now_ms, struct sup_records *out);
/** Handles one decoded request `in` (borrowed) at now_ms: fills *reply (always, for a request
 *  type) and appends at most one record to `out`. The reply may be sent only after the records
 *  of its batch are durable. TALLY_OK; TALLY_EPROTO when `in` is not a valid request (a reply
 *  type, bad fields: drop the connection); TALLY_ETOOBIG when `out` has no free entry; errors
 *  change nothing. */
TALLY_MUST_CHECK int sup_ledger_handle(sup_ledger *l, int64_t now_ms,
                                       const struct proto_lease_msg *in,
                                       struct proto_lease_msg *reply /* OUT */,
                                       struct sup_records *out);
/** Closes as spent every lease whose deadline + margin has passed at now_ms, one EXPIRE record
 *  each, as many as `out` has room for (call again while it fills up). TALLY_OK. */
TALLY_MUST_CHECK int sup_ledger_expire(sup_ledger *l, int64_t now_ms, struct sup_records *out);
/** Earliest instant at which sup_ledger_expire has work, INT64_MAX when none. */
int64_t sup_ledger_next_expiry_ms(const sup_ledger *l);
/** Next RECALL to push into *out: a kept lease whose path has a budget that ran short (found
 *  by sup_ledger_handle while answering an ACQUIRE). Send it to its holder (origin.child) after
 *  the batch's replies; it changes no durable state, so it needs no record and may be lost
 *  (the lease then lives to its deadline). TALLY_OK, or TALLY_ENOTFOUND when none is due. */
TALLY_MUST_CHECK int sup_ledger_next_recall(sup_ledger *l, struct proto_lease_msg *out /* OUT */);

/** Counters into *out. */
void sup_ledger_stats(const sup_ledger *l, struct sup_ledger_stats *out /* OUT */);
/** Calls cb for every cell of every budget (windows only). A non-zero return stops and is
 *  returned. The suites only (lease_visit.c, compiled in through tally_ledger_internal). */
int sup_ledger_each_cell(const sup_ledger *l, int (*cb)(void *ctx, const struct sup_cell_info *c),
                         void *ctx);
/** Calls cb for every outstanding lease. A non-zero return stops and is returned. The suites
 *  only, as sup_ledger_each_cell. */
int sup_ledger_each_lease(const sup_ledger *l,
                          int (*cb)(void *ctx, const struct sup_lease_info *lease), void *ctx);
/** Slots of `link` held at now_ms (0 for an unknown link). */
int64_t sup_ledger_slots_held(const sup_ledger *l, const char *link, int64_t now_ms);
/** A hash of the durable state (budgets, leases, slots, children and their cached replies to
 *  state-changing requests, counters of ids): equal for a live ledger and its replay. */
uint64_t sup_ledger_digest(const sup_ledger *l);
/** The ledger's clock: the high-water mark of every recorded now_ms. */
int64_t sup_ledger_now_ms(const sup_ledger *l);

#endif /* SUP_LEASE_H */

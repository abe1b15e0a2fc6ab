/*
 * Internals of the ledger copies (node_ledger.c: LEDGER records applied, the open copies, the
 * broken ones; node_ledger_snap.c: the copies in the log's snapshots).
 */
#ifndef NODE_LEDGER_INT_H
#define NODE_LEDGER_INT_H

#include "cluster_node_int.h"
#include "store_journal.h"

#define OPEN_MAX    16 /* copies kept open, the most recently used */
#define TENANT_SIZE 64 /* a tenant's name and its NUL */
struct open_copy {
    char tenant[TENANT_SIZE]; /* "" when the slot is free */
    store_journal_copy *c;
    uint64_t used; /* the tick of its last use */
};

struct node_ledger {
    struct open_copy open[OPEN_MAX];
    uint64_t tick;
    /* Tenants whose copy failed to take a record: every later record of theirs is skipped
     * (written after a gap, it would make a ledger that never was) until a snapshot replaces
     * the copy. What this member lacks meanwhile: the tenant's records from the failed one on.
     * A supervisor started here (this member leads) would replay a ledger without them and
     * grant again what they granted. This member takes no snapshot meanwhile (it would hold
     * the stale copy at a position past its gap, and the log would forget the batches that
     * fill it), so a restart of tallyd heals the copy: libraft restores the last snapshot and
     * applies every batch after it again, the failed one included. */
    char (*broken)[TENANT_SIZE];
    size_t n_broken, cap_broken;
    bool broken_all;   /* a failure could not be remembered (no memory): every tenant is */
    bool refusal_told; /* the refused snapshot is logged once per episode */
    uint64_t retry_at; /* no snapshot before this many batches (one was too large) */
};

/* Records as LEDGER bodies and snapshots carry them: count (4) then count x (length (4) |
 * record), big-endian. */
struct recs {
    const uint8_t *p; /* the first record's length */
    size_t len;       /* the bytes of every record, lengths included */
    uint32_t count;
    size_t at; /* the next record's offset from p, while the store takes them */
};

/** The detail of c's last error. */
static inline const char *
cluster__ledger_detail(store_journal_copy *c)
{
    return store_db_errmsg(store_journal_copy_db(c));
}

/** Checks the list at p (len bytes available): *used its bytes. TALLY_OK or TALLY_EPROTO. */
int cluster__ledger_recs_parse(const uint8_t *p, size_t len, struct recs *r /* OUT */,
                               size_t *used /* OUT */);
/** store_record_encode_fn over a parsed list (ctx: its struct recs): the store takes records
 *  0..count-1 in order. */
int cluster__ledger_recs_next(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len /* OUT */);
/** Whether `tenant`'s copy is broken. */
bool cluster__ledger_broken(const struct node_ledger *lg, const char *tenant);
/** `tenant`'s copy is whole again (a snapshot replaced it). */
void cluster__ledger_unbreak(struct node_ledger *lg, const char *tenant);
/** The copy of `tenant` failed at position `count` with rc (detail: why): logged, broken. */
void cluster__ledger_fail(struct node_ledger *lg, const char *tenant, uint64_t count, int rc,
                          const char *detail);
/** The open copy of `tenant`, or NULL. */
store_journal_copy *cluster__ledger_find(struct node_ledger *lg, const char *tenant);
/** The copy of `tenant`, opened (directory and file created when missing) unless it is open;
 *  kept open (the least recently used one closes). *why says what failed. */
int cluster__ledger_get(cluster_node *n, const char *tenant, store_journal_copy **out /* OUT */,
                        const char **why /* OUT */);

#endif /* NODE_LEDGER_INT_H */

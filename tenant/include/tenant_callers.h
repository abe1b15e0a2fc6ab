/*
 * tenant_callers: the budgets of an endpoint keyed by caller (docs/DESIGN.md §12).
 * A caller is what the proxy vouches for, "KIND:VALUE" (ip:203.0.113.7,
 * account:alice@example.com); it is known here only by its keyed hash, never in
 * clear. One table holds the callers of one endpoint: exact entries up to a fixed
 * ceiling (--max-callers), and past it a count-min sketch that can only
 * over-count, so a flood of distinct callers never admits anyone over a limit and
 * never grows memory.
 *
 * Header-wide rules: pure like tenant_count.h (state, now and cost passed in, no
 * clock, no I/O); a table allocates only when it grows toward its ceiling or
 * first needs its sketch, never otherwise. One thread at a time per table.
 * Strings are borrowed for the call; results go to out-parameters marked OUT.
 */
#ifndef TENANT_CALLERS_H
#define TENANT_CALLERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally_common.h"
#include "tenant.h"
#include "tenant_count.h"

#define TENANT_CALLER_KEY_BYTES 16  /* keyed BLAKE2b of the caller, what tables hold */
#define TENANT_CALLERS_MAX      4   /* callers in one request, each its own budget */
#define TENANT_CALLER_KIND_MAX  16  /* KIND: [a-z0-9_-]{1,16} */
#define TENANT_CALLER_VALUE_MAX 256 /* VALUE: 1 to 256 printable ASCII bytes */
#define TENANT_CALLER_TEXT_MAX  (TENANT_CALLER_KIND_MAX + 1 + TENANT_CALLER_VALUE_MAX)

/* The sketch that takes over past the ceiling: depth rows of width cells, each
 * cell a budget state; a caller's estimate is its least counted row. */
#define TENANT_CALLERS_SKETCH_DEPTH 4
#define TENANT_CALLERS_SKETCH_WIDTH 4096
/* At the ceiling, expired entries are looked for at most this often. */
#define TENANT_CALLERS_SWEEP_MS 1000

/** Checks one caller, "KIND:VALUE" of `len` bytes (not NUL-terminated, borrowed):
 *  KIND [a-z0-9_-]{1,16}, then ':', then VALUE of 1..TENANT_CALLER_VALUE_MAX bytes
 *  0x20..0x7e but ',' (folded fields are refused, never read as one caller). TALLY_OK, or
 * TALLY_EINVAL with *why (static storage) saying what. */
TALLY_MUST_CHECK int tenant_caller_parse(const char *s, size_t len, const char **why /* OUT */);
/** Keyed BLAKE2b-128 of a parsed caller under the deployment key (domain-separated
 *  from token hashes). TALLY_OK or TALLY_EINVAL when len is out of bounds. */
TALLY_MUST_CHECK int tenant_caller_hash(const unsigned char key[TENANT_KEY_BYTES], const char *s,
                                        size_t len,
                                        unsigned char out[TENANT_CALLER_KEY_BYTES] /* OUT */);

typedef struct tenant_callers tenant_callers;

/* The answer for one request's callers. */
struct tenant_callers_decision {
    bool admitted;
    bool never;             /* a cost above a limit: no retry can succeed */
    bool sketched;          /* at least one caller was decided by the sketch */
    uint32_t caller;        /* index (in the request) of the caller reported below: refused,
                               the one with the longest wait; admitted, the least remaining */
    int64_t retry_after_ms; /* 0 admitted; TENANT_RETRY_NEVER when never */
    int64_t limit;          /* that caller's tightest (or refusing) bound */
    int64_t period_ms;
    int64_t remaining;
    int64_t reset_ms;
};

struct tenant_callers_stats {
    uint64_t entries;   /* exact entries held */
    uint64_t max;       /* the ceiling */
    uint64_t bytes;     /* memory held: entries, index and sketch */
    uint64_t reclaimed; /* expired entries dropped to make room */
    uint64_t sketched;  /* decisions made by the sketch */
    bool sketch;        /* the sketch is allocated (the ceiling was reached once) */
};

/** A table of at most `max_entries` exact callers (1..TENANT_MAX_CALLERS_MAX).
 *  *out is owned by the caller, release with tenant_callers_close(). */
TALLY_MUST_CHECK int tenant_callers_open(int64_t max_entries, tenant_callers **out /* OUT */);
void tenant_callers_close(tenant_callers *t);
/** Moves the ceiling (the endpoint's --max-callers changed): entries beyond a lowered
 *  one stay until they expire, new callers go to the sketch meanwhile. TALLY_EINVAL
 *  outside 1..TENANT_MAX_CALLERS_MAX. */
TALLY_MUST_CHECK int tenant_callers_set_max(tenant_callers *t, int64_t max_entries);

/* What an exact entry holds, for persistence: the key, the instant it is whole again,
 * and the state of every limit. Plain integers only. */
union tenant_callers_state {
    struct tenant_window_state window;
    struct tenant_gcra_state gcra;
};
struct tenant_callers_entry {
    unsigned char key[TENANT_CALLER_KEY_BYTES];
    int64_t expires_ms; /* from this instant the entry counts as fresh and may be dropped */
    union tenant_callers_state st;
};

/* How to take back what one admitted decision charged (a HOLD that another authority's
 * refusal cancels): the state of each exact entry before and after. */
struct tenant_callers_undo_one {
    unsigned char key[TENANT_CALLER_KEY_BYTES];
    bool exact; /* counted in an exact entry; sketch counts are never taken back */
    union tenant_callers_state before, after;
};
struct tenant_callers_undo {
    uint32_t n;
    int64_t cost;
    struct tenant_callers_undo_one v[TENANT_CALLERS_MAX];
};

/** Decides `cost` for the `n` callers `keys` (1..TENANT_CALLERS_MAX; a repeated key
 *  counts once) against `ls` with `algorithm`, all or nothing: when every caller
 *  admits, every one is charged; when one refuses, nothing changes anywhere. A
 *  caller without an entry gets one when charged while the ceiling allows (expired
 *  entries are reclaimed first), else it is counted in the sketch. Evaluated at the
 *  table's clock high-water mark, so a clock stepping back reopens nothing.
 *  TALLY_OK (refused or not), TALLY_EINVAL / TALLY_ECOST / TALLY_EOVERFLOW for bad
 *  arguments, TALLY_ENOMEM when the sketch is needed and cannot be allocated
 *  (nothing changed: the request must not be admitted). */
TALLY_MUST_CHECK int tenant_callers_decide(tenant_callers *t, enum tenant_algorithm algorithm,
                                           const struct tenant_limits *ls,
                                           const unsigned char (*keys)[TENANT_CALLER_KEY_BYTES],
                                           size_t n, int64_t now_ms, int64_t cost,
                                           struct tenant_callers_decision *out /* OUT */,
                                           struct tenant_callers_undo *undo /* OUT, or NULL */);
/** Takes back an admitted decision's charge (undo from tenant_callers_decide), never
 *  more than it added: in a window that has not rolled over its cost is subtracted
 *  (counts add up, so charges made since stay counted); a GCRA state goes back only
 *  if nothing was charged since; what the sketch counted stays. Calls it once. */
void tenant_callers_undo(tenant_callers *t, enum tenant_algorithm algorithm,
                         const struct tenant_callers_undo *undo);
void tenant_callers_stats(const tenant_callers *t, struct tenant_callers_stats *out /* OUT */);

/** The exact entry of `key`, or NULL (borrowed, valid until the next decide). */
const struct tenant_callers_entry *
tenant_callers_find(const tenant_callers *t, const unsigned char key[TENANT_CALLER_KEY_BYTES]);
/** Puts back an entry read from storage (restart), counting with `algorithm`, unless it
 *  expired at now_ms or the table is full; its clock high-water mark is the table's
 *  from then on. TALLY_OK, TALLY_ETOOBIG when full, TALLY_ENOMEM. */
TALLY_MUST_CHECK int tenant_callers_restore(tenant_callers *t, enum tenant_algorithm algorithm,
                                            const struct tenant_callers_entry *e, int64_t now_ms);

/* The sketch, for persistence: a caller's cells, and a cell's state. */
#define TENANT_CALLERS_SKETCH_CELLS (TENANT_CALLERS_SKETCH_DEPTH * TENANT_CALLERS_SKETCH_WIDTH)
/** The cells a caller counts in, one per row (whether or not the sketch exists). */
void tenant_callers_sketch_cells(const unsigned char key[TENANT_CALLER_KEY_BYTES],
                                 uint32_t out[TENANT_CALLERS_SKETCH_DEPTH] /* OUT */);
/** Cell `cell` (0..TENANT_CALLERS_SKETCH_CELLS - 1), or NULL while there is no sketch. */
const union tenant_callers_state *tenant_callers_sketch_get(const tenant_callers *t, uint32_t cell);
/** Puts back a cell read from storage (allocating the sketch). TALLY_OK, TALLY_EINVAL,
 *  TALLY_ENOMEM. */
TALLY_MUST_CHECK int tenant_callers_sketch_restore(tenant_callers *t, uint32_t cell,
                                                   const union tenant_callers_state *st);

#endif /* TENANT_CALLERS_H */

/*
 * A string-keyed index for the bounded tables of the ledger and the child counter: open
 * addressing with linear probing over an array of item numbers (1 + index into the owner's
 * table, 0 = empty), sized at setup to a power of two at least twice the table, and
 * backward-shift deletion (no tombstones, so lookups stay short however long it runs). The keys
 * live in the owner's items; the index asks for them through key_of. Internal, not installed.
 */
#ifndef TENANT_INDEX_H
#define TENANT_INDEX_H

#include <stdint.h>

#include "tally_common.h"

struct tenant_index {
    uint32_t *slot; /* 1 + item, 0 = empty */
    uint32_t *tag;  /* the hash of the key at each slot (set by tenant_index_set) */
    uint32_t cap;   /* power of two */
};

/* The key of item `item` (0-based) of the owner `ctx`. */
typedef const char *(*tenant_index_key_fn)(const void *ctx, uint32_t item);

/** Allocates an index for up to `items` items. TALLY_OK, TALLY_EINVAL or TALLY_ENOMEM. */
TALLY_MUST_CHECK int tenant_index_init(struct tenant_index *ix, uint32_t items);
/** Frees the slots; safe on a zeroed index. */
void tenant_index_release(struct tenant_index *ix);
/** Position holding `key`, or the empty position where it would go. */
uint32_t tenant_index_pos(const struct tenant_index *ix, const char *key,
                          tenant_index_key_fn key_of, const void *ctx);
/** Files `item` under `key` (absent so far). An item moved to another number keeps its
 *  position: `slot[tenant_index_pos(...)] = item + 1` renumbers it. */
void tenant_index_set(struct tenant_index *ix, const char *key, uint32_t item,
                      tenant_index_key_fn key_of, const void *ctx);
/** The item at `key`, or -1. */
int64_t tenant_index_find(const struct tenant_index *ix, const char *key,
                          tenant_index_key_fn key_of, const void *ctx);
/** Empties position `pos`, moving later entries of its probe run back. */
void tenant_index_remove(struct tenant_index *ix, uint32_t pos);

#endif /* TENANT_INDEX_H */

/*
 * The string index of tenant_index.h: FNV-1a hashes, linear probing, and backward-shift deletion
 * (an entry moves back into the hole unless its home slot lies cyclically between the hole and
 * itself), so no tombstones accumulate. With at most half the slots used, probes stay short.
 * Each slot keeps its key's hash beside the item: a probe compares the key's bytes only when
 * the hashes match, and a deletion never hashes a key again.
 */
#include "tenant_index.h"

#include <string.h>

static uint32_t
hash(const char *key)
{
    uint32_t h = 2166136261u;

    for (; *key != '\0'; key++)
        h = (h ^ (uint8_t)*key) * 16777619u;
    return h;
}

int
tenant_index_init(struct tenant_index *ix, uint32_t items)
{
    ix->slot = NULL;
    if (items == 0 || items > (UINT32_MAX >> 2))
        return TALLY_EINVAL;
    for (ix->cap = 8; ix->cap < 2 * items;)
        ix->cap *= 2;
    ix->slot = tally_calloc(2 * (size_t)ix->cap, sizeof(*ix->slot));
    ix->tag = ix->slot != NULL ? ix->slot + ix->cap : NULL; /* one block: slots, then hashes */
    return ix->slot != NULL ? TALLY_OK : TALLY_ENOMEM;
}

void
tenant_index_release(struct tenant_index *ix)
{
    tally_free(ix->slot);
    ix->slot = ix->tag = NULL;
    ix->cap = 0;
}

static uint32_t
pos_of(const struct tenant_index *ix, const char *key, uint32_t h, tenant_index_key_fn key_of,
       const void *ctx)
{
    uint32_t mask = ix->cap - 1, i = h & mask;

    while (ix->slot[i] != 0 && (ix->tag[i] != h || strcmp(key_of(ctx, ix->slot[i] - 1), key) != 0))
        i = (i + 1) & mask;
    return i;
}

uint32_t
tenant_index_pos(const struct tenant_index *ix, const char *key, tenant_index_key_fn key_of,
                 const void *ctx)
{
    return pos_of(ix, key, hash(key), key_of, ctx);
}

void
tenant_index_set(struct tenant_index *ix, const char *key, uint32_t item,
                 tenant_index_key_fn key_of, const void *ctx)
{
    uint32_t h = hash(key), i = pos_of(ix, key, h, key_of, ctx);

    ix->slot[i] = item + 1;
    ix->tag[i] = h;
}

int64_t
tenant_index_find(const struct tenant_index *ix, const char *key, tenant_index_key_fn key_of,
                  const void *ctx)
{
    uint32_t i = tenant_index_pos(ix, key, key_of, ctx);

    return ix->slot[i] != 0 ? (int64_t)ix->slot[i] - 1 : -1;
}

void
tenant_index_remove(struct tenant_index *ix, uint32_t pos)
{
    uint32_t mask = ix->cap - 1, i = pos, j = pos;

    for (;;) {
        uint32_t home;

        j = (j + 1) & mask;
        if (ix->slot[j] == 0)
            break;
        home = ix->tag[j] & mask;
        /* The entry at j may fill the hole at i iff its home is not cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        ix->slot[i] = ix->slot[j];
        ix->tag[i] = ix->tag[j];
        i = j;
    }
    ix->slot[i] = 0;
}

/*
 * The string index of sup_index.h: FNV-1a hashes, linear probing, and backward-shift deletion
 * (an entry moves back into the hole unless its home slot lies cyclically between the hole and
 * itself), so no tombstones accumulate. With at most half the slots used, probes stay short.
 */
#include "sup_index.h"

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
sup__index_init(struct sup_index *ix, uint32_t items)
{
    ix->slot = NULL;
    if (items == 0 || items > (UINT32_MAX >> 2))
        return TALLY_EINVAL;
    for (ix->cap = 8; ix->cap < 2 * items;)
        ix->cap *= 2;
    ix->slot = tally_calloc(ix->cap, sizeof(*ix->slot));
    return ix->slot != NULL ? TALLY_OK : TALLY_ENOMEM;
}

void
sup__index_release(struct sup_index *ix)
{
    tally_free(ix->slot);
    ix->slot = NULL;
    ix->cap = 0;
}

uint32_t
sup__index_pos(const struct sup_index *ix, const char *key, sup_index_key_fn key_of,
               const void *ctx)
{
    uint32_t mask = ix->cap - 1, i = hash(key) & mask;

    while (ix->slot[i] != 0 && strcmp(key_of(ctx, ix->slot[i] - 1), key) != 0)
        i = (i + 1) & mask;
    return i;
}

int64_t
sup__index_find(const struct sup_index *ix, const char *key, sup_index_key_fn key_of,
                const void *ctx)
{
    uint32_t i = sup__index_pos(ix, key, key_of, ctx);

    return ix->slot[i] != 0 ? (int64_t)ix->slot[i] - 1 : -1;
}

void
sup__index_remove(struct sup_index *ix, uint32_t pos, sup_index_key_fn key_of, const void *ctx)
{
    uint32_t mask = ix->cap - 1, i = pos, j = pos;

    for (;;) {
        uint32_t home;

        j = (j + 1) & mask;
        if (ix->slot[j] == 0)
            break;
        home = hash(key_of(ctx, ix->slot[j] - 1)) & mask;
        /* The entry at j may fill the hole at i iff its home is not cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        ix->slot[i] = ix->slot[j];
        i = j;
    }
    ix->slot[i] = 0;
}

/*
 * The string index of tenant_index.h: FNV-1a hashes, linear probing, and backward-shift deletion
 * (an entry moves back into the hole unless its home slot lies cyclically between the hole and
 * itself), so no tombstones accumulate. With at most half the slots used, probes stay short.
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
    ix->slot = tally_calloc(ix->cap, sizeof(*ix->slot));
    return ix->slot != NULL ? TALLY_OK : TALLY_ENOMEM;
}

void
tenant_index_release(struct tenant_index *ix)
{
    tally_free(ix->slot);
    ix->slot = NULL;
    ix->cap = 0;
}

uint32_t
tenant_index_pos(const struct tenant_index *ix, const char *key, tenant_index_key_fn key_of,
                 const void *ctx)
{
    uint32_t mask = ix->cap - 1, i = hash(key) & mask;

    while (ix->slot[i] != 0 && strcmp(key_of(ctx, ix->slot[i] - 1), key) != 0)
        i = (i + 1) & mask;
    return i;
}

int64_t
tenant_index_find(const struct tenant_index *ix, const char *key, tenant_index_key_fn key_of,
                  const void *ctx)
{
    uint32_t i = tenant_index_pos(ix, key, key_of, ctx);

    return ix->slot[i] != 0 ? (int64_t)ix->slot[i] - 1 : -1;
}

void
tenant_index_remove(struct tenant_index *ix, uint32_t pos, tenant_index_key_fn key_of,
                    const void *ctx)
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

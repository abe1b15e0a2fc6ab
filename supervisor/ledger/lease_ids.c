/*
 * The ledger's lease table without scans: an index from lease id to entry (open addressing on a
 * multiplicative hash, backward-shift deletion as in lease_index.c), a stack of free entries
 * (lowest on top), and a min-heap of expiry instants. Finding a reported lease, placing a grant
 * and finding the next expiry walked every entry; with 10,000 live leases each ACQUIRE paid
 * three such walks. A heap entry whose lease was closed early (returned, reported) stays until
 * its instant and is then dropped: the timer may wake once for nothing, never late.
 */
#include "sup_lease_int.h"

#include <string.h>

static uint32_t
id_home(const sup_ledger *l, uint64_t id)
{
    return (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (l->id_cap - 1);
}

static void
id_put(sup_ledger *l, uint32_t index)
{
    uint32_t i = id_home(l, l->leases[index].id);

    while (l->id_slot[i] != 0)
        i = (i + 1) & (l->id_cap - 1);
    l->id_slot[i] = index + 1;
}

static void
id_del(sup_ledger *l, uint32_t index)
{
    uint32_t mask = l->id_cap - 1, i = id_home(l, l->leases[index].id), j;

    while (l->id_slot[i] != index + 1) {
        if (l->id_slot[i] == 0)
            return;
        i = (i + 1) & mask;
    }
    for (j = i;;) {
        uint32_t home;

        j = (j + 1) & mask;
        if (l->id_slot[j] == 0)
            break;
        home = id_home(l, l->leases[l->id_slot[j] - 1].id);
        /* The entry at j may fill the hole at i iff its home is not cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        l->id_slot[i] = l->id_slot[j];
        i = j;
    }
    l->id_slot[i] = 0;
}

struct sup_lease *
sup__lease_find(const sup_ledger *l, uint64_t id)
{
    uint32_t i;

    if (id == 0)
        return NULL;
    for (i = id_home(l, id); l->id_slot[i] != 0; i = (i + 1) & (l->id_cap - 1)) {
        struct sup_lease *lease = &l->leases[l->id_slot[i] - 1];

        if (lease->id == id)
            return lease;
    }
    return NULL;
}

int
sup__lease_tables_build(sup_ledger *l)
{
    uint32_t cap = 8, *slot, *free_v;

    while (cap < 2 * l->max_leases)
        cap *= 2;
    slot = tally_calloc(cap, sizeof(*slot));
    free_v = tally_calloc(l->max_leases, sizeof(*free_v));
    /* Room for every live lease and as many closed early: compactions stay rare. */
    if (l->exp_cap < 2 * l->max_leases) {
        struct sup_expiry *exp = tally_realloc(l->exp, 2 * l->max_leases * sizeof(*exp));

        if (exp != NULL) {
            l->exp = exp;
            l->exp_cap = 2 * l->max_leases;
        }
    }
    if (slot == NULL || free_v == NULL || l->exp_cap < 2 * l->max_leases) {
        tally_free(slot);
        tally_free(free_v);
        return TALLY_ENOMEM;
    }
    tally_free(l->id_slot);
    tally_free(l->free_v);
    l->id_slot = slot;
    l->id_cap = cap;
    l->free_v = free_v;
    l->free_len = 0;
    for (uint32_t i = l->max_leases; i-- > 0;) {
        /* No live lease (a ledger just opened): every entry is free, and the table, zeroed
         * pages the kernel has not mapped yet, is not read (a megabyte of page faults). */
        if (l->lease_count == 0 || l->leases[i].id == 0)
            l->free_v[l->free_len++] = i;
        else
            id_put(l, i);
    }
    return TALLY_OK;
}

void
sup__lease_tables_free(sup_ledger *l)
{
    tally_free(l->id_slot);
    tally_free(l->free_v);
    tally_free(l->exp);
    l->id_slot = l->free_v = NULL;
    l->exp = NULL;
    l->id_cap = l->free_len = l->exp_len = l->exp_cap = 0;
}

struct sup_lease *
sup__lease_free_entry(const sup_ledger *l)
{
    return l->free_len > 0 ? &l->leases[l->free_v[l->free_len - 1]] : NULL;
}

/* ---- expiry heap ---- */

static void
exp_swap(struct sup_expiry *a, struct sup_expiry *b)
{
    struct sup_expiry t = *a;

    *a = *b;
    *b = t;
}

static void
exp_sift_down(sup_ledger *l, uint32_t i)
{
    for (;;) {
        uint32_t a = 2 * i + 1, b = a + 1, m = i;

        if (a < l->exp_len && l->exp[a].at < l->exp[m].at)
            m = a;
        if (b < l->exp_len && l->exp[b].at < l->exp[m].at)
            m = b;
        if (m == i)
            break;
        exp_swap(&l->exp[i], &l->exp[m]);
        i = m;
    }
}

static bool
exp_live(const sup_ledger *l, const struct sup_expiry *e)
{
    return e->index < l->max_leases && l->leases[e->index].id == e->id &&
           l->leases[e->index].deadline_ms == e->at;
}

/* Drops the entries of leases closed early and restores the heap: O(entries), done when the
 * heap is full, so that a steady state never allocates. */
static void
exp_compact(sup_ledger *l)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < l->exp_len; i++) {
        if (exp_live(l, &l->exp[i]))
            l->exp[n++] = l->exp[i];
    }
    l->exp_len = n;
    for (uint32_t i = n / 2; i-- > 0;)
        exp_sift_down(l, i);
}

static void
exp_push(sup_ledger *l, const struct sup_lease *lease)
{
    uint32_t i;

    if (l->exp_len == l->exp_cap)
        exp_compact(l);
    if (l->exp_len == l->exp_cap) {
        uint32_t cap = l->exp_cap > 0 ? l->exp_cap * 2 : 256;
        struct sup_expiry *v = tally_realloc(l->exp, cap * sizeof(*v));

        if (v == NULL) {
            l->exp_lost = true; /* fall back to a scan (sup__expiry_next) */
            return;
        }
        l->exp = v;
        l->exp_cap = cap;
    }
    i = l->exp_len++;
    l->exp[i].at = lease->deadline_ms;
    l->exp[i].id = lease->id;
    l->exp[i].index = (uint32_t)(lease - l->leases);
    while (i > 0 && l->exp[(i - 1) / 2].at > l->exp[i].at) {
        exp_swap(&l->exp[(i - 1) / 2], &l->exp[i]);
        i = (i - 1) / 2;
    }
}

void
sup__expiry_pop(sup_ledger *l)
{
    l->exp[0] = l->exp[--l->exp_len];
    exp_sift_down(l, 0);
}

struct sup_lease *
sup__expiry_top(sup_ledger *l)
{
    while (l->exp_len > 0) {
        if (exp_live(l, &l->exp[0]))
            return &l->leases[l->exp[0].index];
        sup__expiry_pop(l); /* closed early, or the entry was reused */
    }
    return NULL;
}

int64_t
sup__expiry_next(const sup_ledger *l)
{
    int64_t next = INT64_MAX;

    if (!l->exp_lost)
        return l->exp_len > 0 ? l->exp[0].at : INT64_MAX;
    for (uint32_t i = 0; i < l->lease_hw; i++) {
        if (l->leases[i].id != 0 && l->leases[i].deadline_ms < next)
            next = l->leases[i].deadline_ms;
    }
    return next;
}

/* ---- entries ---- */

void
sup__lease_opened(sup_ledger *l, struct sup_lease *lease)
{
    uint32_t index = (uint32_t)(lease - l->leases);

    for (uint32_t k = l->free_len; k-- > 0;) {
        if (l->free_v[k] == index) {
            l->free_v[k] = l->free_v[--l->free_len];
            break;
        }
    }
    id_put(l, index);
    exp_push(l, lease);
    if (index + 1 > l->lease_hw)
        l->lease_hw = index + 1;
}

void
sup__lease_closing(sup_ledger *l, struct sup_lease *lease)
{
    uint32_t index = (uint32_t)(lease - l->leases);

    id_del(l, index);
    l->free_v[l->free_len++] = index;
}

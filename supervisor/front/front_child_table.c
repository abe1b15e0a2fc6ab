/*
 * The table of child counters (front_child_life.c holds their lifecycle): an index by
 * "tenant/endpoint" (one lookup per request, whatever the number of tenants), the list of
 * OPEN children by last use (the idle sweep walks it from its tail) and the list of those
 * whose file is open, by use (the cap on open files closes the least recently used).
 */
#include "sup_front_int.h"

#include <stdio.h>

static const char *
child_key(const void *ctx, uint32_t item)
{
    const sup_front *f = ctx;

    return f->children[item]->key;
}

/* One lookup per request: an index, not a walk over every tenant's children. */
struct front_child *
front_child_find(sup_front *f, const char *tenant, const char *endpoint)
{
    char key[2 * TENANT_NAME_MAX + 2];
    int64_t i;

    if (f->child_index.slot == NULL)
        return NULL;
    snprintf(key, sizeof(key), "%s/%s", tenant, endpoint);
    i = tenant_index_find(&f->child_index, key, child_key, f);
    return i >= 0 ? f->children[i] : NULL;
}

/* Sizes the index for `cap` children and files those there are. */
int
front_child_index(sup_front *f, uint32_t cap)
{
    struct tenant_index ix = {NULL, NULL, 0};

    if (tenant_index_init(&ix, cap) != TALLY_OK)
        return TALLY_ENOMEM;
    tenant_index_release(&f->child_index);
    f->child_index = ix;
    for (uint32_t i = 0; i < f->n_children; i++)
        tenant_index_set(&ix, f->children[i]->key, i, child_key, f);
    return TALLY_OK;
}

void
front_child_table_add(sup_front *f, struct front_child *fc)
{
    f->children[f->n_children] = fc;
    tenant_index_set(&f->child_index, fc->key, f->n_children, child_key, f);
    f->n_children++;
}

/* Takes fc out of the table; the last child moves into its place. */
void
front_child_table_remove(sup_front *f, struct front_child *fc)
{
    uint32_t pos = tenant_index_pos(&f->child_index, fc->key, child_key, f);
    uint32_t i = f->child_index.slot[pos];
    uint32_t last = f->n_children - 1;

    front_fast_forget(&f->fast); /* the memo may name fc */
    if (NEVER(i == 0 || f->children[i - 1] != fc))
        return;
    i--;
    tenant_index_remove(&f->child_index, pos);
    if (i != last) {
        f->children[i] = f->children[last];
        pos = tenant_index_pos(&f->child_index, f->children[i]->key, child_key, f);
        f->child_index.slot[pos] = i + 1;
    }
    f->n_children = last;
}

void
front_lru_unlink(sup_front *f, struct front_child *fc)
{
    if (fc->lru_prev != NULL)
        fc->lru_prev->lru_next = fc->lru_next;
    else if (f->lru_head == fc)
        f->lru_head = fc->lru_next;
    if (fc->lru_next != NULL)
        fc->lru_next->lru_prev = fc->lru_prev;
    else if (f->lru_tail == fc)
        f->lru_tail = fc->lru_prev;
    fc->lru_prev = fc->lru_next = NULL;
}

void
front_lru_push_front(sup_front *f, struct front_child *fc)
{
    fc->lru_prev = NULL;
    fc->lru_next = f->lru_head;
    if (f->lru_head != NULL)
        f->lru_head->lru_prev = fc;
    f->lru_head = fc;
    if (f->lru_tail == NULL)
        f->lru_tail = fc;
}

/* The OPEN children whose file is open, most recently used first: the cap on open
 * files closes the least recently used of them (the child itself stays). */
void
front_files_unlink(sup_front *f, struct front_child *fc)
{
    if (!fc->in_files)
        return;
    if (fc->file_prev != NULL)
        fc->file_prev->file_next = fc->file_next;
    else
        f->file_head = fc->file_next;
    if (fc->file_next != NULL)
        fc->file_next->file_prev = fc->file_prev;
    else
        f->file_tail = fc->file_prev;
    fc->file_prev = fc->file_next = NULL;
    fc->in_files = false;
}

void
front_files_push_front(sup_front *f, struct front_child *fc)
{
    front_files_unlink(f, fc);
    fc->file_prev = NULL;
    fc->file_next = f->file_head;
    if (f->file_head != NULL)
        f->file_head->file_prev = fc;
    f->file_head = fc;
    if (f->file_tail == NULL)
        f->file_tail = fc;
    fc->in_files = true;
}

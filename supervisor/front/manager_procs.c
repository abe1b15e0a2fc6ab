/*
 * The manager's supervisors by tenant: a table that only grows (a tenant's entry keeps its
 * backoff and counters across hibernations) and an index over it, so the lookup every frame
 * and every pump makes is one probe, not a scan of every tenant ever seen.
 */
#include "sup_manager_int.h"

#include <stdio.h>

static const char *
proc_key(const void *ctx, uint32_t item)
{
    const sup_manager *m = ctx;

    return m->procs[item]->tenant;
}

struct sup_proc *
sup__proc_find(const sup_manager *m, const char *tenant)
{
    int64_t i;

    if (m->proc_index.slot == NULL)
        return NULL;
    i = tenant_index_find(&m->proc_index, tenant, proc_key, m);
    return i >= 0 ? m->procs[i] : NULL;
}

struct sup_proc *
sup__proc_get(sup_manager *m, const char *tenant)
{
    struct sup_proc *p = sup__proc_find(m, tenant);

    if (p != NULL)
        return p;
    if (m->n_procs == m->cap_procs) {
        uint32_t cap = m->cap_procs == 0 ? 16 : m->cap_procs * 2;
        struct sup_proc **n = tally_realloc(m->procs, cap * sizeof(*n));
        struct tenant_index ix = {NULL, NULL, 0};

        if (n == NULL)
            return NULL;
        m->procs = n;
        if (tenant_index_init(&ix, cap) != TALLY_OK)
            return NULL;
        m->cap_procs = cap;
        tenant_index_release(&m->proc_index);
        m->proc_index = ix;
        for (uint32_t i = 0; i < m->n_procs; i++)
            tenant_index_set(&ix, m->procs[i]->tenant, i, proc_key, m);
    }
    p = tally_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
    p->m = m;
    p->process.data = p;
    m->procs[m->n_procs] = p;
    tenant_index_set(&m->proc_index, tenant, m->n_procs, proc_key, m);
    m->n_procs++;
    return p;
}

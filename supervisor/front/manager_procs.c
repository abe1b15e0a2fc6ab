/*
 * The manager's supervisors by tenant: a table that only grows (a tenant's entry keeps its
 * backoff and counters across hibernations) and an index over it, so the lookup every frame
 * and every pump makes is one probe, not a scan of every tenant ever seen. Likewise the live
 * processes in order of use and the waiting tenants in order of arrival are lists, and the
 * ones going away a count: making room at the ceiling looks at the least recently used live
 * ones and the waiters only.
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

bool
sup__proc_going(const struct sup_proc *p)
{
    return p->process_live && (p->conn == NULL || proto_conn_is_closing(p->conn));
}

static void
live_unlink(sup_manager *m, struct sup_proc *p)
{
    if (p->live_prev != NULL)
        p->live_prev->live_next = p->live_next;
    else
        m->live_head = p->live_next;
    if (p->live_next != NULL)
        p->live_next->live_prev = p->live_prev;
    else
        m->live_tail = p->live_prev;
    p->live_prev = p->live_next = NULL;
}

static void
live_push_front(sup_manager *m, struct sup_proc *p)
{
    p->live_prev = NULL;
    p->live_next = m->live_head;
    if (m->live_head != NULL)
        m->live_head->live_prev = p;
    else
        m->live_tail = p;
    m->live_head = p;
}

void
sup__proc_track(struct sup_proc *p)
{
    sup_manager *m = p->m;
    bool going = sup__proc_going(p);

    if (p->process_live != p->in_live) {
        if (p->process_live)
            live_push_front(m, p);
        else
            live_unlink(m, p);
        p->in_live = p->process_live;
    }
    if (going != p->going_counted) {
        if (going)
            m->n_going++;
        else
            m->n_going--;
        p->going_counted = going;
    }
}

void
sup__proc_touch(struct sup_proc *p, uint64_t now_ms)
{
    p->last_used_ms = now_ms;
    if (p->in_live && p->m->live_head != p) {
        live_unlink(p->m, p);
        live_push_front(p->m, p);
    }
}

void
sup__wait_add(struct sup_proc *p, uint64_t now_ms)
{
    sup_manager *m = p->m;

    if (p->waiting_room)
        return;
    p->waiting_room = true;
    p->waiting_acquire = false;
    p->waiting_since = now_ms;
    p->wait_next = NULL;
    p->wait_prev = m->wait_tail;
    if (m->wait_tail != NULL)
        m->wait_tail->wait_next = p;
    else
        m->wait_head = p;
    m->wait_tail = p;
    m->n_waiting++;
}

void
sup__wait_remove(struct sup_proc *p)
{
    sup_manager *m = p->m;

    if (!p->waiting_room)
        return;
    if (p->wait_prev != NULL)
        p->wait_prev->wait_next = p->wait_next;
    else
        m->wait_head = p->wait_next;
    if (p->wait_next != NULL)
        p->wait_next->wait_prev = p->wait_prev;
    else
        m->wait_tail = p->wait_prev;
    p->wait_prev = p->wait_next = NULL;
    p->waiting_room = false;
    m->n_waiting--;
}

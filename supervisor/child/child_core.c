/*
 * The child counter's lifecycle and storage side (sup_child.h): opening with its configuration,
 * the link table (created on first use, idle links evicted when full), reachability, and the
 * lease rows of the child's own file: which writes to hand out (a PUT raising a lease's mark
 * ahead of need, a DELETE for a lease that is done), what a durable write unblocks, and resuming
 * rows after a restart. A resumed lease starts at used := mark, the most that can have been
 * admitted on it, and its deadline is the earlier of the stored monotonic and wall-clock
 * deadlines, so neither a restart nor a wall clock stepping back can stretch it.
 */
#include "sup_child_int.h"

#include <stdio.h>
#include <string.h>

#define LINKS_DEFAULT 8 /* a tenant's endpoint usually has a few links; more grow the table */
/* The table grows (doubling) when it is full of busy links, up to this. */
#define LINKS_HARD_MAX (1u << 20)

static int64_t
or_default(int64_t v, int64_t def)
{
    return v > 0 ? v : def;
}

void
sup_child_close(sup_child *c)
{
    if (c == NULL)
        return;
    for (uint32_t i = 0; c->links != NULL && i < c->max_links; i++) {
        for (int j = 0; c->links[i] != NULL && j < CHILD_LEASES; j++)
            sup__child_use_unbind(c, &c->links[i]->l[j]);
        tally_free(c->links[i]);
    }
    tally_free(c->links);
    tally_free(c->req);
    tenant_index_release(&c->link_index);
    sup__child_sched_free(c);
    tally_free(c);
}

int
sup_child_set_policy(sup_child *c, const struct tenant_endpoint *policy)
{
    struct tenant_budget probe;

    if (strcmp(policy->name, c->policy.name) != 0)
        return TALLY_EINVAL;
    if (tenant_budget_init(&probe, TENANT_SCOPE_ENDPOINT_TENANT, TENANT_ALG_WINDOW,
                           &policy->degraded_limits) != TALLY_OK)
        return TALLY_ECONFIG;
    if (memcmp(&policy->degraded_limits, &c->policy.degraded_limits,
               sizeof(policy->degraded_limits)) != 0)
        memset(&c->degraded, 0, sizeof(c->degraded));
    c->policy = *policy;
    return TALLY_OK;
}

void
sup_child_forget_refusals(sup_child *c)
{
    for (uint32_t i = 0; i < c->link_hw; i++) {
        if (c->links[i] != NULL)
            c->links[i]->deny_until = 0;
    }
}

int
sup_child_open(const struct sup_child_config *cfg, sup_child **out)
{
    struct tenant_budget probe;
    sup_child *c = NULL;
    int rc = TALLY_EINVAL;

    *out = NULL;
    if (cfg == NULL || !tenant_name_valid(cfg->tenant) || !tenant_name_valid(cfg->policy.name) ||
        cfg->incarnation == 0 || cfg->incarnation > PROTO_LEASE_ID_MAX)
        goto out;
    rc = TALLY_ECONFIG;
    if (tenant_budget_init(&probe, TENANT_SCOPE_ENDPOINT_TENANT, TENANT_ALG_WINDOW,
                           &cfg->policy.degraded_limits) != TALLY_OK)
        goto out;
    rc = TALLY_ENOMEM;
    c = tally_calloc(1, sizeof(*c));
    if (c == NULL)
        goto out;
    snprintf(c->tenant, sizeof(c->tenant), "%s", cfg->tenant);
    c->policy = cfg->policy;
    c->incarnation = cfg->incarnation;
    c->persist_marks = cfg->persist_marks;
    if (cfg->counters != NULL && cfg->counters->bind != NULL && cfg->counters->unbind != NULL)
        c->counters = *cfg->counters;
    c->wait_ms = or_default(cfg->wait_ms, SUP_CHILD_WAIT_MS_DEFAULT);
    c->idle_ms = or_default(cfg->idle_ms, SUP_CHILD_IDLE_MS_DEFAULT);
    c->heartbeat_ms = or_default(cfg->heartbeat_ms, 1000);
    c->retransmit_ms = or_default(cfg->retransmit_ms, SUP_CHILD_RETRANSMIT_MS_DEFAULT);
    c->unreachable_ms = or_default(cfg->unreachable_ms, SUP_CHILD_UNREACHABLE_MS_DEFAULT);
    c->renew_ms = or_default(cfg->renew_ms, SUP_CHILD_RENEW_MS_DEFAULT);
    c->lead_ms = or_default(cfg->lead_ms, SUP_CHILD_LEAD_MS_DEFAULT);
    c->epsilon_ppm = or_default(cfg->epsilon_ppm, SUP_CHILD_EPSILON_PPM_DEFAULT);
    c->epsilon_long_ppm = or_default(cfg->epsilon_long_ppm, SUP_CHILD_EPSILON_LONG_PPM_DEFAULT);
    {
        /* How long before a window end this tenant's links ask ahead (next_at in child_sched.c). */
        uint64_t h = 14695981039346656037ULL;

        for (const char *p = cfg->tenant; *p != '\0'; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ULL;
        c->next_ahead_ppm = (int64_t)(h % 1000000);
    }
    c->mark_chunk_min = or_default(cfg->mark_chunk_min, SUP_CHILD_MARK_CHUNK_MIN_DEFAULT);
    c->mark_lead_ms = or_default(cfg->mark_lead_ms, SUP_CHILD_MARK_LEAD_MS_DEFAULT);
    c->l_min = or_default(cfg->l_min, 1);
    c->l_max = or_default(cfg->l_max, (int64_t)1 << 20);
    c->max_links = cfg->max_links > 0 ? cfg->max_links : LINKS_DEFAULT;
    c->links_max = cfg->links_max > 0 ? cfg->links_max : LINKS_HARD_MAX;
    c->connected = true;
    c->last_reply_mono = INT64_MIN / 2;
    rc = TALLY_EINVAL;
    if (c->epsilon_ppm >= 1000000 || c->epsilon_long_ppm >= 1000000 || c->l_min > c->l_max ||
        c->l_max > PROTO_LEASE_N_MAX)
        goto out;
    rc = tenant_index_init(&c->link_index, c->max_links);
    if (rc != TALLY_OK)
        goto out;
    rc = TALLY_ENOMEM;
    c->links = tally_calloc(c->max_links, sizeof(*c->links));
    c->req = tally_calloc(CHILD_REQ_INITIAL, sizeof(*c->req));
    c->req_cap = CHILD_REQ_INITIAL;
    if (c->links == NULL || c->req == NULL || sup__child_sched_size(c, c->max_links) != TALLY_OK)
        goto out;
    *out = c;
    c = NULL; /* ownership moved to the caller */
    rc = TALLY_OK;
out:
    sup_child_close(c);
    return rc;
}

/* ---- links ---- */

static const char *
link_key(const void *ctx, uint32_t item)
{
    const sup_child *c = ctx;

    return c->links[item]->id;
}

struct child_link *
sup__child_link_find(const sup_child *c, const char *id, int32_t *index)
{
    int64_t i = tenant_index_find(&c->link_index, id, link_key, c);

    if (index != NULL)
        *index = (int32_t)i;
    return i >= 0 ? c->links[i] : NULL;
}

static bool
link_in_flight(const sup_child *c, int32_t index)
{
    for (uint32_t i = 0; i < c->req_cap; i++) {
        if (c->req[i].seq != 0 && c->req[i].link == index)
            return true;
    }
    return false;
}

/* Takes link `v` out of the work queues before it is freed (its slot may be reused). */
static void
unqueue(sup_child *c, uint32_t v)
{
    struct child_queue *qs[2] = {&c->msgq, &c->pq};

    for (int q = 0; q < 2; q++) {
        for (uint32_t pos = 0; pos < qs[q]->len; pos++) {
            if (qs[q]->item[pos] == v) {
                sup__child_queue_drop(c, qs[q], pos);
                break;
            }
        }
    }
}

/* Doubles the link table and rebuilds its index; the links keep their slots, so
 * request and heartbeat references by index stay valid. TALLY_OK, TALLY_EFULL at
 * the hard maximum, TALLY_ENOMEM (then nothing changed). */
static int
links_grow(sup_child *c)
{
    uint32_t cap = c->max_links * 2;
    struct tenant_index ix = {NULL, NULL, 0};
    struct child_link **links;

    if (c->max_links >= c->links_max)
        return TALLY_EFULL;
    if (sup__child_sched_size(c, cap) != TALLY_OK || tenant_index_init(&ix, cap) != TALLY_OK)
        return TALLY_ENOMEM;
    links = tally_realloc(c->links, cap * sizeof(*links));
    if (links == NULL) {
        tenant_index_release(&ix);
        return TALLY_ENOMEM;
    }
    memset(links + c->max_links, 0, (cap - c->max_links) * sizeof(*links));
    c->links = links;
    tenant_index_release(&c->link_index);
    c->link_index = ix;
    c->max_links = cap;
    for (uint32_t i = 0; i < c->link_hw; i++) {
        if (c->links[i] != NULL)
            tenant_index_set(&c->link_index, c->links[i]->id, i, link_key, c);
    }
    return TALLY_OK;
}

/* The first link that may leave the full table (`any`: a remembered refusal too); max_links
 * when none may. */
static uint32_t
evictable(const sup_child *c, int64_t now_ms, bool any)
{
    for (uint32_t v = 0; v < c->max_links; v++) {
        const struct child_link *k = c->links[v];
        if (!link_in_flight(c, (int32_t)v) && sup__child_link_idle(k) &&
            (any || k->deny_until <= now_ms))
            return v;
    }
    return c->max_links;
}

struct child_link *
sup__child_link_get(sup_child *c, const char *id, int64_t now_ms, int *rc, int32_t *index)
{
    struct child_link *k = sup__child_link_find(c, id, index);
    uint32_t slot = 0;

    *rc = TALLY_OK;
    if (k != NULL)
        return k;
    if (!tenant_link_id_valid(id)) {
        *rc = TALLY_EINVAL;
        return NULL;
    }
    if (c->link_count == c->max_links) {
        uint32_t v;

        /* A link with no lease, nothing asked and no debt goes, unless it remembers a
         * refusal still in force: dropping that one would send its next request to the
         * supervisor again (a table of 8 links over a tenant's 200 refused links asked
         * for every request). Such links make the table grow instead; at its ceiling any
         * idle link goes. */
        v = evictable(c, now_ms, false);
        if (v == c->max_links) {
            *rc = links_grow(c);
            if (*rc == TALLY_OK)
                goto insert;
            if (*rc != TALLY_EFULL || (v = evictable(c, now_ms, true)) == c->max_links)
                return NULL;
            *rc = TALLY_OK;
        }
        tenant_index_remove(&c->link_index,
                            tenant_index_pos(&c->link_index, c->links[v]->id, link_key, c));
        unqueue(c, v);
        tally_free(c->links[v]);
        c->links[v] = NULL;
        c->link_count--;
        while (c->link_hw > 0 && c->links[c->link_hw - 1] == NULL)
            c->link_hw--;
    }
insert:
    while (c->links[slot] != NULL)
        slot++;
    k = tally_calloc(1, sizeof(*k));
    if (k == NULL) {
        *rc = TALLY_ENOMEM;
        return NULL;
    }
    snprintf(k->id, sizeof(k->id), "%s", id);
    k->l_slow = c->l_min;
    k->timer_at = INT64_MAX;
    c->links[slot] = k;
    tenant_index_set(&c->link_index, id, slot, link_key, c);
    c->link_count++;
    if (slot + 1 > c->link_hw)
        c->link_hw = slot + 1;
    *index = (int32_t)slot;
    return k;
}

/* ---- reachability ---- */

bool
sup__child_reachable(const sup_child *c, int64_t now_mono)
{
    int64_t oldest = INT64_MAX, since;

    if (!c->connected)
        return false;
    for (uint32_t i = 0; i < c->req_cap; i++) {
        const struct child_req *r = &c->req[i];

        if (r->seq != 0 && r->first_mono >= 0 && r->first_mono < oldest)
            oldest = r->first_mono;
    }
    if (oldest == INT64_MAX)
        return true; /* nothing asked, nothing unanswered */
    since = oldest > c->last_reply_mono ? oldest : c->last_reply_mono;
    return now_mono - since < c->unreachable_ms;
}

int64_t
sup_child_last_reply_ms(const sup_child *c)
{
    return c->last_reply_mono;
}

bool
sup_child_reachable(const sup_child *c, struct sup_time now)
{
    return sup__child_reachable(c, now.mono_ms);
}

void
sup_child_set_connected(sup_child *c, bool connected, struct sup_time now)
{
    if (connected && !c->connected)
        c->last_reply_mono = now.mono_ms; /* give a new connection its full patience */
    c->connected = connected;
}

void
sup_child_resend_now(sup_child *c, struct sup_time now)
{
    for (uint32_t i = 0; i < c->req_cap; i++) {
        struct child_req *r = &c->req[i];
        if (r->seq != 0 && r->first_mono >= 0) {
            r->next_mono = now.mono_ms;
            r->backoff = c->retransmit_ms;
        }
    }
}

/* ---- persistence ---- */

static void
lease_rec(const sup_child *c, const struct child_link *k, const struct child_lease *cl,
          struct sup_child_lease_rec *rec)
{
    memset(rec, 0, sizeof(*rec));
    rec->lease_id = cl->id;
    rec->incarnation = c->incarnation;
    snprintf(rec->link, sizeof(rec->link), "%s", k->id);
    rec->n = cl->n;
    rec->mark = cl->mark_want;
    rec->ttl_ms = cl->ttl_ms;
    rec->sent_mono_ms = cl->sent_mono;
    rec->deadline_mono_ms = cl->deadline_mono;
    rec->deadline_wall_ms = cl->deadline_wall;
    rec->flags = (cl->keep ? SUP_CHILD_REC_KEEP : 0) | (cl->edge ? SUP_CHILD_REC_EDGE : 0) |
                 (cl->last ? SUP_CHILD_REC_LAST : 0);
}

void
sup__child_use_bind(sup_child *c, const struct child_link *k, struct child_lease *cl)
{
    struct sup_child_lease_rec rec;
    int64_t used = cl->used;

    if (c->counters.bind == NULL || cl->use != NULL)
        return;
    lease_rec(c, k, cl, &rec);
    cl->use = c->counters.bind(c->counters.ctx, &rec, &used);
    /* Never above what the child counts: the mark is the most that can have been admitted. */
    if (cl->use != NULL && used >= 0 && used < cl->used)
        cl->used = used;
}

void
sup__child_use_unbind(sup_child *c, struct child_lease *cl)
{
    if (cl->use != NULL)
        c->counters.unbind(c->counters.ctx, cl->use);
    cl->use = NULL;
}

/* The next write of `k`, if any. */
static bool
link_persist(sup_child *c, struct child_link *k, struct sup_child_persist *out)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        struct child_lease *cl = &k->l[j];

        if (cl->state == CL_LIVE && cl->mark_want > cl->mark_sent) {
            out->op = SUP_PERSIST_PUT;
            lease_rec(c, k, cl, &out->rec);
            if (cl->mark_first == 0)
                cl->mark_first = cl->mark_want;
            cl->mark_sent = cl->mark_want;
            cl->row = true;
            c->stats.writes++;
            return true;
        }
        if (cl->state == CL_PARKED && cl->park_due) {
            /* Nothing more is admitted on it here: its exact use is what the next
             * incarnation resumes from. */
            out->op = SUP_PERSIST_PUT;
            lease_rec(c, k, cl, &out->rec);
            out->rec.mark = cl->used;
            cl->park_due = false;
            cl->row = true;
            c->stats.writes++;
            return true;
        }
        if (cl->state == CL_RETIRED && cl->delete_due) {
            memset(out, 0, sizeof(*out));
            out->op = SUP_PERSIST_DELETE;
            out->rec.lease_id = cl->id;
            snprintf(out->rec.link, sizeof(out->rec.link), "%s", k->id);
            cl->delete_due = false;
            c->stats.writes++;
            return true;
        }
    }
    return false;
}

int
sup_child_next_persist(sup_child *c, struct sup_child_persist *out)
{
    /* Marks move only in strict mode; rows resumed in either mode are deleted when done. */
    while (c->pq.len > 0) {
        struct child_link *k = c->links[c->pq.item[0]];

        if (k != NULL && link_persist(c, k, out))
            return TALLY_OK;
        sup__child_queue_drop(c, &c->pq, 0);
    }
    return TALLY_ENOTFOUND;
}

void
sup_child_persisted(sup_child *c, const struct sup_child_persist *p, struct sup_child_event *ev)
{
    int32_t index = -1;
    struct child_link *k = sup__child_link_find(c, p->rec.link, &index);
    struct child_lease *cl = k != NULL ? sup__child_lease_by_id(k, p->rec.lease_id) : NULL;

    if (ev != NULL)
        memset(ev, 0, sizeof(*ev));
    if (cl == NULL)
        return;
    if (p->op == SUP_PERSIST_PUT && cl->state == CL_LIVE) {
        if (p->rec.mark > cl->mark_durable)
            cl->mark_durable = p->rec.mark;
        cl->row_durable = true;
    } else if (p->op == SUP_PERSIST_DELETE && cl->state == CL_RETIRED && !cl->delete_due) {
        /* Only now may the lease be reported: it can no longer be resumed. */
        cl->row = false;
        sup__child_enqueue(c, index);
    } else {
        return;
    }
    if (ev != NULL) {
        ev->kind = SUP_EV_LINK;
        snprintf(ev->link, sizeof(ev->link), "%s", k->id);
    }
}

int
sup_child_resume(sup_child *c, const struct sup_child_lease_rec *rec, struct sup_time now)
{
    struct child_lease *cl = NULL;
    struct child_link *k;
    int64_t left;
    int32_t index;
    int rc;

    if (rec == NULL || rec->lease_id == 0 || rec->incarnation >= c->incarnation || rec->n < 1 ||
        rec->mark < 0 || rec->mark > rec->n || rec->ttl_ms < 1)
        return TALLY_EINVAL;
    k = sup__child_link_get(c, rec->link, now.mono_ms, &rc, &index);
    if (k == NULL)
        return rc;
    for (int j = 0; j < CHILD_LEASES && cl == NULL; j++) {
        if (k->l[j].state == CL_FREE)
            cl = &k->l[j];
    }
    if (cl == NULL)
        return TALLY_EFULL;
    memset(cl, 0, sizeof(*cl));
    cl->state = CL_LIVE;
    cl->id = rec->lease_id;
    cl->n = rec->n;
    cl->used = rec->mark; /* whatever was admitted before the crash, at most the mark */
    cl->ttl_ms = rec->ttl_ms;
    cl->foreign = true;
    /* As granted: a kept lease stays kept, one that ends at a window end is not renewed by age
     * (a renewal would end there too), and the last of its windows still asks ahead. */
    cl->keep = (rec->flags & SUP_CHILD_REC_KEEP) != 0;
    cl->edge = (rec->flags & SUP_CHILD_REC_EDGE) != 0;
    cl->last = (rec->flags & SUP_CHILD_REC_LAST) != 0;
    cl->row = true;
    cl->row_durable = true;
    cl->mark_durable = cl->mark_want = cl->mark_sent = rec->mark;
    cl->got_mono = now.mono_ms;
    cl->sent_mono = rec->sent_mono_ms;
    /* The monotonic clock is trusted only on the same boot (it did not go back) and bounds the
     * wall clock, which may have stepped back since. */
    left = rec->deadline_wall_ms - now.wall_ms;
    if (now.mono_ms < rec->sent_mono_ms || rec->deadline_mono_ms > rec->sent_mono_ms + rec->ttl_ms)
        left = 0;
    else if (rec->deadline_mono_ms - now.mono_ms < left)
        left = rec->deadline_mono_ms - now.mono_ms;
    cl->deadline_mono = now.mono_ms + (left > 0 ? left : 0);
    cl->deadline_wall = now.wall_ms + (left > 0 ? left : 0);
    /* On the same boot the host may know exactly what was admitted on it, less than the mark:
     * nothing between the two is lost. */
    if (left > 0)
        sup__child_use_bind(c, k, cl);
    if (left <= 0 || cl->used >= cl->n)
        sup__child_retire(c, k, cl);
    else
        c->stats.resumed++;
    sup__child_touch(c, index, now.mono_ms);
    return TALLY_OK;
}

void
sup_child_shutdown(sup_child *c, struct sup_time now)
{
    for (uint32_t i = 0; i < c->link_hw; i++) {
        struct child_link *k = c->links[i];

        for (int j = 0; k != NULL && j < CHILD_LEASES; j++) {
            if (k->l[j].state == CL_LIVE)
                sup__child_retire(c, k, &k->l[j]);
        }
        if (k != NULL) {
            k->acq_due = false;
            sup__child_touch(c, (int32_t)i, now.mono_ms);
        }
    }
}

uint32_t
sup_child_park(sup_child *c, struct sup_time now)
{
    uint32_t parked = 0;

    for (uint32_t i = 0; i < c->link_hw; i++) {
        struct child_link *k = c->links[i];

        for (int j = 0; k != NULL && j < CHILD_LEASES; j++) {
            struct child_lease *cl = &k->l[j];

            if (cl->state != CL_LIVE)
                continue;
            /* A NEXT lease not started has no row to park it with: it is given back. */
            if ((cl->keep || cl->foreign) && cl->used < cl->n && cl->start_mono <= now.mono_ms &&
                cl->deadline_mono - now.mono_ms >= SUP_CHILD_PARK_MIN_MS) {
                cl->state = CL_PARKED;
                cl->park_due = true;
                c->stats.leases_parked++;
                parked++;
            } else {
                sup__child_retire(c, k, cl);
            }
        }
        if (k != NULL) {
            k->acq_due = false;
            sup__child_touch(c, (int32_t)i, now.mono_ms);
        }
    }
    return parked;
}

/* ---- introspection ---- */

void
sup_child_stats(const sup_child *c, struct sup_time now, struct sup_child_stats *out)
{
    *out = c->stats;
    out->links = c->link_count;
    out->live_leases = 0;
    out->inflight = 0;
    for (uint32_t i = 0; i < c->link_hw; i++) {
        for (int j = 0; c->links[i] != NULL && j < CHILD_LEASES; j++)
            out->live_leases += c->links[i]->l[j].state == CL_LIVE;
    }
    for (uint32_t i = 0; i < c->req_cap; i++)
        out->inflight += c->req[i].seq != 0;
    out->reachable = sup__child_reachable(c, now.mono_ms);
}

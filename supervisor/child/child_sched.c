/*
 * What the child has to do next, without looking at every link: two work queues and a timer
 * heap. A link enters the message queue when it may have an ACQUIRE or a RETURN to send, and the
 * write queue when it may have a row to write; each entry point that changes a link (a decision,
 * a reply, a durable write, a timer) calls sup__child_touch() on it. The consumers drop the
 * entries that turn out to have nothing left, so a queue holds the links with work and a few
 * that just finished. The heap holds one instant per link with a live lease (its earliest
 * deadline, idle return or renewal by age); an entry made stale by later traffic is popped,
 * recomputed and pushed again (lazy: an instant only ever moves later by itself, and an earlier
 * one is pushed at once). The pump, the timer and the writes cost O(work), not O(links): with
 * 10,000 links, scans over every link took three quarters of tallyd's CPU.
 */
#include "sup_child_int.h"

#include <string.h>

bool
sup__child_acquire_held(const struct child_link *k)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];

        if (cl->state == CL_RETIRED && cl->recalled && cl->report_due && cl->report_seq == 0 &&
            !cl->quiet && cl->row)
            return true;
    }
    return false;
}

bool
sup__child_msg_work(const struct child_link *k)
{
    if (k->acq_due && k->acq_seq == 0 && !sup__child_acquire_held(k))
        return true;
    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];

        /* What build_return would send: a report that needs no ACQUIRE to ride on. */
        if (cl->state == CL_RETIRED && cl->report_due && cl->report_seq == 0 && !cl->quiet &&
            !cl->row)
            return true;
    }
    return false;
}

bool
sup__child_persist_work(const struct child_link *k)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];

        if ((cl->state == CL_LIVE && cl->mark_want > cl->mark_sent) ||
            (cl->state == CL_RETIRED && cl->delete_due) || (cl->state == CL_PARKED && cl->park_due))
            return true;
    }
    return false;
}

/* Wants an ACQUIRE flagged NEXT for `k` (need 0), unless one is due or in flight. */
static void
want_next(struct child_link *k)
{
    if (k->acq_seq != 0 || k->acq_due)
        return;
    k->acq_need = 0;
    k->acq_due = true;
    k->acq_next = true;
}

/* True iff a started lease of `k` has admitted something: the link is in use in these windows,
 * whichever of its leases took the requests (a renewal waits unused behind the lease it renews,
 * a resumed lease behind nothing). */
static bool
link_used(const struct child_link *k)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];

        if (cl->state == CL_LIVE && cl->start_mono == 0 && cl->used > 0)
            return true;
    }
    return false;
}

/* When `k` should ask ahead for the windows after its live LAST lease `cl` (INT64_MAX: never). */
static int64_t
next_at(const sup_child *c, const struct child_link *k, const struct child_lease *cl)
{
    int64_t lo, hi, life;

    if (cl->state != CL_LIVE || !cl->last || !cl->keep || cl->start_mono != 0 ||
        k->next_for == cl->id || cl->used >= cl->n || !link_used(k))
        return INT64_MAX; /* asked already, used up, or the link unused in these windows */
    /* Spread over the whole range, also when the lease's life shortens it: a cap alone would
     * send every tenant whose instant falls past it at once. */
    life = cl->deadline_mono - cl->sent_mono;
    hi = life / 4 < NEXT_AHEAD_MAX_MS ? life / 4 : NEXT_AHEAD_MAX_MS;
    lo = hi / 2 < NEXT_AHEAD_MIN_MS ? hi / 2 : NEXT_AHEAD_MIN_MS;
    return cl->deadline_mono - lo - (hi - lo) * c->next_ahead_ppm / 1000000;
}

int64_t
sup__child_drift_margin(const sup_child *c, int64_t ttl_ms)
{
    int64_t t = c->lease_ttl_ms > 0 ? c->lease_ttl_ms : SUP_CHILD_LEASE_TTL_MS;
    int64_t head = ttl_ms < t ? ttl_ms : t, tail = ttl_ms - head;

    /* epsilon over a lease's first T_lease, epsilon_long over the rest (docs/DESIGN.md §5), plus
     * one tick: clocks are read in whole milliseconds. */
    return (head * c->epsilon_ppm + 999999) / 1000000 +
           (tail * c->epsilon_long_ppm + 999999) / 1000000 + 1;
}

/* A NEXT grant names the windows' end again, measured from a send far later than the first send
 * of the link's LAST lease: that lease may run until the end as measured from this ask, less the
 * drift bound over the wait alone (0.1 s and 0.1 % of it), instead of less the bound over its
 * whole life (3.7 s for an hour): the gap at a window end, where the old lease has ended and the
 * new one not begun and a request needs the supervisor, shrinks to twice the shorter bound. Only
 * while that lease is live, so the ask was decided before its end: the end named is then its end
 * (every window of its path ends there, and none earlier), and each bound is one on the same
 * instant. Never past its own TTL from its first send, which its row checks. */
void
sup__child_last_end_from_next(const sup_child *c, struct child_link *k,
                              const struct proto_lease_grant *g, int64_t sent_mono,
                              int64_t now_mono)
{
    int64_t end = sent_mono + g->start_ms - sup__child_drift_margin(c, g->start_ms);

    for (int j = 0; j < CHILD_LEASES; j++) {
        struct child_lease *cl = &k->l[j];
        int64_t at = end < cl->sent_mono + cl->ttl_ms ? end : cl->sent_mono + cl->ttl_ms;

        /* The NEXT lease itself has not started: it is not a running one. */
        if (cl->state != CL_LIVE || !cl->last || cl->start_mono != 0 ||
            now_mono >= cl->deadline_mono || at <= cl->deadline_mono)
            continue;
        cl->deadline_wall += at - cl->deadline_mono;
        cl->deadline_mono = at;
    }
}

/* The next instant at which a timer of `k` may act, after `after`: the deadline of a live lease
 * (and of a used-up one waiting to ride on an ACQUIRE), its idle return, its renewal by age. */
static int64_t
link_timer(const sup_child *c, const struct child_link *k, int64_t after)
{
    int64_t next = INT64_MAX;

    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];
        int64_t t;

        if (cl->state == CL_RETIRED && cl->quiet && cl->report_due && cl->report_seq == 0 &&
            cl->deadline_mono > after && cl->deadline_mono < next)
            next = cl->deadline_mono;
        if (cl->state != CL_LIVE)
            continue;
        if (cl->deadline_mono < next)
            next = cl->deadline_mono;
        if (cl->start_mono > after && cl->start_mono < next)
            next = cl->start_mono;
        t = next_at(c, k, cl);
        if (t > after && t < next && after - k->last_use < NEXT_ACTIVE_MS)
            next = t;
        if (!cl->foreign && !cl->keep) {
            t = (k->last_use > cl->got_mono ? k->last_use : cl->got_mono) + c->idle_ms;
            if (t < next)
                next = t;
        }
        t = cl->sent_mono + cl->ttl_ms * 6 / 10;
        if (!cl->edge && t > after && t < next)
            next = t;
    }
    return next;
}

static bool
queue_push(struct child_queue *q, uint32_t index)
{
    if (q->len == q->cap)
        return false; /* cannot happen: a link is queued once and cap is the table's size */
    q->item[q->len++] = index;
    return true;
}

void
sup__child_queue_drop(sup_child *c, struct child_queue *q, uint32_t pos)
{
    struct child_link *k = c->links[q->item[pos]];

    if (k != NULL) {
        if (q == &c->msgq)
            k->in_msgq = false;
        else
            k->in_pq = false;
    }
    q->item[pos] = q->item[--q->len];
}

/* ---- the timer heap (a binary min-heap on `at`) ---- */

static void
heap_swap(struct child_timer *a, struct child_timer *b)
{
    struct child_timer t = *a;

    *a = *b;
    *b = t;
}

static int
heap_push(sup_child *c, int64_t at, uint32_t index)
{
    uint32_t i;

    if (c->heap_len == c->heap_cap) {
        uint32_t cap = c->heap_cap > 0 ? c->heap_cap * 2 : 8;
        struct child_timer *h = tally_realloc(c->heap, cap * sizeof(*h));

        if (h == NULL)
            return TALLY_ENOMEM;
        c->heap = h;
        c->heap_cap = cap;
    }
    i = c->heap_len++;
    c->heap[i].at = at;
    c->heap[i].link = index;
    while (i > 0 && c->heap[(i - 1) / 2].at > c->heap[i].at) {
        heap_swap(&c->heap[(i - 1) / 2], &c->heap[i]);
        i = (i - 1) / 2;
    }
    return TALLY_OK;
}

static struct child_timer
heap_pop(sup_child *c)
{
    struct child_timer top = c->heap[0];
    uint32_t i = 0;

    c->heap[0] = c->heap[--c->heap_len];
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;

        if (l < c->heap_len && c->heap[l].at < c->heap[m].at)
            m = l;
        if (r < c->heap_len && c->heap[r].at < c->heap[m].at)
            m = r;
        if (m == i)
            break;
        heap_swap(&c->heap[i], &c->heap[m]);
        i = m;
    }
    return top;
}

/* ---- per link ---- */

void
sup__child_enqueue(sup_child *c, int32_t index)
{
    struct child_link *k = index >= 0 ? c->links[index] : NULL;

    if (k == NULL)
        return;
    if (!k->in_msgq && sup__child_msg_work(k))
        k->in_msgq = queue_push(&c->msgq, (uint32_t)index);
    if (!k->in_pq && sup__child_persist_work(k))
        k->in_pq = queue_push(&c->pq, (uint32_t)index);
}

void
sup__child_touch(sup_child *c, int32_t index, int64_t now_mono)
{
    struct child_link *k = index >= 0 ? c->links[index] : NULL;
    int64_t at;

    if (k == NULL)
        return;
    sup__child_enqueue(c, index);
    at = link_timer(c, k, now_mono);
    if (at < k->timer_at && heap_push(c, at, (uint32_t)index) == TALLY_OK)
        k->timer_at = at;
}

/* True iff `k` holds a lease that has not started (a NEXT lease). */
static bool
next_held(const struct child_link *k)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        if (k->l[j].state == CL_LIVE && k->l[j].start_mono != 0)
            return true;
    }
    return false;
}

/* The timers of one link (what sup_child_tick did for every link). */
static void
link_tick(sup_child *c, struct child_link *k, int64_t now_mono)
{
    bool idle, old = true, any = false;

    sup__child_link_roll(c, k, now_mono);
    sup__child_rate_update(k, now_mono);
    idle = now_mono - k->last_use >= c->idle_ms;
    for (int j = 0; j < CHILD_LEASES; j++) {
        struct child_lease *cl = &k->l[j];

        if (cl->state != CL_LIVE)
            continue;
        if (cl->start_mono != 0 && now_mono >= cl->start_mono)
            cl->start_mono = 0; /* its windows have started: an ordinary kept lease now */
        /* Near the end of the last lease of its windows, a link in use asks ahead for the next
         * ones: the supervisor starts before the boundary, not for the first request after it. */
        if (now_mono >= next_at(c, k, cl) && now_mono < cl->deadline_mono &&
            now_mono - k->last_use < NEXT_ACTIVE_MS && k->acq_seq == 0 && !k->acq_due &&
            !next_held(k)) {
            k->next_for = cl->id;
            want_next(k);
            c->stats.prefetches++;
        }
        if (cl->start_mono > now_mono)
            continue; /* not started: neither idle nor old */
        /* Idle for a second: give the tokens back (docs/LEASE-PROTOCOL.md §3), unless the
         * supervisor said the few left are worth keeping (KEEP): they go back at the deadline. */
        if (idle && !cl->foreign && !cl->keep && now_mono - cl->got_mono >= c->idle_ms) {
            sup__child_retire(c, k, cl);
            continue;
        }
        any = true;
        /* A lease cut short by a window end cannot be renewed past that end: no age
         * renewal for it, the next window starts with a fresh ACQUIRE. */
        old = old && !cl->edge && now_mono - cl->sent_mono >= cl->ttl_ms * 6 / 10;
    }
    /* Renew by age: traffic continues but every lease is past 0.6 of its ttl. */
    if (any && old && !idle && !k->pass && k->acq_seq == 0 && !k->acq_due) {
        sup__child_want_acquire(k, 0);
        c->stats.prefetches++;
    }
    sup__child_link_roll(c, k, now_mono);
}

void
sup_child_tick(sup_child *c, struct sup_time now)
{
    while (c->heap_len > 0 && c->heap[0].at <= now.mono_ms) {
        struct child_timer t = heap_pop(c);
        struct child_link *k = c->links[t.link];

        if (k == NULL || k->timer_at != t.at)
            continue; /* stale: the link was evicted or has an earlier entry */
        k->timer_at = INT64_MAX;
        link_tick(c, k, now.mono_ms);
        sup__child_touch(c, (int32_t)t.link, now.mono_ms);
    }
}

int64_t
sup__child_timer_next(const sup_child *c)
{
    return c->heap_len > 0 ? c->heap[0].at : INT64_MAX;
}

/* ---- setup ---- */

int
sup__child_sched_size(sup_child *c, uint32_t links)
{
    uint32_t *m = tally_realloc(c->msgq.item, links * sizeof(*m));
    uint32_t *p;

    if (m == NULL)
        return TALLY_ENOMEM;
    c->msgq.item = m;
    c->msgq.cap = links;
    p = tally_realloc(c->pq.item, links * sizeof(*p));
    if (p == NULL)
        return TALLY_ENOMEM;
    c->pq.item = p;
    c->pq.cap = links;
    return TALLY_OK;
}

void
sup__child_sched_free(sup_child *c)
{
    tally_free(c->msgq.item);
    tally_free(c->pq.item);
    tally_free(c->heap);
    memset(&c->msgq, 0, sizeof(c->msgq));
    memset(&c->pq, 0, sizeof(c->pq));
    c->heap = NULL;
    c->heap_len = c->heap_cap = 0;
}

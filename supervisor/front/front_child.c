/*
 * Child counters inside tallyd (sup_child.h) and what they need from the
 * outside world: their own SQLite file (lease rows and an incarnation
 * counter), a timer, the lease channel to the tenant's supervisor, and the
 * requests parked while a grant, a durable mark or a slot is on its way. A
 * parked request is re-run when its link changes and given up at its
 * deadline (then the child decides without the supervisor: degraded or 503
 * per the endpoint's policy), so no request waits longer than wait_ms for
 * another process.
 */
#include "sup_front_int.h"

#include <string.h>

static void park(struct front_child *fc, struct sup_front_req *r, enum sup_front_stage stage,
                 int64_t give_up_ms);

/* Re-runs the requests of `link` waiting for a lease, in arrival order. They are
 * taken off the list first: one that parks again goes to the back of the list
 * and is not run twice in this pass. */
void
front_child_rerun_link(struct front_child *fc, const char *link)
{
    struct sup_front_req *batch = NULL;
    struct sup_front_req **tail = &batch;
    struct sup_front_req *r = fc->parked;

    while (r != NULL) {
        struct sup_front_req *next = r->next;
        if (r->stage == SUP_FRONT_LEASE && strcmp(r->link, link) == 0) {
            front_child_unpark(fc, r);
            *tail = r;
            tail = &r->next;
        }
        r = next;
    }
    while (batch != NULL) {
        r = batch;
        batch = r->next;
        r->next = NULL;
        front_child_run(fc, r, 0);
    }
}

/* ---- parked requests ---- */

static void
park(struct front_child *fc, struct sup_front_req *r, enum sup_front_stage stage,
     int64_t give_up_ms)
{
    r->child = fc;
    r->stage = stage;
    /* A request re-parked (a grant came, then it waits for a durable mark) keeps
     * its first deadline: no request waits longer than it was promised. */
    if (r->give_up_ms == 0 || give_up_ms < r->give_up_ms)
        r->give_up_ms = give_up_ms;
    r->next = NULL;
    if (fc->parked == NULL) {
        r->prev = r;
        fc->parked = r;
    } else {
        struct sup_front_req *tail = fc->parked->prev;
        tail->next = r;
        r->prev = tail;
        fc->parked->prev = r;
    }
    fc->f->stats.waits++;
}

void
front_child_unpark(struct front_child *fc, struct sup_front_req *r)
{
    if (r->child != fc)
        return;
    if (fc->parked == r) {
        fc->parked = r->next;
        if (fc->parked != NULL)
            fc->parked->prev = r->prev;
    } else {
        r->prev->next = r->next;
        if (r->next != NULL)
            r->next->prev = r->prev;
        else
            fc->parked->prev = r->prev;
    }
    if (r->stage == SUP_FRONT_SLOT)
        sup_child_slot_cancel(fc->child, r->slot_op);
    r->next = r->prev = NULL;
    r->child = NULL;
}

/* The window reported with an answer, admitted or refused (the RateLimit
 * fields): the link's own window on this endpoint when there is one, else the
 * widest scope's first; under the degraded limits, their first. `remaining` is
 * what the decision knows is left of it: what the link's live leases hold
 * (reserved on every budget of the path, so never more than truly remains), or
 * exactly, from the degraded window the child owns; 0 when unknown. Returns
 * the window's scope. */
static uint8_t
fill_window(struct front_child *fc, struct proto_check_reply *reply, int64_t wall_ms, bool degraded,
            int64_t remaining)
{
    const struct tenant_limits *ls = &fc->policy.limits;
    uint8_t scope = TENANT_SCOPE_ENDPOINT_LINK;

    if (degraded) {
        ls = &fc->policy.degraded_limits;
        scope = TENANT_SCOPE_ENDPOINT_TENANT;
    } else if (ls->count == 0) {
        ls = &fc->policy.tenant_limits;
        scope = TENANT_SCOPE_ENDPOINT_TENANT;
    }
    reply->limit = -1;
    reply->remaining = -1;
    if (ls->count > 0) {
        int64_t period = ls->v[0].period_ms;
        reply->limit = ls->v[0].n;
        reply->period_ms = period;
        reply->remaining = remaining > 0 ? remaining : 0;
        if (reply->remaining > reply->limit)
            reply->remaining = reply->limit;
        reply->reset_ms = tenant_window_end_ms(tenant_window_id(wall_ms, period), period) - wall_ms;
    }
    return scope;
}

static void
answer_admit(struct front_child *fc, struct sup_front_req *r, const struct sup_admit *a,
             int64_t slot_id, int64_t wall_ms)
{
    struct proto_check_reply reply;
    bool degraded = a != NULL && a->degraded;

    memset(&reply, 0, sizeof(reply));
    reply.status = PROTO_ADMITTED;
    reply.slot_id = slot_id;
    if (degraded || r->degraded)
        reply.flags |= PROTO_F_DEGRADED;
    /* Without `a` (a slot granted later) the leases may have moved on: 0. */
    reply.scope = fill_window(fc, &reply, wall_ms, degraded, a != NULL ? a->left : 0);
    front_reply(fc->f, r, &reply);
}

/* `scope` fired; the reply reports the window an admission would (remaining 0). */
static void
answer_refused(struct front_child *fc, struct sup_front_req *r, enum tenant_scope scope,
               int64_t retry_after_ms, bool degraded, int64_t wall_ms)
{
    struct proto_check_reply reply;

    memset(&reply, 0, sizeof(reply));
    reply.status = PROTO_REFUSED;
    (void)fill_window(fc, &reply, wall_ms, degraded, 0);
    reply.scope = (uint8_t)scope;
    if (retry_after_ms == TENANT_RETRY_NEVER) {
        reply.flags |= PROTO_F_NEVER;
        reply.retry_after_ms = -1;
    } else {
        reply.retry_after_ms = retry_after_ms;
    }
    front_reply(fc->f, r, &reply);
}

/* Gives back what an expensive operation took when it got no slot. A lease that
 * ended meanwhile has nothing to give back (its tokens count as spent). */
void
front_child_refund(struct front_child *fc, struct sup_front_req *r, uint64_t lease_id)
{
    int rc = sup_child_refund(fc->child, r->link, lease_id, r->cost);

    (void)NEVER(rc != TALLY_OK && rc != TALLY_ENOTFOUND);
}

static bool
needs_slot(struct front_child *fc, struct sup_front_req *r)
{
    const struct store_snap_tenant *t;

    (void)r;
    if (!fc->policy.expensive)
        return false; /* the usual case, without a walk over the tenants */
    t = store_snapshot_tenant(fc->f->snap, fc->tenant);
    return t != NULL && t->plan->concurrency > 0;
}

/* True when the tenant's supervisor is not running and may be started now, or
 * was started and has not answered yet: a cold start, not an outage. A restart
 * after a crash is an outage (a full disk, a corrupt journal make it crash
 * again and again): its requests keep their deadline. One going away (its
 * channel closed, the process not yet reaped) may be hibernating or crashing:
 * cold until its exit says which (front_child_on_down). */
static bool
cold(struct front_child *fc)
{
    sup_manager *m = fc->f->mgr;

    if (front_lease_remote(fc->f)) /* the leader's start: cold while it can be reached */
        return fc->f->cl_link;
    if (sup_manager_crashed(m, fc->tenant))
        return false;
    if (sup_manager_is_starting(m, fc->tenant))
        return true;
    return !sup_manager_is_up(m, fc->tenant) && sup_manager_backoff_left_ms(m, fc->tenant) == 0;
}

/* The supervisor of fc's tenant is being started for `link`: the tenant's other links that may
 * call this endpoint (its first FRONT_WARM_MAX such links, by creation) ask for their leases
 * now, riding on the same start. Without it, a quiet tenant's second link would start the
 * supervisor again once the first start has gone idle. A warmed lease strands what any grant
 * strands: a kept one is a small share of plenty, recalled when the budget runs short; a short
 * one goes back after a second unused. */
static void
warm_siblings(struct front_child *fc, const char *link, struct sup_time now)
{
    const store_snapshot *snap = fc->f->snap;
    const struct store_snap_tenant *t = store_snapshot_tenant(snap, fc->tenant);
    const struct store_snap_link *ls;
    size_t i, n, live = 0;
    bool asked;

    if (t == NULL)
        return;
    ls = store_snapshot_tenant_links(snap, t, &n);
    for (i = 0; i < n && i < 4 * FRONT_WARM_MAX && live < FRONT_WARM_MAX; i++) {
        if (!store_snap_link_allows(&ls[i], fc->endpoint, now.wall_ms))
            continue;
        live++;
        if (strcmp(ls[i].id, link) != 0 &&
            sup_child_warm(fc->child, ls[i].id, now, &asked) == TALLY_OK && asked)
            fc->f->stats.leases_warmed++;
    }
}

void
front_child_submit(struct front_child *fc, struct sup_front_req *r)
{
    if (fc->state == FRONT_CHILD_OPEN) {
        front_child_run(fc, r, 0);
        front_child_pump_soon(fc);
        return;
    }
    /* The file is being opened (or closed, then opened again) on the thread pool:
     * the request waits for it as for a supervisor's cold start. */
    r->wait_for = SUP_FRONT_WAIT_FILE;
    park(fc, r, SUP_FRONT_OPENING, front_now().mono_ms + fc->f->cfg.cold_start_ms);
    if (!fc->pump_soon) /* else the pump due now arms the timer for its deadline */
        front_child_arm(fc);
}

void
front_child_run(struct front_child *fc, struct sup_front_req *r, unsigned flags)
{
    struct sup_admit a;
    struct sup_time now = front_now();
    int rc = sup_child_admit(fc->child, r->link, r->cost, now, flags, &a);

    if (rc != TALLY_OK) {
        front_reply_status(fc->f, r, rc == TALLY_EFULL ? PROTO_UNAVAILABLE : PROTO_INTERNAL, 1000,
                           rc == TALLY_EFULL ? "link table full" : tally_strerror(rc));
        return;
    }
    switch (a.verdict) {
    case SUP_ADMIT_OK:
        if (!needs_slot(fc, r)) {
            answer_admit(fc, r, &a, 0, now.wall_ms);
            return;
        }
        r->lease_id = a.lease_id;
        if (a.degraded) {
            /* No slot can be had without the supervisor: expensive operations
             * fail closed while degraded. */
            front_child_refund(fc, r, a.lease_id);
            front_reply_status(fc->f, r, PROTO_UNAVAILABLE, 1000,
                               "concurrency authority unreachable");
            return;
        }
        if (sup_child_slot_acquire(fc->child, r->link, now, &r->slot_op) != TALLY_OK) {
            front_child_refund(fc, r, a.lease_id);
            front_reply_status(fc->f, r, PROTO_UNAVAILABLE, 1000, "too many operations pending");
            return;
        }
        r->give_up_ms = 0; /* a new wait, for another process's answer */
        r->wait_for = SUP_FRONT_WAIT_SLOT;
        park(fc, r, SUP_FRONT_SLOT, now.mono_ms + fc->f->cfg.wait_ms);
        return;
    case SUP_ADMIT_REFUSED:
        answer_refused(fc, r, a.scope, a.retry_after_ms, a.degraded, now.wall_ms);
        return;
    case SUP_ADMIT_WAIT:
        /* A supervisor that is starting (spawned, replaying its journal) is not
         * unreachable: give a cold start its own, longer deadline. */
        if (!(flags & SUP_ADMIT_GIVE_UP) && cold(fc)) {
            if (a.give_up_ms < now.mono_ms + fc->f->cfg.cold_start_ms)
                a.give_up_ms = now.mono_ms + fc->f->cfg.cold_start_ms;
            if (a.wait == SUP_WAIT_GRANT)
                warm_siblings(fc, r->link, now);
        }
        r->wait_for = a.wait == SUP_WAIT_MARK ? SUP_FRONT_WAIT_MARK : SUP_FRONT_WAIT_GRANT;
        park(fc, r, SUP_FRONT_LEASE, a.give_up_ms);
        return;
    case SUP_ADMIT_UNAVAILABLE:
        r->outage = true; /* front_obs_reply: the endpoint is unavailable */
        front_reply_status(fc->f, r, PROTO_UNAVAILABLE, a.retry_after_ms, "authority unreachable");
        return;
    case SUP_ADMIT_UNAUTHORIZED:
        front_reply_status(fc->f, r, PROTO_UNAUTHORIZED, 0, NULL);
        return;
    }
}

/* A slot answer for the parked request that asked for it. */
static void
on_slot_event(struct front_child *fc, const struct sup_child_event *ev)
{
    struct sup_front_req *r;

    for (r = fc->parked; r != NULL; r = r->next) {
        if (r->stage == SUP_FRONT_SLOT && r->slot_op == ev->op)
            break;
    }
    if (r == NULL)
        return;
    r->stage = SUP_FRONT_SLOT_ANSWERED; /* unpark must not cancel the slot */
    front_child_unpark(fc, r);
    if (ev->kind == SUP_EV_SLOT_GRANTED) {
        answer_admit(fc, r, NULL, ev->slot_id, front_now().wall_ms);
        return;
    }
    front_child_refund(fc, r, r->lease_id);
    if (ev->kind == SUP_EV_SLOT_DENIED)
        answer_refused(fc, r, TENANT_SCOPE_CONCURRENCY, ev->retry_after_ms, false,
                       front_now().wall_ms);
    else
        front_reply_status(fc->f, r, PROTO_UNAVAILABLE,
                           ev->retry_after_ms > 0 ? ev->retry_after_ms : 1000, "slot refused");
}

void
front_child_on_event(struct front_child *fc, const struct sup_child_event *ev)
{
    if (ev->kind == SUP_EV_SLOT_GRANTED || ev->kind == SUP_EV_SLOT_DENIED ||
        ev->kind == SUP_EV_SLOT_FAILED) {
        on_slot_event(fc, ev);
        return;
    }
    if (ev->kind == SUP_EV_LINK)
        front_child_rerun_link(fc, ev->link);
}

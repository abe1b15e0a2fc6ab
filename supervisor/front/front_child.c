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

#include "tally_log.h"

#include <string.h>

static void park(struct front_child *fc, struct sup_front_req *r, enum sup_front_stage stage,
                 int64_t give_up_ms);
static void arm(struct front_child *fc);
static void on_timer(uv_timer_t *t);
static void on_pump_idle(uv_idle_t *h);
static void child_turn(struct front_child *fc);

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
static void
refund(struct front_child *fc, struct sup_front_req *r, uint64_t lease_id)
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
        arm(fc);
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
            refund(fc, r, a.lease_id);
            front_reply_status(fc->f, r, PROTO_UNAVAILABLE, 1000,
                               "concurrency authority unreachable");
            return;
        }
        if (sup_child_slot_acquire(fc->child, r->link, now, &r->slot_op) != TALLY_OK) {
            refund(fc, r, a.lease_id);
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
    refund(fc, r, r->lease_id);
    if (ev->kind == SUP_EV_SLOT_DENIED)
        answer_refused(fc, r, TENANT_SCOPE_CONCURRENCY, ev->retry_after_ms, false,
                       front_now().wall_ms);
    else
        front_reply_status(fc->f, r, PROTO_UNAVAILABLE,
                           ev->retry_after_ms > 0 ? ev->retry_after_ms : 1000, "slot refused");
}

static void
on_event(struct front_child *fc, const struct sup_child_event *ev)
{
    if (ev->kind == SUP_EV_SLOT_GRANTED || ev->kind == SUP_EV_SLOT_DENIED ||
        ev->kind == SUP_EV_SLOT_FAILED) {
        on_slot_event(fc, ev);
        return;
    }
    if (ev->kind == SUP_EV_LINK)
        front_child_rerun_link(fc, ev->link);
}

/* ---- timers and messages ---- */

static void
arm(struct front_child *fc)
{
    int64_t wake = fc->child != NULL ? sup_child_next_wake_ms(fc->child) : INT64_MAX;
    int64_t retry = fc->child != NULL ? front_store_wake_ms(fc) : INT64_MAX;
    struct sup_front_req *r;
    int64_t now = front_now().mono_ms;

    if (retry < wake)
        wake = retry;
    if (fc->state == FRONT_CHILD_DRAINING && fc->drain_mono_ms < wake)
        wake = fc->drain_mono_ms;
    for (r = fc->parked; r != NULL; r = r->next) {
        if (r->give_up_ms < wake)
            wake = r->give_up_ms;
    }
    if (wake == INT64_MAX) {
        uv_timer_stop(&fc->timer);
        fc->armed_ms = INT64_MAX;
        return;
    }
    /* Already armed for that instant: most pumps leave the next wake where it was, and
     * moving a timer costs two operations on the loop's heap of every child's timer. */
    if (fc->armed_ms == wake && uv_is_active((uv_handle_t *)&fc->timer))
        return;
    fc->armed_ms = wake;
    /* At least 1 ms: a timer due "now" that finds nothing to do must not turn
     * the loop into a busy wait. */
    uv_timer_start(&fc->timer, on_timer, wake > now ? (uint64_t)(wake - now) : 1, 0);
}

/* The lease traffic at --log-level debug, one line per message: "lease_sent" with the
 * send's result, "lease_received" with an ERROR's code. tally_log_begin() returns
 * false at once at higher levels, so the hot path pays one comparison. */
static void
log_lease(const char *event, const char *tenant, const struct proto_lease_msg *m, int rc)
{
    struct tally_log l;

    if (!tally_log_begin(&l, TALLY_LOG_DEBUG, event))
        return;
    tally_log_str(&l, "tenant", tenant);
    tally_log_str(&l, "type", proto_lease_type_name(m->type));
    tally_log_int(&l, "seq", (int64_t)m->origin.seq);
    if (rc != TALLY_OK)
        tally_log_str(&l, "error", tally_err_name(rc));
    if (m->type == PROTO_LEASE_ERROR)
        tally_log_int(&l, "code", m->error.code);
    tally_log_end(&l);
}

/* Rounds of one pump: messages and writes feed each other, but a child that keeps
 * producing both must not hold the loop; the rest waits for the next turn. */
#define PUMP_ROUNDS 16
/* At most one "lease_pump_deferred" line per this many ms, whatever the rate. */
#define PUMP_LOG_EVERY_MS 10000

/* The pump hit PUMP_ROUNDS with work left: counted, logged (rate-limited), and
 * resumed on the next loop turn from the pump queue (after a poll), so nothing is
 * left waiting for an unrelated event. */
static void
pump_deferred(struct front_child *fc, int64_t now_ms)
{
    sup_front *f = fc->f;
    struct tally_log l;

    f->stats.pump_deferrals++;
    if (f->pump_log_ms == 0 || now_ms - f->pump_log_ms >= PUMP_LOG_EVERY_MS) {
        f->pump_log_ms = now_ms;
        if (tally_log_begin(&l, TALLY_LOG_WARN, "lease_pump_deferred")) {
            tally_log_str(&l, "tenant", fc->tenant);
            tally_log_str(&l, "endpoint", fc->endpoint);
            tally_log_int(&l, "rounds", PUMP_ROUNDS);
            tally_log_int(&l, "deferrals", (int64_t)f->stats.pump_deferrals);
            tally_log_end(&l);
        }
    }
    front_child_pump_soon(fc);
}

void
front_child_pump(struct front_child *fc)
{
    sup_front *f = fc->f;
    struct proto_lease_msg m;
    struct sup_time now = front_now();
    bool more = true;
    int round;

    /* A pump called directly leaves fc on the pump queue if it is there: it is pumped
     * once more before the next poll, which does no harm. */
    if (fc->child == NULL) { /* its file is being opened or closed */
        if (fc->timer_live)
            arm(fc);
        return;
    }
    /* A supervisor being started is not an unreachable one: its silence while it
     * replays its journal must not push the child into degraded mode. */
    if (sup_manager_is_starting(f->mgr, fc->tenant)) {
        sup_child_set_connected(fc->child, false, now);
        sup_child_set_connected(fc->child, true, now);
    }
    /* Messages and writes feed each other (a durable mark re-runs requests that
     * may ask for a lease): go on until a round does neither. */
    for (round = 0; round < PUMP_ROUNDS && more; round++) {
        /* A message taken from the child changed its state (a request in flight, a
         * report on its way) whether or not the send worked, and may free work for
         * the next round: it counts as progress either way. */
        bool took = false;
        proto_conn *cork = sup_manager_cork(f->mgr, fc->tenant);

        while (sup_child_next_message(fc->child, now, &m) == TALLY_OK) {
            size_t len = 0;
            int src;
            took = true;
            if (proto_lease_encode(&m, 0, f->frame, sizeof(f->frame), &len) != TALLY_OK)
                continue;
            src = sup_manager_send(f->mgr, fc->tenant, f->frame, len);
            log_lease("lease_sent", fc->tenant, &m, src);
            if (src != TALLY_OK) {
                /* Not on its way: the child's retransmit timer sends it again,
                 * and its requests give up at their deadline meanwhile. */
                f->stats.lease_send_failures++;
                continue;
            }
            f->stats.lease_messages++;
            front_obs_lease_sent(f, fc, m.origin.seq);
        }
        sup_manager_uncork(cork);
        more = front_store_flush(fc) || took;
    }
    if (!fc->timer_live)
        return;
    if (more)
        pump_deferred(fc, now.mono_ms);
    else
        arm(fc);
    if (fc->state == FRONT_CHILD_DRAINING)
        front_child_drain_check(fc);
}

void
front_child_pump_soon(struct front_child *fc)
{
    if (!fc->timer_live) {
        front_child_pump(fc);
        return;
    }
    if (fc->pump_soon)
        return;
    /* One pump for all the requests of this loop turn: a pipelined batch of 16
     * checks costs one pass over the child's links, not sixteen. */
    fc->pump_soon = true;
    if (fc->f->pumpq == NULL)
        uv_idle_start(&fc->f->pump_idle, on_pump_idle);
    fc->pump_next = fc->f->pumpq;
    fc->f->pumpq = fc;
}

void
front_child_pump_forget(struct front_child *fc)
{
    struct front_child **p;

    for (p = &fc->f->pumpq; *p != NULL; p = &(*p)->pump_next) {
        if (*p == fc) {
            *p = fc->pump_next;
            break;
        }
    }
    fc->pump_next = NULL;
    fc->pump_soon = false;
}

/* Before the next poll: the children queued by front_child_pump_soon, each as its timer
 * would have run it. */
static void
on_pump_idle(uv_idle_t *h)
{
    sup_front *f = h->data;
    struct front_child *fc = f->pumpq;

    f->pumpq = NULL;
    uv_idle_stop(h);
    while (fc != NULL) {
        struct front_child *next = fc->pump_next;

        fc->pump_next = NULL;
        /* Taken off the queue before its turn: a pump that queues it again puts it on the
         * next round's queue. Forgotten meanwhile (retired by an earlier child's turn; its
         * memory lives until the loop's close phase): skipped. */
        if (fc->pump_soon && fc->timer_live) {
            fc->pump_soon = false;
            child_turn(fc);
        }
        fc = next;
    }
}

void
front_pumpq_init(sup_front *f)
{
    uv_idle_init(f->loop, &f->pump_idle);
    f->pump_idle.data = f;
}

void
front_pumpq_close(sup_front *f, uv_close_cb cb)
{
    f->pumpq = NULL;
    uv_close((uv_handle_t *)&f->pump_idle, cb);
}

static void
on_timer(uv_timer_t *t)
{
    child_turn(t->data);
}

/* What the child's timer does: its timers, its parked requests' deadlines, a pump. */
static void
child_turn(struct front_child *fc)
{
    struct sup_time now = front_now();
    struct sup_front_req *r;
    struct sup_front_req *next;

    if (fc->child != NULL)
        sup_child_tick(fc->child, now);
    for (r = fc->parked; r != NULL; r = next) {
        next = r->next;
        if (r->give_up_ms > now.mono_ms)
            continue;
        fc->f->stats.wait_timeouts[r->wait_for]++;
        if (r->stage == SUP_FRONT_OPENING) {
            /* The file took longer than a cold start may: as if it could not open. */
            front_child_unpark(fc, r);
            r->owner = NULL;
            front_reply_status(fc->f, r, PROTO_UNAVAILABLE, 1000, "child counter not ready");
        } else if (r->stage == SUP_FRONT_LEASE) {
            front_child_unpark(fc, r);
            front_child_run(fc, r, SUP_ADMIT_GIVE_UP);
        } else {
            front_child_unpark(fc, r); /* cancels the slot request */
            refund(fc, r, r->lease_id);
            front_reply_status(fc->f, r, PROTO_UNAVAILABLE, 1000,
                               "concurrency authority unreachable");
        }
    }
    front_child_pump(fc);
}

void
front_child_on_frame(sup_front *f, const char *tenant, const struct proto_frame *fr)
{
    struct proto_lease_msg m;
    struct sup_child_event ev;
    struct front_child *fc;

    if (proto_lease_decode(fr, &m) != TALLY_OK)
        return;
    log_lease("lease_received", tenant, &m, TALLY_OK);
    fc = front_child_find(f, tenant, m.origin.child);
    if (fc == NULL || fc->child == NULL)
        return; /* an earlier incarnation's answer: its leases expire as spent */
    if (m.type != PROTO_LEASE_RECALL) /* its seq names a lease, not a request */
        front_obs_lease_answered(f, fc, m.origin.seq);
    memset(&ev, 0, sizeof(ev));
    if (sup_child_on_message(fc->child, front_now(), &m, &ev) == TALLY_OK)
        on_event(fc, &ev);
    front_child_pump_soon(fc); /* the replies of one supervisor write: one pump */
}

void
front_child_on_down(sup_front *f, const char *tenant)
{
    uint32_t i;

    /* The children retransmit on their own timers; the next send respawns the
     * supervisor (after the backoff, if it crashed). A crash ends a cold start:
     * requests parked for one keep only their own deadline. */
    bool crashed = sup_manager_crashed(f->mgr, tenant);
    int64_t until = front_now().mono_ms + f->cfg.wait_ms;
    size_t n_eps = 0;
    const struct tenant_endpoint *eps =
        f->snap != NULL ? store_snapshot_endpoints(f->snap, &n_eps) : NULL;

    /* The tenant's children, found by endpoint (a policy per plan may repeat a name:
     * pumping a child twice does no harm), not by a walk over every tenant's. */
    for (i = 0; i < n_eps; i++) {
        struct front_child *fc = front_child_find(f, tenant, eps[i].name);
        if (fc == NULL || fc->child == NULL)
            continue;
        for (struct sup_front_req *r = fc->parked; crashed && r != NULL; r = r->next) {
            if (r->stage == SUP_FRONT_LEASE && r->give_up_ms > until)
                r->give_up_ms = until;
        }
        front_child_pump(fc);
    }
}

/*
 * The lease traffic of tallyd's child counters: a pump takes a child's messages to its
 * tenant's supervisor and its writes to its file, the pump queue runs the children asked for
 * in a loop turn once before the next poll, each child's timer runs its turn (its own timers,
 * the deadlines of its parked requests, a pump), and frames from a supervisor reach their
 * child here.
 */
#include "sup_front_int.h"

#include "tally_log.h"

#include <string.h>

static void on_timer(uv_timer_t *t);
static void on_pump_idle(uv_idle_t *h);
static void child_turn(struct front_child *fc);

void
front_child_arm(struct front_child *fc)
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
            front_child_arm(fc);
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
            int src;
            took = true;
            src = front_lease_send(f, fc->tenant, &m);
            log_lease("lease_sent", fc->tenant, &m, src);
            if (src != TALLY_OK) {
                /* Not on its way: the child's retransmit timer sends it again,
                 * and its requests give up at their deadline meanwhile. */
                f->stats.lease_send_failures++;
                continue;
            }
            f->stats.lease_messages++;
            front_obs_lease_sent(f, fc, m.origin.incarnation, m.origin.seq);
        }
        sup_manager_uncork(cork);
        if (took && f->n_firsts > 0)
            front_first_kick(f, fc->tenant);
        more = front_store_flush(fc) || took;
    }
    if (!fc->timer_live)
        return;
    if (more)
        pump_deferred(fc, now.mono_ms);
    else
        front_child_arm(fc);
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
            front_child_refund(fc, r, r->lease_id);
            front_reply_status(fc->f, r, PROTO_UNAVAILABLE, 1000,
                               "concurrency authority unreachable");
        }
    }
    front_child_pump(fc);
}

/* An answer that came before the child's incarnation was durable: kept for
 * front_child_deliver_held. The first answers of a new child are a WELCOME and a GRANT or two;
 * past FRONT_HELD_MAX one is dropped (its request is sent again, and answered again). */
static void
hold(struct front_child *fc, const struct proto_lease_msg *m)
{
    struct front_store *s = &fc->store;

    if (s->held == NULL)
        s->held = tally_malloc(FRONT_HELD_MAX * sizeof(*s->held));
    if (s->held != NULL && s->n_held < FRONT_HELD_MAX)
        s->held[s->n_held++] = *m;
}

void
front_child_on_frame(sup_front *f, const char *tenant, const struct proto_frame *fr)
{
    struct proto_lease_msg m;

    if (proto_lease_decode(fr, &m) != TALLY_OK || front_lease_route_in(f, tenant, &m))
        return;
    front_child_on_lease(f, tenant, &m);
}

void
front_child_on_lease(sup_front *f, const char *tenant, const struct proto_lease_msg *m)
{
    struct sup_child_event ev;
    struct front_child *fc;

    log_lease("lease_received", tenant, m, TALLY_OK);
    fc = front_child_find(f, tenant, m->origin.child);
    if (fc == NULL || fc->child == NULL)
        return; /* an earlier incarnation's answer: its leases expire as spent */
    if (m->type != PROTO_LEASE_RECALL) /* its seq names a lease, not a request */
        front_obs_lease_answered(f, fc, m->origin.incarnation, m->origin.seq);
    if (fc->store.inc_pending) {
        hold(fc, m);
        return;
    }
    memset(&ev, 0, sizeof(ev));
    if (sup_child_on_message(fc->child, front_now(), m, &ev) == TALLY_OK)
        front_child_on_event(fc, &ev);
    front_child_pump_soon(fc); /* the replies of one supervisor write: one pump */
}

void
front_child_deliver_held(struct front_child *fc)
{
    struct front_store *s = &fc->store;

    for (uint32_t i = 0; i < s->n_held && fc->child != NULL; i++) {
        struct sup_child_event ev;

        memset(&ev, 0, sizeof(ev));
        if (sup_child_on_message(fc->child, front_now(), &s->held[i], &ev) == TALLY_OK)
            front_child_on_event(fc, &ev);
    }
    tally_free(s->held);
    s->held = NULL;
    s->n_held = 0;
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

/*
 * Requests on endpoints keyed by caller (docs/DESIGN.md §12): tallyd's side of
 * the caller authorities (sup_callers.h). Each caller of a request is hashed
 * with the deployment key at once (nothing further sees it in clear), its hash
 * names its authority, and each authority involved gets one DECIDE for its
 * callers, always as a HOLD: when every verdict admits, the request is admitted
 * and the charges stand; when one refuses, the others are CANCELled, so a
 * refusal charges nothing. An authority that does not answer within the wait
 * (the cold-start wait while it starts) leaves the answer to the endpoint's
 * policy: closed is 503, open admits under the degraded limit counted here, per
 * caller, in memory. A verdict that arrives after its request was answered 503
 * (or its client left) is cancelled too.
 *
 * The authorities are processes (`tallyd --callers S`), started on first need,
 * restarted after an exit with a backoff of 10 ms doubling to 2 s, hibernating
 * when idle like the supervisors. Requests waiting for verdicts come from a
 * fixed pool: beyond it, 503.
 */
#include "front_callers_int.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "tally_log.h"

static void
cancel_hold(struct front_callers *fc, unsigned shard, uint32_t id)
{
    uint8_t frame[PROTO_CALLER_MSG_MAX];
    size_t len = proto_caller_cancel_encode(frame, 0, id);

    fc->f->stats.callers.cancels++;
    if (fc->a[shard].conn != NULL)
        (void)proto_conn_send(fc->a[shard].conn, frame, len);
}

static void
unlink_req(struct front_callers *fc, struct front_caller_req *q)
{
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        fc->busy = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    q->r->creq = NULL;
    q->r = NULL;
    q->prev = NULL;
    q->next = fc->free;
    fc->free = q;
    if (fc->busy == NULL)
        uv_timer_stop(&fc->sweep);
}

/* Cancels the holds that admitted, for a request that is not admitted after all. */
static void
cancel_admitted(struct front_callers *fc, const struct front_caller_req *q)
{
    for (unsigned s = 0; s < SUP_CALLER_SHARDS; s++) {
        if (q->admitted & (1u << s))
            cancel_hold(fc, s, q->id);
    }
}

/* The degraded answer of an open endpoint whose authority is away: its degraded limit,
 * counted here per caller. NULL table (no memory, no room): refused as unavailable. */
static tenant_callers *
degraded_table(struct front_callers *fc, const char *endpoint)
{
    struct degraded_table *free_slot = NULL;

    for (size_t i = 0; i < sizeof(fc->degraded) / sizeof(fc->degraded[0]); i++) {
        if (fc->degraded[i].t != NULL && strcmp(fc->degraded[i].endpoint, endpoint) == 0)
            return fc->degraded[i].t;
        if (fc->degraded[i].t == NULL && free_slot == NULL)
            free_slot = &fc->degraded[i];
    }
    if (free_slot == NULL || tenant_callers_open(DEGRADED_MAX, &free_slot->t) != TALLY_OK)
        return NULL;
    snprintf(free_slot->endpoint, sizeof(free_slot->endpoint), "%s", endpoint);
    return free_slot->t;
}

static void
fill_reply(const struct proto_caller_verdict *v, int64_t now_wall, struct proto_check_reply *out)
{
    memset(out, 0, sizeof(*out));
    out->status = v->admitted ? PROTO_ADMITTED : PROTO_REFUSED;
    out->scope = TENANT_SCOPE_CALLER;
    out->flags = v->never ? PROTO_F_NEVER : 0;
    out->retry_after_ms = v->admitted ? 0 : v->never ? -1 : v->retry_after_ms;
    out->limit = v->limit;
    out->period_ms = v->period_ms;
    out->remaining = v->remaining;
    out->reset_ms = v->reset_ms > now_wall ? v->reset_ms - now_wall : 0;
}

static void
answer(struct front_callers *fc, struct front_caller_req *q, const struct proto_check_reply *rep)
{
    struct sup_front_req *r = q->r;
    sup_front *f = fc->f;

    switch (rep->status) {
    case PROTO_ADMITTED:
        f->stats.callers.admitted++;
        if (rep->flags & PROTO_F_DEGRADED)
            f->stats.callers.degraded++;
        break;
    case PROTO_REFUSED:
        f->stats.callers.refused++;
        break;
    default:
        f->stats.callers.unavailable++;
        break;
    }
    unlink_req(fc, q);
    front_reply(f, r, rep);
}

/* Every authority involved answered, or the wait is over (timed_out). */
static void
conclude(struct front_callers *fc, struct front_caller_req *q, bool timed_out)
{
    struct proto_check_reply rep;
    struct tenant_callers_decision d;
    tenant_callers *t;
    int64_t now = front_now().wall_ms;

    if (!timed_out && !q->failed) {
        fill_reply(&q->best, now, &rep);
        if (rep.status != PROTO_ADMITTED)
            cancel_admitted(fc, q);
        answer(fc, q, &rep);
        return;
    }
    if (!q->failed && q->on_unavailable == TENANT_UNAVAIL_OPEN &&
        (t = degraded_table(fc, q->endpoint)) != NULL &&
        tenant_callers_decide(t, q->algorithm, &q->degraded,
                              (const unsigned char(*)[TENANT_CALLER_KEY_BYTES])q->keys, q->n, now,
                              q->cost, &d, NULL) == TALLY_OK) {
        struct proto_caller_verdict v = {.admitted = d.admitted,
                                         .never = d.never,
                                         .retry_after_ms = d.retry_after_ms,
                                         .limit = d.limit,
                                         .period_ms = d.period_ms,
                                         .remaining = d.remaining,
                                         .reset_ms = d.reset_ms};
        fill_reply(&v, now, &rep);
        if (d.admitted)
            rep.flags |= PROTO_F_DEGRADED; /* what admitted holds counted stays counted */
        else
            cancel_admitted(fc, q);
        answer(fc, q, &rep);
        return;
    }
    cancel_admitted(fc, q);
    q->r->outage = true;
    memset(&rep, 0, sizeof(rep));
    rep.status = PROTO_UNAVAILABLE;
    rep.retry_after_ms = 1000;
    rep.limit = -1;
    rep.remaining = -1;
    snprintf(rep.detail, sizeof(rep.detail), "%s",
             q->failed ? "caller authority failed" : "caller authority unreachable");
    answer(fc, q, &rep);
}

/* Sends q's DECIDE to authority s (its callers on s only); a send that cannot go now (the
 * authority is going away) is marked for the sweep to try again. */
static void
send_shard(struct front_callers *fc, struct front_caller_req *q, unsigned s)
{
    struct proto_caller_decide m;
    uint8_t frame[PROTO_CALLER_MSG_MAX];
    size_t len;

    memset(&m, 0, sizeof(m));
    for (uint32_t i = 0; i < q->n; i++) {
        if (sup_caller_shard(q->keys[i]) == s)
            memcpy(m.keys[m.n++], q->keys[i], TENANT_CALLER_KEY_BYTES);
    }
    snprintf(m.endpoint, sizeof(m.endpoint), "%s", q->endpoint);
    m.algorithm = q->algorithm;
    m.limits = q->limits;
    m.max_callers = q->max_callers;
    m.cost = q->cost;
    m.hold = true;
    len = proto_caller_decide_encode(frame, q->id, &m);
    q->unsent &= (uint8_t) ~(1u << s);
    if (len > 0 && fc__authority_send(&fc->a[s], frame, len) == TALLY_EUNAVAIL)
        q->unsent |= (uint8_t)(1u << s);
}

static void
on_sweep(uv_timer_t *t)
{
    struct front_callers *fc = t->data;
    int64_t now = front_now().mono_ms;
    struct front_caller_req *q = fc->busy;

    while (q != NULL) {
        struct front_caller_req *next = q->next;
        for (unsigned sh = 0; q->unsent != 0 && sh < SUP_CALLER_SHARDS; sh++) {
            if (q->unsent & (1u << sh))
                send_shard(fc, q, sh);
        }
        if (now >= q->give_up_ms)
            conclude(fc, q, true);
        q = next;
    }
}

/* Keeps the verdict the answer reports: refused, the longest wait (never first);
 * admitted, the least remaining. */
static void
merge(struct front_caller_req *q, const struct proto_caller_verdict *v)
{
    const struct proto_caller_verdict *b = &q->best;

    if (!q->have || (b->admitted && !v->admitted) ||
        (!b->admitted && !v->admitted && !b->never &&
         (v->never || v->retry_after_ms > b->retry_after_ms)) ||
        (b->admitted && v->admitted && v->remaining < b->remaining))
        q->best = *v;
    q->have = true;
}

void
fc__on_frame(proto_conn *c, const struct proto_frame *fr, void *data)
{
    struct authority *a = data;
    struct front_callers *fc = a->fc;
    struct proto_caller_verdict v;
    struct front_caller_req *q;

    if (proto_caller_verdict_decode(fr, &v) != TALLY_OK) {
        proto_conn_close(c);
        return;
    }
    a->answered = true;
    a->entries = v.entries;
    a->bytes = v.bytes;
    fc->f->stats.callers.entries = 0;
    fc->f->stats.callers.table_bytes = 0;
    for (unsigned s = 0; s < SUP_CALLER_SHARDS; s++) {
        fc->f->stats.callers.entries += fc->a[s].entries;
        fc->f->stats.callers.table_bytes += fc->a[s].bytes;
    }
    if (v.sketched)
        fc->f->stats.callers.sketched++;
    for (q = fc->busy; q != NULL; q = q->next) {
        if (q->id == fr->request_id && (q->waiting & (1u << a->shard)))
            break;
    }
    if (q == NULL) { /* answered already (503) or its client left: not admitted */
        if (v.admitted)
            cancel_hold(fc, a->shard, fr->request_id);
        return;
    }
    q->waiting &= (uint8_t) ~(1u << a->shard);
    if (v.admitted)
        q->admitted |= (uint8_t)(1u << a->shard);
    if (v.failed)
        q->failed = true;
    else
        merge(q, &v);
    if (q->waiting == 0)
        conclude(fc, q, false);
}

int
front_callers_open(sup_front *f, struct front_callers **out)
{
    struct front_callers *fc = tally_calloc(1, sizeof(*fc));

    *out = NULL;
    if (fc == NULL)
        return TALLY_ENOMEM;
    fc->f = f;
    for (unsigned s = 0; s < SUP_CALLER_SHARDS; s++) {
        fc->a[s].fc = fc;
        fc->a[s].shard = s;
    }
    for (size_t i = 0; i < POOL; i++) {
        fc->pool[i].next = fc->free;
        fc->free = &fc->pool[i];
    }
    uv_timer_init(f->loop, &fc->sweep);
    fc->sweep.data = fc;
    uv_timer_init(f->loop, &fc->kill);
    fc->kill.data = fc;
    *out = fc;
    return TALLY_OK;
}

/* What a request is decided under: the endpoint's policy for the plan of the token's
 * tenant when a valid token came along, else its default. Never keyed by the token. */
static const struct tenant_endpoint *
caller_policy(sup_front *f, const char *token, const char *endpoint)
{
    const char *plan = "";
    unsigned char hash[TENANT_HASH_BYTES];

    if (token != NULL && tenant_token_hash(f->key, token, hash) == TALLY_OK) {
        const struct store_snap_link *l = store_snapshot_link(f->snap, hash);
        if (l != NULL && store_snap_link_allows(l, endpoint, front_now().wall_ms))
            plan = l->tenant->plan->name;
    }
    sodium_memzero(hash, sizeof(hash));
    return store_snapshot_endpoint(f->snap, plan, endpoint);
}

void
front_callers_check(struct front_callers *fc, struct sup_front_req *r, const char *token,
                    const char *endpoint, const char *const *callers, const size_t *lens, size_t n,
                    int64_t cost)
{
    sup_front *f = fc->f;
    const struct tenant_endpoint *p;
    struct front_caller_req *q;
    const char *why = NULL;
    struct sup_time now = front_now();
    bool cold = false;

    f->stats.callers.checks++;
    p = tenant_name_valid(endpoint) ? caller_policy(f, token, endpoint) : NULL;
    if (p == NULL || p->key != TENANT_KEY_CALLER) {
        f->stats.callers.bad_request += p == NULL;
        front_reply_status(f, r, p == NULL ? PROTO_BAD_REQUEST : PROTO_UNAUTHORIZED, 0,
                           p == NULL ? "unknown endpoint" : NULL);
        return;
    }
    if (n == 0 || n > TENANT_CALLERS_MAX)
        why = n == 0 ? "missing X-Tally-Caller" : "too many X-Tally-Caller: at most 4";
    for (size_t i = 0; i < n && why == NULL; i++) {
        if (tenant_caller_parse(callers[i], lens[i], &why) != TALLY_OK && why == NULL)
            why = "bad X-Tally-Caller";
    }
    if (why == NULL && (cost < 0 || cost > TENANT_COST_MAX))
        why = "bad cost";
    if (why == NULL && fc->free == NULL) {
        front_reply_status(f, r, PROTO_UNAVAILABLE, 1000, "too many caller requests in flight");
        return;
    }
    if (why != NULL || f->closing) {
        f->stats.callers.bad_request += why != NULL;
        front_reply_status(f, r, why != NULL ? PROTO_BAD_REQUEST : PROTO_UNAVAILABLE,
                           why != NULL ? 0 : 1000, why != NULL ? why : "shutting down");
        return;
    }
    q = fc->free;
    fc->free = q->next;
    memset(q, 0, sizeof(*q));
    q->r = r;
    r->creq = q;
    r->shadow = p->shadow;
    if (++fc->next_id == 0)
        fc->next_id = 1;
    q->id = fc->next_id;
    snprintf(q->endpoint, sizeof(q->endpoint), "%s", endpoint);
    q->on_unavailable = p->on_unavailable;
    q->algorithm = p->algorithm;
    q->degraded = p->degraded_limits;
    q->cost = cost > 0 ? cost : p->cost;
    q->n = (uint32_t)n;
    q->limits = p->limits;
    q->max_callers = ((p->max_callers > 0 ? p->max_callers : TENANT_MAX_CALLERS_DEFAULT) +
                      SUP_CALLER_SHARDS - 1) /
                     SUP_CALLER_SHARDS;
    for (size_t i = 0; i < n; i++) {
        if (tenant_caller_hash(f->key, callers[i], lens[i], q->keys[i]) != TALLY_OK)
            continue; /* parsed above: cannot happen */
        q->involved |= (uint8_t)(1u << sup_caller_shard(q->keys[i]));
    }
    q->next = fc->busy;
    if (fc->busy != NULL)
        fc->busy->prev = q;
    fc->busy = q;
    for (unsigned s = 0; s < SUP_CALLER_SHARDS; s++) {
        if (!(q->involved & (1u << s)))
            continue;
        q->waiting |= (uint8_t)(1u << s);
        send_shard(fc, q, s);
        /* An authority just started, or one going away that the next replaces. */
        cold |= (fc->a[s].live && !fc->a[s].answered) || (q->unsent & (1u << s)) != 0;
    }
    q->give_up_ms = now.mono_ms + (cold ? f->cfg.cold_start_ms : f->cfg.wait_ms);
    if (!uv_is_active((uv_handle_t *)&fc->sweep))
        uv_timer_start(&fc->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
}

void
front_callers_cancel(struct front_callers *fc, struct sup_front_req *r)
{
    struct front_caller_req *q = r->creq;

    if (q == NULL)
        return;
    cancel_admitted(fc, q); /* the verdicts still to come are cancelled as they arrive */
    unlink_req(fc, q);
}

void
front_callers_close(struct front_callers *fc, void (*closed)(sup_front *f))
{
    fc->closing = true;
    fc->closed = closed;
    fc->pending = 3; /* two timers and this call */
    while (fc->busy != NULL) {
        struct front_caller_req *q = fc->busy;
        struct sup_front_req *r = q->r;
        unlink_req(fc, q);
        front_reply_status(fc->f, r, PROTO_UNAVAILABLE, 1000, "shutting down");
    }
    for (unsigned s = 0; s < SUP_CALLER_SHARDS; s++) {
        struct authority *a = &fc->a[s];
        if (a->conn != NULL)
            proto_conn_close(a->conn); /* EOF: it commits and exits */
        if (a->live || a->closing) {
            fc->pending++; /* on_exit closes the process handle, or it is closing */
            a->counted = true;
        }
        if (a->live)
            uv_process_kill(&a->proc, SIGTERM);
    }
    for (size_t i = 0; i < sizeof(fc->degraded) / sizeof(fc->degraded[0]); i++)
        tenant_callers_close(fc->degraded[i].t);
    uv_timer_stop(&fc->sweep);
    uv_close((uv_handle_t *)&fc->sweep, fc__on_handle_closed);
    if (fc__any_live(fc))
        uv_timer_start(&fc->kill, fc__on_kill, KILL_AFTER_MS, 0);
    else
        uv_close((uv_handle_t *)&fc->kill, fc__on_handle_closed);
    fc__count_down(fc);
}

void
front_callers_free(struct front_callers *fc)
{
    tally_free(fc);
}

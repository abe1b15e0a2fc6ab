/*
 * The child's side of the lease channel: requests in flight, the messages it pulls out, the
 * replies it takes in, and its timers. Every request gets the next seq of this incarnation and
 * is kept, byte for byte, until its reply arrives, retransmitted after 20 ms, 40 ms, ... up to
 * 1 s (the supervisor answers a retransmission from its dedupe window). The seqs in flight span
 * less than the supervisor's window, so a retransmission is never stale. Until WELCOME, the
 * HELLO and first sends that follow it on the wire are all that goes out: the supervisor takes
 * them in order, usually in one turn, so a first request costs it one commit, not two; their
 * retransmissions wait for WELCOME. A report of a lease (in an ACQUIRE, or a RETURN) goes out only
 * after the lease stopped being used and, in strict mode, after its row is durably deleted;
 * degraded debt rides on the next ACQUIRE or HEARTBEAT and counts as charged once its reply
 * arrives.
 */
#include "sup_child_int.h"

#include <stdio.h>
#include <string.h>

static void
req_send(sup_child *c, struct child_req *r, struct sup_time now, struct proto_lease_msg *out)
{
    if (r->first_mono < 0) {
        r->first_mono = now.mono_ms;
        r->first_wall = now.wall_ms;
    } else {
        c->stats.retransmits++;
    }
    r->next_mono = now.mono_ms + r->backoff;
    r->backoff = r->backoff * 2 < CHILD_BACKOFF_MAX_MS ? r->backoff * 2 : CHILD_BACKOFF_MAX_MS;
    *out = r->msg;
    c->stats.messages++;
}

static struct child_lease *
report_ready(struct child_link *k, bool on_acquire)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        struct child_lease *cl = &k->l[j];

        /* A lease with tokens left is reported only once its row is gone (it must never be
         * both credited and resumed); a used-up one credits nothing and rides along. */
        if (cl->state == CL_RETIRED && cl->report_due && cl->report_seq == 0 &&
            (cl->quiet ? on_acquire : !cl->row))
            return cl;
    }
    return NULL;
}

/* The rate the supervisor sizes a kept lease by: the link's EWMA, or, when more, what a lease of
 * the link held for at least T_renew saw over its life (the EWMA forgets a link used every few
 * seconds between two uses; the lease remembers). Milli-tokens per second. */
static int64_t
lease_rate(const sup_child *c, const struct child_link *k, int64_t now_mono)
{
    int64_t rate = k->rate_milli;

    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];
        int64_t age = now_mono - cl->got_mono, r;

        if (cl->state == CL_FREE || cl->foreign || cl->pass || age < c->renew_ms ||
            cl->used > INT64_MAX / 1000000)
            continue;
        r = cl->used * 1000000 / age;
        if (r > rate)
            rate = r;
    }
    return rate < PROTO_LEASE_RATE_MAX ? rate : PROTO_LEASE_RATE_MAX;
}

static bool
build_acquire(sup_child *c, struct child_link *k, int32_t index, struct sup_time now,
              struct proto_lease_msg *out)
{
    struct child_req *r = sup__child_req_new(c, PROTO_LEASE_ACQUIRE, index, now.mono_ms);
    struct proto_lease_acquire *a;
    struct child_lease *rep;

    if (r == NULL)
        return false;
    a = &r->msg.acquire;
    snprintf(a->endpoint, sizeof(a->endpoint), "%s", c->policy.name);
    snprintf(a->link, sizeof(a->link), "%s", k->id);
    a->need = k->acq_need;
    a->want = sup__child_want(c, k, k->acq_need);
    a->flags = k->acq_next && k->acq_need == 0 ? PROTO_LEASE_ACQ_NEXT : 0;
    k->acq_next = false;
    a->rate_milli = lease_rate(c, k, now.mono_ms);
    rep = report_ready(k, true);
    if (rep != NULL) {
        /* The swap: the leftover of a lease no longer used rides on the renewal. */
        a->report_lease = rep->id;
        a->report_used = rep->used;
        rep->report_seq = r->seq;
        r->report_lease = rep->id;
    }
    a->debt = k->debt_new < PROTO_LEASE_N_MAX ? k->debt_new : PROTO_LEASE_N_MAX;
    k->debt_new -= a->debt;
    c->debt_total -= a->debt;
    k->debt_sent += a->debt;
    r->debt = a->debt;
    k->acq_seq = r->seq;
    k->acq_due = false;
    c->stats.acquires++;
    req_send(c, r, now, out);
    return true;
}

/* Recalled leases of k whose report could go now. */
static int
recalled_ready(const struct child_link *k)
{
    int n = 0;

    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];

        n += cl->state == CL_RETIRED && cl->recalled && cl->report_due && cl->report_seq == 0 &&
             !cl->quiet && !cl->row;
    }
    return n;
}

static bool
build_return(sup_child *c, struct child_link *k, int32_t index, struct sup_time now,
             struct proto_lease_msg *out)
{
    struct child_lease *rep = report_ready(k, false);
    struct child_req *r;

    if (rep == NULL)
        return false;
    r = sup__child_req_new(c, PROTO_LEASE_RETURN, index, now.mono_ms);
    if (r == NULL)
        return false;
    r->msg.ret.lease_id = rep->id;
    r->msg.ret.used = rep->used;
    r->report_lease = rep->id;
    rep->report_seq = r->seq;
    c->stats.returns++;
    req_send(c, r, now, out);
    return true;
}

/* A heartbeat is worth sending only while there is degraded debt to report (the recent traffic
 * rides along). Traffic alone sends nothing: a child deciding on its leases needs no supervisor,
 * and one that heard nothing from its child for a while may hibernate. */
static bool
hb_wanted(const sup_child *c)
{
    return c->debt_total > 0;
}

/* True iff the child has something for its supervisor: a request in flight or waiting to go,
 * a link with a message to send, or debt. Only then does a new incarnation say HELLO: a child
 * that only decides on the leases it resumed never starts its supervisor. */
static bool
wants_channel(const sup_child *c)
{
    for (uint32_t i = 0; i < c->req_cap; i++) {
        if (c->req[i].seq != 0 && c->req[i].seq != c->hello_seq)
            return true;
    }
    for (uint32_t pos = 0; pos < c->msgq.len; pos++) {
        const struct child_link *k = c->links[c->msgq.item[pos]];

        if (k != NULL && sup__child_msg_work(k))
            return true;
    }
    return hb_wanted(c);
}

static bool
build_heartbeat(sup_child *c, struct sup_time now, struct proto_lease_msg *out)
{
    struct child_req *r = sup__child_req_new(c, PROTO_LEASE_HEARTBEAT, -1, now.mono_ms);
    struct proto_lease_heartbeat *h;

    if (r == NULL)
        return false;
    h = &r->msg.heartbeat;
    snprintf(h->endpoint, sizeof(h->endpoint), "%s", c->policy.name);
    /* Debt first, then recent traffic. */
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < c->link_hw && h->count < PROTO_LEASE_HB_MAX; i++) {
            struct child_link *k = c->links[i];
            struct proto_lease_hb_entry *e;
            bool listed = false;

            if (k == NULL || (pass == 0 && k->debt_new == 0) ||
                (pass == 1 && now.mono_ms - k->last_use >= 2 * c->heartbeat_ms))
                continue;
            for (uint32_t j = 0; j < h->count; j++)
                listed = listed || r->hb_link[j] == (int32_t)i;
            if (listed)
                continue;
            e = &h->e[h->count];
            snprintf(e->link, sizeof(e->link), "%s", k->id);
            e->rate_milli = k->rate_milli;
            e->debt = k->debt_new < PROTO_LEASE_N_MAX ? k->debt_new : PROTO_LEASE_N_MAX;
            k->debt_new -= e->debt;
            c->debt_total -= e->debt;
            k->debt_sent += e->debt;
            r->hb_link[h->count] = (int32_t)i;
            r->hb_debt[h->count] = e->debt;
            h->count++;
        }
    }
    c->hb_seq = r->seq;
    c->hb_next_mono = now.mono_ms + c->heartbeat_ms;
    req_send(c, r, now, out);
    return true;
}

/* True iff this registration's HELLO went out at least once: first sends may follow it. */
static bool
hello_sent(const sup_child *c)
{
    for (uint32_t i = 0; c->hello_seq != 0 && i < c->req_cap; i++) {
        if (c->req[i].seq == c->hello_seq)
            return c->req[i].first_mono >= 0;
    }
    return false;
}

/* The next message a link has: a RETURN or an ACQUIRE, built now (a first send). */
static int
link_message(sup_child *c, struct sup_time now, struct proto_lease_msg *out)
{
    for (uint32_t pos = 0; pos < c->msgq.len;) {
        uint32_t i = c->msgq.item[pos];
        struct child_link *k = c->links[i];

        if (k == NULL || !sup__child_msg_work(k)) {
            sup__child_queue_drop(c, &c->msgq, pos);
            continue;
        }
        /* Recalled leases are reported before the link asks again: a second one goes in a
         * RETURN ahead of the ACQUIRE that carries the first. */
        if (k->acq_due && recalled_ready(k) > 1 && build_return(c, k, (int32_t)i, now, out))
            return TALLY_OK;
        if ((k->acq_due && k->acq_seq == 0 && !sup__child_acquire_held(k) &&
             build_acquire(c, k, (int32_t)i, now, out)) ||
            build_return(c, k, (int32_t)i, now, out))
            return TALLY_OK;
        break; /* work, but no request entry free: nothing else can go out either */
    }
    return TALLY_ENOTFOUND;
}

int
sup_child_next_message(sup_child *c, struct sup_time now, struct proto_lease_msg *out)
{
    struct child_req *due = NULL;

    if (!c->welcomed) {
        struct child_req *h = sup__child_req_find(c, c->hello_seq);

        if (h == NULL && !wants_channel(c))
            return TALLY_ENOTFOUND;
        if (h == NULL) {
            h = sup__child_req_new(c, PROTO_LEASE_HELLO, -1, now.mono_ms);
            if (h == NULL)
                return TALLY_ENOTFOUND;
            snprintf(h->msg.hello.tenant, sizeof(h->msg.hello.tenant), "%s", c->tenant);
            c->hello_seq = h->seq;
        }
        if (h->next_mono <= now.mono_ms) {
            req_send(c, h, now, out);
            return TALLY_OK;
        }
        /* Behind a HELLO that went out, first sends only: retransmissions, and the
         * heartbeat, wait for WELCOME. */
        return h->first_mono >= 0 ? link_message(c, now, out) : TALLY_ENOTFOUND;
    }
    /* Due first sends and retransmissions, oldest first. */
    for (uint32_t i = 0; i < c->req_cap; i++) {
        struct child_req *r = &c->req[i];

        if (r->seq != 0 && r->next_mono <= now.mono_ms && (due == NULL || r->seq < due->seq))
            due = r;
    }
    if (due != NULL) {
        req_send(c, due, now, out);
        return TALLY_OK;
    }
    /* Then the links with work, dropping those that have none left. */
    if (link_message(c, now, out) == TALLY_OK)
        return TALLY_OK;
    if (c->hb_seq == 0 && now.mono_ms >= c->hb_next_mono && hb_wanted(c) &&
        build_heartbeat(c, now, out))
        return TALLY_OK;
    return TALLY_ENOTFOUND;
}

/* The reply to `r` arrived: whatever it carried (report, debt) was applied by the supervisor. */
static void
req_complete(sup_child *c, struct child_req *r, int64_t now_mono)
{
    struct child_link *k = r->link >= 0 ? c->links[r->link] : NULL;
    struct child_lease *cl = k != NULL ? sup__child_lease_by_id(k, r->report_lease) : NULL;

    if (cl != NULL && cl->report_seq == r->seq)
        cl->report_due = false;
    if (k != NULL && r->msg.type == PROTO_LEASE_ACQUIRE) {
        k->acq_seq = 0;
        k->debt_sent -= r->debt;
    }
    if (r->msg.type == PROTO_LEASE_HEARTBEAT) {
        for (uint32_t i = 0; i < r->msg.heartbeat.count; i++) {
            if (c->links[r->hb_link[i]] != NULL)
                c->links[r->hb_link[i]]->debt_sent -= r->hb_debt[i];
        }
        c->hb_seq = 0;
    }
    if (r->seq == c->hello_seq)
        c->hello_seq = 0;
    memset(r, 0, sizeof(*r));
    if (k != NULL)
        sup__child_link_roll(c, k, now_mono);
}

static bool
reply_matches(uint8_t req, uint8_t rep)
{
    switch (rep) {
    case PROTO_LEASE_WELCOME:
        return req == PROTO_LEASE_HELLO;
    case PROTO_LEASE_GRANT:
    case PROTO_LEASE_DENY:
        return req == PROTO_LEASE_ACQUIRE;
    case PROTO_LEASE_RETURN_ACK:
        return req == PROTO_LEASE_RETURN;
    case PROTO_LEASE_HB_ACK:
        return req == PROTO_LEASE_HEARTBEAT;
    case PROTO_LEASE_SLOT_GRANT:
    case PROTO_LEASE_SLOT_DENY:
        return req == PROTO_LEASE_SLOT_ACQUIRE;
    case PROTO_LEASE_SLOT_RELEASE_ACK:
        return req == PROTO_LEASE_SLOT_RELEASE;
    default:
        return rep == PROTO_LEASE_ERROR;
    }
}

static void
on_error(sup_child *c, struct child_req *r, const struct proto_lease_error *e, struct sup_time now,
         struct sup_child_event *ev)
{
    struct child_link *k = r->link >= 0 ? c->links[r->link] : NULL;
    int64_t until = now.mono_ms + (e->retry_after_ms > 0 ? e->retry_after_ms : 1000);
    uint8_t type = r->msg.type;
    uint64_t seq = r->seq;

    if (e->code == PROTO_LEASE_E_HELLO) {
        /* The supervisor does not know this incarnation: register again, then resend. */
        c->welcomed = false;
        if (type == PROTO_LEASE_HELLO)
            req_complete(c, r, now.mono_ms);
        return;
    }
    if (k != NULL && e->code == PROTO_LEASE_E_LINK)
        k->unauth_until = until;
    else if (k != NULL && e->code != PROTO_LEASE_E_STALE)
        k->unavail_until = until;
    req_complete(c, r, now.mono_ms);
    if (type == PROTO_LEASE_SLOT_ACQUIRE) {
        ev->kind = SUP_EV_SLOT_FAILED;
        ev->op = seq;
        ev->retry_after_ms = until - now.mono_ms;
    } else if (k != NULL) {
        ev->kind = SUP_EV_LINK;
    }
}

/* A grant the child does not use (the link's table has no room for it: every entry live or
 * waiting for its row's DELETE to be durable; or it names another link) goes straight back in
 * a RETURN with nothing used, which the supervisor credits in full. With no request slot free
 * either, it is left to expire as spent at its TTL: it strands its n tokens that long and never
 * admits twice (I4). */
static void
give_back(sup_child *c, int32_t index, const struct proto_lease_grant *g, int64_t now_mono)
{
    struct child_req *r = sup__child_req_new(c, PROTO_LEASE_RETURN, index, now_mono);

    if (r == NULL) {
        c->stats.grants_stranded++;
        return;
    }
    r->msg.ret.lease_id = g->lease_id;
    r->msg.ret.used = 0;
    c->stats.returns++;
}

static void
on_grant(sup_child *c, struct child_req *r, const struct proto_lease_msg *m, struct sup_time now)
{
    struct child_link *k = c->links[r->link];
    struct child_req copy = *r;

    req_complete(c, r, now.mono_ms);
    /* A lease is reserved on the path of the link it names: one for another link than the
     * request's (an answer meant for another request under the same seq) is handed back
     * unused, never spent against this link's limit. The request asks again. */
    if (strcmp(m->grant.link, k->id) != 0) {
        c->stats.grants_foreign++;
        give_back(c, copy.link, &m->grant, now.mono_ms);
        return;
    }
    if (sup__child_lease_by_id(k, m->grant.lease_id) == NULL &&
        sup__child_lease_add(c, k, &m->grant, &copy, now.mono_ms) != TALLY_OK) {
        c->stats.grants_no_room++;
        give_back(c, copy.link, &m->grant, now.mono_ms);
    }
    if (copy.msg.acquire.flags & PROTO_LEASE_ACQ_NEXT) {
        c->stats.grants++; /* ahead of its windows: says nothing about the running ones */
        return;
    }
    k->pass = (m->grant.flags & PROTO_LEASE_GRANT_PASS) != 0;
    k->deny_until = 0;
    c->stats.grants++;
}

static void
on_deny(sup_child *c, struct child_req *r, const struct proto_lease_deny *d, struct sup_time now)
{
    struct child_link *k = c->links[r->link];
    int64_t need = r->msg.acquire.need;

    bool next = (r->msg.acquire.flags & PROTO_LEASE_ACQ_NEXT) != 0;

    req_complete(c, r, now.mono_ms);
    c->stats.denies++;
    if (next)
        return; /* nothing ahead: the link asks when its windows start, as before */
    if (d->flags & PROTO_LEASE_DENY_PASS) {
        k->pass = true; /* ask again with a request, not ahead of one */
        return;
    }
    k->deny_never = (d->flags & PROTO_LEASE_DENY_NEVER) != 0;
    k->deny_until = now.mono_ms + (k->deny_never ? CHILD_NEVER_CACHE_MS : d->retry_after_ms);
    k->deny_cost = need > 0 ? need : 1;
    k->deny_scope = d->scope;
    k->deny_limit = d->limit;
}

int
sup_child_on_message(sup_child *c, struct sup_time now, const struct proto_lease_msg *m,
                     struct sup_child_event *ev)
{
    struct child_req *r;
    struct child_link *k;
    int32_t index;

    memset(ev, 0, sizeof(*ev));
    if (m == NULL || !proto_lease_is_reply(m->type))
        return TALLY_EPROTO;
    if (strcmp(m->origin.child, c->policy.name) != 0 || m->origin.incarnation > c->incarnation)
        return TALLY_OK;
    if (m->type == PROTO_LEASE_RECALL) {
        /* Pushed, not a reply: its seq is the lease id, matching no request. It names the
         * incarnation that was granted the lease: an earlier one for a lease resumed here. */
        k = sup__child_link_find(c, m->recall.link, &index);
        sup__child_lease_recall(c, k, m->recall.lease_id, now.mono_ms);
        if (k != NULL) {
            snprintf(ev->link, sizeof(ev->link), "%s", k->id);
            ev->kind = SUP_EV_LINK;
            sup__child_touch(c, index, now.mono_ms);
        }
        return TALLY_OK;
    }
    if (m->origin.incarnation != c->incarnation)
        return TALLY_OK; /* an answer to an earlier incarnation */
    r = sup__child_req_find(c, m->origin.seq);
    if (r == NULL || !reply_matches(r->msg.type, m->type))
        return TALLY_OK; /* a duplicate, or a reply to something already answered */
    c->last_reply_mono = now.mono_ms;
    index = r->link;
    k = index >= 0 ? c->links[index] : NULL;
    if (k != NULL)
        snprintf(ev->link, sizeof(ev->link), "%s", k->id);
    switch (m->type) {
    case PROTO_LEASE_WELCOME: {
        int64_t hello_first = r->first_mono;

        c->welcomed = true;
        c->children = m->welcome.children;
        c->lease_ttl_ms = m->welcome.lease_ttl_ms;
        req_complete(c, r, now.mono_ms);
        /* Whatever waited for the registration goes out now; what followed the HELLO on the
         * wire was taken after it, and keeps its retransmission timer. */
        for (uint32_t i = 0; i < c->req_cap; i++) {
            if (c->req[i].seq != 0 && c->req[i].first_mono < hello_first)
                c->req[i].next_mono = now.mono_ms;
        }
        c->hb_next_mono = now.mono_ms;
        break;
    }
    case PROTO_LEASE_ERROR:
        on_error(c, r, &m->error, now, ev);
        break;
    case PROTO_LEASE_GRANT:
        on_grant(c, r, m, now);
        ev->kind = SUP_EV_LINK;
        break;
    case PROTO_LEASE_DENY:
        on_deny(c, r, &m->deny, now);
        ev->kind = SUP_EV_LINK;
        break;
    case PROTO_LEASE_SLOT_GRANT: {
        bool cancelled = r->cancelled;
        uint64_t op = r->seq;

        req_complete(c, r, now.mono_ms);
        if (cancelled) {
            /* Nobody waits for it any more: give it straight back. */
            if (m->slot_grant.slot_id > 0) {
                int rc = sup_child_slot_release(c, m->slot_grant.link, m->slot_grant.slot_id, now);

                (void)rc; /* no room: the slot frees itself at its TTL */
            }
            break;
        }
        ev->kind = SUP_EV_SLOT_GRANTED;
        ev->op = op;
        ev->slot_id = m->slot_grant.slot_id;
        break;
    }
    case PROTO_LEASE_SLOT_DENY:
        ev->kind = r->cancelled ? SUP_EV_NONE : SUP_EV_SLOT_DENIED;
        ev->op = r->seq;
        ev->retry_after_ms = m->slot_deny.retry_after_ms;
        req_complete(c, r, now.mono_ms);
        break;
    default: /* RETURN_ACK, HB_ACK, SLOT_RELEASE_ACK */
        req_complete(c, r, now.mono_ms);
        break;
    }
    sup__child_touch(c, index, now.mono_ms);
    return TALLY_OK;
}

/* ---- timers ---- */

/* True iff a message or a write can be pulled right now. */
static bool
work_due(const sup_child *c)
{
    /* Messages only when one can go out (a full window would make this a busy loop). */
    bool send = (c->welcomed || hello_sent(c)) && sup__child_req_room(c);

    for (uint32_t pos = 0; send && pos < c->msgq.len; pos++) {
        const struct child_link *k = c->links[c->msgq.item[pos]];

        if (k != NULL && sup__child_msg_work(k))
            return true;
    }
    for (uint32_t pos = 0; pos < c->pq.len; pos++) {
        const struct child_link *k = c->links[c->pq.item[pos]];

        if (k != NULL && sup__child_persist_work(k))
            return true;
    }
    return false;
}

int64_t
sup_child_next_wake_ms(const sup_child *c)
{
    int64_t next = sup__child_timer_next(c);

    if (work_due(c))
        return 0; /* something to send or write now: a caller that only follows this timer
                     still never leaves an ACQUIRE or a mark behind */

    for (uint32_t i = 0; i < c->req_cap; i++) {
        if (c->req[i].seq != 0 && c->req[i].next_mono < next &&
            (c->welcomed || c->req[i].seq == c->hello_seq))
            next = c->req[i].next_mono;
    }
    if (!c->welcomed && c->hello_seq == 0 && wants_channel(c))
        next = 0; /* a HELLO is due now */
    if (c->welcomed && c->hb_seq == 0 && hb_wanted(c) && c->hb_next_mono < next)
        next = c->hb_next_mono;
    return next;
}

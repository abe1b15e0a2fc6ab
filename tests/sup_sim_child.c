/*
 * The simulated children (sup_sim.h): an application in front of each child counter. Requests
 * arrive in busy and quiet phases per link; a request that must wait is parked and re-run when
 * an event names its link or when its wait is over; an expensive endpoint's admitted request
 * then asks for a slot, holds it for a while (or forgets it, leaving it to the TTL) and gives
 * its tokens back when no slot comes. The child's file is a list of rows written 0-2 ms after
 * they are handed out (up to write_max_ms); a crash loses the child's memory and the writes in
 * progress.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sup_sim_int.h"

void
sim_child_open(struct sim_world *w, int i)
{
    struct sim_child *ch = &w->ch[i];
    struct sup_child_config cfg;
    struct sup_time now = sim_child_time(w, i);

    memset(&cfg, 0, sizeof(cfg));
    strcpy(cfg.tenant, "acme");
    cfg.policy = ch->ep;
    cfg.incarnation = ++ch->inc;
    cfg.persist_marks = w->p.strict;
    cfg.epsilon_long_ppm = w->eps_long_ppm;
    if (!w->p.realistic) {
        /* Everything ten to twenty times faster than the defaults, so a few simulated seconds
         * cross many windows. */
        cfg.wait_ms = 20;
        cfg.idle_ms = 150;
        cfg.heartbeat_ms = 100;
        cfg.retransmit_ms = 4;
        cfg.unreachable_ms = 150;
        cfg.renew_ms = 150;
        cfg.lead_ms = 10;
        cfg.mark_chunk_min = 2;
    }
    assert_true(ch->inc < SIM_INC_MAX);
    assert_int_equal(sup_child_open(&cfg, &ch->c), TALLY_OK);
    for (int r = 0; r < ch->nrows; r++)
        assert_int_equal(sup_child_resume(ch->c, &ch->rows[r], now), TALLY_OK);
    ch->down_until = -1;
}

static void
park(struct sim_world *w, int i, int link, int64_t cost, int64_t give_up)
{
    struct sim_child *ch = &w->ch[i];

    if (ch->npark == SIM_PARK_MAX)
        return; /* the app times out: not admitted, nothing counted */
    ch->park[ch->npark++] = (struct sim_park){link, cost, give_up};
}

static void
refund(struct sim_world *w, int i, int link, uint64_t lease, int64_t cost)
{
    if (sup_child_refund(w->ch[i].c, w->links[link], lease, cost) == TALLY_OK)
        sim_on_refund(w, i, link, lease, cost);
}

static void
start_op(struct sim_world *w, int i, int link, int64_t cost, uint64_t lease)
{
    struct sim_child *ch = &w->ch[i];
    struct sup_time now = sim_child_time(w, i);

    for (int k = 0; k < SIM_OPS_MAX; k++) {
        struct sim_op *op = &ch->ops[k];

        if (op->state != 0)
            continue;
        if (sup_child_slot_acquire(ch->c, w->links[link], now, &op->op) != TALLY_OK)
            break;
        op->link = link;
        op->lease = lease;
        op->cost = cost;
        op->slot = 0;
        op->until = w->t + (w->p.realistic ? 50 : 20); /* give up waiting at this time */
        op->state = 1;
        return;
    }
    /* No room for the operation: give the tokens back. */
    refund(w, i, link, lease, cost);
}

/* One request of child i on `link`; returns false when it should stay parked. */
static bool
request(struct sim_world *w, int i, int link, int64_t cost, int64_t give_up, bool parked)
{
    struct sim_child *ch = &w->ch[i];
    struct sup_time now = sim_child_time(w, i);
    unsigned flags = parked && now.mono_ms >= give_up ? SUP_ADMIT_GIVE_UP : 0;
    struct sup_admit a;

    assert_int_equal(sup_child_admit(ch->c, w->links[link], cost, now, flags, &a), TALLY_OK);
    switch (a.verdict) {
    case SUP_ADMIT_OK:
        sim_on_admit(w, i, link, cost, &a);
        if (ch->ep.expensive && !a.degraded)
            start_op(w, i, link, cost, a.lease_id);
        return true;
    case SUP_ADMIT_WAIT:
        if (flags & SUP_ADMIT_GIVE_UP)
            fail_msg("WAIT after give-up");
        if (!parked) {
            park(w, i, link, cost, a.give_up_ms);
            /* As tallyd does while a supervisor starts: another link asks ahead. */
            if (a.wait == SUP_WAIT_GRANT && w->p.links > 1 && sim_range(w, 0, 3) == 0) {
                bool asked;
                int other = (link + 1 + (int)sim_range(w, 0, w->p.links - 2)) % w->p.links;

                assert_int_equal(sup_child_warm(ch->c, w->links[other], now, &asked), TALLY_OK);
            }
        }
        w->r->waited += !parked;
        return false;
    case SUP_ADMIT_REFUSED:
        w->r->refused++;
        if (a.scope == TENANT_SCOPE_PLAN && !a.degraded)
            sim_on_plan_refusal(w, i, false);
        return true;
    default:
        w->r->unavailable++;
        return true;
    }
}

void
sim_child_event(struct sim_world *w, int i, const struct sup_child_event *ev)
{
    struct sim_child *ch = &w->ch[i];
    int link;

    switch (ev->kind) {
    case SUP_EV_LINK:
        link = sim_link_index(w, ev->link);
        if (link >= 0)
            ch->ev_link[link] = true;
        break;
    case SUP_EV_SLOT_GRANTED:
    case SUP_EV_SLOT_DENIED:
    case SUP_EV_SLOT_FAILED:
        for (int k = 0; k < SIM_OPS_MAX; k++) {
            struct sim_op *op = &ch->ops[k];

            if (op->state != 1 || op->op != ev->op)
                continue;
            if (ev->kind == SUP_EV_SLOT_GRANTED && ev->slot_id > 0) {
                op->slot = ev->slot_id;
                op->state = 2;
                op->held_from = w->t;
                op->sup_from = sim_slot_granted_at(w, op->link, op->slot);
                op->until = sim_range(w, 0, 9) == 0 ? -1 : w->t + sim_range(w, 0, 800);
                if (w->p.realistic)
                    op->until = w->t + sim_range(w, 0, 50);
                w->r->slot_grants++;
            } else {
                if (ev->kind != SUP_EV_SLOT_GRANTED)
                    w->r->slot_denies++;
                refund(w, i, op->link, op->lease, op->cost);
                op->state = 0;
            }
        }
        break;
    default:
        break;
    }
}

struct crash_scan {
    const struct sim_child *ch;
    int64_t now_mono, lost, life, n_sum;
};

/* What a crash loses of one lease: what it had left, less what a row will resume (n - mark). */
static int
scan_crash(void *ctx, const struct sup_child_lease_info *l)
{
    struct crash_scan *s = ctx;
    int64_t lost;

    if (!l->live || l->foreign || l->deadline_mono_ms <= s->now_mono)
        return 0;
    lost = l->n - l->used;
    for (int r = 0; r < s->ch->nrows; r++) {
        if (s->ch->rows[r].lease_id == l->lease_id)
            lost -= l->n - s->ch->rows[r].mark;
    }
    if (lost > 0) {
        s->lost += lost;
        if (l->deadline_mono_ms - s->now_mono > s->life)
            s->life = l->deadline_mono_ms - s->now_mono;
    }
    s->n_sum += l->n;
    return 0;
}

void
sim_child_crash(struct sim_world *w, int i)
{
    struct sim_child *ch = &w->ch[i];
    struct crash_scan cs = {ch, sim_child_time(w, i).mono_ms, 0, 0, 0};

    /* Stranded by the crash: never more than the live leases held (under-admission only). */
    (void)sup_child_each_lease(ch->c, scan_crash, &cs);
    if (cs.lost > cs.n_sum)
        sim_fail(w, "a crash of child %d loses %lld tokens, more than its leases' %lld", i,
                 (long long)cs.lost, (long long)cs.n_sum);
    w->r->crash_lost_total += cs.lost;
    if (cs.lost > w->r->crash_lost_max)
        w->r->crash_lost_max = cs.lost;
    if (cs.life > w->r->crash_lost_life_max)
        w->r->crash_lost_life_max = cs.life;
    sup_child_close(ch->c);
    ch->c = NULL;
    ch->npq = 0; /* writes in progress are lost; the file keeps what completed */
    ch->npark = 0;
    memset(ch->ops, 0, sizeof(ch->ops));
    memset(ch->ev_link, 0, sizeof(ch->ev_link));
    ch->down_until = w->t + sim_range(w, 0, 50);
    ch->crash_at = 0;
    ch->closing_until = 0;
    w->r->child_crashes++;
}

/* An idle close (tallyd's front closing a child nobody asked for): its kept leases are parked in
 * its file, the others go back; it closes once its writes are done and nothing is in flight (or
 * at a deadline, losing what is unwritten, as a crash would), and opens again later, resuming
 * the parked leases. */
void
sim_child_idle_close(struct sim_world *w, int i)
{
    struct sim_child *ch = &w->ch[i];

    for (int k = 0; k < SIM_OPS_MAX; k++) {
        if (ch->ops[k].state != 0)
            return; /* an operation holds a slot: not idle */
    }
    if (ch->npark > 0 || ch->closing_until > 0)
        return;
    w->r->leases_parked += sup_child_park(ch->c, sim_child_time(w, i));
    w->r->idle_closes++;
    ch->closing_until = w->t + 200;
}

/* Closes a closing child when its writes and messages are done (or its time is up). */
static void
close_when_drained(struct sim_world *w, int i)
{
    struct sim_child *ch = &w->ch[i];
    struct sup_child_stats st;

    sup_child_stats(ch->c, sim_child_time(w, i), &st);
    if ((ch->npq > 0 || st.inflight > 0 || st.live_leases > 0) && w->t < ch->closing_until)
        return;
    sup_child_close(ch->c);
    ch->c = NULL;
    ch->npq = 0;
    ch->npark = 0;
    memset(ch->ops, 0, sizeof(ch->ops));
    memset(ch->ev_link, 0, sizeof(ch->ev_link));
    ch->down_until = w->t + sim_range(w, 0, 20);
    ch->closing_until = 0;
}

static void
file_apply(struct sim_child *ch, const struct sup_child_persist *p)
{
    int r;

    for (r = 0; r < ch->nrows && ch->rows[r].lease_id != p->rec.lease_id; r++)
        ;
    if (p->op == SUP_PERSIST_DELETE) {
        if (r < ch->nrows)
            ch->rows[r] = ch->rows[--ch->nrows];
        return;
    }
    if (r == ch->nrows) {
        assert_true(ch->nrows < SIM_ROWS_MAX);
        ch->nrows++;
    }
    ch->rows[r] = p->rec;
}

void
sim_child_step(struct sim_world *w, int i)
{
    struct sim_child *ch = &w->ch[i];
    struct sup_time now = sim_child_time(w, i);
    struct sup_child_persist p;
    struct proto_lease_msg m;
    int kept = 0;

    /* Writes complete in order, 0..write_max_ms after they were handed out. */
    while (ch->npq > 0 && ch->pq[0].at <= w->t) {
        struct sup_child_event ev;

        file_apply(ch, &ch->pq[0].p);
        sup_child_persisted(ch->c, &ch->pq[0].p, &ev);
        sim_child_event(w, i, &ev);
        memmove(ch->pq, ch->pq + 1, (size_t)(--ch->npq) * sizeof(ch->pq[0]));
    }
    if (sup_child_next_wake_ms(ch->c) <= now.mono_ms)
        sup_child_tick(ch->c, now);
    /* Operations: give up waiting, release when done. */
    for (int k = 0; k < SIM_OPS_MAX; k++) {
        struct sim_op *op = &ch->ops[k];

        if (op->state == 1 && w->t >= op->until) {
            sup_child_slot_cancel(ch->c, op->op);
            refund(w, i, op->link, op->lease, op->cost);
            op->state = 0;
        } else if (op->state == 2 && op->until >= 0 && w->t >= op->until) {
            if (sup_child_slot_release(ch->c, w->links[op->link], op->slot, now) == TALLY_OK)
                op->state = 0;
        } else if (op->state == 2 && op->until < 0 && w->t - op->held_from > 2 * sim_slot_ttl(w)) {
            op->state = 0; /* forgotten; the supervisor reclaimed it long ago */
        }
    }
    /* Parked requests: re-run on an event for their link, or when their wait is over. */
    for (int k = 0; k < ch->npark; k++) {
        struct sim_park *pk = &ch->park[k];

        if ((ch->ev_link[pk->link] || now.mono_ms >= pk->give_up) &&
            request(w, i, pk->link, pk->cost, pk->give_up, true))
            continue;
        ch->park[kept++] = *pk;
    }
    ch->npark = kept;
    memset(ch->ev_link, 0, sizeof(ch->ev_link));
    /* New requests. */
    for (int l = 0; l < w->p.links && !w->draining; l++) {
        if (!w->p.steady && w->t >= ch->phase_until[l]) {
            ch->busy[l] = sim_range(w, 0, 2) > 0;
            ch->phase_until[l] = w->t + sim_range(w, 50, 700);
        }
        if (w->p.quiet_p100k > 0 ? sim_range(w, 0, 99999) < w->p.quiet_p100k
                                 : (w->p.steady || ch->busy[l]) && sim_range(w, 0, 9999) < w->p10k)
            (void)request(w, i, l, w->p.steady ? 1 : sim_range(w, 1, 3), 0, false);
    }
    while (sup_child_next_message(ch->c, now, &m) == TALLY_OK) {
        uint8_t b[SIM_FRAME_MAX];
        size_t len;

        sim_on_sent(w, i, &m);
        /* The dangerous moment for a strict child: a lease reported, its row maybe not yet
         * deleted. Die there now and then. */
        if (!w->draining && ch->crash_at == 0 &&
            (m.type == PROTO_LEASE_RETURN ||
             (m.type == PROTO_LEASE_ACQUIRE && m.acquire.report_lease != 0)) &&
            (int)sim_range(w, 0, 99) < w->p.crash_after_report_pct)
            ch->crash_at = w->t + sim_range(w, 1, 8);
        if (m.type == PROTO_LEASE_ACQUIRE) {
            w->r->acquires++;
            w->r->late_acquires += w->t >= w->p.duration_ms / 2 && !w->draining;
        }
        sim_encode(&m, b, &len);
        sim_net_push(w, true, i, b, len);
    }
    while (ch->npq < SIM_PQ_MAX && sup_child_next_persist(ch->c, &p) == TALLY_OK) {
        ch->pq[ch->npq].p = p;
        ch->pq[ch->npq].at = w->t + (w->p.faults ? sim_range(w, 0, w->p.write_max_ms) : 0);
        ch->npq++;
    }
    if (ch->closing_until > 0)
        close_when_drained(w, i);
}

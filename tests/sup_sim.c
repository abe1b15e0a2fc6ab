/*
 * The simulated world of sup_sim.h. Each 1 ms step: maybe inject a fault (clock step back,
 * partition, crash), deliver the frames due (the supervisor handles its batch, appends records,
 * then persists them before any reply of the batch leaves: the output gate), run the supervisor's
 * expiry timer, then every child (sup_sim_child.c). Every frame goes through the real codec.
 * Clocks: true time t; the host's wall clock t + wall_off, which steps back now and then; each
 * child's monotonic clock runs at 1 + drift (|drift| <= 1%, the children assume 2%; or, in half
 * the worlds with faults, |drift| <= 0.09% with the default 0.1% past a lease's first T_lease) and
 * keeps running across a crash of the child process. A world given a log (sup_sim_int.h, struct
 * sim_log) hands each turn to it instead of persisting it, and the log starts the supervisor.
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
#include "test_support.h"

uint64_t
sim_rand(struct sim_world *w)
{
    return test_rand(&w->rng);
}

int64_t
sim_range(struct sim_world *w, int64_t lo, int64_t hi)
{
    return test_rand_range(&w->rng, lo, hi);
}

static bool
chance(struct sim_world *w, int per_100k)
{
    return (int64_t)(sim_rand(w) % 100000) < per_100k;
}

int64_t
sim_wall(const struct sim_world *w)
{
    return w->t + w->wall_off;
}

struct sup_time
sim_child_time(const struct sim_world *w, int i)
{
    struct sup_time now;

    now.mono_ms = w->ch[i].mono0 + w->t + w->t * w->ch[i].drift_ppm / 1000000;
    now.wall_ms = sim_wall(w);
    return now;
}

int64_t
sim_slot_ttl(const struct sim_world *w)
{
    return w->lcfg.slot_ttl_ms > 0 ? w->lcfg.slot_ttl_ms : TENANT_SLOT_TTL_MS_DEFAULT;
}

int
sim_link_index(const struct sim_world *w, const char *link)
{
    for (int i = 0; i < w->p.links; i++) {
        if (strcmp(w->links[i], link) == 0)
            return i;
    }
    return -1;
}

int
sim_ep_index(const struct sim_world *w, const char *name)
{
    for (int i = 0; i < w->p.children; i++) {
        if (strcmp(w->eps[i].name, name) == 0)
            return i;
    }
    return -1;
}

/* The big buffers of a world outlive a schedule (no allocator churn between runs). */
static void *
reuse(void *p, size_t n, size_t size, bool zero)
{
    if (p == NULL)
        p = calloc(n, size);
    else if (zero)
        memset(p, 0, n * size);
    assert_non_null(p);
    return p;
}

static void
setup(struct sim_world *w, const struct sim_params *p, const struct sim_log *log,
      struct sim_result *r)
{
    struct sim_world keep = *w;

    memset(w, 0, sizeof(*w));
    memset(r, 0, sizeof(*r));
    w->p = *p;
    w->r = r;
    w->log = log;
    w->rng = p->seed;
    sim_configure(w);
    w->net = reuse(keep.net, SIM_NET_MAX, sizeof(*w->net), false);
    w->counts = reuse(keep.counts, SIM_MAP_CAP, sizeof(*w->counts), true);
    w->windows = reuse(keep.windows, SIM_MAP_CAP, sizeof(*w->windows), true);
    w->replied = reuse(keep.replied, SIM_MAP_CAP, sizeof(*w->replied), true);
    w->cells = reuse(keep.cells, SIM_MAP_CAP, sizeof(*w->cells), true);
    w->capj = keep.capj > 0 ? keep.capj : 4096;
    w->journal = reuse(keep.journal, w->capj, sizeof(*w->journal), false);
    w->cap_leases = keep.cap_leases > 0 ? keep.cap_leases : 4096;
    w->leases = reuse(keep.leases, w->cap_leases, sizeof(*w->leases), true);
    if (log == NULL)
        sim_sup_start(w); /* with a log, once it has a leader (its step) */
    /* The children's bound past a lease's first T_lease: the default (0.1 %, with drifts within
     * it) or 2 % like the first T_lease (with drifts up to 1 %, the old world). */
    w->eps_long_ppm =
        p->faults && sim_range(w, 0, 1) == 0 ? 20000 : SUP_CHILD_EPSILON_LONG_PPM_DEFAULT;
    for (int i = 0; i < p->children; i++) {
        int64_t d = w->eps_long_ppm < 20000 ? w->eps_long_ppm * 9 / 10 : 10000;

        w->ch[i].ep = w->eps[i];
        w->ch[i].mono0 = sim_range(w, 1000, 1000000);
        w->ch[i].drift_ppm = p->faults ? sim_range(w, -d, d) : -p->drift_ppm;
        sim_child_open(w, i);
    }
}

static void
teardown(struct sim_world *w)
{
    for (int i = 0; i < w->p.children; i++) {
        sup_child_close(w->ch[i].c);
        w->ch[i].c = NULL;
    }
    sup_ledger_close(w->sup);
    w->sup = NULL;
}

/* ---- network ---- */

static bool
cut_off(const struct sim_world *w)
{
    return w->t < w->partition_until;
}

void
sim_net_push(struct sim_world *w, bool to_sup, int child, const uint8_t *b, size_t len)
{
    int copies = 1;

    if (w->p.faults && !w->draining) {
        if (cut_off(w) || (int)sim_range(w, 0, 99) < w->p.loss_pct)
            return;
        if ((int)sim_range(w, 0, 99) < w->p.dup_pct)
            copies = 2;
    }
    for (int k = 0; k < copies; k++) {
        struct sim_msg *m;

        if (w->nnet == SIM_NET_MAX)
            return; /* a full network drops, like any other loss */
        m = &w->net[w->nnet++];
        m->at = w->t + (w->p.faults ? sim_range(w, 0, w->p.delay_max_ms) : 1);
        m->order = w->order++;
        m->child = child;
        m->to_sup = to_sup;
        m->len = (uint16_t)len;
        memcpy(m->b, b, len);
    }
}

void
sim_encode(const struct proto_lease_msg *m, uint8_t *b, size_t *len)
{
    int rc = proto_lease_encode(m, 0, b, SIM_FRAME_MAX, len);

    if (rc != TALLY_OK)
        fail_msg("encode %s: %s", proto_lease_type_name(m->type), tally_strerror(rc));
}

void
sim_decode(const uint8_t *b, size_t len, struct proto_lease_msg *m)
{
    struct proto_frame f;

    assert_true(len >= PROTO_FRAME_HEADER);
    f.version = b[4];
    f.type = b[5];
    f.flags = (uint16_t)(b[6] << 8 | b[7]);
    f.request_id = 0;
    f.payload = b + PROTO_FRAME_HEADER;
    f.payload_len = len - PROTO_FRAME_HEADER;
    assert_int_equal(proto_lease_decode(&f, m), TALLY_OK);
}

/* ---- supervisor ---- */

static void
persist_batch(struct sim_world *w)
{
    for (size_t i = 0; i < w->nb; i++) {
        if (w->nj == w->capj) {
            w->capj *= 2;
            w->journal = realloc(w->journal, w->capj * sizeof(*w->journal));
            assert_non_null(w->journal);
        }
        if (w->p.verbose) {
            const struct sup_record *b = &w->batch[i];

            fprintf(stderr,
                    "t=%lld rec %u flags %x now %lld %s/%llu/%llu %s %s lease %llu n %lld ttl "
                    "%lld rep %llu used %lld cred %lld debt %lld\n",
                    (long long)w->t, b->kind, b->flags, (long long)b->now_ms, b->origin.child,
                    (unsigned long long)b->origin.incarnation, (unsigned long long)b->origin.seq,
                    b->endpoint, b->link, (unsigned long long)b->lease_id, (long long)b->n,
                    (long long)b->ttl_ms, (unsigned long long)b->report_lease,
                    (long long)b->report_used, (long long)b->credited, (long long)b->debt);
        }
        w->journal[w->nj++] = w->batch[i];
        sim_on_persisted(w, &w->batch[i], w->batch_t[i]);
    }
    w->nb = 0;
    sim_batch_done(w, true);
}

void
sim_sup_start(struct sim_world *w)
{
    struct sup_records out = {w->batch, 0, SIM_BATCH_MAX};

    sim_replay(w, &w->sup);
    assert_int_equal(sup_ledger_start(w->sup, sim_wall(w), &out), TALLY_OK);
    w->nb = out.count;
    for (size_t i = 0; i < w->nb; i++)
        w->batch_t[i] = w->t;
    /* As tallyd's supervisor does: the EPOCH record goes with the first turn's batch,
     * durable before any reply, and lost with it by a crash before that commit. */
}

static void
sup_handle(struct sim_world *w, int child, const uint8_t *b, size_t len)
{
    struct proto_lease_msg in, reply;
    struct sup_records out = {w->batch, w->nb, SIM_BATCH_MAX};
    uint64_t digest;
    int rc;

    sim_decode(b, len, &in);
    digest = sim_before_handle(w, &in);
    rc = sup_ledger_handle(w->sup, sim_wall(w), &in, &reply, &out);
    if (rc != TALLY_OK)
        fail_msg("handle %s: %s", proto_lease_type_name(in.type), tally_strerror(rc));
    for (size_t i = w->nb; i < out.count; i++)
        w->batch_t[i] = w->t;
    sim_after_handle(w, &in, &reply, &w->batch[w->nb], out.count - w->nb, digest);
    w->nb = out.count;
    assert_true(w->nrep < SIM_BATCH_MAX);
    w->replies[w->nrep].child = child;
    {
        size_t rlen;

        sim_encode(&reply, w->replies[w->nrep].b, &rlen);
        w->replies[w->nrep].len = (uint16_t)rlen;
    }
    w->nrep++;
}

/* Journal compaction, as the process layer may do at any quiet moment: the journal becomes a
 * snapshot of the ledger, which must replay to the same state. */
static void
compact(struct sim_world *w)
{
    struct sup_records out = {NULL, 0, 0};
    size_t needed = 0;
    sup_ledger *again = NULL;

    assert_int_equal(sup_ledger_snapshot(w->sup, &out, &needed), TALLY_ETOOBIG);
    while (w->capj < needed) {
        w->capj *= 2;
        w->journal = realloc(w->journal, w->capj * sizeof(*w->journal));
        assert_non_null(w->journal);
    }
    out = (struct sup_records){w->journal, 0, w->capj};
    assert_int_equal(sup_ledger_snapshot(w->sup, &out, &needed), TALLY_OK);
    assert_int_equal(out.count, needed);
    w->nj = out.count;
    sim_replay(w, &again);
    if (sup_ledger_digest(again) != sup_ledger_digest(w->sup))
        sim_fail(w, "a snapshot of %zu records replays to another state", w->nj);
    sup_ledger_close(again);
    w->checked_nj = 0;
    w->r->compactions++;
}

/* RECALLs go out after the batch's replies, over the same lossy network. */
static void
push_recalls(struct sim_world *w)
{
    struct proto_lease_msg m;

    while (sup_ledger_next_recall(w->sup, &m) == TALLY_OK) {
        int i = sim_ep_index(w, m.origin.child);
        uint8_t b[SIM_FRAME_MAX];
        size_t len;

        assert_true(i >= 0);
        sim_encode(&m, b, &len);
        sim_net_push(w, false, i, b, len);
        w->r->recalls++;
    }
}

void
sim_sup_crash(struct sim_world *w, int64_t down_until)
{
    sup_ledger_close(w->sup);
    w->sup = NULL;
    w->nb = 0;
    w->nrep = 0;
    sim_batch_done(w, false);
    w->sup_down_until = down_until;
    if (w->log != NULL)
        w->log->crashed(w);
}

static void
sup_end_of_turn(struct sim_world *w)
{
    struct sup_records out;
    size_t nj;

    if (w->sup == NULL)
        return;
    out = (struct sup_records){w->batch, w->nb, SIM_BATCH_MAX};
    if (sup_ledger_next_expiry_ms(w->sup) <= sim_wall(w)) {
        assert_int_equal(sup_ledger_expire(w->sup, sim_wall(w), &out), TALLY_OK);
        for (size_t i = w->nb; i < out.count; i++)
            w->batch_t[i] = w->t;
        w->nb = out.count;
    }
    if (w->crash_at_persist) {
        /* Killed before the commit: the batch's records and replies are gone together. */
        w->crash_at_persist = false;
        sim_sup_crash(w, w->t + sim_range(w, 0, 200));
        w->r->sup_crashes++;
        return;
    }
    if (w->log != NULL) {
        w->log->turn(w); /* the log's output gate: replies leave once it has committed */
        return;
    }
    nj = w->nj;
    persist_batch(w); /* the output gate: records durable, then the replies leave */
    if (w->p.faults && !w->draining && chance(w, w->p.compact_per_100k))
        compact(w);
    for (size_t i = 0; i < w->nrep; i++)
        sim_net_push(w, false, w->replies[i].child, w->replies[i].b, w->replies[i].len);
    w->nrep = 0;
    push_recalls(w);
    /* The writer ends cleanly after a turn that wrote (tallyd's first turn for a new tenant,
     * or a supervisor's idle exit); the next replays the journal a few ms later. The turn's
     * unsent RECALLs and volatile replies go with it. */
    if (w->nj > nj && !w->draining &&
        ((w->p.first_turn && !w->handed_over) || chance(w, w->p.handover_per_100k))) {
        w->handed_over = true;
        sup_ledger_close(w->sup);
        w->sup = NULL;
        w->sup_down_until = w->t + sim_range(w, 0, 5);
        w->r->handovers++;
    }
}

/* ---- children ---- */

/* ---- the loop ---- */

static void
deliver(struct sim_world *w)
{
    for (;;) {
        size_t best = w->nnet;
        struct sim_msg m;

        for (size_t k = 0; k < w->nnet; k++) {
            const struct sim_msg *c = &w->net[k];

            if (c->at <= w->t && (best == w->nnet || c->at < w->net[best].at ||
                                  (c->at == w->net[best].at && c->order < w->net[best].order)))
                best = k;
        }
        if (best == w->nnet)
            return;
        m = w->net[best];
        w->net[best] = w->net[--w->nnet];
        if (m.to_sup) {
            if (w->sup != NULL)
                sup_handle(w, m.child, m.b, m.len);
        } else if (w->ch[m.child].c != NULL) {
            struct proto_lease_msg in;
            struct sup_child_event ev;
            int i = m.child;

            sim_decode(m.b, m.len, &in);
            assert_int_equal(sup_child_on_message(w->ch[i].c, sim_child_time(w, i), &in, &ev),
                             TALLY_OK);
            sim_child_event(w, i, &ev);
            if (in.type == PROTO_LEASE_DENY && in.deny.scope == TENANT_SCOPE_PLAN)
                sim_on_plan_refusal(w, i, false);
        }
    }
}

static void
faults(struct sim_world *w)
{
    if (!w->p.faults || w->draining)
        return;
    if (chance(w, w->p.clock_step_per_100k)) {
        w->wall_off -= sim_range(w, 1, 250); /* NTP steps the host clock back */
        w->r->clock_steps++;
    }
    if (!cut_off(w) && chance(w, w->p.partition_per_100k)) {
        w->partition_until = w->t + sim_range(w, 50, 500);
        w->r->partitions++;
        for (int i = 0; i < w->p.children; i++) {
            if (w->ch[i].c != NULL && sim_range(w, 0, 1))
                sup_child_set_connected(w->ch[i].c, false, sim_child_time(w, i));
        }
    }
    if (w->sup != NULL && chance(w, w->p.sup_crash_per_100k))
        w->crash_at_persist = true;
    if (w->t == w->lower_at && w->log != NULL && !w->log->caught_up(w))
        w->lower_at++; /* the bounds of a lowered limit are taken from a ledger that is durable */
    else if (w->t == w->lower_at)
        sim_lower_limit(w);
    for (int i = 0; i < w->p.children; i++) {
        if (w->ch[i].c != NULL && (chance(w, w->p.child_crash_per_100k) ||
                                   (w->ch[i].crash_at > 0 && w->t >= w->ch[i].crash_at)))
            sim_child_crash(w, i);
        else if (w->ch[i].c != NULL && !w->draining && chance(w, w->p.idle_close_per_100k))
            sim_child_idle_close(w, i);
    }
}

static void
step(struct sim_world *w)
{
    int64_t wall = sim_wall(w);

    if (wall > w->wall_hw)
        w->wall_hw = wall;
    faults(w);
    if (w->t == w->partition_until) {
        for (int i = 0; i < w->p.children; i++) {
            if (w->ch[i].c != NULL)
                sup_child_set_connected(w->ch[i].c, true, sim_child_time(w, i));
        }
    }
    if (w->log != NULL)
        w->log->step(w);
    else if (w->sup == NULL && w->t >= w->sup_down_until)
        sim_sup_start(w);
    for (int i = 0; i < w->p.children; i++) {
        if (w->ch[i].c == NULL && w->t >= w->ch[i].down_until)
            sim_child_open(w, i);
    }
    deliver(w);
    sup_end_of_turn(w);
    for (int i = 0; i < w->p.children; i++) {
        if (w->ch[i].c != NULL)
            sim_child_step(w, i);
    }
    sim_check_step(w);
}

/* Long enough for every lease to end: a kept lease lives to min(keep life, its windows' end), a
 * NEXT lease that long after its start. The longest window of any budget of any path counts (a
 * NEXT lease of an endpoint whose windows outlast the plan's starts at their end). */
static int64_t
drain_ms(const struct sim_world *w)
{
    int64_t base = w->p.realistic ? 8000 : 1500, life, period = 0;
    int64_t keep = w->lcfg.keep_ttl_ms > 0 ? w->lcfg.keep_ttl_ms : SUP_KEEP_TTL_MS_DEFAULT;

    for (int ep = 0; ep < w->p.children; ep++) {
        for (int kind = 0; kind < 4; kind++) { /* plan, link, endpoint, endpoint per link */
            const struct tenant_limits *ls = sim_path_limits(w, kind, ep);

            for (uint32_t i = 0; ls != NULL && i < ls->count; i++) {
                if (ls->v[i].period_ms > period)
                    period = ls->v[i].period_ms;
            }
        }
    }
    life = keep < period ? keep : period;
    /* A NEXT lease, asked before the running windows end, starts at their end (up to a period
     * away) and lives its keep life from there. */
    life += period;
    return life + 1500 > base ? life + 1500 : base;
}

void
sim_run(const struct sim_params *p, struct sim_result *r)
{
    sim_run_log(p, NULL, r);
}

void
sim_run_log(const struct sim_params *p, const struct sim_log *log, struct sim_result *r)
{
    static struct sim_world *w; /* reused: one schedule after the other */

    if (w == NULL)
        w = calloc(1, sizeof(*w));
    assert_non_null(w);
    setup(w, p, log, r);
    for (w->t = 0; w->t < p->duration_ms; w->t++)
        step(w);
    /* Drain: no more faults or requests; reports, returns and debt flow to the supervisor. */
    w->draining = true;
    w->partition_until = 0;
    w->crash_at_persist = false;
    for (int i = 0; i < p->children; i++) {
        if (w->ch[i].c != NULL)
            sup_child_set_connected(w->ch[i].c, true, sim_child_time(w, i));
    }
    for (int64_t end = w->t + drain_ms(w); w->t < end; w->t++)
        step(w);
    /* A log drains too: what was handed to it decided, its copies caught up. */
    for (int64_t end = w->t + SIM_SETTLE_MS; log != NULL && !log->settled(w); w->t++) {
        if (w->t == end)
            sim_fail(w, "the log did not settle within %d ms of the drain", SIM_SETTLE_MS);
        step(w);
    }
    for (int i = 0; i < p->children; i++) {
        struct sup_child_stats st;

        if (w->ch[i].c != NULL) {
            sup_child_stats(w->ch[i].c, sim_child_time(w, i), &st);
            r->lease_recalls += st.lease_recalls;
            r->warms += st.warms;
        }
    }
    if (log != NULL)
        log->end(w);
    sim_check_end(w);
    teardown(w);
}

/*
 * The child's hot path (sup_child_admit) and its leases. A request is admitted from the live
 * lease of its link with the earliest deadline that still has room (used + cost <= n, now before
 * the deadline, and in strict mode used + cost <= the durable mark); no allocation, no I/O, no
 * clock. Admitting may ask for more ahead of need: an ACQUIRE at the low watermark
 * max(rate * lead, n/4) (docs/LEASE-PROTOCOL.md §3) so a steady stream never waits, and the next
 * mark when used crosses mark - chunk/2. Without a lease that fits, a cached refusal answers
 * (envoy's over-limit cache), or the request waits for the ACQUIRE in flight, or, when the
 * supervisor is out of reach (or the wait is over), it is decided by the endpoint's on_unavailable
 * policy: 503 when closed, the degraded local limit when open, counted as debt for the supervisor.
 * Lease sizes start small and grow (slow start: doubled when a lease runs out within T_renew,
 * halved when one ends more than half unused), or follow the measured rate: rate * T_renew.
 */
#include "sup_child_int.h"

#include <string.h>

#define RATE_STEP_MS 250

static bool
lease_live(const struct child_lease *cl, int64_t now_mono)
{
    return cl->state == CL_LIVE && now_mono < cl->deadline_mono && now_mono >= cl->start_mono;
}

struct child_lease *
sup__child_lease_by_id(struct child_link *k, uint64_t id)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        if (k->l[j].state != CL_FREE && k->l[j].id == id)
            return &k->l[j];
    }
    return NULL;
}

bool
sup__child_link_idle(const struct child_link *k)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        if (k->l[j].state != CL_FREE)
            return false;
    }
    return !k->acq_due && k->acq_seq == 0 && k->debt_new == 0 && k->debt_sent == 0;
}

static int64_t
chunk_of(const sup_child *c, int64_t n)
{
    int64_t chunk = n < c->mark_chunk_min ? n : c->mark_chunk_min;

    return n / 4 > chunk ? n / 4 : chunk;
}

/* Raises the wanted mark of `cl` to cover `upto`, a chunk at a time. */
static void
mark_ahead(const sup_child *c, struct child_lease *cl, int64_t upto)
{
    int64_t chunk = chunk_of(c, cl->n);

    while (cl->mark_want < upto)
        cl->mark_want += chunk;
    if (cl->mark_want > cl->n)
        cl->mark_want = cl->n;
}

/* How far ahead of use a mark is asked for: half a chunk, or what the link uses in
 * mark_lead_ms if that is more, so a write held that long by a disk stall holds no request
 * of a steady stream. */
static int64_t
mark_lead(const sup_child *c, const struct child_link *k, int64_t chunk)
{
    int64_t by_rate = (k->rate_milli * c->mark_lead_ms + 999999) / 1000000;

    return by_rate > chunk / 2 ? by_rate : chunk / 2;
}

/* How far a lease with marks may admit. Once a row of it is durable, to its durable mark: a
 * crash resumes it from that row. Before, a crash leaves no row, and the lease expires as spent
 * (it strands, never admits twice): so it admits up to the mark its first row carries (the
 * wanted mark until that row is handed out) without waiting for the fsync. A new lease's first
 * requests then pay no disk write. */
static int64_t
admit_upto(const struct child_lease *cl)
{
    if (cl->row_durable)
        return cl->mark_durable;
    return child_first_mark(cl);
}

/* Ends the use of a live lease: its row is deleted, then it is reported. A resumed lease is
 * reported too: its use counts from its durable mark, at least what every incarnation admitted
 * on it, so the supervisor credits no token that was used. */
static void
retire(sup_child *c, struct child_lease *cl)
{
    (void)c;
    cl->state = CL_RETIRED;
    cl->report_due = true;
    cl->quiet = cl->used >= cl->n;
    cl->report_seq = 0;
    cl->delete_due = cl->row;
}

void
sup__child_retire(sup_child *c, struct child_link *k, struct child_lease *cl)
{
    if (cl->state != CL_LIVE)
        return;
    /* Slow start: a lease that ends mostly unused was too big. */
    if (!cl->foreign && !cl->pass && cl->used * 2 < cl->n) {
        k->l_slow /= 2;
        if (k->l_slow < c->l_min)
            k->l_slow = c->l_min;
    }
    retire(c, cl);
}

void
sup__child_link_roll(sup_child *c, struct child_link *k, int64_t now_mono)
{
    for (int j = 0; j < CHILD_LEASES; j++) {
        struct child_lease *cl = &k->l[j];

        if (cl->state == CL_LIVE && now_mono >= cl->deadline_mono) {
            sup__child_retire(c, k, cl);
            /* Every window of its path ends with it: nothing left to credit, no RETURN. */
            cl->report_due = cl->report_due && !cl->last;
        }
        /* Past its deadline a used-up lease is about to expire on its own. */
        if (cl->state == CL_RETIRED && cl->quiet && cl->report_seq == 0 &&
            now_mono >= cl->deadline_mono)
            cl->report_due = false;
        /* Done: nothing to report, the row gone (or never written). */
        if (cl->state == CL_RETIRED && !cl->report_due && !cl->row) {
            sup__child_use_unbind(c, cl);
            memset(cl, 0, sizeof(*cl));
        }
    }
}

void
sup__child_rate_update(struct child_link *k, int64_t now_mono)
{
    int64_t dt = now_mono - k->rate_since;

    if (dt < RATE_STEP_MS)
        return;
    /* Quiet steps decay the estimate (x3/4 each); the last step blends in what was admitted. */
    for (int64_t steps = dt / RATE_STEP_MS; steps > 1 && steps < 64 && k->rate_milli > 0; steps--)
        k->rate_milli = k->rate_milli * 3 / 4;
    if (dt / RATE_STEP_MS >= 64)
        k->rate_milli = 0;
    {
        int64_t inst = k->acc * 1000000 / dt; /* milli-tokens per second */

        k->rate_milli = k->rate_milli == 0 ? inst : (3 * k->rate_milli + inst) / 4;
    }
    if (k->rate_milli > PROTO_LEASE_RATE_MAX)
        k->rate_milli = PROTO_LEASE_RATE_MAX;
    k->acc = 0;
    k->rate_since = now_mono;
}

int64_t
sup__child_want(const sup_child *c, const struct child_link *k, int64_t need)
{
    /* ceil(rate * T_renew): rate_milli is 1/1000 token per second, T_renew in ms. */
    int64_t by_rate = (k->rate_milli * c->renew_ms + 999999) / 1000000;
    int64_t want = k->l_slow > by_rate ? k->l_slow : by_rate;

    if (want < c->l_min)
        want = c->l_min;
    if (want > c->l_max)
        want = c->l_max;
    return want > need ? want : need;
}

void
sup__child_want_acquire(struct child_link *k, int64_t need)
{
    if (k->acq_seq != 0)
        return;
    if (!k->acq_due || need > k->acq_need)
        k->acq_need = need;
    k->acq_due = true;
    k->acq_next = false; /* a request's or a renewal's ACQUIRE is for now */
}

/* How many leases of `k` are live at `now_mono`; *left (when not NULL) gets their tokens left. */
static int
live_count(const struct child_link *k, int64_t now_mono, int64_t *left)
{
    int live = 0;
    int64_t sum = 0;

    for (int j = 0; j < CHILD_LEASES; j++) {
        if (lease_live(&k->l[j], now_mono)) {
            live++;
            sum += k->l[j].n - k->l[j].used;
        }
    }
    if (left != NULL)
        *left = sum;
    return live;
}

/* True iff `k` has a live lease and every live lease is past 0.6 of its TTL and does not end at
 * a window boundary (a renewal cannot go past that end: the next window starts afresh). */
static bool
all_old(const struct child_link *k, int64_t now_mono)
{
    bool any = false;

    for (int j = 0; j < CHILD_LEASES; j++) {
        const struct child_lease *cl = &k->l[j];

        if (!lease_live(cl, now_mono))
            continue;
        if (cl->edge || now_mono - cl->sent_mono < cl->ttl_ms * 6 / 10)
            return false;
        any = true;
    }
    return any;
}

/* After a charge: the next mark, the watermark prefetch, and a used-up lease. */
static void
after_charge(sup_child *c, struct child_link *k, struct child_lease *cl, int64_t now_mono)
{
    int64_t chunk = chunk_of(c, cl->n), n = cl->n;

    if ((c->persist_marks || cl->foreign) && cl->mark_want < n) {
        int64_t lead = mark_lead(c, k, chunk);

        if (cl->used >= cl->mark_want - lead)
            mark_ahead(c, cl, cl->used + lead + 1);
    }
    if (cl->used == n) {
        /* Slow start: a lease used up within T_renew was too small. */
        if (!cl->foreign && now_mono - cl->got_mono < c->renew_ms) {
            k->l_slow *= 2;
            if (k->l_slow > c->l_max)
                k->l_slow = c->l_max;
        }
        sup__child_retire(c, k, cl);
    }
    /* Prefetch only for a stream: a link that expects another request within
     * T_renew (or whose leases already grew by slow start). A lone request on a
     * quiet link would otherwise leave a second lease idle until its RETURN,
     * doubling the messages of links that are hit now and then. */
    if (!k->pass && k->acq_seq == 0 && !k->acq_due &&
        (n > c->l_min || k->rate_milli * c->renew_ms >= 1000000)) {
        int64_t by_rate = (k->rate_milli * c->lead_ms + 999999) / 1000000;
        int64_t mark = (n + 3) / 4 > by_rate ? (n + 3) / 4 : by_rate, left;

        /* No prefetch while two are live (I4); renew at the watermark, or when every live
         * lease is past 0.6 of its (full) TTL: a quiet link's kept lease is renewed by the
         * first request after that, not by a request finding it expired. */
        if (live_count(k, now_mono, &left) < CHILD_LIVE_MAX &&
            (left <= mark || all_old(k, now_mono))) {
            sup__child_want_acquire(k, 0);
            c->stats.prefetches++;
        }
    }
}

/* The live lease with the earliest deadline that fits `cost`; *blocked when one fits but for its
 * mark. *left gets the tokens left on the link's live leases, counted in the same pass. */
static struct child_lease *
lease_pick(const sup_child *c, struct child_link *k, int64_t cost, int64_t now_mono,
           struct child_lease **blocked, int64_t *left)
{
    struct child_lease *best = NULL;

    *blocked = NULL;
    *left = 0;
    for (int j = 0; j < CHILD_LEASES; j++) {
        struct child_lease *cl = &k->l[j];

        if (!lease_live(cl, now_mono))
            continue;
        *left += cl->n - cl->used;
        if (cl->used > cl->n - cost)
            continue;
        /* A resumed lease follows its marks in either mode: its row would otherwise resume
         * it again, after a second crash, from a mark it has passed. */
        if ((c->persist_marks || cl->foreign) && cl->used + cost > admit_upto(cl)) {
            if (*blocked == NULL || cl->deadline_mono < (*blocked)->deadline_mono)
                *blocked = cl;
            continue;
        }
        if (best == NULL || cl->deadline_mono < best->deadline_mono)
            best = cl;
    }
    return best;
}

/* The supervisor cannot help this request: on_unavailable decides (docs/DESIGN.md §8). */
static void
admit_unavailable(sup_child *c, struct child_link *k, int64_t cost, struct sup_time now,
                  struct sup_admit *out)
{
    struct tenant_verdict v;

    if (c->policy.on_unavailable == TENANT_UNAVAIL_CLOSED) {
        out->verdict = SUP_ADMIT_UNAVAILABLE;
        out->retry_after_ms = 1000;
        c->stats.unavailable++;
        return;
    }
    out->degraded = true;
    if (tenant_window_decide(&c->policy.degraded_limits, &c->degraded, now.wall_ms, cost, &v) !=
        TALLY_OK) {
        out->verdict = SUP_ADMIT_UNAVAILABLE;
        out->retry_after_ms = 1000;
        c->stats.unavailable++;
        return;
    }
    if (!v.admitted) {
        out->verdict = SUP_ADMIT_REFUSED;
        out->scope = TENANT_SCOPE_ENDPOINT_TENANT;
        out->retry_after_ms = v.retry_after_ms;
        out->limit = v.count > 0 ? v.v[v.bound].limit : 0;
        c->stats.refused++;
        return;
    }
    out->verdict = SUP_ADMIT_OK;
    out->left = v.count > 0 ? v.v[0].remaining : 0;
    k->debt_new += cost;
    c->debt_total += cost;
    k->last_use = c->last_use = now.mono_ms;
    c->stats.degraded++;
}

static void
decide(sup_child *c, struct child_link *k, int64_t cost, struct sup_time now, unsigned flags,
       struct sup_admit *out)
{
    struct child_lease *cl, *blocked;
    int64_t left;

    memset(out, 0, sizeof(*out));
    sup__child_link_roll(c, k, now.mono_ms);
    sup__child_rate_update(k, now.mono_ms);
    if (k->unauth_until > now.mono_ms) {
        out->verdict = SUP_ADMIT_UNAUTHORIZED;
        return;
    }
    cl = lease_pick(c, k, cost, now.mono_ms, &blocked, &left);
    if (cl != NULL) {
        cl->used += cost;
        sup__child_use_note(cl); /* before the answer leaves */
        k->acc += cost;
        k->last_use = c->last_use = now.mono_ms;
        out->verdict = SUP_ADMIT_OK;
        out->lease_id = cl->id;
        out->left = left - cost;
        c->stats.admits++;
        after_charge(c, k, cl, now.mono_ms);
        return;
    }
    if (blocked != NULL && !(flags & SUP_ADMIT_GIVE_UP)) {
        /* The lease has room but the mark is not durable yet: ask for it and wait. */
        mark_ahead(c, blocked, blocked->used + cost);
        out->verdict = SUP_ADMIT_WAIT;
        out->wait = SUP_WAIT_MARK;
        out->give_up_ms = now.mono_ms + c->wait_ms;
        c->stats.waits++;
        return;
    }
    if (k->deny_until > now.mono_ms && cost >= k->deny_cost) {
        out->verdict = SUP_ADMIT_REFUSED;
        out->scope = (enum tenant_scope)k->deny_scope;
        out->retry_after_ms = k->deny_never ? TENANT_RETRY_NEVER : k->deny_until - now.mono_ms;
        out->limit = k->deny_limit;
        c->stats.refused++;
        return;
    }
    /* A lease that only waits for its mark needs a write, not another lease. */
    if (blocked == NULL)
        sup__child_want_acquire(k, cost);
    if ((flags & SUP_ADMIT_GIVE_UP) || k->unavail_until > now.mono_ms ||
        !sup__child_reachable(c, now.mono_ms)) {
        admit_unavailable(c, k, cost, now, out);
        return;
    }
    out->verdict = SUP_ADMIT_WAIT;
    out->wait = SUP_WAIT_GRANT;
    out->give_up_ms = now.mono_ms + c->wait_ms;
    c->stats.waits++;
}

int
sup_child_admit(sup_child *c, const char *link, int64_t cost, struct sup_time now, unsigned flags,
                struct sup_admit *out)
{
    struct child_link *k;
    int32_t index;
    int rc;

    if (cost < 1 || cost > TENANT_COST_MAX)
        return TALLY_ECOST;
    k = sup__child_link_get(c, link, now.mono_ms, &rc, &index);
    if (k == NULL)
        return rc;
    decide(c, k, cost, now, flags, out);
    sup__child_touch(c, index, now.mono_ms);
    return TALLY_OK;
}

int
sup_child_warm(sup_child *c, const char *link, struct sup_time now, bool *asked)
{
    struct child_link *k;
    int32_t index;
    int rc;

    *asked = false;
    k = sup__child_link_get(c, link, now.mono_ms, &rc, &index);
    if (k == NULL)
        return rc;
    sup__child_link_roll(c, k, now.mono_ms);
    if (live_count(k, now.mono_ms, NULL) == 0 && !k->acq_due && k->acq_seq == 0 && !k->pass &&
        k->deny_until <= now.mono_ms && k->unauth_until <= now.mono_ms &&
        k->unavail_until <= now.mono_ms) {
        sup__child_want_acquire(k, 0);
        c->stats.warms++;
        *asked = true;
    }
    sup__child_touch(c, index, now.mono_ms);
    return TALLY_OK;
}

int
sup_child_refund(sup_child *c, const char *link, uint64_t lease_id, int64_t cost)
{
    struct child_link *k = sup__child_link_find(c, link, NULL);
    struct child_lease *cl = k != NULL ? sup__child_lease_by_id(k, lease_id) : NULL;

    (void)c;
    if (cl == NULL || cl->state != CL_LIVE || cost < 1 || cost > cl->used)
        return TALLY_ENOTFOUND;
    cl->used -= cost;
    sup__child_use_note(cl);
    return TALLY_OK;
}

/* Retires the live lease of `k` with the fewest tokens left, to make room for a new one. It was
 * displaced, not too big: slow start keeps its size. */
static void
make_room(sup_child *c, struct child_link *k, int64_t now_mono)
{
    struct child_lease *least = NULL;

    for (int j = 0; j < CHILD_LEASES; j++) {
        struct child_lease *o = &k->l[j];

        if (lease_live(o, now_mono) && (least == NULL || o->n - o->used < least->n - least->used))
            least = o;
    }
    retire(c, least);
}

int
sup__child_lease_add(sup_child *c, struct child_link *k, const struct proto_lease_grant *g,
                     const struct child_req *r, int64_t now_mono)
{
    struct child_lease *cl = NULL;
    int64_t margin = sup__child_drift_margin(c, g->ttl_ms);
    /* Asked for before a recall (sup_child_recall): sized under the old limits, never used;
     * or RECALLed by the supervisor before its GRANT got here. */
    bool recalled = r->seq <= c->recall_seq;

    for (int j = 0; j < CHILD_RECALLED; j++) {
        if (c->recalled[j] == g->lease_id) {
            recalled = true;
            c->recalled[j] = 0;
            c->stats.lease_recalls++;
        }
    }

    /* At most CHILD_LIVE_MAX live leases per link, the new one included (the bound on stranded
     * tokens, I4): the one with the fewest tokens left makes room and is reported. Without it, a
     * link whose requests cost more than any lease it holds would collect leases too small for
     * them, one per request. */
    sup__child_link_roll(c, k, now_mono);
    while (!recalled && live_count(k, now_mono, NULL) >= CHILD_LIVE_MAX)
        make_room(c, k, now_mono);
    for (int j = 0; j < CHILD_LEASES && cl == NULL; j++) {
        if (k->l[j].state == CL_FREE)
            cl = &k->l[j];
    }
    if (cl == NULL) {
        /* Every entry busy: give up the oldest pending report (it only strands tokens). */
        for (int j = 0; j < CHILD_LEASES && cl == NULL; j++) {
            if (k->l[j].state == CL_RETIRED && !k->l[j].row)
                cl = &k->l[j];
        }
    }
    if (cl == NULL)
        return TALLY_EFULL;
    sup__child_use_unbind(c, cl);
    memset(cl, 0, sizeof(*cl));
    cl->state = CL_LIVE;
    cl->id = g->lease_id;
    cl->n = g->n;
    cl->ttl_ms = g->ttl_ms;
    cl->pass = (g->flags & PROTO_LEASE_GRANT_PASS) != 0;
    cl->keep = (g->flags & PROTO_LEASE_GRANT_KEEP) != 0;
    /* A lease shorter than T_lease was cut by a window end too (older supervisors say so only
     * that way). */
    cl->edge = (g->flags & PROTO_LEASE_GRANT_EDGE) != 0 || g->ttl_ms < c->lease_ttl_ms;
    cl->last = (g->flags & PROTO_LEASE_GRANT_LAST) != 0;
    cl->got_mono = now_mono;
    /* Gray & Cheriton: measured from when the request was first sent, shortened by the drift
     * bound, so it ends before the supervisor's grant time + ttl on any clock within epsilon. */
    cl->sent_mono = r->first_mono;
    cl->deadline_mono = r->first_mono + g->ttl_ms - margin;
    cl->deadline_wall = r->first_wall + g->ttl_ms - margin;
    if (g->start_ms > 0) {
        /* Not before its windows start: the wait measured from the grant's arrival (after the
         * decision), lengthened by the drift bound. It has no row: a crash of this process
         * leaves it to expire as spent (under-admission). */
        cl->start_mono = now_mono + g->start_ms + sup__child_drift_margin(c, g->start_ms);
        cl->mark_durable = cl->mark_want = cl->mark_sent = cl->n;
        sup__child_last_end_from_next(c, k, g, r->first_mono, now_mono);
    } else if (c->persist_marks && cl->n > c->mark_chunk_min && !recalled) {
        /* The first chunk (or the link's mark lead), carried by the row written before the
         * first admission. */
        mark_ahead(c, cl, 1 + mark_lead(c, k, 0));
        sup__child_use_bind(c, k, cl); /* counting from 0, before its row can exist */
    } else {
        /* No row: a small lease (a quiet link's) is not worth an fsync before its first use.
         * It cannot be resumed, so a crash of this process leaves it to expire as spent: it
         * strands at most its n, and never admits twice. */
        cl->mark_durable = cl->mark_want = cl->mark_sent = cl->n;
    }
    if (recalled || cl->deadline_mono <= now_mono)
        sup__child_retire(c, k, cl);
    return TALLY_OK;
}

void
sup__child_lease_recall(sup_child *c, struct child_link *k, uint64_t id, int64_t now_mono)
{
    struct child_lease *cl = k != NULL ? sup__child_lease_by_id(k, id) : NULL;

    if (cl != NULL) {
        if (cl->state == CL_LIVE && now_mono < cl->deadline_mono) {
            /* Recalled because a budget ran short, not because it was too big: slow start
             * keeps its size. */
            retire(c, cl);
            cl->recalled = true;
            c->stats.lease_recalls++;
        }
        return;
    }
    for (int j = 0; j < CHILD_RECALLED; j++) {
        if (c->recalled[j] == id)
            return; /* a duplicate */
    }
    /* Not here (yet): its GRANT may still be on its way. An id this child never gets is
     * harmless; it leaves the ring after CHILD_RECALLED more. */
    c->recalled[c->recalled_next] = id;
    c->recalled_next = (c->recalled_next + 1) % CHILD_RECALLED;
}

void
sup_child_recall(sup_child *c, struct sup_time now)
{
    c->recall_seq = c->next_seq;
    c->stats.recalls++;
    for (uint32_t i = 0; i < c->link_hw; i++) {
        struct child_link *k = c->links[i];
        if (k == NULL)
            continue;
        for (int j = 0; j < CHILD_LEASES; j++) {
            k->l[j].recalled = k->l[j].state == CL_LIVE || k->l[j].recalled;
            sup__child_retire(c, k, &k->l[j]);
        }
        k->deny_until = 0;
        k->pass = false;
        sup__child_touch(c, (int32_t)i, now.mono_ms);
    }
}

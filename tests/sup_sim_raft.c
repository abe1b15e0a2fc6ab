/*
 * The raft mode of the simulation (sup_sim_raft.h): a struct sim_log (sup_sim_int.h) on
 * libraft 0.15's raft_fixture. What the supervisor of cluster mode does (process_cluster.c,
 * docs/LEASE-PROTOCOL.md §5), here in one place:
 *   - a turn with records is one command, raft_apply'd on the member the supervisor runs on;
 *     the turn's replies and RECALLs are held until that apply's callback says committed and
 *     applied; a turn without records waits behind the newest batch in flight, or leaves now;
 *     a failed apply (raft_apply's own, or its callback's) ends the supervisor, unanswered;
 *   - the supervisor runs on the leader: the live member in the leader state of the highest
 *     term. When that changes, the supervisor ends; the new leader commits a barrier, then a
 *     supervisor is rebuilt from that member's copy (it must hold every committed batch) and
 *     writes its EPOCH. Without a leader the children's requests get no answer;
 *   - a compaction is BEGIN, the ledger's snapshot in CHUNKs and END, each a command: a member's
 *     copy keeps every command it applied, and its journal is what they leave (journal_take).
 * Ground truth: a command is committed when some member first applies its index (indexes are
 * applied in order everywhere); its records then become the world's durable journal
 * (sim_on_persisted), and every later apply of that index anywhere must be the same batch, every
 * copy a prefix of the committed log (digests), so the copies are checked as they grow.
 * Time: the fixture's clock runs in steps of its own (the next tick, disk write or delivery). A
 * server outside the members' configuration ticks every millisecond; stepping the fixture until
 * that tick at the world's t fires every event due at or before t and none after it (on equal times
 * the fixture fires the lowest server index first, requests before a later server's tick), so both
 * clocks read t whenever the world acts.
 * Links: a cut is raft_fixture_disconnect both ways; a deposed leader loses what its followers
 * send it (raft_fixture_depose would run the fixture's clock ahead of the world's by itself, up
 * to 3 s, and asserts every other server is a follower). A disk fault fails the leader's next
 * write (disk_fault_arm); a member libraft stops (RAFT_UNAVAILABLE) is killed for good.
 * libraft 0.15 runs as it is, but for a wrapper on its fixture's disk (disk_truncate); what it
 * mishandles is kept out of the schedules: a follower's failed send of an AppendEntries result
 * (disk_fault_arm) and logs shortened by snapshots (cluster_open).
 */
#include "sup_sim_raft_int.h"

/* ---- the output gate ---- */

static void
hold(struct sim_raft *s, uint64_t batch, int child, const uint8_t *b, size_t len)
{
    struct held *h;

    if (batch == 0) {
        sim_net_push(s->w, false, child, b, len);
        s->rr->released++;
        return;
    }
    sr_grow((void **)&s->held, &s->capheld, s->nheld + 1, sizeof(*s->held));
    h = &s->held[s->nheld++];
    h->batch = batch;
    h->child = child;
    h->len = (uint16_t)len;
    memcpy(h->b, b, len);
}

/* Replies leave in order once their batch is committed and applied on the supervisor's member:
 * its apply callback said so. */
static void
release(struct sim_raft *s)
{
    while (s->hhead < s->nheld) {
        const struct held *h = &s->held[s->hhead];
        struct batch *b = sr_batch_of(s, h->batch);

        if (b->state != B_DONE)
            break;
        if (!b->committed)
            sim_fail(s->w, "the replies of batch %llu left before it was committed",
                     (unsigned long long)h->batch);
        b->released = true;
        sim_net_push(s->w, false, h->child, h->b, h->len);
        s->rr->released++;
        s->hhead++;
    }
    if (s->hhead == s->nheld)
        s->hhead = s->nheld = 0;
}

static void
on_applied(struct raft_apply *req, int status, void *result)
{
    struct apply_req *a = req->data;
    struct sim_raft *s = a->s;
    struct batch *b = sr_batch_of(s, a->batch);

    (void)result;
    b->state = status == 0 ? B_DONE : B_FAILED;
    if (status != 0 && !s->closing) {
        s->rr->failed_applies++;
        if (b->run == s->run && s->host >= 0)
            s->failed = true; /* leadership lost before the commit was known: it ends */
    }
    free(a);
}

uint64_t
sr_in_flight(struct sim_raft *s)
{
    return s->run_last != 0 && sr_batch_of(s, s->run_last)->state == B_FLIGHT ? s->run_last : 0;
}

/* A body: [batch id][operation][count], then each record as [length (2)][bytes]. */
static size_t
encode_body(struct sim_raft *s, uint64_t id, uint8_t op, const struct sup_record *v, size_t n)
{
    size_t at = BODY_HEAD;

    sr_grow((void **)&s->body, &s->capbody, BODY_HEAD + n * (2 + SUP_RECORD_ENCODED_MAX), 1);
    put_u64(s->body, id);
    s->body[8] = op;
    put_u32(s->body + 9, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        size_t rl = 0;

        if (sup_record_encode(&v[i], s->body + at + 2, SUP_RECORD_ENCODED_MAX, &rl) != TALLY_OK)
            sim_fail(s->w, "a record does not encode");
        s->body[at] = (uint8_t)(rl >> 8);
        s->body[at + 1] = (uint8_t)rl;
        at += 2 + rl;
    }
    return at;
}

static uint64_t
batch_add(struct sim_raft *s)
{
    struct batch *b;

    sr_grow((void **)&s->batches, &s->capbatch, s->nbatch + 1, sizeof(*s->batches));
    b = &s->batches[s->nbatch++];
    memset(b, 0, sizeof(*b));
    b->run = s->run;
    b->state = B_FLIGHT;
    s->rr->batches++;
    return s->nbatch;
}

/* What the checker needs when the turn's batch commits: when each record was handled, and the
 * reply cache entries of the turn (w->pending past the ones shown for earlier batches). */
static uint64_t
batch_new(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    struct batch *b = sr_batch_of(s, batch_add(s));
    size_t np = w->npending - s->visible;

    sr_grow((void **)&s->times, &s->captimes, s->ntimes + w->nb, sizeof(*s->times));
    b->t_off = s->ntimes;
    b->nt = w->nb;
    memcpy(s->times + s->ntimes, w->batch_t, w->nb * sizeof(*s->times));
    s->ntimes += w->nb;
    sr_grow((void **)&s->pend, &s->cappend, s->npend + np, sizeof(*s->pend));
    b->p_off = s->npend;
    b->np = np;
    memcpy(s->pend + s->npend, w->pending + s->visible, np * sizeof(*s->pend));
    s->npend += np;
    /* Shown to the checker while in flight (a duplicate then must change nothing and get the
     * same reply), as long as its table keeps room for the turns to come. */
    b->visible = w->npending <= VISIBLE_MAX;
    if (b->visible)
        s->visible = w->npending;
    else
        w->npending = s->visible;
    return s->nbatch;
}

static bool
submit(struct sim_raft *s, uint64_t id, uint8_t op, const struct sup_record *v, size_t n)
{
    size_t len = encode_body(s, id, op, v, n);
    struct raft_buffer buf;
    struct apply_req *a = calloc(1, sizeof(*a));
    int rv;

    assert_non_null(a);
    buf.len = (FRAME_HEAD + len + 7) / 8 * 8; /* libraft pads entries to 8 bytes */
    buf.base = raft_calloc(1, buf.len);
    assert_non_null(buf.base);
    put_u32(buf.base, (uint32_t)len);
    memcpy((uint8_t *)buf.base + FRAME_HEAD, s->body, len);
    a->s = s;
    a->batch = id;
    a->req.data = a;
    sr_disk_fault_arm(s, s->host);
    rv = raft_apply(sr_member_raft(s, (unsigned)s->host), &a->req, &buf, 1, on_applied);
    if (rv != 0) {
        raft_free(buf.base);
        free(a);
        sr_batch_of(s, id)->state = B_FAILED;
        s->rr->failed_applies++;
        return false;
    }
    return true;
}

/* A snapshot of the ledger (its records rebuild the live state from nothing) must replay to it. */
static void
snapshot_check(struct sim_raft *s, size_t n)
{
    sup_ledger *again = NULL;

    assert_int_equal(sup_ledger_open(&s->w->lcfg, &again), TALLY_OK);
    for (size_t i = 0; i < n; i++) {
        if (sup_ledger_replay(again, &s->snap[i]) != TALLY_OK)
            sim_fail(s->w, "snapshot record %zu does not replay", i);
    }
    if (sup_ledger_digest(again) != sup_ledger_digest(s->w->sup))
        sim_fail(s->w, "a snapshot of %zu records replays to another state", n);
    sup_ledger_close(again);
}

/* A batch without replies of its own handed over: the supervisor's newest. */
static bool
hand_over(struct sim_raft *s, uint8_t op, const struct sup_record *v, size_t n)
{
    uint64_t id = batch_add(s);

    if (!submit(s, id, op, v, n))
        return false;
    s->run_last = id;
    return true;
}

/* Compaction on the log, as the supervisor of cluster mode does between turns: BEGIN, the
 * snapshot in CHUNKs, END, after everything it handed over before (process_journal.c). */
static void
replace(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    struct sup_records out = {NULL, 0, 0};
    size_t needed = 0, part = 0, fault_at;
    bool ok;

    assert_int_equal(sup_ledger_snapshot(w->sup, &out, &needed), TALLY_ETOOBIG);
    sr_grow((void **)&s->snap, &s->capsnap, needed, sizeof(*s->snap));
    out = (struct sup_records){s->snap, 0, s->capsnap};
    assert_int_equal(sup_ledger_snapshot(w->sup, &out, &needed), TALLY_OK);
    snapshot_check(s, out.count);
    /* A disk fault due fails a CHUNK or the END: the replacement is cut short, its BEGIN (and
     * CHUNKs) may be committed, and every copy must still hold the journal it had. */
    fault_at = s->disk_fault ? (size_t)sim_range(w, 1, 1 + (int64_t)(out.count / CHUNK_MAX)) : 0;
    s->disk_fault = false;
    ok = hand_over(s, OP_BEGIN, NULL, 0);
    for (size_t at = 0, n; ok && at < out.count; at += n) {
        n = out.count - at < CHUNK_MAX ? out.count - at : CHUNK_MAX;
        s->disk_fault = ++part == fault_at;
        ok = hand_over(s, OP_CHUNK, s->snap + at, n);
    }
    s->disk_fault = ok && ++part == fault_at;
    if (!ok || !hand_over(s, OP_END, NULL, 0)) {
        sim_sup_crash(w, w->t); /* a refused append ends the supervisor */
        return;
    }
    if (w->p.verbose)
        fprintf(stderr, "t=%lld raft: the journal replaced by %zu records (to batch %llu)\n",
                (long long)w->t, out.count, (unsigned long long)s->run_last);
}

/* The checker reads the live ledger's cells once the journal grew (sim_check_step: I1 on every
 * cell, I8): they are the durable cells only while nothing is in flight. A batch lost with its
 * leadership may have moved a cell to the next window, or credited tokens, that the ledger rebuilt
 * from the log never sees; so the check waits for a turn that leaves nothing in flight. */
static void
defer_cell_check(struct sim_raft *s)
{
    struct sim_world *w = s->w;

    if (sr_in_flight(s) != 0) {
        s->check_owed = s->check_owed || w->nj != w->checked_nj;
        w->checked_nj = w->nj;
    } else if (s->check_owed) {
        s->check_owed = false;
        w->checked_nj = (size_t)-1; /* now */
    }
}

static void
log_turn(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;
    struct proto_lease_msg m;
    uint64_t wait;

    s->w = w;
    release(s);
    wait = sr_in_flight(s);
    if (w->nb > 0) {
        wait = batch_new(s);
        if (!submit(s, wait, OP_APPEND, w->batch, w->nb)) {
            sim_sup_crash(w, w->t); /* nothing of this turn leaves */
            return;
        }
        s->run_last = wait;
    }
    w->nb = 0;
    for (size_t i = 0; i < w->nrep; i++)
        hold(s, wait, w->replies[i].child, w->replies[i].b, w->replies[i].len);
    w->nrep = 0;
    while (sup_ledger_next_recall(w->sup, &m) == TALLY_OK) {
        uint8_t b[SIM_FRAME_MAX];
        size_t len;
        int i = sim_ep_index(w, m.origin.child);

        assert_true(i >= 0);
        sim_encode(&m, b, &len);
        hold(s, wait, i, b, len);
        w->r->recalls++;
    }
    if (!w->draining && sim_range(w, 0, 99999) < w->p.compact_per_100k)
        replace(s);
    defer_cell_check(s);
}

static void
log_crashed(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    /* Its held replies and the reply cache it showed go; its batches may still commit. */
    s->hhead = s->nheld = 0;
    s->visible = 0;
    for (uint64_t id = 1; id <= s->nbatch; id++)
        sr_batch_of(s, id)->visible = false;
    s->host = -1;
    s->run_last = 0;
    s->failed = false;
    s->unserved_since = w->t;
}

/* ---- the supervisor on the leader ---- */

static void
on_barrier(struct raft_barrier *req, int status)
{
    struct barrier_req *b = req->data;
    struct sim_raft *s = b->s;

    if (s->barrier == b) {
        s->barrier = NULL;
        s->barrier_ok = status == 0;
    }
    free(b);
}

static void
barrier_start(struct sim_raft *s)
{
    struct barrier_req *b = calloc(1, sizeof(*b));

    assert_non_null(b);
    b->s = s;
    b->req.data = b;
    sr_disk_fault_arm(s, s->leader);
    if (raft_barrier(sr_member_raft(s, (unsigned)s->leader), &b->req, on_barrier) != 0) {
        free(b); /* a disk fault: again next step */
        return;
    }
    s->barrier = b;
    s->barrier_host = s->leader;
    s->barrier_term = s->leader_term;
}

/* The barrier is applied on the leader: its copy holds every batch committed before it. */
static void
supervisor_start(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    const struct copy *c = &s->m[s->leader].copy;

    s->barrier_ok = false;
    if (c->n != s->ncl || c->digest != sr_committed_digest(s, s->ncl))
        sim_fail(w, "after its barrier, member %d holds %llu batches; %zu were committed",
                 s->leader, (unsigned long long)c->n, s->ncl);
    sr_journal_from_copy(s, c);
    s->run++;
    s->host = s->leader;
    s->host_term = s->leader_term;
    s->run_last = 0;
    s->failed = false;
    w->checked_nj = 0; /* a new ledger: its cells are checked at the next step */
    sim_sup_start(w);
    s->rr->supervisor_starts++;
    if (s->starts++ > 0 && w->t - s->unserved_since > s->rr->unserved_max_ms)
        s->rr->unserved_max_ms = w->t - s->unserved_since;
    if (w->p.verbose)
        fprintf(stderr, "t=%lld raft: supervisor on member %d (term %llu), %zu records\n",
                (long long)w->t, s->host, (unsigned long long)s->host_term, w->nj);
}

static void
supervise(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    bool moved = s->leader != s->host || s->leader_term != s->host_term;

    if (w->sup != NULL && (s->failed || moved))
        sim_sup_crash(w, w->t); /* it stopped leading, or a commit failed: never answered */
    if (s->barrier != NULL && (s->leader != s->barrier_host || s->leader_term != s->barrier_term))
        s->barrier = NULL; /* its callback comes, and changes nothing */
    if (s->barrier_ok && (s->leader != s->barrier_host || s->leader_term != s->barrier_term))
        s->barrier_ok = false;
    if (w->sup != NULL || s->leader < 0 || w->t < w->sup_down_until)
        return;
    if (s->barrier_ok)
        supervisor_start(s);
    else if (s->barrier == NULL)
        barrier_start(s);
}

static void
log_step(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    s->w = w;
    sr_advance(s, w->t);
    sr_notice_broken(s);
    if (!w->draining)
        sr_faults(s);
    else
        s->disk_fault = false;
    sr_faults_end(s);
    sr_find_leader(s);
    release(s);
    supervise(s);
}

/* ---- a schedule ---- */

/* The clock (advance): a server that ticks every millisecond, a standby in a configuration of its
 * own, so it takes no part in the members' elections. It never answers them either, so the
 * fixture finds no leader every server acknowledges: it then does not copy the leader's log at
 * every step for its Leader Append-Only check, which over a log never shortened would cost a
 * step its length (the members' state machine safety is checked here, at each apply). */
static void
clock_open(struct sim_raft *s)
{
    struct raft_configuration conf;
    struct raft *r;
    char address[16];

    sr_fsm_setup(&s->clock_fsm, NULL); /* never applies a command */
    assert_int_equal(raft_fixture_grow(&s->f, &s->clock_fsm), 0);
    r = raft_fixture_get(&s->f, s->clock);
    raft_set_heartbeat_timeout(r, 1);
    snprintf(address, sizeof(address), "%u", s->clock + 1);
    raft_configuration_init(&conf);
    assert_int_equal(raft_configuration_add(&conf, s->clock + 1, address, RAFT_STANDBY), 0);
    assert_int_equal(raft_bootstrap(r, &conf), 0);
    raft_configuration_close(&conf);
}

static void
cluster_open(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    struct raft_configuration conf;
    unsigned e = s->rp.election_ms;

    assert_int_equal(raft_fixture_initialize(&s->f), 0);
    for (unsigned i = 0; i < s->n; i++) {
        s->m[i].s = s;
        s->m[i].i = i;
        s->m[i].copy.digest = FNV_BASIS;
        sr_fsm_setup(&s->m[i].fsm, &s->m[i]);
        assert_int_equal(raft_fixture_grow(&s->f, &s->m[i].fsm), 0);
        sr_disk_wrap(s, i);
    }
    clock_open(s);
    raft_configuration_init(&conf);
    for (unsigned i = 0; i < s->n; i++) {
        struct raft *r = sr_member_raft(s, i);
        char address[16];

        snprintf(address, sizeof(address), "%u", i + 1);
        assert_int_equal(raft_configuration_add(&conf, i + 1, address, RAFT_VOTER), 0);
        /* As cluster/log.c, at the simulation's pace: heartbeats every tenth of the election
         * timeout, pre-vote, a snapshot not answered sent again after 20 election timeouts.
         * Snapshots are taken far more often than cluster mode's every 100,000 batches (which
         * no schedule reaches), but every entry stays in the log behind them: libraft 0.15
         * appends the entries a leader sends from index 1 after the last entry of a follower
         * whose log a snapshot shortened (replication.c, deleteConflictingEntries: an entry
         * below the log reads as missing), and its fixture's disk truncates from the wrong
         * place once a snapshot was installed. So no member ever needs one installed. */
        raft_set_election_timeout(r, e);
        raft_set_heartbeat_timeout(r, e / 10 > 0 ? e / 10 : 1);
        raft_set_pre_vote(r, true);
        raft_set_install_snapshot_timeout(r, 20 * e);
        raft_set_snapshot_threshold(r, s->rp.snapshot_every);
        raft_set_snapshot_trailing(r, UINT_MAX);
        raft_fixture_set_network_latency(&s->f, i, (unsigned)sim_range(w, 1, 4));
        raft_fixture_set_disk_latency(&s->f, i, (unsigned)sim_range(w, 1, 3));
        for (unsigned j = 0; j < s->n; j++)
            s->phys[i][j] = true;
    }
    for (unsigned i = 0; i < s->n; i++) {
        assert_int_equal(raft_bootstrap(sr_member_raft(s, i), &conf), 0);
        s->m[i].stored = 1; /* the configuration, written by the bootstrap */
    }
    raft_configuration_close(&conf);
    sr_redraw_timeouts(s);
    assert_int_equal(raft_fixture_start(&s->f), 0);
}

static void
cluster_close(struct sim_raft *s)
{
    s->closing = true; /* pending requests fail, appends in flight land: none of it counts */
    raft_fixture_close(&s->f);
    for (unsigned i = 0; i < s->n; i++)
        free(s->m[i].copy.b);
    free(s->batches);
    free(s->times);
    free(s->pend);
    free(s->held);
    free(s->body);
    free(s->cl);
    free(s->at_index);
    free(s->snap);
    free(s->writes);
    free(s->stage.v);
    free(s->scratch.v);
}

void
sim_raft_run(const struct sim_params *p, const struct sim_raft_params *rp, struct sim_result *r,
             struct sim_raft_result *rr)
{
    static struct sim_world setup_world;
    struct sim_raft *s;

    if (the_raft == NULL) /* libraft keeps pointers into it until the fixture closes */
        the_raft = calloc(1, sizeof(*the_raft));
    s = the_raft;
    assert_non_null(s);
    memset(s, 0, sizeof(*s));
    assert_true(rp->voters >= 1 && rp->voters <= MEMBERS_MAX && rp->election_ms >= 10);
    s->rp = *rp;
    s->rr = rr;
    s->n = rp->voters;
    s->clock = rp->voters;
    s->leader = s->host = s->deposed = s->barrier_host = -1;
    /* The cluster is drawn before the world exists, from a generator of its own seeded from the
     * schedule's; then from the world's, as its faults are. */
    memset(&setup_world, 0, sizeof(setup_world));
    setup_world.p = *p;
    setup_world.rng = p->seed ^ 0x7a3f7ULL;
    s->w = &setup_world;
    cluster_open(s);
    s->log = (struct sim_log){
        s, log_step, log_turn, log_crashed, sr_log_caught_up, sr_log_settled, sr_log_end};
    sim_run_log(p, &s->log, r);
    cluster_close(s);
}

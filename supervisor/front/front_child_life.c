/*
 * The child counters' lifecycle inside tallyd: found by (tenant, endpoint)
 * through an index (one lookup per request, whatever the number of tenants),
 * created on first use with their own timer while their file is opened on the
 * thread pool (the requests wait meanwhile), their policy refreshed on reloads.
 * A child nobody asked for in child_idle_ms, or the least recently used one
 * when more than max_open_children files are open, hands its leases back,
 * closes its file on the thread pool and is freed: an idle tenant costs no
 * descriptor and no memory, and its next request opens the file again, as a
 * new incarnation that resumes its rows exactly as after a restart. At
 * shutdown every child returns its leases (parks its kept ones when its
 * supervisor hibernates: none is started for them), writes its rows, closes.
 */
#include "sup_front_int.h"

#include <stdio.h>
#include <string.h>

#include "tally_log.h"

/* A draining child waits this long for its RETURNs to be answered and its rows
 * written; then it closes anyway (what is unanswered expires as spent). */
#define FRONT_CHILD_DRAIN_MS 2000

static void
child_free(struct front_child *fc)
{
    sup_child_close(fc->child);
    front_store_close(fc);
    tally_free(fc);
}

static void
on_retired_timer_closed(uv_handle_t *h)
{
    child_free(h->data);
}

/* fc leaves the table for good (its file is closed): freed once its timer is. */
static void
retire(struct front_child *fc)
{
    front_child_table_remove(fc->f, fc);
    fc->timer_live = false;
    front_child_pump_forget(fc);
    uv_close((uv_handle_t *)&fc->timer, on_retired_timer_closed);
}

/* A child's policy follows the configuration: on_unavailable, degraded limits,
 * cost and expensive take effect at the first request after a reload. A child
 * being opened takes the newest policy when its state machine is created. */
static void
refresh_policy(struct front_child *fc, const struct tenant_endpoint *policy)
{
    if (fc->policy_reloads == fc->f->stats.reloads)
        return;
    fc->policy_reloads = fc->f->stats.reloads;
    if (fc->child == NULL || (memcmp(&fc->policy, policy, sizeof(*policy)) != 0 &&
                              sup_child_set_policy(fc->child, policy) == TALLY_OK))
        fc->policy = *policy;
}

/* A child may close when nothing waits on it and its supervisor answers: a child
 * in degraded or unavailable mode keeps its file (and its degraded admissions, to
 * be reported as debt) until the supervisor is back. */
static bool
closable(const struct front_child *fc, struct sup_time now)
{
    return fc->state == FRONT_CHILD_OPEN && fc->parked == NULL && !fc->store.busy &&
           fc->store.n == 0 && fc->mode == FRONT_MODE_NORMAL && sup_child_reachable(fc->child, now);
}

/* An OPEN child whose file may close while it stays: nothing to write or being
 * written, nothing waiting. */
static bool
sleepable(const struct front_child *fc)
{
    return fc->state == FRONT_CHILD_OPEN && !fc->store.busy && fc->store.db != NULL &&
           fc->store.n == 0 && fc->parked == NULL;
}

/* The child parks its kept leases in its file, with the fingerprint of the limits
 * they were granted under, and gives the others back; how many it parked. */
static uint32_t
park(struct front_child *fc, struct sup_time now)
{
    uint32_t parked = sup_child_park(fc->child, now);

    if (parked > 0) {
        fc->store.limits_fp = front_limits_fp(fc->f->snap, fc);
        fc->store.limits_fp_put = true;
    }
    return parked;
}

/* OPEN -> DRAINING: park; front_child_drain_check closes the file once that is
 * written and answered. */
static void
drain(struct front_child *fc)
{
    struct sup_time now = front_now();

    front_lru_unlink(fc->f, fc);
    front_files_unlink(fc->f, fc);
    /* Counted as leaving while its file is open (or opening again for a write). */
    fc->leaving = fc->store.busy || fc->store.db != NULL; /* db is the pool's while busy */
    fc->f->n_leaving += fc->leaving;
    fc->state = FRONT_CHILD_DRAINING;
    fc->drain_mono_ms = now.mono_ms + FRONT_CHILD_DRAIN_MS;
    fc->f->stats.leases_parked += park(fc, now);
    front_child_pump(fc);
}

/* Open files (not counting those on their way out) above the cap: the least
 * recently used children whose file can close, close it and stay (asleep). */
static void
enforce_cap(sup_front *f)
{
    struct front_child *fc = f->file_tail;
    uint32_t closing = 0;

    while (fc != NULL && f->n_files - f->n_leaving - closing > f->cfg.max_open_children) {
        struct front_child *prev = fc->file_prev;
        if (sleepable(fc)) {
            front_files_unlink(f, fc);
            front_store_sleep_start(fc);
            f->stats.child_sleeps++;
            closing++;
        }
        fc = prev;
    }
}

/* (nothing) or CLOSING -> OPENING */
static void
open_start(struct front_child *fc)
{
    fc->store.limits_fp_now = front_limits_fp(fc->f->snap, fc);
    fc->state = FRONT_CHILD_OPENING;
    fc->f->n_files++;
    fc->f->stats.child_opens++;
    front_store_open_start(fc);
}

void
front_child_touch(sup_front *f, struct front_child *fc)
{
    fc->used_mono_ms = front_now().mono_ms;
    if (fc->state == FRONT_CHILD_OPEN && f->lru_head != fc) {
        front_lru_unlink(f, fc);
        front_lru_push_front(f, fc);
    }
    if (fc->in_files && f->file_head != fc)
        front_files_push_front(f, fc);
}

int
front_child_get(sup_front *f, const char *tenant, const struct tenant_endpoint *policy,
                struct front_child **out)
{
    struct front_child *fc = front_child_find(f, tenant, policy->name);

    *out = NULL;
    if (fc != NULL) {
        refresh_policy(fc, policy);
        front_child_touch(f, fc);
        *out = fc;
        return TALLY_OK;
    }
    if (f->n_children == f->cap_children) {
        uint32_t cap = f->cap_children == 0 ? 16 : f->cap_children * 2;
        struct front_child **n = tally_realloc(f->children, cap * sizeof(*n));
        if (n == NULL)
            return TALLY_ENOMEM;
        f->children = n;
        f->cap_children = cap;
        tenant_index_release(&f->child_index);
    }
    if (f->child_index.slot == NULL && front_child_index(f, f->cap_children) != TALLY_OK)
        return TALLY_ENOMEM;
    fc = tally_calloc(1, sizeof(*fc));
    if (fc == NULL)
        return TALLY_ENOMEM;
    fc->f = f;
    snprintf(fc->tenant, sizeof(fc->tenant), "%s", tenant);
    snprintf(fc->endpoint, sizeof(fc->endpoint), "%s", policy->name);
    snprintf(fc->key, sizeof(fc->key), "%s/%s", tenant, policy->name);
    fc->policy = *policy;
    fc->policy_reloads = f->stats.reloads;
    fc->used_mono_ms = front_now().mono_ms;
    uv_timer_init(f->loop, &fc->timer);
    fc->timer.data = fc;
    fc->timer_live = true;
    fc->armed_ms = INT64_MIN;
    front_child_table_add(f, fc);
    open_start(fc);
    enforce_cap(f);
    *out = fc;
    return TALLY_OK;
}

/* Answers every waiting request of fc with 503 (its file is not usable). */
static void
answer_parked(struct front_child *fc, int64_t retry_after_ms, const char *detail)
{
    while (fc->parked != NULL) {
        struct sup_front_req *r = fc->parked;
        front_child_unpark(fc, r);
        r->owner = NULL; /* not the child's answer: no mode change */
        front_reply_status(fc->f, r, PROTO_UNAVAILABLE, retry_after_ms, detail);
    }
}

/* Creates the state machine on the file just opened and resumes its rows. */
static int
start_child(struct front_child *fc)
{
    struct sup_child_config cfg;
    struct sup_child_counters counters;
    sup_front *f = fc->f;
    int rc;

    memset(&cfg, 0, sizeof(cfg));
    if (front_use_counters(fc, &counters))
        cfg.counters = &counters;
    cfg.incarnation = fc->store.incarnation;
    snprintf(cfg.tenant, sizeof(cfg.tenant), "%s", fc->tenant);
    cfg.policy = fc->policy;
    cfg.persist_marks = f->cfg.strict;
    cfg.wait_ms = f->cfg.wait_ms;
    rc = sup_child_open(&cfg, &fc->child);
    if (rc == TALLY_OK)
        rc = front_store_resume(fc);
    /* Leases resumed from rows written under other limits than today's are not used
     * (recalled: reported, their tokens credited): a limit lowered while the child was
     * closed, or while tallyd was down, is in force too. */
    if (rc == TALLY_OK && fc->store.limits_fp_found &&
        fc->store.limits_fp != front_limits_fp(f->snap, fc)) {
        sup_child_recall(fc->child, front_now());
        f->stats.recalls++;
    }
    if (rc != TALLY_OK) {
        snprintf(fc->store.errmsg, sizeof(fc->store.errmsg), "%s", "cannot start the child");
        sup_child_close(fc->child);
        fc->child = NULL;
        front_store_close(fc); /* rare (no memory): closed here */
    }
    return rc;
}

static void child_ready(struct front_child *fc);

void
front_child_opened(struct front_child *fc, int rc)
{
    sup_front *f = fc->f;

    if (fc->closed) { /* shut down meanwhile: nothing waits any more */
        if (fc->store.db == NULL)
            f->n_files--; /* the open failed: nothing to close */
        front_child_release(fc);
        return;
    }
    if (rc == TALLY_OK)
        rc = start_child(fc);
    if (rc != TALLY_OK) {
        f->n_files--;
        f->stats.child_open_failures++;
        front_log_open_failed(f, fc->tenant, fc->endpoint, rc, fc->store.errmsg);
        answer_parked(fc, 1000, tally_strerror(rc));
        retire(fc);
        return;
    }
    child_ready(fc);
}

/* OPENING -> OPEN: the state machine is there; the requests that waited run. */
static void
child_ready(struct front_child *fc)
{
    sup_front *f = fc->f;
    struct sup_front_req *batch;

    fc->state = FRONT_CHILD_OPEN;
    front_lru_push_front(f, fc);
    front_files_push_front(f, fc);
    /* The requests that waited for the file run in arrival order; one that
     * parks again (for a lease) goes to the back of the list, after them. */
    batch = fc->parked;
    fc->parked = NULL;
    while (batch != NULL) {
        struct sup_front_req *r = batch;
        batch = r->next;
        r->next = r->prev = NULL;
        r->child = NULL;
        r->stage = SUP_FRONT_IDLE;
        front_child_run(fc, r, 0);
    }
    front_child_pump(fc);
}

bool
front_child_start_early(struct front_child *fc)
{
    struct front_store *s = &fc->store;

    /* A new file's first incarnation, as its open would find it (front_store_open_work). */
    s->incarnation = 1;
    s->limits_fp = s->limits_fp_now;
    s->limits_fp_found = false;
    s->inc_pending = true;
    if (start_child(fc) != TALLY_OK) {
        s->inc_pending = false;
        return false;
    }
    if (!front_store_early_queue(fc)) { /* the job owns the store from here */
        sup_child_close(fc->child);
        fc->child = NULL;
        s->inc_pending = false;
        return false;
    }
    child_ready(fc);
    return true;
}

void
front_child_early_done(struct front_child *fc, int rc)
{
    sup_front *f = fc->f;

    if (fc->closed) { /* shut down meanwhile: its last rows, then freed */
        if (rc == TALLY_OK)
            fc->store.inc_pending = false;
        if (rc != TALLY_OK || !front_store_flush(fc))
            front_child_release(fc);
        return;
    }
    if (rc == TALLY_OK) {
        fc->store.inc_pending = false;
        front_child_deliver_held(fc);
        front_child_pump(fc);
        return;
    }
    /* No file: nothing it was answered was used (answers wait for the incarnation), and the
     * next request opens the file as any first one. */
    f->n_files--;
    f->stats.child_open_failures++;
    front_log_open_failed(f, fc->tenant, fc->endpoint, rc, fc->store.errmsg);
    answer_parked(fc, 1000, tally_strerror(rc));
    front_lru_unlink(f, fc);
    front_files_unlink(f, fc);
    retire(fc);
}

void
front_child_drain_check(struct front_child *fc)
{
    struct sup_child_stats cs;
    struct sup_time now;

    if (fc->state != FRONT_CHILD_DRAINING || fc->f->closing || fc->store.busy)
        return;
    now = front_now();
    sup_child_stats(fc->child, now, &cs);
    if ((cs.inflight > 0 || cs.live_leases > 0 || fc->store.n > 0 ||
         sup_child_next_wake_ms(fc->child) == 0) &&
        now.mono_ms < fc->drain_mono_ms)
        return;
    /* Rows not yet written stay as they are on disk: resumed by the next
     * incarnation or expired as spent; nothing is admitted twice. */
    fc->store.n = 0;
    sup_child_close(fc->child);
    fc->child = NULL;
    fc->state = FRONT_CHILD_CLOSING;
    uv_timer_stop(&fc->timer);
    front_store_close_start(fc);
}

void
front_child_file_closed(struct front_child *fc, bool had_file)
{
    sup_front *f = fc->f;

    f->n_files -= had_file;
    f->n_leaving -= fc->leaving;
    fc->leaving = false;
    f->stats.child_closes++;
    if (fc->closed) {
        front_child_release(fc);
        return;
    }
    if (fc->parked != NULL) { /* asked for meanwhile: open again, a new incarnation */
        open_start(fc);
        enforce_cap(f);
        return;
    }
    retire(fc);
}

void
front_child_file_slept(struct front_child *fc)
{
    sup_front *f = fc->f;

    f->n_files--;
    if (fc->closed) { /* shut down meanwhile: its last writes, then freed */
        if (fc->child == NULL || !front_store_flush(fc))
            front_child_release(fc);
        return;
    }
    front_child_pump(fc); /* a write that came meanwhile opens it again */
}

void
front_child_file_woke(struct front_child *fc)
{
    sup_front *f = fc->f;

    if (fc->store.db == NULL) {
        f->n_files--; /* the open failed (the batch is tried again later), or the file was
                       * closed again after the write: it was queued at the cap */
        return;
    }
    if (fc->state == FRONT_CHILD_OPEN && !fc->closed) {
        front_files_push_front(f, fc);
        enforce_cap(f);
    }
}

/* How often idle children are looked for: a fraction of the idle time, so one
 * closes within about 1.5 times it. */
static uint64_t
sweep_every_ms(const sup_front *f)
{
    int64_t ms = f->cfg.child_idle_ms / 2;

    return (uint64_t)(ms < 10 ? 10 : ms > 1000 ? 1000 : ms);
}

/* Closes the children unused for child_idle_ms, least recently used first: the
 * walk stops at the first one used since. */
static void
on_idle_timer(uv_timer_t *t)
{
    sup_front *f = t->data;
    struct sup_time now = front_now();
    struct front_child *fc = f->lru_tail;

    while (fc != NULL && now.mono_ms - fc->used_mono_ms >= f->cfg.child_idle_ms) {
        struct front_child *prev = fc->lru_prev;
        if (closable(fc, now))
            drain(fc);
        fc = prev;
    }
    enforce_cap(f);
    store_use_sweep(f->use, now.mono_ms); /* kept counters nobody resumed, past their lease */
    front_first_sweep(f, now.mono_ms);
}

void
front_children_init(sup_front *f)
{
    uv_timer_init(f->loop, &f->idle_timer);
    f->idle_timer.data = f;
    uv_timer_start(&f->idle_timer, on_idle_timer, sweep_every_ms(f), sweep_every_ms(f));
}

void
front_child_release(struct front_child *fc)
{
    sup_front *f = fc->f;

    if (fc->store.db != NULL) {
        /* Closed off the loop too (the close checkpoints: reads and fsyncs);
         * front_child_file_closed comes back here without the file. */
        sup_child_close(fc->child);
        fc->child = NULL;
        front_store_close_start(fc);
        return;
    }
    child_free(fc);
    if (--f->children_pending == 0 && f->children_done != NULL)
        f->children_done(f);
}

static void
on_child_timer_closed(uv_handle_t *h)
{
    struct front_child *fc = h->data;

    fc->closed = true;
    /* An open or a close in flight ends in front_child_opened or _file_closed. The
     * last rows (RETURNed leases deleted) are written before the file closes. */
    if (!fc->store.busy && (fc->child == NULL || !front_store_flush(fc)))
        front_child_release(fc);
}

void
front_children_close(sup_front *f, void (*done)(sup_front *f))
{
    struct sup_time now = front_now();
    uint32_t i;

    f->children_done = done;
    f->children_pending = (int)f->n_children;
    if (f->n_children == 0) {
        done(f);
        return;
    }
    for (i = 0; i < f->n_children; i++) {
        struct front_child *fc = f->children[i];
        answer_parked(fc, 1000, "shutting down");
        fc->timer_live = false;
        front_child_pump_forget(fc);
        if (fc->child != NULL) { /* open or draining; an open or close in flight finishes */
            /* Kept leases go back to a running supervisor; a hibernated one's are parked
             * (returning them would start every quiet tenant's supervisor). */
            if (front_lease_up(f, fc->tenant))
                sup_child_shutdown(fc->child, now);
            else
                f->stats.leases_parked += park(fc, now);
            front_child_pump(fc); /* RETURNs of the others out, rows written */
        }
        uv_close((uv_handle_t *)&fc->timer, on_child_timer_closed);
    }
    f->n_children = 0;
    f->lru_head = f->lru_tail = NULL;
    tenant_index_release(&f->child_index);
}

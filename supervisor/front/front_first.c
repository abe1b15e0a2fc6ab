/*
 * First turns (docs/DESIGN.md §4). A tenant with no ledger and no supervisor running has never
 * been granted anything: the leases its first requests wait for are made by tallyd on the
 * thread pool (sup_first_turn_run), under the tenant's supervisor.lock, instead of by a
 * supervisor started for them. Its supervisor starts later, when a message needs it (more
 * tokens, a return, a window's end), and replays the turn; a tenant whose first leases last
 * starts no process until then.
 *
 * The look that finds a new child's file missing (front_prestart.c) also looks for the
 * tenant's ledger; when both are missing it opens a record for the tenant here instead of
 * starting the supervisor, and a first job takes the lock and makes the ledger while the
 * child's file is made beside it (the child, started before its file, sends its messages at
 * once). The tenant's lease messages then come here (front_lease_send): those sent until the
 * turn starts (the new child's HELLO and ACQUIREs) make it, in a second job once both the
 * ledger and a message are there; those sent while it runs wait for the supervisor. At its
 * end the replies reach their children as a supervisor's would (held until a new child's
 * incarnation is durable); a third job closes the ledger and lets the lock go, and the waiting
 * messages then go to the supervisor (starting it). A turn that could not be made (the lock
 * held, a ledger found, a storage error) answers nothing: its messages go to the supervisor,
 * which answers them. A record that no message comes to within FIRST_WAIT_MS lets its lock go.
 */
#include "sup_front_int.h"

#include <string.h>

#include "sup_ledger.h"
#include "tally_log.h"

/* Messages held for the supervisor while a turn runs; past it, the child's retransmission
 * sends them again. */
#define FIRST_LATER 32
/* RECALLs handed back beside the replies. */
#define FIRST_RECALLS 8
/* A record ready with no message for this long lets its lock go (the idle sweep). */
#define FIRST_WAIT_MS 1000

/* A record's life: OPENING (the lock, the ledger and its epoch, thread pool) -> READY ->
 * RUNNING (the turn, thread pool) -> CLOSING (the ledger closed and the lock let go, thread
 * pool) -> gone. A record that makes no turn goes from OPENING or READY to CLOSING (or is
 * gone at once when it holds nothing). */
enum first_state { FIRST_OPENING, FIRST_READY, FIRST_RUNNING, FIRST_CLOSING };

struct front_first {
    sup_front *f;
    char tenant[TENANT_NAME_MAX + 1];
    enum first_state state;
    bool made; /* its turn answered: the close's end starts the supervisor */
    int64_t ready_mono_ms;
    sup_first_ledger *ledger;
    int rc; /* of the job that ran last */
    struct proto_lease_msg in[SUP_FIRST_TURN_MAX];
    bool allowed[SUP_FIRST_TURN_MAX]; /* in[i]'s link may call its endpoint (the loop's view) */
    size_t n_in;
    struct proto_lease_msg out[SUP_FIRST_TURN_MAX + FIRST_RECALLS];
    size_t n_out;
    struct proto_lease_msg later[FIRST_LATER]; /* for the supervisor, in order */
    size_t n_later;
    struct tenant_plan plan;
    struct tenant_endpoint *eps;
    size_t n_eps;
    struct sup_first_turn turn;
    uv_work_t work;
};

static struct front_first *
find(sup_front *f, const char *tenant)
{
    for (uint32_t i = 0; i < f->n_firsts; i++) {
        if (strcmp(f->firsts[i]->tenant, tenant) == 0)
            return f->firsts[i];
    }
    return NULL;
}

static void
drop(sup_front *f, struct front_first *ff)
{
    for (uint32_t i = 0; i < f->n_firsts; i++) {
        if (f->firsts[i] == ff) {
            f->firsts[i] = f->firsts[--f->n_firsts];
            break;
        }
    }
    tally_free(ff->eps);
    tally_free(ff);
}

/* Messages of the tenant to its supervisor, started by the first (a failure: the child's
 * retransmission sends it again). */
static void
send_supervisor(sup_front *f, const char *tenant, const struct proto_lease_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (proto_lease_encode(&m[i], 0, f->frame, sizeof(f->frame), &len) == TALLY_OK)
            (void)sup_manager_send(f->mgr, tenant, f->frame, len);
    }
}

static void
log_not_made(const struct front_first *ff)
{
    struct tally_log l;

    /* A supervisor's lock or ledger found, the tenant gone, no message: nothing failed. */
    bool quiet = ff->rc == TALLY_EEXIST || ff->rc == TALLY_ELOCKED || ff->rc == TALLY_ENOTFOUND ||
                 ff->rc == TALLY_ETIMEDOUT;

    if (!tally_log_begin(&l, quiet ? TALLY_LOG_DEBUG : TALLY_LOG_WARN, "first_turn_not_made"))
        return;
    tally_log_str(&l, "tenant", ff->tenant);
    tally_log_str(&l, "error", tally_strerror(ff->rc));
    tally_log_end(&l);
}

/* The end of a record whose turn was not made: its messages are the supervisor's. */
static void
not_made(sup_front *f, struct front_first *ff)
{
    f->stats.first_turns_not_made++;
    log_not_made(ff);
    send_supervisor(f, ff->tenant, ff->in, ff->n_in);
    send_supervisor(f, ff->tenant, ff->later, ff->n_later);
    drop(f, ff);
}

/* A job's end on the loop: a failed job is a failed step; NULL while tallyd closes (the
 * record is gone, its ledger closed here if it holds one: nothing else waits on the loop). */
static struct front_first *
job_end(uv_work_t *w, int status)
{
    struct front_first *ff = w->data;
    sup_front *f = ff->f;

    if (status != 0 && ff->rc == TALLY_OK)
        ff->rc = TALLY_EIO;
    if (!f->closing)
        return ff;
    sup_first_turn_close(ff->ledger);
    drop(f, ff);
    front_pending_done(f);
    return NULL;
}

static void open_work(uv_work_t *w);
static void open_done(uv_work_t *w, int status);
static bool link_allows(void *ctx, const char *link_id, const char *endpoint, int64_t now_ms);

/* Loop: what the ledger needs of the configuration, copied (a reload may free the snapshot
 * while the jobs run). False when the tenant is gone. */
static bool
turn_config(struct front_first *ff)
{
    sup_front *f = ff->f;
    const struct store_snap_tenant *t =
        f->snap != NULL ? store_snapshot_tenant(f->snap, ff->tenant) : NULL;

    if (t == NULL || sup_tenant_policies(f->snap, t, &ff->eps, &ff->n_eps) != TALLY_OK)
        return false;
    ff->plan = *t->plan;
    ff->turn = (struct sup_first_turn){
        .tenant = ff->tenant,
        .plan = &ff->plan,
        .endpoints = ff->eps,
        .endpoint_count = ff->n_eps,
        .keep_lease_ms = f->cfg.keep_lease_ms,
        .link_allows = link_allows,
        .link_ctx = ff,
    };
    return true;
}

bool
front_first_begin(sup_front *f, const char *tenant)
{
    struct front_first *ff;
    int rc;

    if (f->closing || f->cl_on || sup_manager_is_up(f->mgr, tenant) ||
        sup_manager_is_starting(f->mgr, tenant))
        return false;
    if (find(f, tenant) != NULL)
        return true;
    if (f->n_firsts == FRONT_FIRST_MAX)
        return false;
    ff = tally_calloc(1, sizeof(*ff));
    if (ff == NULL)
        return false;
    ff->f = f;
    ff->work.data = ff;
    ff->state = FIRST_OPENING;
    snprintf(ff->tenant, sizeof(ff->tenant), "%s", tenant);
    /* uv_queue_work fails only for a missing callback (NEVER evaluates twice: not the call). */
    rc = turn_config(ff) ? uv_queue_work(f->loop, &ff->work, open_work, open_done) : UV_EINVAL;
    if (rc == UV_EINVAL || NEVER(rc != 0)) {
        tally_free(ff->eps);
        tally_free(ff);
        return false;
    }
    f->firsts[f->n_firsts++] = ff;
    return true;
}

bool
front_first_pending(sup_front *f, const char *tenant)
{
    return f->n_firsts > 0 && find(f, tenant) != NULL;
}

bool
front_first_take(sup_front *f, const char *tenant, const struct proto_lease_msg *m, int *rc)
{
    struct front_first *ff = find(f, tenant);

    if (ff == NULL)
        return false;
    *rc = TALLY_OK;
    if (ff->state <= FIRST_READY && ff->n_in < SUP_FIRST_TURN_MAX)
        ff->in[ff->n_in++] = *m;
    else if (ff->n_later < FIRST_LATER)
        ff->later[ff->n_later++] = *m;
    else
        *rc = TALLY_EUNAVAIL; /* sent again by the child's retransmission */
    return true;
}

/* Thread pool: the lock and the ledger. */
static void
open_work(uv_work_t *w)
{
    struct front_first *ff = w->data;

    ff->rc = sup_first_turn_open(ff->f->data, &ff->turn, &ff->ledger);
}

static void
open_done(uv_work_t *w, int status)
{
    struct front_first *ff = job_end(w, status);
    sup_front *f = ff != NULL ? ff->f : NULL;

    if (ff == NULL)
        return;
    if (ff->rc != TALLY_OK) {
        not_made(f, ff);
        return;
    }
    ff->state = FIRST_READY;
    ff->ready_mono_ms = front_now().mono_ms;
    f->pool_turned = true;
    front_pool_taken(f);             /* its ledger came from the pool, open or not */
    front_first_kick(f, ff->tenant); /* the messages that came meanwhile */
}

/* The link an ACQUIRE or SLOT_ACQUIRE asks for, and its endpoint in *ep; NULL for others. */
static const char *
asked_link(const struct proto_lease_msg *m, const char **ep)
{
    if (m->type == PROTO_LEASE_ACQUIRE) {
        *ep = m->acquire.endpoint;
        return m->acquire.link;
    }
    *ep = m->slot_acquire.endpoint;
    return m->type == PROTO_LEASE_SLOT_ACQUIRE ? m->slot_acquire.link : NULL;
}

/* The turn's link check: what the loop found for each ACQUIRE when it queued the turn. */
static bool
link_allows(void *ctx, const char *link_id, const char *endpoint, int64_t now_ms)
{
    const struct front_first *ff = ctx;

    (void)now_ms;
    for (size_t i = 0; i < ff->n_in; i++) {
        const char *ep = NULL;
        const char *link = asked_link(&ff->in[i], &ep);

        if (link != NULL && strcmp(link, link_id) == 0 && strcmp(ep, endpoint) == 0)
            return ff->allowed[i];
    }
    return false;
}

/* Thread pool: the turn. Touches only the record, which the loop leaves alone while it runs
 * (messages sent meanwhile go to `later`). */
static void
turn_work(uv_work_t *w)
{
    struct front_first *ff = w->data;
    size_t cap = sizeof(ff->out) / sizeof(ff->out[0]);

    ff->rc = sup_first_turn_run(ff->ledger, ff->in, ff->n_in, ff->out, cap, &ff->n_out);
}

static void
turn_done(uv_work_t *w, int status)
{
    struct front_first *ff = job_end(w, status);
    sup_front *f = ff != NULL ? ff->f : NULL;

    if (ff == NULL)
        return;
    if (ff->rc == TALLY_OK) {
        ff->made = true;
        f->stats.first_turns++;
        for (size_t i = 0; i < ff->n_out; i++)
            front_child_on_lease(f, ff->tenant, &ff->out[i]);
    }
    front_first_release(f, ff);
}

/* Loop: whether each ACQUIRE's link may call its endpoint now, as the supervisor would check. */
static void
links_check(struct front_first *ff)
{
    const store_snapshot *snap = ff->f->snap;
    int64_t now = front_now().wall_ms;

    for (size_t i = 0; i < ff->n_in; i++) {
        const char *ep = NULL;
        const char *id = asked_link(&ff->in[i], &ep);
        const struct store_snap_link *l =
            id != NULL && snap != NULL ? store_snapshot_link_by_id(snap, id) : NULL;

        ff->allowed[i] = l != NULL && strcmp(l->tenant->id, ff->tenant) == 0 &&
                         store_snap_link_allows(l, ep, now);
    }
}

void
front_first_kick(sup_front *f, const char *tenant)
{
    struct front_first *ff = find(f, tenant);
    int rc;

    if (ff == NULL || ff->state != FIRST_READY || ff->n_in == 0 || f->closing)
        return;
    ff->state = FIRST_RUNNING;
    links_check(ff);
    /* uv_queue_work fails only for a missing callback. */
    rc = uv_queue_work(f->loop, &ff->work, turn_work, turn_done);
    if (NEVER(rc != 0)) {
        ff->rc = TALLY_EIO;
        front_first_release(f, ff);
    }
}

/* Thread pool: the ledger closed, the lock let go. */
static void
release_work(uv_work_t *w)
{
    struct front_first *ff = w->data;

    sup_first_turn_close(ff->ledger);
    ff->ledger = NULL;
}

/* A message the turn answered, sent again by its child while the turn ran (a child sends again
 * after 20 ms without an answer): the answer has reached it since. */
static bool
answered(const struct front_first *ff, const struct proto_lease_msg *m)
{
    for (size_t i = 0; i < ff->n_in; i++) {
        const struct proto_lease_msg *a = &ff->in[i];

        if (a->type == m->type && a->origin.seq == m->origin.seq &&
            a->origin.incarnation == m->origin.incarnation &&
            strcmp(a->origin.child, m->origin.child) == 0)
            return true;
    }
    return false;
}

static void
release_done(uv_work_t *w, int status)
{
    struct front_first *ff = job_end(w, status);
    sup_front *f = ff != NULL ? ff->f : NULL;

    if (ff == NULL)
        return;
    if (!ff->made) {
        not_made(f, ff);
        return;
    }
    /* The supervisor starts when a message needs it (one sent meanwhile and not answered by
     * the turn, below, or a later one), and replays the turn: a tenant whose first leases last
     * starts none until then. */
    for (size_t i = 0; i < ff->n_later; i++) {
        if (!answered(ff, &ff->later[i]))
            send_supervisor(f, ff->tenant, &ff->later[i], 1);
    }
    drop(f, ff);
}

void
front_first_release(sup_front *f, struct front_first *ff)
{
    int rc;

    ff->state = FIRST_CLOSING;
    rc = uv_queue_work(f->loop, &ff->work, release_work, release_done);
    if (NEVER(rc != 0)) {
        sup_first_turn_close(ff->ledger);
        ff->ledger = NULL;
        release_done(&ff->work, 0);
    }
}

void
front_first_sweep(sup_front *f, int64_t now_mono_ms)
{
    for (uint32_t i = f->n_firsts; i-- > 0;) {
        struct front_first *ff = f->firsts[i];

        if (ff->state == FIRST_READY && ff->n_in == 0 &&
            now_mono_ms - ff->ready_mono_ms >= FIRST_WAIT_MS) {
            ff->rc = TALLY_ETIMEDOUT;
            front_first_release(f, ff);
        }
    }
}

void
front_first_close(sup_front *f)
{
    /* Those on the thread pool go at their job's end (one pending each); a ready one's ledger
     * is closed here: tallyd is closing, nothing else waits on the loop. */
    for (uint32_t i = f->n_firsts; i-- > 0;) {
        struct front_first *ff = f->firsts[i];

        if (ff->state == FIRST_READY) {
            sup_first_turn_close(ff->ledger);
            drop(f, ff);
        } else {
            f->pending++;
        }
    }
}

/*
 * tallyd's decision service (sup_front.h): auth against an in-memory copy of
 * the configuration, then the child counter of (tenant, endpoint). The copy is
 * replaced whenever the config database changes (checked every 250 ms and on
 * a RELOAD from `tally`), so a revocation is in force before `tally link
 * revoke` returns, and any change within a second even when the RELOAD could
 * not be delivered. Shadow mode is applied here, where every answer passes: a
 * refusal on a shadow endpoint goes out as an admission flagged
 * PROTO_F_SHADOW_REFUSED, after it was counted exactly as if enforced (a
 * refusal charges nothing, so nothing needs undoing).
 */
#include "sup_front_int.h"

#include "front_callers.h"
#include "front_obs.h"
#include "tally_log.h"

#include <sodium.h>
#include <string.h>
#include <time.h>

#define RELOAD_CHECK_MS 250

static void
forget_refusals(sup_front *f)
{
    uint32_t i;

    for (i = 0; i < f->n_children; i++) {
        if (f->children[i]->child != NULL)
            sup_child_forget_refusals(f->children[i]->child);
    }
}

/* True when what bounds the requests of `fc` differs between two configurations: the
 * tenant's plan as it has it (its limits, per-link limits, concurrency, overrides included),
 * its billing day, the endpoint's limits or algorithm for that plan, or the tenant or endpoint
 * is gone. */
static bool
limits_changed(const store_snapshot *old, const store_snapshot *cur, const struct front_child *fc)
{
    const struct store_snap_tenant *ta = store_snapshot_tenant(old, fc->tenant);
    const struct store_snap_tenant *tb = store_snapshot_tenant(cur, fc->tenant);
    struct tenant_endpoint ea, eb;

    if (ta == NULL || tb == NULL)
        return true;
    /* The plans as the tenant has them: its overrides and its billing day included. */
    if (!tenant_limits_equal(&ta->plan->limits, &tb->plan->limits) ||
        !tenant_limits_equal(&ta->plan->link_limits, &tb->plan->link_limits) ||
        ta->plan->concurrency != tb->plan->concurrency || ta->billing_day != tb->billing_day)
        return true;
    if (!store_snapshot_endpoint_for(old, ta, fc->endpoint, &ea) ||
        !store_snapshot_endpoint_for(cur, tb, fc->endpoint, &eb))
        return true;
    return !tenant_limits_equal(&ea.limits, &eb.limits) ||
           !tenant_limits_equal(&ea.tenant_limits, &eb.tenant_limits) ||
           ea.algorithm != eb.algorithm;
}

static uint64_t
fp_mix(uint64_t h, int64_t v)
{
    for (int i = 0; i < 8; i++) { /* FNV-1a over the value's bytes, low first */
        h ^= (uint64_t)v >> (8 * i) & 0xff;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t
fp_limits(uint64_t h, const struct tenant_limits *ls)
{
    h = fp_mix(h, ls->count);
    for (uint32_t i = 0; i < ls->count; i++)
        h = fp_mix(fp_mix(h, ls->v[i].n), ls->v[i].period_ms);
    return h;
}

int64_t
front_limits_fp(const store_snapshot *snap, const struct front_child *fc)
{
    const struct store_snap_tenant *t = store_snapshot_tenant(snap, fc->tenant);
    const struct tenant_endpoint *e;
    uint64_t h = 14695981039346656037ull;

    if (t == NULL)
        return 0;
    e = store_snapshot_endpoint(snap, t->plan->name, fc->endpoint);
    if (e == NULL)
        return 0;
    /* What limits_changed compares, and nothing else. */
    h = fp_limits(fp_limits(h, &t->plan->limits), &t->plan->link_limits);
    h = fp_mix(h, t->plan->concurrency);
    h = fp_limits(fp_limits(h, &e->limits), &e->tenant_limits);
    h = fp_mix(h, e->algorithm);
    return (int64_t)(h | 1); /* never 0: 0 is "no tenant or endpoint" */
}

/* A changed limit is in force from this reload on: the children it bounds stop using the
 * leases granted under the old one (their unused tokens go back to the supervisor, which
 * has read the new configuration before it grants again: it checks before every ACQUIRE).
 * Admitted in the window then never exceeds the new limit plus what was admitted before the
 * change, for a lowered limit as for a smaller plan or a removed endpoint. */
static void
recall_changed(sup_front *f, const store_snapshot *old, const store_snapshot *cur)
{
    struct sup_time now = front_now();

    for (uint32_t i = 0; i < f->n_children; i++) {
        struct front_child *fc = f->children[i];
        if (fc->child == NULL || !limits_changed(old, cur, fc))
            continue;
        sup_child_recall(fc->child, now);
        f->stats.recalls++;
        front_child_pump_soon(fc);
    }
}

int
sup_front_flush(sup_front *f, const char *tenant)
{
    struct sup_time now = front_now();

    if (f->snap == NULL || store_snapshot_tenant(f->snap, tenant) == NULL)
        return TALLY_ENOTFOUND;
    for (uint32_t i = 0; i < f->n_children; i++) {
        struct front_child *fc = f->children[i];

        if (fc->child == NULL || strcmp(fc->tenant, tenant) != 0)
            continue;
        sup_child_recall(fc->child, now);
        f->stats.recalls++;
        front_child_pump_soon(fc);
    }
    return TALLY_OK;
}

int
sup_front_reload(sup_front *f, bool force)
{
    store_snapshot *snap = NULL;
    int rc;

    if (!force && f->snap != NULL &&
        store_data_version(f->config) == store_snapshot_version(f->snap))
        return TALLY_OK;
    rc = store_snapshot_load(f->config, NULL, &snap);
    if (rc != TALLY_OK) {
        struct tally_log l;
        /* The first failure of a streak, then one a minute: never a line per poll. */
        f->stats.reload_failures++;
        if (f->stats.reload_fail_streak++ % 240 == 0 &&
            tally_log_begin(&l, TALLY_LOG_ERROR, "reload_failed")) {
            tally_log_str(&l, "error", tally_strerror(rc));
            tally_log_end(&l);
        }
        return rc;
    }
    f->stats.reload_fail_streak = 0;
    front_obs_reload(f->snap, snap, force);
    /* A refusal a child remembers (until its window ends) may be stale now: a
     * raised limit must be in force from the next request on. Once more at the
     * next poll, for a refusal the supervisor sent just before it saw the change
     * and that arrives after this reload. */
    if (f->snap != NULL && store_snapshot_version(f->snap) != store_snapshot_version(snap)) {
        recall_changed(f, f->snap, snap);
        forget_refusals(f);
        f->obs.forget_again = true;
    }
    store_snapshot_free(f->snap);
    f->snap = snap;
    f->stats.reloads++;
    front_fast_size(&f->fast, store_snapshot_link_count(snap)); /* a new epoch */
    f->stats.live_links = (uint32_t)store_snapshot_link_count(snap);
    return TALLY_OK;
}

static void
on_reload_timer(uv_timer_t *t)
{
    sup_front *f = t->data;

    if (f->obs.forget_again) {
        f->obs.forget_again = false;
        forget_refusals(f);
    }
    (void)sup_front_reload(f, false);
}

static void
on_mgr_frame(void *data, const char *tenant, const struct proto_frame *fr)
{
    if (fr->type >= PROTO_JOURNAL_SYNC) /* a supervisor's journal, in a cluster */
        front_cluster_journal(data, tenant, fr);
    else
        front_child_on_frame(data, tenant, fr);
}

static void
on_mgr_down(void *data, const char *tenant, int status)
{
    sup_front *f = data;

    (void)status;
    if (f->cl_on && f->cl_leading)
        f->cl.down(f->cl.ctx, tenant); /* the members' children are told too */
    front_child_on_down(f, tenant);
}

int
sup_front_open(uv_loop_t *loop, const struct sup_front_config *cfg, sup_front **out)
{
    static const struct sup_manager_cbs mgr_cbs = {on_mgr_frame, on_mgr_down};
    struct sup_manager_config mc;
    sup_front *f = NULL;
    int rc = TALLY_ENOMEM;

    *out = NULL;
    f = tally_calloc(1, sizeof(*f));
    if (f == NULL)
        goto out;
    f->loop = loop;
    f->cfg = *cfg;
    snprintf(f->data, sizeof(f->data), "%s", cfg->data);
    snprintf(f->exe, sizeof(f->exe), "%s", cfg->exe);
    f->cfg.data = f->data;
    f->cfg.exe = f->exe;
    if (f->cfg.wait_ms <= 0)
        f->cfg.wait_ms = SUP_CHILD_WAIT_MS_DEFAULT;
    if (f->cfg.cold_start_ms <= 0)
        f->cfg.cold_start_ms = 5000;
    if (f->cfg.child_idle_ms <= 0)
        f->cfg.child_idle_ms = SUP_FRONT_CHILD_IDLE_MS_DEFAULT;
    if (f->cfg.max_open_children == 0)
        f->cfg.max_open_children = SUP_FRONT_MAX_OPEN_CHILDREN_DEFAULT;
    rc = store_config_open(f->data, false, &f->config);
    if (rc == TALLY_OK)
        rc = store_key_load(f->data, &f->key);
    if (rc == TALLY_OK)
        rc = sup_front_reload(f, true);
    if (rc != TALLY_OK)
        goto out;
    front_use_open(f);
    memset(&mc, 0, sizeof(mc));
    mc.data_dir = f->data;
    mc.exe = f->exe;
    mc.durability = cfg->strict ? "strict" : "batched";
    mc.idle_exit_ms = cfg->idle_exit_ms;
    mc.max_supervisors = cfg->max_supervisors;
    mc.batch_sync_ms = cfg->strict ? 0 : cfg->batch_sync_ms;
    mc.journal_compact_rows = cfg->journal_compact_rows;
    mc.keep_lease_ms = cfg->keep_lease_ms;
    front_pool_open(f); /* before the fork server: its spares put ledgers there */
    rc = sup_manager_open(loop, &mc, &mgr_cbs, f, &f->mgr);
    if (rc == TALLY_OK)
        rc = front_callers_open(f, &f->callers);
    if (rc != TALLY_OK)
        goto out;
    rc = front_fast_open(&f->fast, loop, f);
    if (rc != TALLY_OK)
        goto out;
    uv_timer_init(loop, &f->reload_timer);
    f->reload_timer.data = f;
    uv_timer_start(&f->reload_timer, on_reload_timer, RELOAD_CHECK_MS, RELOAD_CHECK_MS);
    front_children_init(f);
    front_pumpq_init(f);
    front_pool_start(f);
    *out = f;
    f = NULL; /* ownership moved to the caller */
out:
    if (f != NULL) {
        front_fast_free(&f->fast);
        store_use_close(f->use);
        front_callers_free(f->callers);
        store_key_free(f->key);
        store_snapshot_free(f->snap);
        store_db_close(f->config);
        tally_free(f);
    }
    return rc;
}

/* Auth: the keyed hash of the token must name a live link allowed here. */
static const struct store_snap_link *
authenticate(sup_front *f, const char *token, const char *endpoint, int64_t wall_ms)
{
    unsigned char hash[TENANT_HASH_BYTES];
    const struct store_snap_link *l = NULL;

    if (tenant_token_hash(f->key, token, hash) == TALLY_OK)
        l = store_snapshot_link(f->snap, hash);
    sodium_memzero(hash, sizeof(hash));
    if (l != NULL && !store_snap_link_allows(l, endpoint, wall_ms))
        l = NULL;
    return l;
}

/* A check starts: counted, its fields reset; false (answered) when shutting down. */
static bool
req_begin(sup_front *f, struct sup_front_req *r)
{
    f->stats.checks++;
    r->start_ns = front_now_ns();
    r->owner = NULL;
    r->shadow = false;
    r->outage = false;
    r->degraded = false;
    r->child = NULL;
    r->creq = NULL;
    r->stage = SUP_FRONT_IDLE;
    r->give_up_ms = 0;
    r->next = r->prev = NULL;
    if (f->closing) {
        front_reply_status(f, r, PROTO_UNAVAILABLE, 1000, "shutting down");
        return false;
    }
    return true;
}

/* The request goes to its child (fc runs under `policy`). */
static void
submit(struct sup_front_req *r, const struct store_snap_link *l, struct front_child *fc,
       const struct tenant_endpoint *policy, int64_t cost)
{
    size_t n = strlen(l->id);

    memcpy(r->link, l->id, n + 1 < sizeof(r->link) ? n + 1 : sizeof(r->link));
    r->link[sizeof(r->link) - 1] = '\0';
    r->owner = fc;
    r->shadow = policy->shadow; /* from the current snapshot: a change applies at once */
    r->cost = cost > 0 ? cost : policy->cost;
    front_child_submit(fc, r);
}

/* A (token, endpoint) the memo knows, its link allowed there now (store_snap_link_allows,
 * as on the long way): the child runs the endpoint's policy of this snapshot. */
static void
check_known(sup_front *f, struct sup_front_req *r, const struct store_snap_link *l,
            struct front_child *fc, int64_t cost)
{
    if (cost < 0 || cost > TENANT_COST_MAX) {
        front_reply_status(f, r, PROTO_BAD_REQUEST, 0, "bad cost");
        return;
    }
    front_child_touch(f, fc);
    submit(r, l, fc, &fc->policy, cost);
}

void
sup_front_check(sup_front *f, struct sup_front_req *r, const char *token, const char *endpoint,
                int64_t cost)
{
    unsigned char tag[FRONT_TAG_BYTES];
    bool memo = false;
    const struct store_snap_link *l;
    const struct tenant_endpoint *policy = NULL;
    struct tenant_endpoint bound; /* the policy with its months on the tenant's billing day */
    struct front_child *fc = NULL;
    struct sup_time now = front_now();
    int rc;

    if (!req_begin(f, r))
        return;
    if (front_fast_tag(&f->fast, token, endpoint, tag)) {
        const struct front_memo_entry *e = front_fast_find(&f->fast, tag);
        if (e != NULL && store_snap_link_allows(e->link, endpoint, now.wall_ms)) {
            check_known(f, r, e->link, e->fc, cost);
            return;
        }
        memo = true;
    }
    l = authenticate(f, token, endpoint, now.wall_ms);
    if (l == NULL) {
        front_reply_status(f, r, PROTO_UNAUTHORIZED, 0, NULL);
        return;
    }
    if (tenant_name_valid(endpoint) &&
        store_snapshot_endpoint_for(f->snap, l->tenant, endpoint, &bound))
        policy = &bound;
    if (policy == NULL) {
        front_reply_status(f, r, PROTO_BAD_REQUEST, 0, "unknown endpoint");
        return;
    }
    if (cost < 0 || cost > TENANT_COST_MAX) {
        front_reply_status(f, r, PROTO_BAD_REQUEST, 0, "bad cost");
        return;
    }
    if (policy->key == TENANT_KEY_CALLER) { /* a token never keys a caller endpoint */
        front_reply_status(f, r, PROTO_BAD_REQUEST, 0, "missing X-Tally-Caller");
        return;
    }
    rc = front_child_get(f, l->tenant->id, policy, &fc);
    if (rc != TALLY_OK) { /* no memory for a new child: unavailable, not our bug */
        front_reply_status(f, r, PROTO_UNAVAILABLE, 1000, tally_strerror(rc));
        return;
    }
    /* The child follows the policy of this snapshot (a child whose new policy could not
     * be set goes the long way again next time). */
    if (memo && fc->policy_reloads == f->stats.reloads &&
        memcmp(&fc->policy, policy, sizeof(*policy)) == 0)
        front_fast_put(&f->fast, tag, l, fc);
    sodium_memzero(tag, sizeof(tag));
    submit(r, l, fc, policy, cost);
}

void
sup_front_check_callers(sup_front *f, struct sup_front_req *r, const char *token,
                        const char *endpoint, const char *const *callers, const size_t *lens,
                        size_t n, int64_t cost)
{
    if (!req_begin(f, r))
        return;
    front_callers_check(f->callers, r, token, endpoint, callers, lens, n, cost);
}

int
sup_front_endpoint_key(const sup_front *f, const char *endpoint)
{
    size_t n = 0;
    const struct tenant_endpoint *all = store_snapshot_endpoints(f->snap, &n);

    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i].name, endpoint) == 0)
            return (int)all[i].key;
    }
    return -1;
}

int
sup_front_release(sup_front *f, const char *token, int64_t slot_id)
{
    unsigned char hash[TENANT_HASH_BYTES];
    const struct store_snap_link *l = NULL;
    struct sup_time now = front_now();
    uint32_t i;

    if (tenant_token_hash(f->key, token, hash) == TALLY_OK)
        l = store_snapshot_link(f->snap, hash);
    sodium_memzero(hash, sizeof(hash));
    if (l == NULL || slot_id < 1)
        return l == NULL ? PROTO_UNAUTHORIZED : PROTO_BAD_REQUEST;
    /* A slot belongs to the link; any child of its tenant can carry the release. */
    for (i = 0; i < f->n_children; i++) {
        struct front_child *fc = f->children[i];
        if (fc->child != NULL && strcmp(fc->tenant, l->tenant->id) == 0 &&
            sup_child_slot_release(fc->child, l->id, slot_id, now) == TALLY_OK) {
            front_child_pump(fc);
            return PROTO_ADMITTED;
        }
    }
    return PROTO_BAD_REQUEST; /* no child of this tenant: no slot was ever taken here */
}

void
sup_front_cancel(sup_front *f, struct sup_front_req *r)
{
    if (r->creq != NULL)
        front_callers_cancel(f->callers, r);
    if (r->child != NULL)
        front_child_unpark(r->child, r);
    r->child = NULL;
    r->stage = SUP_FRONT_IDLE;
}

sup_manager *
sup_front_manager(sup_front *f)
{
    return f->mgr;
}

static void
front_free(sup_front *f)
{
    void (*cb)(void *) = f->close_cb;
    void *data = f->close_data;

    front_fast_free(&f->fast);
    front_callers_free(f->callers);
    store_use_close(f->use); /* every child is closed: no counter is bound */
    if (f->pool_on)
        store_pool_open_drop(); /* no fill, no first turn runs now */
    store_key_free(f->key);
    store_snapshot_free(f->snap);
    store_db_close(f->config);
    tally_free(f->children);
    tenant_index_release(&f->child_index);
    tally_free(f);
    if (cb != NULL)
        cb(data);
}

void
front_pending_done(sup_front *f)
{
    if (--f->pending == 0)
        front_free(f);
}

static void
on_manager_closed(void *data)
{
    front_pending_done(data);
}

/* The reload timer's, the idle sweep's, the pool's, the pump queue's and the clock handles'. */
static void
on_reload_timer_closed(uv_handle_t *h)
{
    sup_front *f = h->data;

    if (--f->pending == 0)
        front_free(f);
}

static void
on_callers_closed(sup_front *f)
{
    if (--f->pending == 0)
        front_free(f);
}

static void
on_children_closed(sup_front *f)
{
    front_pumpq_close(f, on_reload_timer_closed); /* every child is closed: nothing to pump */
    /* RETURNs are queued on the channels: closing them lets each supervisor read
     * them, commit and exit. */
    sup_manager_close(f->mgr, on_manager_closed, f);
}

void
sup_front_close(sup_front *f, void (*cb)(void *data), void *data)
{
    if (f == NULL || f->closing)
        return;
    f->closing = true;
    f->close_cb = cb;
    f->close_data = data;
    f->pending = 8; /* the manager, three timers, the caller authorities, two clock handles,
                     * the pump queue's idle handle */
    if (f->pool_busy)
        f->pending++;     /* and the pool's fill on the thread pool */
    front_first_close(f); /* and each first turn on it */
    front_fast_close(&f->fast, on_reload_timer_closed);
    front_callers_close(f->callers, on_callers_closed);
    uv_close((uv_handle_t *)&f->reload_timer, on_reload_timer_closed);
    uv_close((uv_handle_t *)&f->idle_timer, on_reload_timer_closed);
    front_pool_close(f, on_reload_timer_closed);
    front_children_close(f, on_children_closed);
}

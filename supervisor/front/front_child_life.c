/*
 * The child counters' lifecycle inside tallyd: found by (tenant, endpoint)
 * through an index (one lookup per request, whatever the number of tenants),
 * opened on first use with their own file and timer, their policy refreshed
 * on reloads, and closed at shutdown once their RETURNs are out and their
 * rows deleted.
 */
#include "sup_front_int.h"

#include <stdio.h>
#include <string.h>

#include "tally_log.h"

static const char *
child_key(const void *ctx, uint32_t item)
{
    const sup_front *f = ctx;

    return f->children[item]->key;
}

/* One lookup per request: an index, not a walk over every tenant's children. */
struct front_child *
front_child_find(sup_front *f, const char *tenant, const char *endpoint)
{
    char key[2 * TENANT_NAME_MAX + 2];
    int64_t i;

    if (f->child_index.slot == NULL)
        return NULL;
    snprintf(key, sizeof(key), "%s/%s", tenant, endpoint);
    i = tenant_index_find(&f->child_index, key, child_key, f);
    return i >= 0 ? f->children[i] : NULL;
}

/* Sizes the index for `cap` children and files those there are. */
static int
index_children(sup_front *f, uint32_t cap)
{
    struct tenant_index ix = {NULL, 0};

    if (tenant_index_init(&ix, cap) != TALLY_OK)
        return TALLY_ENOMEM;
    tenant_index_release(&f->child_index);
    f->child_index = ix;
    for (uint32_t i = 0; i < f->n_children; i++)
        ix.slot[tenant_index_pos(&ix, f->children[i]->key, child_key, f)] = i + 1;
    return TALLY_OK;
}

/* ---- lifecycle ---- */

static void
child_free(struct front_child *fc)
{
    sup_child_close(fc->child);
    front_store_close(fc);
    tally_free(fc);
}

/* A child's policy follows the configuration: on_unavailable, degraded limits,
 * cost and expensive take effect at the first request after a reload. */
static void
refresh_policy(struct front_child *fc, const struct tenant_endpoint *policy)
{
    if (fc->policy_reloads == fc->f->stats.reloads)
        return;
    fc->policy_reloads = fc->f->stats.reloads;
    if (memcmp(&fc->policy, policy, sizeof(*policy)) == 0)
        return;
    if (sup_child_set_policy(fc->child, policy) == TALLY_OK)
        fc->policy = *policy;
}

/* A child's file cannot be opened (corrupt, newer schema, no space): its
 * requests get 503 and every one tries again, so it heals when the file is
 * fixed; the log says so once a minute, naming the tenant and the file. */
static void
log_open_failed(sup_front *f, const char *tenant, const char *endpoint, int rc, const char *detail)
{
    char key[sizeof(f->open_failed)];
    int64_t now = front_now().mono_ms;
    struct tally_log l;

    snprintf(key, sizeof(key), "%s/%s", tenant, endpoint);
    if (strcmp(key, f->open_failed) == 0 && now - f->open_failed_mono_ms < 60000)
        return;
    snprintf(f->open_failed, sizeof(f->open_failed), "%s", key);
    f->open_failed_mono_ms = now;
    if (!tally_log_begin(&l, TALLY_LOG_ERROR, "child_open_failed"))
        return;
    tally_log_str(&l, "tenant", tenant);
    tally_log_str(&l, "endpoint", endpoint);
    tally_log_str(&l, "error", tally_strerror(rc));
    tally_log_str(&l, "detail", detail);
    tally_log_end(&l);
}

int
front_child_get(sup_front *f, const char *tenant, const struct tenant_endpoint *policy,
                struct front_child **out)
{
    struct sup_child_config cfg;
    struct front_child *fc = front_child_find(f, tenant, policy->name);
    int rc;

    *out = NULL;
    if (fc != NULL) {
        refresh_policy(fc, policy);
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
    if (f->child_index.slot == NULL && index_children(f, f->cap_children) != TALLY_OK)
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
    memset(&cfg, 0, sizeof(cfg));
    rc = front_store_open(fc, &cfg.incarnation);
    snprintf(cfg.tenant, sizeof(cfg.tenant), "%s", tenant);
    cfg.policy = *policy;
    cfg.persist_marks = f->cfg.strict;
    cfg.wait_ms = f->cfg.wait_ms;
    if (rc == TALLY_OK)
        rc = sup_child_open(&cfg, &fc->child);
    if (rc == TALLY_OK)
        rc = front_store_resume(fc);
    if (rc != TALLY_OK) {
        log_open_failed(f, tenant, policy->name, rc,
                        fc->store.db != NULL ? store_db_errmsg(fc->store.db) : store_open_errmsg());
        child_free(fc);
        return rc;
    }
    uv_timer_init(f->loop, &fc->timer);
    fc->timer.data = fc;
    fc->timer_live = true;
    f->children[f->n_children] = fc;
    f->child_index.slot[tenant_index_pos(&f->child_index, fc->key, child_key, f)] = ++f->n_children;
    *out = fc;
    return TALLY_OK;
}

void
front_child_release(struct front_child *fc)
{
    sup_front *f = fc->f;

    child_free(fc);
    if (--f->children_pending == 0 && f->children_done != NULL)
        f->children_done(f);
}

static void
on_child_timer_closed(uv_handle_t *h)
{
    struct front_child *fc = h->data;

    fc->closed = true;
    /* The last rows (RETURNed leases deleted) are written before the file closes. */
    if (!fc->store.busy && !front_store_flush(fc))
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
        while (fc->parked != NULL) {
            struct sup_front_req *r = fc->parked;
            front_child_unpark(fc, r);
            front_reply_status(f, r, PROTO_UNAVAILABLE, 1000, "shutting down");
        }
        sup_child_shutdown(fc->child, now);
        fc->timer_live = false;
        front_child_pump(fc); /* RETURNs out, rows deleted */
        uv_close((uv_handle_t *)&fc->timer, on_child_timer_closed);
    }
    f->n_children = 0;
    tenant_index_release(&f->child_index);
}

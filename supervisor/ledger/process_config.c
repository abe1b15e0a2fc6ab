/*
 * A supervisor's view of the configuration (sup_process_int.h): the tenant's snapshot read
 * from tally.db, its endpoints resolved against its plan, the link check the ledger asks,
 * a spare's connection to tally.db, opened before its tenant was known, and the reload
 * when tally.db changes (a timer while messages come, and before each ACQUIRE).
 */
#include "sup_ledger.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "store_config.h"
#include "store_paths.h"
#include "store_snapshot.h"
#include "sup_lease.h"
#include "tally_common.h"

#include "sup_process_int.h"

bool
sp_link_allows(void *ctx, const char *link_id, const char *endpoint, int64_t now_ms)
{
    struct sp *s = ctx;
    const struct store_snap_link *l = store_snapshot_link_by_id(s->snap, link_id);

    return l != NULL && strcmp(l->tenant->id, s->o->tenant) == 0 &&
           store_snap_link_allows(l, endpoint, now_ms);
}

int
sup_tenant_policies(const store_snapshot *snap, const struct store_snap_tenant *t,
                    struct tenant_endpoint **out, size_t *n)
{
    const struct tenant_plan *plan = t->plan;
    size_t all_n = 0;
    const struct tenant_endpoint *all = store_snapshot_endpoints(snap, &all_n);
    struct tenant_endpoint *eps = tally_calloc(all_n + 1, sizeof(*eps));

    *out = NULL;
    *n = 0;
    if (eps == NULL)
        return TALLY_ENOMEM;
    for (size_t i = 0; i < all_n; i++) {
        const struct tenant_endpoint *e = store_snapshot_endpoint(snap, plan->name, all[i].name);
        if (e == &all[i]) {
            eps[*n] = *e;
            store_endpoint_bind_month(&eps[(*n)++], t->billing_day);
        }
    }
    *out = eps;
    return TALLY_OK;
}

static int
resolve_endpoints(struct sp *s, const struct store_snap_tenant *t)
{
    tally_free(s->eps);
    s->eps = NULL;
    s->n_eps = 0;
    return sup_tenant_policies(s->snap, t, &s->eps, &s->n_eps);
}

/* A spare's connection to tally.db, opened before its tenant was known (sup_process_warm),
 * and the file it was opened on. Once read, it waits in warm_read for sp_config_release: its
 * close (a few hundred microseconds of a cold process) is not on the first answer's path. */
static store_db *warm_config, *warm_read;
static struct stat warm_st;

/* The file tally.db names now. */
static bool
config_stat(const char *data, struct stat *st)
{
    char path[STORE_PATH_MAX];

    return (size_t)snprintf(path, sizeof(path), "%s/" STORE_CONFIG_FILE, data) < sizeof(path) &&
           stat(path, st) == 0;
}

/* Takes the spare's connection if it is still on the file tally.db names now. */
static store_db *
warm_take(const char *data)
{
    struct stat st;
    store_db *db = warm_config;

    warm_config = NULL;
    if (db != NULL &&
        (!config_stat(data, &st) || st.st_dev != warm_st.st_dev || st.st_ino != warm_st.st_ino)) {
        store_db_close(db);
        db = NULL;
    }
    return db;
}

/* Reads the tenant's configuration with a connection of its own, closed at once: a
 * connection held open would cost every reader of the shared file (the kernel keeps one
 * list of locks on it). A spare's first read uses the connection it opened while it
 * waited. */
int
sp_load_config(struct sp *s, const struct store_snap_tenant **t)
{
    store_snapshot *snap = NULL;
    store_db *warm = warm_take(s->o->data);
    store_db *config = warm;
    int rc = config != NULL ? TALLY_OK : store_config_open(s->o->data, false, &config);

    if (rc == TALLY_OK)
        rc = store_snapshot_load(config, s->o->tenant, &snap);
    if (config == warm) {
        sp_config_release();
        warm_read = warm;
    } else {
        store_db_close(config);
    }
    if (rc != TALLY_OK)
        return rc;
    store_snapshot_free(s->snap);
    s->snap = snap;
    *t = store_snapshot_tenant(s->snap, s->o->tenant);
    if (*t == NULL)
        return TALLY_ENOTFOUND;
    return resolve_endpoints(s, *t);
}

void
sp_config_release(void)
{
    store_db_close(warm_read);
    warm_read = NULL;
}

void
sp_config_warm(const char *data)
{
    store_snapshot *snap = NULL;

    if (store_config_open(data, false, &warm_config) != TALLY_OK)
        return;
    /* Its schema read and its statements made: what every tenant's first read needs. */
    if (store_snapshot_load(warm_config, "", &snap) == TALLY_OK)
        store_snapshot_free(snap);
    if (!config_stat(data, &warm_st)) {
        store_db_close(warm_config);
        warm_config = NULL;
    }
}

void
sp_reload(struct sp *s)
{
    const struct store_snap_tenant *t = NULL;
    int rc;

    /* Only when tally.db changed (its stamp: no connection, no lock); in a cluster, once the
     * ledger is open (READY). */
    if (s->ledger == NULL || !store_config_stamp_changed(s->o->data, &s->config_stamp))
        return;
    rc = sp_load_config(s, &t);
    if (rc == TALLY_ENOTFOUND) {
        sp_log_event(s, TALLY_LOG_INFO, "tenant_removed");
        sp_flush(s);
        sp_stop(s, 0);
        return;
    }
    if (rc == TALLY_OK)
        rc = sup_ledger_configure(s->ledger, t->plan, s->eps, s->n_eps);
    if (rc == TALLY_OK) {
        sp_log_event(s, TALLY_LOG_DEBUG, "supervisor_reload");
    } else {
        /* Read again at the next look, whatever the files say then. */
        memset(&s->config_stamp, 0, sizeof(s->config_stamp));
        sp_log_error(s, TALLY_LOG_ERROR, "supervisor_reload_failed", rc, NULL);
    }
}

/* The reload timer. A supervisor that hears nothing stops looking at tally.db after a quiet
 * second: a thousand idle supervisors would otherwise wake four thousand times a second for
 * nothing (a fifth of a CPU on these machines). Nothing is lost: every ACQUIRE looks at the
 * stamp before it is decided, and the next message starts the timer again. */
void
sp_on_reload_tick(uv_timer_t *h)
{
    struct sp *s = h->data;

    if (s->shrink_due)
        sp_shrink(s);
    if (++s->quiet_ticks > RELOAD_QUIET_TICKS) {
        uv_timer_stop(h);
        return;
    }
    sp_reload(s);
}

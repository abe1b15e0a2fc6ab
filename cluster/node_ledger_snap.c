/*
 * The ledger copies in the log's snapshots (node_ledger.c holds the copies). A snapshot holds
 * every tenant's copy as it is at the snapshot's position: the journal, the staging table (a
 * compaction may be half sent) and the copy's own position. A member that gets a snapshot
 * instead of the batches puts each copy in place, unless its own is there or further already
 * (its own snapshot, restored at a restart), and empties a copy the snapshot does not have.
 */
#include "node_ledger_int.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store_paths.h"
#include "tally_log.h"

/* The snapshot's bytes are held in memory about three times (here, in the log's copy with its
 * header, in libraft's send or write): cluster_log takes a snapshot of any size (it crosses
 * as a raft stream, not as one channel message), so this bound is tally's own. */
#define SNAPSHOT_MAX ((size_t)512 << 20)
/* After a snapshot over SNAPSHOT_MAX, the next try waits this many batches (libraft asks again
 * after every apply once a snapshot is due). */
#define SNAPSHOT_RETRY 1000
/* The smallest tenant in a snapshot: name length, a 1-byte name, position, two counts. */
#define SNAP_TENANT_MIN (1 + 1 + 8 + 4 + 4)

/* The snapshot being made: a buffer that grows up to SNAPSHOT_MAX. */
struct out {
    uint8_t *p;
    size_t len, cap;
    int rc;
};

static void
out_put(struct out *o, const void *b, size_t len)
{
    if (o->rc != TALLY_OK)
        return;
    if (len > SNAPSHOT_MAX - o->len) {
        o->rc = TALLY_ETOOBIG;
        return;
    }
    if (len > o->cap - o->len) {
        size_t want = o->cap > 0 ? o->cap : 64 * 1024;
        uint8_t *p;

        while (want - o->len < len)
            want *= 2;
        p = tally_realloc(o->p, want);
        if (p == NULL) {
            o->rc = TALLY_ENOMEM;
            return;
        }
        o->p = p;
        o->cap = want;
    }
    if (len > 0)
        memcpy(o->p + o->len, b, len);
    o->len += len;
}

static void
out_u32(struct out *o, uint32_t v)
{
    uint8_t b[4];

    cluster__put_u32(b, v);
    out_put(o, b, sizeof(b));
}

static void
out_u64(struct out *o, uint64_t v)
{
    uint8_t b[8];

    cluster__put_u64(b, v);
    out_put(o, b, sizeof(b));
}

/* A list of records being written: its count goes in front once known. */
struct out_recs {
    struct out *o;
    size_t at; /* the count's offset */
    uint32_t count;
};

static int
out_rec(void *ctx, const uint8_t *rec, size_t len)
{
    struct out_recs *w = ctx;

    out_u32(w->o, (uint32_t)len);
    out_put(w->o, rec, len);
    w->count++;
    return w->o->rc;
}

static int
out_list(struct out *o, store_journal_copy *c, bool staged)
{
    struct out_recs w = {o, o->len, 0};
    int rc;

    out_u32(o, 0);
    rc = staged ? store_journal_copy_each_staged(c, out_rec, &w)
                : store_journal_each(store_journal_copy_db(c), out_rec, &w);
    if (rc == TALLY_OK && o->rc == TALLY_OK)
        cluster__put_u32(o->p + w.at, w.count);
    return rc != TALLY_OK ? rc : o->rc;
}

/* Whether DATA/tenants/T/ledger.db is a file (a tenant with a copy). */
static bool
has_copy(const cluster_node *n, const char *tenant)
{
    char path[STORE_PATH_MAX];
    struct stat sb;

    return store_path_tenant(n->data, tenant, "ledger.db", path, sizeof(path)) == TALLY_OK &&
           stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* One tenant into the snapshot: its name, position, journal and staging table. The copy is
 * the open one, or opened for this and closed again (the open ones stay those in use). */
static int
snapshot_tenant(cluster_node *n, struct out *o, const char *tenant)
{
    store_journal_copy *c = cluster__ledger_find(n->ledger, tenant), *own = NULL;
    char path[STORE_PATH_MAX];
    bool known = false;
    uint64_t at = 0;
    int rc = TALLY_OK;
    uint8_t tl = (uint8_t)strlen(tenant);

    if (c == NULL) {
        rc = store_path_tenant(n->data, tenant, "ledger.db", path, sizeof(path));
        if (rc == TALLY_OK)
            rc = store_journal_copy_open(path, &own);
        c = own;
    }
    if (rc == TALLY_OK)
        rc = store_journal_copy_applied(c, &known, &at);
    if (rc == TALLY_OK) {
        out_put(o, &tl, 1);
        out_put(o, tenant, tl);
        out_u64(o, at); /* 0 for a file no record reached (made by its supervisor) */
        rc = out_list(o, c, false);
    }
    if (rc == TALLY_OK)
        rc = out_list(o, c, true);
    if (rc != TALLY_OK && rc != TALLY_ETOOBIG) {
        struct tally_log l;

        if (tally_log_begin(&l, TALLY_LOG_ERROR, "cluster_ledger_snapshot_failed")) {
            tally_log_str(&l, "tenant", tenant);
            tally_log_str(&l, "error", tally_strerror(rc));
            tally_log_str(&l, "detail",
                          c != NULL ? cluster__ledger_detail(c) : store_open_errmsg());
            tally_log_end(&l);
        }
    }
    store_journal_copy_close_keep_wal(own);
    return rc;
}

static void
refused(const char *event, const char *why, uint64_t applied, size_t bytes)
{
    struct tally_log l;

    if (tally_log_begin(&l, TALLY_LOG_ERROR, event)) {
        tally_log_int(&l, "batch", (int64_t)applied);
        if (bytes > 0)
            tally_log_int(&l, "bytes", (int64_t)bytes);
        tally_log_str(&l, "reason", why);
        tally_log_end(&l);
    }
}

/* The ledger part of a snapshot: applied (8) | tenants (4) | per tenant: name length (1),
 * name, position (8), the journal's records and the staging table's (each a count (4) then
 * length (4) | record). Every tenant directory with a ledger.db is in it. The files are read
 * on the loop (libraft 0.15's raft_uv has no asynchronous snapshots), so the cost grows with
 * the ledgers; snapshots are rare (every 100,000 batches). */
int
cluster__ledger_snapshot(cluster_node *n, uint64_t applied, const uint8_t *head, size_t head_len,
                         uint8_t **buf, size_t *len)
{
    struct node_ledger *lg = n->ledger;
    struct out o = {NULL, 0, 0, TALLY_OK};
    char dir[STORE_PATH_MAX];
    struct dirent *e;
    uint32_t tenants = 0;
    size_t count_at;
    DIR *d = NULL;
    int rc = TALLY_OK;

    *buf = NULL;
    *len = 0;
    if (!ALWAYS(lg != NULL))
        return TALLY_EINVAL;
    if (lg->n_broken > 0 || lg->broken_all) {
        if (!lg->refusal_told)
            refused("cluster_ledger_snapshot_refused",
                    "a ledger copy is broken (see cluster_ledger_apply_failed): the log keeps "
                    "its batches until tallyd restarts",
                    applied, 0);
        lg->refusal_told = true;
        return TALLY_EIO;
    }
    if (applied < lg->retry_at)
        return TALLY_ETOOBIG; /* told when it was too large */
    out_put(&o, head, head_len);
    out_u64(&o, applied);
    count_at = o.len;
    out_u32(&o, 0);
    if ((size_t)snprintf(dir, sizeof(dir), "%s/tenants", n->data) < sizeof(dir))
        d = opendir(dir); /* none: no tenant yet */
    while (d != NULL && o.rc == TALLY_OK && rc == TALLY_OK && (e = readdir(d)) != NULL) {
        if (!tenant_name_valid(e->d_name) || !has_copy(n, e->d_name))
            continue;
        rc = snapshot_tenant(n, &o, e->d_name);
        tenants++;
    }
    if (d != NULL)
        closedir(d);
    if (rc == TALLY_OK)
        rc = o.rc;
    if (rc == TALLY_ETOOBIG) {
        refused("cluster_ledger_snapshot_failed",
                "the ledgers exceed the snapshot bound (512 MiB): the log keeps its batches",
                applied, o.len);
        lg->retry_at = applied + SNAPSHOT_RETRY;
    }
    if (rc != TALLY_OK) {
        tally_free(o.p);
        return rc;
    }
    cluster__put_u32(o.p + count_at, tenants);
    *buf = o.p;
    *len = o.len;
    return TALLY_OK;
}

/* A tenant as a snapshot holds it. */
struct snap_tenant {
    char name[TENANT_SIZE];
    uint64_t at;
    struct recs journal, staged;
};

static int
by_name(const void *a, const void *b)
{
    return strcmp(((const struct snap_tenant *)a)->name, ((const struct snap_tenant *)b)->name);
}

/* Whether `tenant` (a valid name) is one of t[0..count-1], sorted by name. */
static bool
snap_has(const struct snap_tenant *t, size_t count, const char *tenant)
{
    struct snap_tenant key;

    memset(&key, 0, sizeof(key));
    memcpy(key.name, tenant, strlen(tenant) + 1); /* a valid name fits */
    return count > 0 && bsearch(&key, t, count, sizeof(*t), by_name) != NULL;
}

/* Checks the ledger part whole before anything is written: *out (tally_malloc'd, sorted by
 * name) and *n_out the tenants. TALLY_OK, TALLY_EPROTO or TALLY_ENOMEM. */
static int
snap_parse(const uint8_t *p, size_t len, uint64_t *applied, struct snap_tenant **out, size_t *n_out)
{
    struct snap_tenant *t = NULL;
    size_t off = 12, count;
    int rc = TALLY_EPROTO;

    *out = NULL;
    *n_out = 0;
    if (len < 12)
        return TALLY_EPROTO;
    *applied = cluster__get_u64(p);
    count = cluster__get_u32(p + 8);
    if (count > (len - off) / SNAP_TENANT_MIN)
        return TALLY_EPROTO;
    if (count > 0 && (t = tally_calloc(count, sizeof(*t))) == NULL)
        return TALLY_ENOMEM;
    for (size_t i = 0; i < count; i++) {
        size_t tl, used = 0;

        tl = len - off >= 1 ? p[off] : 0;
        if (tl == 0 || tl >= TENANT_SIZE || len - off - 1 < tl + 8)
            goto out;
        memcpy(t[i].name, p + off + 1, tl);
        if (strlen(t[i].name) != tl || !tenant_name_valid(t[i].name))
            goto out;
        off += 1 + tl;
        t[i].at = cluster__get_u64(p + off);
        off += 8;
        if (cluster__ledger_recs_parse(p + off, len - off, &t[i].journal, &used) != TALLY_OK)
            goto out;
        off += used;
        if (cluster__ledger_recs_parse(p + off, len - off, &t[i].staged, &used) != TALLY_OK)
            goto out;
        off += used;
    }
    if (off != len)
        goto out;
    if (count > 0)
        qsort(t, count, sizeof(*t), by_name);
    for (size_t i = 1; i < count; i++)
        if (strcmp(t[i - 1].name, t[i].name) == 0)
            goto out;
    *out = t;
    *n_out = count;
    t = NULL;
    rc = TALLY_OK;
out:
    tally_free(t);
    return rc;
}

/* Puts `t`'s journal, staging table and position in its copy, unless the copy holds that
 * position already (the member's own snapshot at a restart: its copies are there or ahead). */
static void
restore_tenant(cluster_node *n, const struct snap_tenant *t, uint64_t applied, bool force)
{
    struct node_ledger *lg = n->ledger;
    store_journal_copy *c = NULL;
    struct recs journal = t->journal, staged = t->staged;
    const char *why;
    bool known = false;
    uint64_t at = 0;
    int rc = cluster__ledger_get(n, t->name, &c, &why);

    if (rc == TALLY_OK && (rc = store_journal_copy_applied(c, &known, &at)) != TALLY_OK)
        why = cluster__ledger_detail(c);
    if (rc == TALLY_OK && known && at >= t->at && !force && !cluster__ledger_broken(lg, t->name))
        return;
    if (rc == TALLY_OK && (rc = store_journal_copy_reset(
                               c, t->at, journal.count, cluster__ledger_recs_next, &journal,
                               staged.count, cluster__ledger_recs_next, &staged)) != TALLY_OK)
        why = cluster__ledger_detail(c);
    if (rc == TALLY_OK)
        cluster__ledger_unbreak(lg, t->name);
    else
        cluster__ledger_fail(lg, t->name, applied, rc, why);
}

/* A copy the snapshot does not have: the tenant had no ledger at the snapshot's position, so
 * its copy is emptied, unless records after that position are in it already. */
static void
restore_absent(cluster_node *n, const char *tenant, uint64_t applied, bool force)
{
    struct node_ledger *lg = n->ledger;
    store_journal_copy *c = NULL;
    const char *why;
    bool known = false;
    uint64_t at = 0;
    int rc = cluster__ledger_get(n, tenant, &c, &why);

    if (rc == TALLY_OK && (rc = store_journal_copy_applied(c, &known, &at)) != TALLY_OK)
        why = cluster__ledger_detail(c);
    if (rc == TALLY_OK && known && at > applied && !force && !cluster__ledger_broken(lg, tenant))
        return;
    if (rc == TALLY_OK &&
        (rc = store_journal_copy_reset(c, applied, 0, NULL, NULL, 0, NULL, NULL)) != TALLY_OK)
        why = cluster__ledger_detail(c);
    if (rc == TALLY_OK)
        cluster__ledger_unbreak(lg, tenant);
    else
        cluster__ledger_fail(lg, tenant, applied, rc, why);
}

int
cluster__ledger_snap_check(const uint8_t *p, size_t len)
{
    struct snap_tenant *t = NULL;
    uint64_t applied = 0;
    size_t count = 0;
    int rc = snap_parse(p, len, &applied, &t, &count);

    tally_free(t);
    return rc;
}

int
cluster__ledger_restore(cluster_node *n, const uint8_t *p, size_t len)
{
    struct node_ledger *lg = n->ledger;
    struct snap_tenant *t = NULL;
    char dir[STORE_PATH_MAX];
    uint64_t applied = 0;
    size_t count = 0;
    bool all = false;
    struct dirent *e;
    DIR *d;
    int rc;

    if (!ALWAYS(lg != NULL))
        return TALLY_EINVAL;
    rc = snap_parse(p, len, &applied, &t, &count);
    if (rc != TALLY_OK)
        return rc;
    /* After a failure nobody could remember, every copy is rewritten; the flag goes
     * (cluster__ledger_fail() sets it again if memory is still short). */
    all = lg->broken_all;
    lg->broken_all = false;
    for (size_t i = 0; i < count; i++)
        restore_tenant(n, &t[i], applied, all);
    if ((size_t)snprintf(dir, sizeof(dir), "%s/tenants", n->data) < sizeof(dir) &&
        (d = opendir(dir)) != NULL) {
        while ((e = readdir(d)) != NULL)
            if (tenant_name_valid(e->d_name) && has_copy(n, e->d_name) &&
                !snap_has(t, count, e->d_name))
                restore_absent(n, e->d_name, applied, all);
        closedir(d);
    }
    /* A broken tenant with no file and none in the snapshot is as it should be: no ledger. */
    for (size_t i = lg->n_broken; i > 0; i--) {
        char tenant[TENANT_SIZE];

        memcpy(tenant, lg->broken[i - 1], TENANT_SIZE); /* unbreak moves the list */
        if (!has_copy(n, tenant) && !snap_has(t, count, tenant))
            cluster__ledger_unbreak(lg, tenant);
    }
    tally_free(t);
    return TALLY_OK;
}

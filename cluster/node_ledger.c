/*
 * Every member's copy of every tenant's ledger (cluster_node_int.h: LEDGER records). The
 * leader's supervisors hand each turn's journal records to tallyd, which appends them to the
 * log; every member, the leader included, writes each committed LEDGER record into its own
 * DATA/tenants/T/ledger.db (store_journal_copy: the `journal` table a supervisor replays), in
 * log order, so that a supervisor started on whichever member leads next replays the ledger
 * as it was. Each file keeps the log position of the last record it holds, written in that
 * record's transaction: a record the log hands over again (a restart replays from the last
 * snapshot) is skipped. A compaction travels as BEGIN, CHUNKs and END: the chunks fill a
 * staging table and END swaps it in at once, so a supervisor never replays half of one.
 *
 * The writes run on the loop, in the apply callback: the log's snapshot is taken on the loop
 * between two applies and must see every record applied so far (with writes on the thread
 * pool it would have to wait for them). Each is one transaction of a file at
 * synchronous=NORMAL, which syncs nothing (a checkpoint, every 200 pages of WAL, does): the
 * log is the durable copy, and a copy that lost its last commits to a power loss gets them
 * again from the log, or the whole copy from the snapshot, when tallyd starts. The 16 files
 * used last stay open, so a busy tenant does not open its file for each record.
 *
 * Snapshots carry every copy (cluster__ledger_snapshot): a member that gets a snapshot instead
 * of the batches (a wiped disk, a long absence) gets the ledgers with it.
 */
#include "node_ledger_int.h"

#include <stdio.h>
#include <string.h>

#include "store_paths.h"
#include "tally_log.h"

/* ---- records ---- */

/* Checks the list at p (len bytes available): *used its bytes. TALLY_OK or TALLY_EPROTO. */
int
cluster__ledger_recs_parse(const uint8_t *p, size_t len, struct recs *r, size_t *used)
{
    size_t off = 4;

    if (len < 4)
        return TALLY_EPROTO;
    r->count = cluster__get_u32(p);
    for (uint32_t i = 0; i < r->count; i++) {
        uint32_t l;

        if (len - off < 4)
            return TALLY_EPROTO;
        l = cluster__get_u32(p + off);
        off += 4;
        if (l == 0 || l > STORE_RECORD_MAX || len - off < l)
            return TALLY_EPROTO;
        off += l;
    }
    r->p = p + 4;
    r->len = off - 4;
    r->at = 0;
    *used = off;
    return TALLY_OK;
}

/* store_record_encode_fn over a parsed list: the store takes records 0..count-1 in order. */
int
cluster__ledger_recs_next(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len)
{
    struct recs *r = ctx;
    uint32_t l;

    (void)i;
    if (NEVER(r->len - r->at < 4))
        return TALLY_EINVAL;
    l = cluster__get_u32(r->p + r->at);
    if (NEVER(l > cap || r->len - r->at - 4 < l))
        return TALLY_EINVAL;
    memcpy(buf, r->p + r->at + 4, l);
    r->at += 4 + (size_t)l;
    *len = l;
    return TALLY_OK;
}

/* ---- the open copies and the broken ones ---- */

bool
cluster__ledger_broken(const struct node_ledger *lg, const char *tenant)
{
    if (lg->broken_all)
        return true;
    for (size_t i = 0; i < lg->n_broken; i++)
        if (strcmp(lg->broken[i], tenant) == 0)
            return true;
    return false;
}

int
cluster__ledger_ready(cluster_node *n, const char *tenant)
{
    if (n->ledger == NULL || !cluster__ledger_broken(n->ledger, tenant))
        return TALLY_OK;
    cluster__log_member("cluster_ledger_copy_broken", n->st.self, NULL,
                        "no supervisor starts from this member's copy of the tenant's ledger "
                        "until a snapshot or a restart heals it");
    return TALLY_EUNAVAIL;
}

void
cluster__ledger_unbreak(struct node_ledger *lg, const char *tenant)
{
    for (size_t i = 0; i < lg->n_broken; i++) {
        if (strcmp(lg->broken[i], tenant) != 0)
            continue;
        memmove(lg->broken[i], lg->broken[lg->n_broken - 1], TENANT_SIZE);
        lg->n_broken--;
        break;
    }
    if (lg->n_broken == 0 && !lg->broken_all)
        lg->refusal_told = false;
}

static void
drop_copy(struct node_ledger *lg, const char *tenant)
{
    for (int i = 0; i < OPEN_MAX; i++) {
        if (strcmp(lg->open[i].tenant, tenant) != 0)
            continue;
        store_journal_copy_close_keep_wal(lg->open[i].c); /* no checkpoint: nothing synced */
        memset(&lg->open[i], 0, sizeof(lg->open[i]));
    }
}

/* The copy of `tenant` failed to take the record at position `count`: logged, and the copy is
 * broken (see struct node_ledger). Its handle is closed: the next use opens the file again. */
void
cluster__ledger_fail(struct node_ledger *lg, const char *tenant, uint64_t count, int rc,
                     const char *detail)
{
    struct tally_log l;

    if (tally_log_begin(&l, TALLY_LOG_ERROR, "cluster_ledger_apply_failed")) {
        tally_log_str(&l, "tenant", tenant);
        tally_log_int(&l, "batch", (int64_t)count);
        tally_log_str(&l, "error", tally_strerror(rc));
        tally_log_str(&l, "detail", detail);
        tally_log_str(&l, "effect",
                      "this member's copy of the ledger stops here until a "
                      "restart or a snapshot; no snapshot is taken meanwhile");
        tally_log_end(&l);
    }
    drop_copy(lg, tenant);
    if (cluster__ledger_broken(lg, tenant))
        return;
    if (lg->n_broken == lg->cap_broken) {
        size_t want = lg->cap_broken == 0 ? 8 : lg->cap_broken * 2;
        void *p = tally_realloc(lg->broken, want * TENANT_SIZE);

        if (p == NULL) {
            lg->broken_all = true;
            return;
        }
        lg->broken = p;
        lg->cap_broken = want;
    }
    snprintf(lg->broken[lg->n_broken++], TENANT_SIZE, "%s", tenant);
}

/* The open copy of `tenant`, or NULL. */
store_journal_copy *
cluster__ledger_find(struct node_ledger *lg, const char *tenant)
{
    for (int i = 0; i < OPEN_MAX; i++) {
        if (lg->open[i].c != NULL && strcmp(lg->open[i].tenant, tenant) == 0) {
            lg->open[i].used = ++lg->tick;
            return lg->open[i].c;
        }
    }
    return NULL;
}

/* The copy of `tenant`, opened (its directory and file created when missing) if it is not
 * open yet; the least recently used one is closed to make room. *why: what failed. */
int
cluster__ledger_get(cluster_node *n, const char *tenant, store_journal_copy **out, const char **why)
{
    struct node_ledger *lg = n->ledger;
    char path[STORE_PATH_MAX];
    int slot = 0;
    int rc;

    *out = cluster__ledger_find(lg, tenant);
    *why = "no detail";
    if (*out != NULL)
        return TALLY_OK;
    rc = store_path_tenant(n->data, tenant, "ledger.db", path, sizeof(path));
    if (rc == TALLY_OK && (rc = store_tenant_dirs(n->data, tenant)) != TALLY_OK)
        *why = "the tenant's directory could not be made";
    if (rc != TALLY_OK)
        return rc;
    for (int i = 1; i < OPEN_MAX; i++)
        if (lg->open[i].used < lg->open[slot].used)
            slot = i; /* a free slot's is 0 */
    if (lg->open[slot].c != NULL) {
        store_journal_copy_close_keep_wal(lg->open[slot].c);
        memset(&lg->open[slot], 0, sizeof(lg->open[slot]));
    }
    rc = store_journal_copy_open(path, out);
    if (rc != TALLY_OK) {
        *why = store_open_errmsg();
        return rc;
    }
    snprintf(lg->open[slot].tenant, TENANT_SIZE, "%s", tenant);
    lg->open[slot].c = *out;
    lg->open[slot].used = ++lg->tick;
    return TALLY_OK;
}

int
cluster__ledger_init(cluster_node *n)
{
    n->ledger = tally_calloc(1, sizeof(*n->ledger));
    return n->ledger != NULL ? TALLY_OK : TALLY_ENOMEM;
}

void
cluster__ledger_close(cluster_node *n)
{
    struct node_ledger *lg = n->ledger;

    if (lg == NULL)
        return;
    for (int i = 0; i < OPEN_MAX; i++)
        store_journal_copy_close(lg->open[i].c); /* checkpointed: tallyd stops */
    tally_free(lg->broken);
    tally_free(lg);
    n->ledger = NULL;
}

/* ---- LEDGER records ---- */

static void
ignored(uint64_t count, const char *tenant, const char *why)
{
    struct tally_log l;

    if (tally_log_begin(&l, TALLY_LOG_WARN, "cluster_ledger_record_ignored")) {
        tally_log_int(&l, "batch", (int64_t)count);
        if (tenant != NULL)
            tally_log_str(&l, "tenant", tenant);
        tally_log_str(&l, "reason", why);
        tally_log_end(&l);
    }
}

void
cluster__ledger_apply(cluster_node *n, uint64_t count, const uint8_t *p, size_t len)
{
    struct node_ledger *lg = n->ledger;
    char tenant[TENANT_SIZE];
    store_journal_copy *c = NULL;
    const char *why;
    struct recs r;
    size_t tl, used = 0;
    uint8_t op;
    int rc;

    if (len < 1) {
        ignored(count, NULL, "no operation");
        return;
    }
    op = p[0];
    if (op == LEDGER_NOOP)
        return; /* a barrier: its apply is the point */
    if (op != LEDGER_APPEND && op != LEDGER_BEGIN && op != LEDGER_CHUNK && op != LEDGER_END) {
        ignored(count, NULL, "unknown operation");
        return;
    }
    /* The log's bytes are trusted (a majority took them), but a record from a newer or a
     * broken leader is decoded with care all the same: every member ignores it alike. */
    tl = len >= 2 ? p[1] : 0;
    if (tl == 0 || tl >= TENANT_SIZE || len - 2 < tl) {
        ignored(count, NULL, "tenant name cut or too long");
        return;
    }
    memcpy(tenant, p + 2, tl);
    tenant[tl] = '\0';
    if (strlen(tenant) != tl || !tenant_name_valid(tenant)) {
        ignored(count, tenant, "invalid tenant name");
        return;
    }
    p += 2 + tl;
    len -= 2 + tl;
    if (op == LEDGER_APPEND || op == LEDGER_CHUNK) {
        if (cluster__ledger_recs_parse(p, len, &r, &used) != TALLY_OK || used != len) {
            ignored(count, tenant, "malformed records");
            return;
        }
    } else if (len != 0) {
        ignored(count, tenant, "unexpected body");
        return;
    }
    if (!ALWAYS(lg != NULL) || cluster__ledger_broken(lg, tenant))
        return; /* logged when it broke */
    rc = cluster__ledger_get(n, tenant, &c, &why);
    if (rc != TALLY_OK) {
        cluster__ledger_fail(lg, tenant, count, rc, why);
        return;
    }
    switch (op) {
    case LEDGER_APPEND:
        rc = store_journal_copy_append(c, count, r.count, cluster__ledger_recs_next, &r);
        break;
    case LEDGER_BEGIN:
        rc = store_journal_copy_stage_begin(c, count);
        break;
    case LEDGER_CHUNK:
        rc = store_journal_copy_stage(c, count, r.count, cluster__ledger_recs_next, &r);
        break;
    default:
        rc = store_journal_copy_stage_end(c, count);
        break;
    }
    if (rc != TALLY_OK)
        cluster__ledger_fail(lg, tenant, count, rc, cluster__ledger_detail(c));
}

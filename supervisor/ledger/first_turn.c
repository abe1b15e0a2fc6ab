/*
 * A never-seen tenant's first turn, made by tallyd on its thread pool instead of by the
 * tenant's supervisor (sup_ledger.h, docs/DESIGN.md §4 "First turns"). The writer is the
 * same: whoever holds the tenant's supervisor.lock. Under that lock, when the tenant has no
 * ledger yet, the open makes one (from DATA/pool when it holds some), opens the same
 * sup_ledger a supervisor opens and commits its first epoch; the run handles the requests
 * given, commits their records in one transaction and only then hands the replies back. The
 * lock goes with the close; the supervisor, started when a message needs it, replays that
 * journal and starts the next epoch, as after any restart.
 */
#include "sup_ledger.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_journal.h"
#include "store_paths.h"
#include "sup_journal_codec.h"
#include "sup_lease.h"

#include "sup_process_int.h" /* sp_wall_ms: the supervisor's clock */

/* A store_record_encode_fn over an array of records (ctx). */
static int
encode_at(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len)
{
    const struct sup_record *v = ctx;

    return sup_record_encode(&v[i], buf, cap, len);
}

struct sup_first_ledger {
    int lock_fd;
    store_db *journal;
    sup_ledger *ledger;
    struct sup_record *recs; /* SUP_FIRST_TURN_MAX + 1 of them */
    size_t n_recs;           /* the epoch's, waiting for the turn's commit */
};

/* Records committed in one transaction. */
static int
commit(sup_first_ledger *fl, const struct sup_records *batch)
{
    return store_journal_append(fl->journal, batch->count, encode_at, batch->v);
}

/* Durable at each commit in both modes: the turn's answers leave once it returns. Locked
 * exclusively while open (its WAL index in memory: no -shm file made on the way; a reader of
 * the ledger waits the few milliseconds of the turn). */
#define LEDGER_FLAGS                                                                               \
    (STORE_OPEN_CREATE | STORE_OPEN_PERSIST_WAL | STORE_OPEN_PRIVATE | STORE_OPEN_EXCLUSIVE |      \
     STORE_OPEN_SYNC_FULL)

int
sup_first_turn_pool_open(unsigned want, unsigned *made)
{
    return store_journal_pool_open(LEDGER_FLAGS, want, made);
}

int
sup_first_turn_open(const char *data, const struct sup_first_turn *t, sup_first_ledger **out)
{
    static const struct store_upgrade upgrade = {sup_record_upgrade, NULL};
    char path[STORE_PATH_MAX];
    struct sup_ledger_config cfg;
    struct sup_records batch = {NULL, 0, 1};
    sup_first_ledger *fl = tally_calloc(1, sizeof(*fl));
    struct stat sb;
    int rc = fl != NULL ? TALLY_OK : TALLY_ENOMEM;

    *out = NULL;
    if (fl != NULL) {
        fl->lock_fd = -1;
        fl->recs = tally_calloc(SUP_FIRST_TURN_MAX + 1, sizeof(*fl->recs));
        if (fl->recs == NULL)
            rc = TALLY_ENOMEM;
    }
    if (rc == TALLY_OK)
        rc = store_tenant_dirs(data, t->tenant);
    if (rc == TALLY_OK)
        rc = store_path_tenant(data, t->tenant, "supervisor.lock", path, sizeof(path));
    if (rc == TALLY_OK)
        rc = store_lock_take(path, &fl->lock_fd);
    if (rc == TALLY_OK)
        rc = store_path_tenant(data, t->tenant, "ledger.db", path, sizeof(path));
    /* A ledger, even an empty one, is its supervisor's to replay. */
    if (rc == TALLY_OK && stat(path, &sb) == 0)
        rc = TALLY_EEXIST;
    else if (rc == TALLY_OK && errno != ENOENT)
        rc = TALLY_EIO;
    if (rc == TALLY_OK)
        rc = store_journal_open(path, LEDGER_FLAGS, &upgrade, &fl->journal);
    if (rc == TALLY_OK) {
        memset(&cfg, 0, sizeof(cfg));
        snprintf(cfg.tenant, sizeof(cfg.tenant), "%s", t->tenant);
        cfg.plan = *t->plan;
        cfg.endpoints = t->endpoints;
        cfg.endpoint_count = t->endpoint_count;
        cfg.link_allows = t->link_allows;
        cfg.link_ctx = t->link_ctx;
        cfg.keep_ttl_ms = t->keep_lease_ms;
        rc = sup_ledger_open(&cfg, &fl->ledger);
    }
    /* The epoch's record waits for the turn's commit, as a supervisor's waits for its first
     * turn's: a commit here would sync the disk while the child's file is being made beside
     * it (the two stall each other), and a turn never made leaves nothing behind. */
    batch.v = fl != NULL ? fl->recs : NULL;
    if (rc == TALLY_OK)
        rc = sup_ledger_start(fl->ledger, sp_wall_ms(), &batch);
    if (rc == TALLY_OK)
        fl->n_recs = batch.count;
    if (rc != TALLY_OK) {
        sup_first_turn_close(fl);
        return rc;
    }
    *out = fl;
    return TALLY_OK;
}

void
sup_first_turn_close(sup_first_ledger *fl)
{
    if (fl == NULL)
        return;
    sup_ledger_close(fl->ledger);
    /* The WAL stays as it is (no checkpoint on the way out): the supervisor reads it. */
    store_db_close_keep_wal(fl->journal);
    if (fl->lock_fd >= 0)
        close(fl->lock_fd);
    tally_free(fl->recs);
    tally_free(fl);
}

int
sup_first_turn_run(sup_first_ledger *fl, const struct proto_lease_msg *in, size_t n_in,
                   struct proto_lease_msg *out, size_t cap, size_t *n)
{
    struct sup_records batch = {NULL, 0, SUP_FIRST_TURN_MAX + 1};
    int64_t now = sp_wall_ms();
    int rc = TALLY_OK;

    *n = 0;
    if (fl == NULL || fl->ledger == NULL || n_in == 0 || n_in > SUP_FIRST_TURN_MAX || cap < n_in)
        return TALLY_EINVAL;
    batch.v = fl->recs;
    batch.count = fl->n_recs;
    for (size_t i = 0; i < n_in && rc == TALLY_OK; i++)
        rc = sup_ledger_handle(fl->ledger, now, &in[i], &out[i], &batch);
    if (rc == TALLY_OK)
        rc = commit(fl, &batch);
    if (rc != TALLY_OK) {
        /* Nothing answered: the requests go to the supervisor, which replays what is durable.
         * The ledger in memory may be ahead of its file: it takes no second turn. */
        sup_ledger_close(fl->ledger);
        fl->ledger = NULL;
        return rc;
    }
    /* Then the RECALLs that fit (one needs no record and may be lost: the next ACQUIRE that
     * runs short finds it again). */
    *n = n_in;
    while (*n < cap && sup_ledger_next_recall(fl->ledger, &out[*n]) == TALLY_OK)
        (*n)++;
    return TALLY_OK;
}

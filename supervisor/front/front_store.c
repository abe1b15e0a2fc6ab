/*
 * A child counter's own SQLite file: its lease rows (with their durable marks)
 * and an incarnation counter. Opening it, bumping the incarnation and resuming
 * the rows happen on the loop thread when the child is created; after that
 * every write runs on the libuv thread pool, one batch at a time per child, so
 * an fsync (FULL in strict mode) never stalls the loop that answers requests.
 * While a batch is in flight the loop thread does not touch the connection.
 * The file and its SQL are store_child's; the rows' bytes are the child's codec
 * (supervisor/child/child_codec.c), encoded on the thread pool with the write.
 */
#include "sup_front_int.h"

#include <stdio.h>
#include <string.h>

#include "store_child.h"
#include "store_paths.h"
#include "sup_child_codec.h"
#include "tally_log.h"

static const struct store_upgrade child_upgrade = {sup_child_rec_upgrade, NULL};

int
front_store_open(struct front_child *fc, uint64_t *incarnation)
{
    sup_front *f = fc->f;
    char path[STORE_PATH_MAX];
    int rc = store_tenant_dirs(f->data, fc->tenant);

    if (rc == TALLY_OK)
        rc = store_path_endpoint_db(f->data, fc->tenant, fc->endpoint, path, sizeof(path));
    if (rc == TALLY_OK)
        rc = store_child_open(path,
                              STORE_OPEN_CREATE | STORE_OPEN_PRIVATE |
                                  (f->cfg.strict ? STORE_OPEN_SYNC_FULL : 0),
                              &child_upgrade, &fc->store.db);
    /* Every start is a new incarnation. */
    if (rc == TALLY_OK)
        rc = store_child_incarnation_next(fc->store.db, incarnation);
    /* Durable in both modes: after an OS crash a reused incarnation would be
     * answered from the supervisor's dedupe window with grants already spent. */
    if (rc == TALLY_OK && !f->cfg.strict)
        rc = store_db_sync(fc->store.db);
    return rc;
}

struct resume_ctx {
    sup_child *child;
    struct sup_time now; /* one instant for every row */
};

/* A store_child_visit_fn: one stored row resumed into the child. */
static int
resume_one(void *ctx, uint64_t id, const uint8_t *p, size_t len)
{
    struct resume_ctx *r = ctx;
    struct sup_child_lease_rec rec;
    int rc;

    (void)id;
    if (sup_child_rec_decode(p, len, &rec) != TALLY_OK)
        return TALLY_OK; /* not ours: its lease expires as spent at the supervisor */
    rc = sup_child_resume(r->child, &rec, r->now);
    return rc == TALLY_EINVAL ? TALLY_OK : rc;
}

int
front_store_resume(struct front_child *fc)
{
    struct resume_ctx r = {fc->child, front_now()};

    return store_child_each(fc->store.db, resume_one, &r);
}

/* A store_child_write_fn over the batch (ctx): row i's id and bytes, or a delete. */
static int
encode_write(void *ctx, size_t i, uint64_t *id, uint8_t *buf, size_t cap, size_t *len)
{
    const struct sup_child_persist *p = &((const struct front_store *)ctx)->batch[i];

    *id = p->rec.lease_id;
    *len = 0;
    return p->op == SUP_PERSIST_PUT ? sup_child_rec_encode(&p->rec, buf, cap, len) : TALLY_OK;
}

/* Thread pool: writes the batch in one transaction. Touches only the batch and
 * the connection, which the loop thread leaves alone while busy is set. */
static void
write_batch(uv_work_t *w)
{
    struct front_child *fc = w->data;
    struct front_store *s = &fc->store;

    s->rc = store_child_write(s->db, s->n, encode_write, s);
}

static void
log_write(const struct front_child *fc, enum tally_log_level level, const char *event, int rc,
          uint64_t attempts)
{
    struct tally_log l;

    if (!tally_log_begin(&l, level, event))
        return;
    tally_log_str(&l, "tenant", fc->tenant);
    tally_log_str(&l, "endpoint", fc->endpoint);
    if (rc != TALLY_OK)
        tally_log_str(&l, "error", tally_strerror(rc));
    if (attempts > 0)
        tally_log_int(&l, "failed_attempts", (int64_t)attempts);
    tally_log_end(&l);
}

/* Loop thread: the batch is durable (or failed); tell the child, then go on.
 * busy stays set while the child hears of it: a request re-run here may want
 * another write, which waits for the pump below instead of reusing the batch
 * this loop is reading. */
static void
batch_done(uv_work_t *w, int status)
{
    struct front_child *fc = w->data;
    struct front_store *s = &fc->store;
    size_t i;

    if (status != 0 && s->rc == TALLY_OK)
        s->rc = TALLY_EIO;
    if (s->rc != TALLY_OK) {
        /* Not durable: the child keeps waiting for these writes (its requests are
         * given up at their deadline: degraded or 503 per policy) and the same
         * batch is tried again after a backoff, so the child heals when the disk
         * does. One log line when it starts failing, one when it recovers. */
        if (s->failing++ == 0)
            log_write(fc, TALLY_LOG_ERROR, "child_write_failed", s->rc, 0);
        s->failures++;
        s->backoff_ms = s->backoff_ms == 0 ? 100 : s->backoff_ms * 2;
        if (s->backoff_ms > 2000)
            s->backoff_ms = 2000;
        s->retry_mono_ms = front_now().mono_ms + s->backoff_ms;
        s->busy = false;
        if (fc->closed) {
            /* Shutting down: leave the rows as they are on disk. An undeleted row is
             * resumed next time or expires as spent; nothing is admitted twice. */
            s->n = 0;
            front_child_release(fc);
            return;
        }
        front_child_pump(fc);
        return;
    }
    if (s->failing > 0)
        log_write(fc, TALLY_LOG_INFO, "child_write_recovered", TALLY_OK, s->failing);
    s->failing = 0;
    s->backoff_ms = 0;
    s->writes += s->n;
    for (i = 0; i < s->n; i++) {
        struct sup_child_event ev;
        memset(&ev, 0, sizeof(ev));
        sup_child_persisted(fc->child, &s->batch[i], &ev);
        if (ev.kind == SUP_EV_LINK)
            front_child_rerun_link(fc, ev.link);
    }
    s->n = 0;
    s->busy = false;
    if (fc->closed) {
        if (!front_store_flush(fc))
            front_child_release(fc);
        return;
    }
    front_child_pump(fc);
}

bool
front_store_flush(struct front_child *fc)
{
    struct front_store *s = &fc->store;
    int rc;

    if (s->busy)
        return false;
    if (s->n > 0 && front_now().mono_ms < s->retry_mono_ms)
        return false; /* a failed batch waits for its retry (front_store_wake_ms) */
    while (s->n < FRONT_STORE_BATCH &&
           sup_child_next_persist(fc->child, &s->batch[s->n]) == TALLY_OK)
        s->n++;
    if (s->n == 0)
        return false;
    s->work.data = fc;
    s->rc = TALLY_OK;
    /* uv_queue_work fails only for a missing callback. */
    rc = uv_queue_work(fc->f->loop, &s->work, write_batch, batch_done);
    if (NEVER(rc != 0))
        return false;
    s->busy = true;
    return true;
}

int64_t
front_store_wake_ms(const struct front_child *fc)
{
    const struct front_store *s = &fc->store;

    return !s->busy && s->n > 0 ? s->retry_mono_ms : INT64_MAX;
}

void
front_store_close(struct front_child *fc)
{
    store_db_close(fc->store.db);
    fc->store.db = NULL;
}

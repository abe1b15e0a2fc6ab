/*
 * A child counter's own SQLite file: its lease rows (with their durable marks)
 * and an incarnation counter. Everything that touches the disk runs on the
 * libuv thread pool, one job at a time per child: the open (directories, file,
 * migration, the incarnation bumped and synced, the rows read and decoded),
 * every batch of writes, and the close of an idle child (which checkpoints and
 * removes its WAL), so neither an fsync (FULL in strict mode) nor a first
 * request of a tenant stalls the loop that answers requests. The loop only
 * resumes the decoded rows into the new state machine.
 * While a batch is in flight the loop thread does not touch the connection.
 * The file and its SQL are store_child's; the rows' bytes are the child's codec
 * (supervisor/child/child_codec.c), encoded on the thread pool with the write.
 */
#include "sup_front_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "store_child.h"
#include "store_paths.h"
#include "sup_child_codec.h"
#include "tally_log.h"

static const struct store_upgrade child_upgrade = {sup_child_rec_upgrade, NULL};

/* Thread pool: creates the tenant's directories and opens (creates, migrates) the
 * file. Reads only what does not change while the front runs (data dir, mode). */
static int
open_file(struct front_child *fc)
{
    sup_front *f = fc->f;
    char path[STORE_PATH_MAX];
    struct stat sb;
    int rc = store_path_endpoint_db(f->data, fc->tenant, fc->endpoint, path, sizeof(path));

    /* A first request: the file is made (from the pool) with its directories. Its tenant's
     * supervisor was started by the look before this job (front_prestart.c). */
    if (rc == TALLY_OK && stat(path, &sb) != 0 && errno == ENOENT)
        fc->store.created = true;
    if (rc == TALLY_OK)
        rc = store_tenant_dirs(f->data, fc->tenant);
    if (rc == TALLY_OK)
        rc = store_child_open(path, front_store_flags(f), &child_upgrade, &fc->store.db);
    return rc;
}

unsigned
front_store_flags(const sup_front *f)
{
    return STORE_OPEN_CREATE | STORE_OPEN_PRIVATE | STORE_OPEN_EXCLUSIVE | STORE_OPEN_PERSIST_WAL |
           (f->cfg.strict ? STORE_OPEN_SYNC_FULL : 0);
}

/* A store_child_visit_fn (thread pool): one stored row decoded and kept for the
 * resume on the loop. */
static int
read_one(void *ctx, uint64_t id, const uint8_t *p, size_t len)
{
    struct front_resume *r = ctx;
    struct sup_child_lease_rec rec;

    (void)id;
    if (sup_child_rec_decode(p, len, &rec) != TALLY_OK)
        return TALLY_OK; /* not ours: its lease expires as spent at the supervisor */
    if (r->n == r->cap) {
        size_t cap = r->cap == 0 ? 8 : r->cap * 2;
        struct sup_child_lease_rec *n = tally_realloc(r->rec, cap * sizeof(*n));
        if (n == NULL)
            return TALLY_ENOMEM;
        r->rec = n;
        r->cap = cap;
    }
    r->rec[r->n++] = rec;
    return TALLY_OK;
}

/* Thread pool: the whole start of a child's file. The loop leaves fc->store alone
 * while busy is set. */
void
front_store_open_work(uv_work_t *w)
{
    struct front_child *fc = w->data;
    struct front_store *s = &fc->store;
    int rc = open_file(fc);

    /* Every start is a new incarnation, under today's limits (the loop took their
     * fingerprint when it queued the open); the fingerprint of the last start or idle
     * close comes back. */
    s->limits_fp = s->limits_fp_now;
    s->limits_fp_found = false;
    if (rc == TALLY_OK && s->created) {
        /* A new file: the first batch stores the incarnation (front_store_flush) while the
         * HELLO and the first ACQUIREs are on their way; no answer reaches the child before
         * it is durable (front_child_on_frame holds them). A crash before then may give the
         * next start the same incarnation, and the supervisor's dedupe window may answer it
         * with a grant made to this one: never used, so it counts once. The file has no rows
         * and no limits stored yet. */
        rc = store_child_incarnation_peek(s->db, &s->incarnation);
        s->incarnation++;
        s->inc_pending = rc == TALLY_OK;
    } else if (rc == TALLY_OK) {
        rc = store_child_incarnation_next(s->db, &s->incarnation, &s->limits_fp,
                                          &s->limits_fp_found);
        /* Durable in both modes: after an OS crash a reused incarnation would be
         * answered from the supervisor's dedupe window with grants already spent. */
        if (rc == TALLY_OK && !fc->f->cfg.strict)
            rc = store_db_sync(s->db);
    }
    if (rc == TALLY_OK)
        rc = store_child_each(s->db, read_one, &s->resume);
    if (rc != TALLY_OK) {
        s->inc_pending = false;
        snprintf(s->errmsg, sizeof(s->errmsg), "%s",
                 s->db != NULL ? store_db_errmsg(s->db) : store_open_errmsg());
        store_db_close(s->db);
        s->db = NULL;
        tally_free(s->resume.rec);
        memset(&s->resume, 0, sizeof(s->resume));
    }
    s->rc = rc;
}

/* Thread pool: the new file of a child whose state machine started before it (a tenant's
 * first turn under way: front_child_start_early), made and its first incarnation stored. The
 * loop uses the child meanwhile but leaves the file, the connection and these fields alone. */
static void
early_work(uv_work_t *w)
{
    struct front_child *fc = w->data;
    struct front_store *s = &fc->store;
    int rc = open_file(fc);

    /* A file made meanwhile by someone else holds another history: not this incarnation's. */
    if (rc == TALLY_OK && !s->created)
        rc = TALLY_EEXIST;
    if (rc == TALLY_OK)
        rc = store_child_incarnation_set(s->db, s->incarnation, s->limits_fp_now);
    if (rc == TALLY_OK && !fc->f->cfg.strict)
        rc = store_db_sync(s->db);
    if (rc != TALLY_OK) {
        snprintf(s->errmsg, sizeof(s->errmsg), "%s",
                 s->db != NULL ? store_db_errmsg(s->db) : store_open_errmsg());
        store_db_close(s->db);
        s->db = NULL;
    }
    s->rc = rc;
}

static void
early_done(uv_work_t *w, int status)
{
    struct front_child *fc = w->data;
    struct front_store *s = &fc->store;

    s->busy = false;
    if (s->created)
        front_pool_taken(fc->f);
    s->created = false;
    front_child_early_done(fc, status != 0 && s->rc == TALLY_OK ? TALLY_EIO : s->rc);
}

bool
front_store_early_queue(struct front_child *fc)
{
    struct front_store *s = &fc->store;
    int rc;

    s->work.data = fc;
    s->rc = TALLY_OK;
    s->errmsg[0] = '\0';
    /* uv_queue_work fails only for a missing callback. */
    rc = uv_queue_work(fc->f->loop, &s->work, early_work, early_done);
    s->busy = rc == 0;
    return !NEVER(rc != 0);
}

void
front_store_open_done(uv_work_t *w, int status)
{
    struct front_child *fc = w->data;
    struct front_store *s = &fc->store;

    s->busy = false;
    if (s->created) /* from the pool, most likely: make the next one */
        front_pool_taken(fc->f);
    s->created = false;
    front_child_opened(fc, status != 0 && s->rc == TALLY_OK ? TALLY_EIO : s->rc);
}

void
front_store_open_start(struct front_child *fc)
{
    struct front_store *s = &fc->store;

    s->work.data = fc;
    s->rc = TALLY_OK;
    s->errmsg[0] = '\0';
    /* A new start: what an earlier one held for its incarnation is not for this one. */
    s->inc_pending = false;
    tally_free(s->held);
    s->held = NULL;
    s->n_held = 0;
    if (!front_prestart_look(fc))
        front_store_open_queue(fc);
}

void
front_store_open_queue(struct front_child *fc)
{
    struct front_store *s = &fc->store;
    /* uv_queue_work fails only for a missing callback. */
    int rc = uv_queue_work(fc->f->loop, &s->work, front_store_open_work, front_store_open_done);

    s->busy = rc == 0;
    if (NEVER(rc != 0))
        front_child_opened(fc, TALLY_EIO);
}

int
front_store_resume(struct front_child *fc)
{
    struct front_resume *r = &fc->store.resume;
    struct sup_time now = front_now(); /* one instant for every row */
    int rc = TALLY_OK;

    for (size_t i = 0; i < r->n && rc == TALLY_OK; i++) {
        rc = sup_child_resume(fc->child, &r->rec[i], now);
        if (rc == TALLY_EINVAL)
            rc = TALLY_OK;
    }
    tally_free(r->rec);
    memset(r, 0, sizeof(*r));
    return rc;
}

/* Thread pool: the file closed, after the fingerprint of the limits its parked leases were
 * granted under (a later open that finds others does not use them; not written, a failed
 * write, they are resumed as after a crash). */
static void
close_file(struct front_child *fc, bool keep_wal)
{
    if (fc->store.limits_fp_put && fc->store.db != NULL)
        fc->store.rc = store_child_meta_put(fc->store.db, "limits", fc->store.limits_fp);
    fc->store.limits_fp_put = false;
    if (keep_wal)
        store_db_close_keep_wal(fc->store.db);
    else
        store_db_close(fc->store.db);
    fc->store.db = NULL;
}

/* The last connection's close checkpoints the WAL into the file and removes it. */
static void
close_work(uv_work_t *w)
{
    close_file(w->data, false);
}

/* An open file set aside for others (the --max-open-children cap) keeps its WAL: it is
 * likely opened again soon, and the reopen then costs no WAL created and synced with its
 * directory, and the close no checkpoint with its two fsyncs. */
static void
sleep_work(uv_work_t *w)
{
    close_file(w->data, true);
}

static void
close_done(uv_work_t *w, int status)
{
    struct front_child *fc = w->data;

    (void)status;
    fc->store.busy = false;
    front_child_file_closed(fc, true);
}

void
front_store_close_start(struct front_child *fc)
{
    struct front_store *s = &fc->store;
    int rc;

    if (s->db == NULL) { /* asleep: nothing to close */
        front_child_file_closed(fc, false);
        return;
    }
    s->work.data = fc;
    rc = uv_queue_work(fc->f->loop, &s->work, close_work, close_done);
    if (NEVER(rc != 0)) {
        front_store_close(fc);
        front_child_file_closed(fc, true);
        return;
    }
    s->busy = true;
}

static void
sleep_done(uv_work_t *w, int status)
{
    struct front_child *fc = w->data;

    (void)status;
    fc->store.busy = false;
    tally_free(fc->store.batch); /* nothing in it: a sleeping child writes nothing */
    fc->store.batch = NULL;
    fc->store.batch_cap = 0;
    front_child_file_slept(fc);
}

void
front_store_sleep_start(struct front_child *fc)
{
    struct front_store *s = &fc->store;
    int rc;

    s->work.data = fc;
    rc = uv_queue_work(fc->f->loop, &s->work, sleep_work, sleep_done);
    if (NEVER(rc != 0))
        return;
    s->busy = true;
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

    /* An asleep child's file is opened again first (no new incarnation: the same
     * state machine goes on). */
    s->rc = s->db == NULL ? open_file(fc) : TALLY_OK;
    /* A new file's incarnation first (made again after a failure: the same value). */
    if (s->rc == TALLY_OK && s->inc_writing) {
        s->rc = store_child_incarnation_set(s->db, s->incarnation, s->limits_fp_now);
        if (s->rc == TALLY_OK && !fc->f->cfg.strict)
            s->rc = store_db_sync(s->db);
    }
    if (s->rc == TALLY_OK && s->n > 0)
        s->rc = store_child_write(s->db, s->n, encode_write, s);
    if (s->close_after && s->db != NULL) {
        int rc = s->rc;
        close_file(fc, true); /* as a sleep: the WAL kept, nothing synced */
        s->rc = rc;
    }
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
    bool stored = s->inc_writing;
    size_t i;

    s->inc_writing = false;
    if (status != 0 && s->rc == TALLY_OK)
        s->rc = TALLY_EIO;
    if (s->reopening) { /* open again, or still closed (the open failed) */
        s->reopening = false;
        front_child_file_woke(fc);
    }
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
    if (stored)
        s->inc_pending = false;
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
    if (s->db == NULL) { /* written by an asleep child, closed again: it carries no batch */
        tally_free(s->batch);
        s->batch = NULL;
        s->batch_cap = 0;
    }
    if (fc->closed) {
        if (!front_store_flush(fc))
            front_child_release(fc);
        return;
    }
    if (stored)
        front_child_deliver_held(fc);
    front_child_pump(fc);
}

bool
front_store_flush(struct front_child *fc)
{
    struct front_store *s = &fc->store;
    int rc;

    if (s->busy)
        return false;
    if ((s->n > 0 || s->inc_pending) && front_now().mono_ms < s->retry_mono_ms)
        return false; /* a failed batch waits for its retry (front_store_wake_ms) */
    /* The batch grows by doubling up to FRONT_STORE_BATCH: most files write a row or two at
     * a time, and a thousand open files each with room for 64 rows held 6 MB. */
    while (s->n < FRONT_STORE_BATCH) {
        if (s->n == s->batch_cap) {
            uint32_t cap = s->batch_cap > 0 ? s->batch_cap * 2 : FRONT_STORE_BATCH_FIRST;
            struct sup_child_persist *b = tally_realloc(s->batch, cap * sizeof(*b));

            if (b == NULL)
                break; /* the writes stay with the child: the next pump takes them */
            s->batch = b;
            s->batch_cap = cap;
        }
        if (sup_child_next_persist(fc->child, &s->batch[s->n]) != TALLY_OK)
            break;
        s->n++;
    }
    if (s->n == 0 && !s->inc_pending)
        return false;
    s->inc_writing = s->inc_pending;
    s->work.data = fc;
    s->rc = TALLY_OK;
    /* Read before the job is queued: from then on the thread pool owns db. */
    s->reopening = s->db == NULL;
    /* At the cap of open files an asleep child's write opens, writes and closes in one job:
     * a burst of them (every kept lease renewed at a window end, a stop parking them all)
     * holds no more files than the pool has threads, instead of one per child until the
     * sleeps queued behind the burst run. */
    s->close_after = s->reopening && fc->f->n_files >= fc->f->cfg.max_open_children;
    /* uv_queue_work fails only for a missing callback. */
    rc = uv_queue_work(fc->f->loop, &s->work, write_batch, batch_done);
    if (NEVER(rc != 0)) {
        s->reopening = false;
        return false;
    }
    if (s->reopening)
        fc->f->n_files++; /* being opened again */
    s->busy = true;
    return true;
}

int64_t
front_store_wake_ms(const struct front_child *fc)
{
    const struct front_store *s = &fc->store;

    return !s->busy && (s->n > 0 || s->inc_pending) ? s->retry_mono_ms : INT64_MAX;
}

void
front_store_close(struct front_child *fc)
{
    store_db_close(fc->store.db);
    fc->store.db = NULL;
    tally_free(fc->store.batch);
    fc->store.batch = NULL;
    fc->store.batch_cap = 0;
    tally_free(fc->store.resume.rec);
    memset(&fc->store.resume, 0, sizeof(fc->store.resume));
    tally_free(fc->store.held);
    fc->store.held = NULL;
    fc->store.n_held = 0;
}

/*
 * A child counter's own SQLite file: its lease rows (with their durable marks)
 * and an incarnation counter. Opening it, bumping the incarnation and resuming
 * the rows happen on the loop thread when the child is created; after that
 * every write runs on the libuv thread pool, one batch at a time per child, so
 * an fsync (FULL in strict mode) never stalls the loop that answers requests.
 * While a batch is in flight the loop thread does not touch the connection.
 */
#include "sup_front_int.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store_paths.h"
#include "tally_log.h"

static const char *const child_migrations[] = {
    "CREATE TABLE meta(k TEXT PRIMARY KEY, v INTEGER NOT NULL) STRICT;"
    "CREATE TABLE lease(id INTEGER PRIMARY KEY, rec BLOB NOT NULL) STRICT;",
};
enum { C_META_GET, C_META_PUT, C_LEASE_PUT, C_LEASE_DEL, C_LEASE_ALL, C__COUNT };
static const char *const child_statements[C__COUNT] = {
    [C_META_GET] = "SELECT v FROM meta WHERE k = ?1",
    [C_META_PUT] = "INSERT OR REPLACE INTO meta(k, v) VALUES(?1, ?2)",
    [C_LEASE_PUT] = "INSERT OR REPLACE INTO lease(id, rec) VALUES(?1, ?2)",
    [C_LEASE_DEL] = "DELETE FROM lease WHERE id = ?1",
    [C_LEASE_ALL] = "SELECT rec FROM lease ORDER BY id",
};
static const struct store_schema child_schema = {"child", child_migrations, 1, child_statements,
                                                 C__COUNT};

/* Bumps and returns the incarnation counter: every start is a new incarnation. */
static int
next_incarnation(store_db *db, uint64_t *out)
{
    sqlite3_stmt *st;
    int64_t v = 0;
    int rc = store_db_begin(db);

    if (rc != TALLY_OK)
        return rc;
    st = store_db_stmt(db, C_META_GET);
    sqlite3_bind_text(st, 1, "incarnation", -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    st = store_db_stmt(db, C_META_PUT);
    sqlite3_bind_text(st, 1, "incarnation", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v + 1);
    rc = store_db_rc(db, sqlite3_step(st));
    sqlite3_reset(st);
    rc = store_db_end(db, rc);
    *out = (uint64_t)(v + 1);
    return rc;
}

int
front_store_open(struct front_child *fc, uint64_t *incarnation)
{
    sup_front *f = fc->f;
    char path[STORE_PATH_MAX];
    int rc = store_tenant_dirs(f->data, fc->tenant);

    if (rc == TALLY_OK)
        rc = store_path_endpoint_db(f->data, fc->tenant, fc->endpoint, path, sizeof(path));
    if (rc == TALLY_OK)
        rc = store_db_open(path, &child_schema,
                           STORE_OPEN_CREATE | STORE_OPEN_PRIVATE |
                               (f->cfg.strict ? STORE_OPEN_SYNC_FULL : 0),
                           &fc->store.db);
    if (rc == TALLY_OK)
        rc = next_incarnation(fc->store.db, incarnation);
    /* Durable in both modes: after an OS crash a reused incarnation would be
     * answered from the supervisor's dedupe window with grants already spent. */
    if (rc == TALLY_OK && !f->cfg.strict)
        rc = store_db_sync(fc->store.db);
    return rc;
}

int
front_store_resume(struct front_child *fc)
{
    sqlite3_stmt *st = store_db_stmt(fc->store.db, C_LEASE_ALL);
    struct sup_child_lease_rec rec;
    struct sup_time now = front_now();
    int rc = TALLY_OK;

    while (rc == TALLY_OK && sqlite3_step(st) == SQLITE_ROW) {
        if ((size_t)sqlite3_column_bytes(st, 0) != sizeof(rec))
            continue; /* not ours: its lease expires as spent at the supervisor */
        memcpy(&rec, sqlite3_column_blob(st, 0), sizeof(rec));
        rc = sup_child_resume(fc->child, &rec, now);
        if (rc == TALLY_EINVAL)
            rc = TALLY_OK;
    }
    sqlite3_reset(st);
    return rc;
}

/* Thread pool: writes the batch in one transaction. Touches only the batch and
 * the connection, which the loop thread leaves alone while busy is set. */
static void
write_batch(uv_work_t *w)
{
    struct front_child *fc = w->data;
    struct front_store *s = &fc->store;
    size_t i;
    int rc = store_db_begin(s->db);

    for (i = 0; i < s->n && rc == TALLY_OK; i++) {
        const struct sup_child_persist *p = &s->batch[i];
        sqlite3_stmt *st;
        if (p->op == SUP_PERSIST_PUT) {
            st = store_db_stmt(s->db, C_LEASE_PUT);
            sqlite3_bind_int64(st, 1, (int64_t)p->rec.lease_id);
            sqlite3_bind_blob(st, 2, &p->rec, sizeof(p->rec), SQLITE_STATIC);
        } else {
            st = store_db_stmt(s->db, C_LEASE_DEL);
            sqlite3_bind_int64(st, 1, (int64_t)p->rec.lease_id);
        }
        rc = store_db_rc(s->db, sqlite3_step(st));
        sqlite3_reset(st);
    }
    rc = store_db_end(s->db, rc);
    s->rc = rc;
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

/*
 * A caller authority process (sup_callers.h). One libuv loop: the channel on
 * fd 3, one caller table per endpoint (tenant_callers.h), a uv_check that
 * commits the entries and sketch cells the turn changed and only then writes the
 * turn's verdicts (persist, then reply: a verdict that admitted is durable before
 * tallyd sees it, so a kill -9 of any process never gives a caller a second
 * allowance), a timer for hibernation and the signals. A commit that fails leaves
 * memory ahead of disk: the process exits 74 without replying and tallyd's
 * requests follow the endpoint's policy until its restart has read the file back.
 *
 * HOLDs (a request whose callers have several authorities) are remembered, the
 * last HOLDS_MAX of them, with what taking them back needs; a CANCEL for one
 * forgotten or from before a restart changes nothing, which only over-counts.
 */
#include "sup_callers.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "callers_int.h"
#include "proto_caller.h"
#include "proto_stream.h"
#include "store_paths.h"
#include "tally_log.h"

#define DIRTY_MAX  1024 /* entries changed in one turn before an early commit */
#define HOLDS_MAX  256
#define SYNC_MS    100 /* batched: the longest a commit waits for its fsync */
#define LOCK_TRIES 300 /* 10 ms apart: how long a start waits for the previous authority */

struct cp_ep {
    char name[TENANT_NAME_MAX + 1];
    enum tenant_algorithm alg;
    tenant_callers *t;
    uint64_t reclaimed; /* the table's count at the last purge of the file */
    bool drop;          /* its rows are of another algorithm: delete them first */
};

struct cp_dirty {
    uint16_t ep;
    unsigned char key[TENANT_CALLER_KEY_BYTES];
    bool cells; /* its sketch cells too */
};

struct cp_hold {
    uint32_t id; /* request id of the HOLD */
    uint16_t ep;
    bool live;
    struct tenant_callers_undo undo;
};

struct cp {
    const struct sup_callers_opts *o;
    uv_loop_t loop;
    uv_check_t check;
    uv_timer_t idle;
    uv_timer_t sync; /* batched durability: fsyncs the WAL at most SYNC_MS after a commit */
    uv_signal_t sigterm, sigint;
    proto_conn *conn;
    store_db *db;
    struct cp_ep eps[TENANT_MAX_ENDPOINTS];
    uint32_t n_eps;
    struct cp_dirty dirty[DIRTY_MAX];
    uint32_t n_dirty;
    struct cp_hold holds[HOLDS_MAX];
    uint32_t next_hold;
    uint8_t *out;
    size_t out_len, out_cap;
    bool stopping;
    int exit_code;
};

static int64_t
wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
log_event(const struct cp *c, enum tally_log_level level, const char *event, int rc)
{
    struct tally_log l;

    if (!tally_log_begin(&l, level, event))
        return;
    tally_log_int(&l, "shard", (int64_t)c->o->shard);
    tally_log_int(&l, "pid", (int64_t)getpid());
    if (rc != TALLY_OK)
        tally_log_str(&l, "error", tally_strerror(rc));
    tally_log_end(&l);
}

static void
stop(struct cp *c, int code)
{
    if (c->stopping)
        return;
    c->stopping = true;
    c->exit_code = code;
    uv_stop(&c->loop);
}

/* The table of endpoint `name` counting with `alg`; a changed algorithm starts afresh
 * (the states of the other one mean nothing). NULL when out of room or memory. */
static struct cp_ep *
ep_get(struct cp *c, const char *name, enum tenant_algorithm alg, int64_t max)
{
    struct cp_ep *e = NULL;

    for (uint32_t i = 0; i < c->n_eps && e == NULL; i++) {
        if (strcmp(c->eps[i].name, name) == 0)
            e = &c->eps[i];
    }
    if (e == NULL) {
        if (c->n_eps == TENANT_MAX_ENDPOINTS)
            return NULL;
        e = &c->eps[c->n_eps];
        memset(e, 0, sizeof(*e));
        snprintf(e->name, sizeof(e->name), "%s", name);
        e->alg = alg;
        if (tenant_callers_open(max, &e->t) != TALLY_OK)
            return NULL;
        c->n_eps++;
    }
    if (e->alg != alg) {
        tenant_callers *fresh = NULL;
        if (tenant_callers_open(max, &fresh) != TALLY_OK)
            return NULL;
        tenant_callers_close(e->t);
        e->t = fresh;
        e->alg = alg;
        e->drop = true;
        e->reclaimed = 0;
    }
    return tenant_callers_set_max(e->t, max) == TALLY_OK ? e : NULL;
}

static void
on_sync(uv_timer_t *t)
{
    struct cp *c = t->data;
    int rc = store_db_sync(c->db);

    if (rc != TALLY_OK) {
        log_event(c, TALLY_LOG_ERROR, "callers_commit_failed", rc);
        stop(c, 74);
    }
}

/* Commits what the turn changed, then writes its verdicts. */
static void
flush(struct cp *c)
{
    int64_t now = wall_ms();
    bool purge = false;
    int rc;

    if (c->n_dirty > 0) {
        rc = store_db_begin(c->db);
        for (uint32_t i = 0; i < c->n_eps && rc == TALLY_OK; i++) {
            struct tenant_callers_stats st;
            if (c->eps[i].drop) {
                rc = callers_file_drop(c->db, c->eps[i].name);
                c->eps[i].drop = false;
            }
            tenant_callers_stats(c->eps[i].t, &st);
            purge |= st.reclaimed != c->eps[i].reclaimed;
            c->eps[i].reclaimed = st.reclaimed;
        }
        if (rc == TALLY_OK && purge)
            rc = callers_file_purge(c->db, now);
        for (uint32_t i = 0; i < c->n_dirty && rc == TALLY_OK; i++) {
            const struct cp_dirty *d = &c->dirty[i];
            const struct cp_ep *e = &c->eps[d->ep];
            const struct tenant_callers_entry *en = tenant_callers_find(e->t, d->key);
            uint32_t cells[TENANT_CALLERS_SKETCH_DEPTH];
            rc = en != NULL ? callers_file_put(c->db, e->name, e->alg, en)
                            : callers_file_del(c->db, e->name, d->key);
            tenant_callers_sketch_cells(d->key, cells);
            for (unsigned r = 0; r < TENANT_CALLERS_SKETCH_DEPTH && d->cells && rc == TALLY_OK;
                 r++) {
                const union tenant_callers_state *s = tenant_callers_sketch_get(e->t, cells[r]);
                if (s != NULL)
                    rc = callers_file_put_cell(c->db, e->name, e->alg, cells[r], s);
            }
        }
        rc = store_db_end(c->db, rc);
        c->n_dirty = 0;
        if (rc == TALLY_OK && !c->o->strict && !uv_is_active((uv_handle_t *)&c->sync))
            uv_timer_start(&c->sync, on_sync, SYNC_MS, 0);
        if (rc != TALLY_OK) {
            /* memory is ahead of disk: no verdict of this turn may leave */
            log_event(c, TALLY_LOG_ERROR, "callers_commit_failed", rc);
            c->out_len = 0;
            stop(c, 74);
            return;
        }
    }
    if (c->out_len > 0 && c->conn != NULL)
        (void)proto_conn_send(c->conn, c->out, c->out_len);
    c->out_len = 0;
}

static void
on_check(uv_check_t *h)
{
    flush(h->data);
}

static int
queue(struct cp *c, const uint8_t *frame, size_t len)
{
    if (len == 0)
        return TALLY_EINVAL;
    if (c->out_cap - c->out_len < len) {
        size_t cap = c->out_cap == 0 ? 16 * 1024 : c->out_cap * 2;
        uint8_t *n = tally_realloc(c->out, cap);
        if (n == NULL)
            return TALLY_ENOMEM;
        c->out = n;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, frame, len);
    c->out_len += len;
    return TALLY_OK;
}

static void
mark(struct cp *c, uint16_t ep, const unsigned char *key, bool cells)
{
    if (c->n_dirty == DIRTY_MAX)
        flush(c);
    c->dirty[c->n_dirty].ep = ep;
    memcpy(c->dirty[c->n_dirty].key, key, TENANT_CALLER_KEY_BYTES);
    c->dirty[c->n_dirty].cells = cells;
    c->n_dirty++;
}

static void
on_decide(struct cp *c, const struct proto_frame *f, const struct proto_caller_decide *m)
{
    struct proto_caller_verdict v;
    struct tenant_callers_decision d;
    struct tenant_callers_stats st;
    struct cp_hold *h = &c->holds[c->next_hold % HOLDS_MAX];
    struct cp_ep *e = ep_get(c, m->endpoint, m->algorithm, m->max_callers);
    uint8_t frame[PROTO_CALLER_MSG_MAX];
    int rc = e != NULL ? TALLY_OK : TALLY_ENOMEM;

    memset(&v, 0, sizeof(v));
    if (m->hold)
        h->live = false; /* the oldest HOLD is forgotten: it stays charged */
    if (rc == TALLY_OK)
        rc = tenant_callers_decide(e->t, m->algorithm, &m->limits,
                                   (const unsigned char(*)[TENANT_CALLER_KEY_BYTES])m->keys, m->n,
                                   wall_ms(), m->cost, &d, m->hold ? &h->undo : NULL);
    if (rc != TALLY_OK) {
        v.failed = true;
        v.retry_after_ms = 1000;
    } else {
        v.admitted = d.admitted;
        v.never = d.never;
        v.sketched = d.sketched;
        v.caller = (uint8_t)d.caller;
        v.retry_after_ms = d.retry_after_ms;
        v.limit = d.limit;
        v.period_ms = d.period_ms;
        v.remaining = d.remaining;
        v.reset_ms = d.reset_ms;
        tenant_callers_stats(e->t, &st);
        for (uint32_t i = 0; i < c->n_eps; i++) {
            struct tenant_callers_stats one;
            tenant_callers_stats(c->eps[i].t, &one);
            v.entries += one.entries;
            v.bytes += one.bytes;
        }
        if (d.admitted) {
            for (uint32_t i = 0; i < m->n; i++)
                mark(c, (uint16_t)(e - c->eps), m->keys[i], st.sketch);
        }
        if (d.admitted && m->hold) {
            h->id = f->request_id;
            h->ep = (uint16_t)(e - c->eps);
            h->live = true;
            c->next_hold++;
        }
    }
    if (queue(c, frame, proto_caller_verdict_encode(frame, f->request_id, &v)) != TALLY_OK)
        stop(c, 74);
}

static void
on_cancel(struct cp *c, uint32_t hold_id)
{
    for (uint32_t i = 0; i < HOLDS_MAX; i++) {
        struct cp_hold *h = &c->holds[i];
        if (!h->live || h->id != hold_id)
            continue;
        h->live = false;
        tenant_callers_undo(c->eps[h->ep].t, c->eps[h->ep].alg, &h->undo);
        for (uint32_t k = 0; k < h->undo.n; k++)
            mark(c, h->ep, h->undo.v[k].key, false);
        return;
    }
}

static void
on_frame(proto_conn *conn, const struct proto_frame *f, void *data)
{
    struct cp *c = data;
    struct proto_caller_decide m;
    uint32_t hold_id;

    uv_timer_again(&c->idle);
    if (c->stopping)
        return;
    if (proto_caller_decide_decode(f, &m) == TALLY_OK)
        on_decide(c, f, &m);
    else if (proto_caller_cancel_decode(f, &hold_id) == TALLY_OK)
        on_cancel(c, hold_id);
    else {
        log_event(c, TALLY_LOG_WARN, "callers_bad_frame", TALLY_EPROTO);
        proto_conn_close(conn);
    }
}

static void
on_close(proto_conn *conn, int reason, void *data)
{
    struct cp *c = data;

    (void)reason;
    if (c->conn == conn)
        c->conn = NULL;
    proto_conn_unref(conn);
    flush(c);
    stop(c, c->exit_code); /* tallyd went away */
}

static void
on_idle(uv_timer_t *t)
{
    struct cp *c = t->data;

    flush(c);
    log_event(c, TALLY_LOG_INFO, "callers_idle_exit", TALLY_OK);
    stop(c, 0);
}

static void
on_signal(uv_signal_t *h, int signum)
{
    struct cp *c = h->data;

    (void)signum;
    flush(c);
    stop(c, 0);
}

static int
load_entry(void *ctx, const char *ep, enum tenant_algorithm alg,
           const struct tenant_callers_entry *en)
{
    struct cp *c = ctx;
    struct cp_ep *e = ep_get(c, ep, alg, TENANT_MAX_CALLERS_MAX);
    int rc;

    if (e == NULL)
        return TALLY_ENOMEM;
    rc = tenant_callers_restore(e->t, alg, en, wall_ms());
    return rc == TALLY_ETOOBIG ? TALLY_OK : rc;
}

static int
load_cell(void *ctx, const char *ep, enum tenant_algorithm alg, uint32_t cell,
          const union tenant_callers_state *st)
{
    struct cp *c = ctx;
    struct cp_ep *e = ep_get(c, ep, alg, TENANT_MAX_CALLERS_MAX);

    return e != NULL ? tenant_callers_sketch_restore(e->t, cell, st) : TALLY_ENOMEM;
}

static int
open_file(struct cp *c, int *lock_fd)
{
    char dir[STORE_PATH_MAX];
    char path[STORE_PATH_MAX + 32];
    int rc = store_callers_dir(c->o->data, dir, sizeof(dir));

    if (rc != TALLY_OK)
        return rc;
    snprintf(path, sizeof(path), "%s/%u.lock", dir, c->o->shard);
    /* The previous authority of a tallyd killed a moment ago may still be committing its
     * last turn (it exits at the EOF of its channel): wait for it rather than fail the
     * requests already queued on this channel. */
    for (int tries = 0;; tries++) {
        rc = store_lock_take(path, lock_fd);
        if (rc != TALLY_ELOCKED || tries == LOCK_TRIES)
            break;
        (void)nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (rc != TALLY_OK)
        return rc;
    snprintf(path, sizeof(path), "%s/%u.db", dir, c->o->shard);
    rc = callers_file_open(path, c->o->strict, &c->db);
    if (rc == TALLY_OK)
        rc = callers_file_load(c->db, load_entry, load_cell, c);
    /* rows whole again were not read back: drop them, so the file holds no more rows
     * than the tables (whose reclaims delete theirs as they go) */
    if (rc == TALLY_OK)
        rc = store_db_begin(c->db);
    if (rc == TALLY_OK)
        rc = store_db_end(c->db, callers_file_purge(c->db, wall_ms()));
    return rc;
}

static void
close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int
sup_callers_run(const struct sup_callers_opts *o)
{
    static struct cp c; /* one authority per process */
    static const struct proto_conn_cbs cbs = {on_frame, on_close};
    uint64_t idle = (uint64_t)(o->idle_exit_ms > 0 ? o->idle_exit_ms : 60000);
    int lock_fd = -1;
    bool loop_live = false;
    int rc;

    memset(&c, 0, sizeof(c));
    c.o = o;
    signal(SIGPIPE, SIG_IGN);
    if (o->shard >= SUP_CALLER_SHARDS)
        return 78;
    rc = open_file(&c, &lock_fd);
    if (rc != TALLY_OK) {
        log_event(&c, rc == TALLY_ELOCKED ? TALLY_LOG_WARN : TALLY_LOG_ERROR, "callers_refused",
                  rc);
        c.exit_code = rc == TALLY_ELOCKED ? 75 : 74;
        goto out;
    }
    if (uv_loop_init(&c.loop) != 0) {
        c.exit_code = 74;
        goto out;
    }
    loop_live = true;
    if (proto_conn_open_fd(&c.loop, o->channel_fd, &cbs, &c, &c.conn) != TALLY_OK) {
        c.exit_code = 74;
        goto out;
    }
    uv_check_init(&c.loop, &c.check);
    c.check.data = &c;
    uv_check_start(&c.check, on_check);
    uv_timer_init(&c.loop, &c.idle);
    c.idle.data = &c;
    uv_timer_init(&c.loop, &c.sync);
    c.sync.data = &c;
    uv_timer_start(&c.idle, on_idle, idle, idle);
    uv_signal_init(&c.loop, &c.sigterm);
    c.sigterm.data = &c;
    uv_signal_start(&c.sigterm, on_signal, SIGTERM);
    uv_signal_init(&c.loop, &c.sigint);
    c.sigint.data = &c;
    uv_signal_start(&c.sigint, on_signal, SIGINT);
    log_event(&c, TALLY_LOG_INFO, "callers_ready", TALLY_OK);
    uv_run(&c.loop, UV_RUN_DEFAULT);
    flush(&c);
    if (c.db != NULL && !o->strict && store_db_sync(c.db) != TALLY_OK && c.exit_code == 0)
        c.exit_code = 74;
out:
    if (c.conn != NULL) {
        proto_conn_close(c.conn);
        c.conn = NULL; /* on_close drops the reference */
    }
    c.stopping = true;
    if (loop_live) {
        uv_walk(&c.loop, close_walk, NULL);
        uv_run(&c.loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&c.loop) != 0 && c.exit_code == 0)
            c.exit_code = 74;
    }
    for (uint32_t i = 0; i < c.n_eps; i++)
        tenant_callers_close(c.eps[i].t);
    store_db_close(c.db);
    tally_free(c.out);
    if (lock_fd >= 0)
        close(lock_fd);
    return c.exit_code;
}

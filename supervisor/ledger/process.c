/*
 * The supervisor process (sup_ledger.h). One libuv loop: the lease channel
 * on fd 3, a uv_check that commits the turn's journal records and only then
 * writes the turn's replies (Redis flushes the AOF before replying; Durable
 * Objects hold output until storage confirms), a timer for lease expiry, a
 * timer for hibernation and a timer that reloads the configuration when the
 * config database changes. A commit that fails leaves memory ahead of disk,
 * so the process exits (74) without replying: tallyd restarts it and the
 * replay rebuilds exactly what was durable.
 *
 * In batched mode commits run with synchronous=NORMAL (no fsync: safe from
 * kill -9, not from an OS crash) and a timer fsyncs the journal's WAL at most
 * BATCH_SYNC_MS after the first commit that is not yet synced, so an OS crash
 * or power loss loses at most the grants of that last stretch (README
 * "Failure modes", durability).
 */
#include "sup_ledger.h"

#include <malloc.h>
#include <signal.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "proto_lease.h"
#include "proto_stream.h"
#include "store_paths.h"
#include "store_snapshot.h"
#include "sup_lease.h"
#include "tally_log.h"

#include "sup_process_int.h"

#define CACHE_KB "64"

int64_t
sp_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
sp_stop(struct sp *s, int code)
{
    if (s->stopping)
        return;
    s->stopping = true;
    s->exit_code = code;
    uv_stop(&s->loop);
}

static void
on_check(uv_check_t *h)
{
    sp_flush(h->data);
}

static void on_expire(uv_timer_t *t);

static void
arm_expiry(struct sp *s)
{
    int64_t at = sup_ledger_next_expiry_ms(s->ledger);
    int64_t wait;

    if (at == INT64_MAX) {
        uv_timer_stop(&s->expire_timer);
        return;
    }
    wait = at - sp_wall_ms();
    uv_timer_start(&s->expire_timer, on_expire, wait > 0 ? (uint64_t)wait : 0, 0);
}

static void
on_expire(uv_timer_t *t)
{
    struct sp *s = t->data;
    int64_t now = sp_wall_ms();

    do {
        if (s->batch.count == s->batch.cap)
            sp_flush(s);
        if (s->stopping || sup_ledger_expire(s->ledger, now, &s->batch) != TALLY_OK)
            return;
    } while (s->batch.count == s->batch.cap);
    arm_expiry(s);
}

int
sp_queue_reply(struct sp *s, const struct proto_lease_msg *reply, uint32_t request_id)
{
    size_t len = 0;
    int rc;

    if (s->out_cap - s->out_len < PROTO_LEASE_FRAME_MAX) {
        size_t cap = s->out_cap == 0 ? 64 * 1024 : s->out_cap * 2;
        uint8_t *n = tally_realloc(s->out, cap);
        if (n == NULL)
            return TALLY_ENOMEM;
        s->out = n;
        s->out_cap = cap;
    }
    rc = proto_lease_encode(reply, request_id, s->out + s->out_len, s->out_cap - s->out_len, &len);
    if (rc == TALLY_OK)
        s->out_len += len;
    return rc;
}

/* A DENY sends a child away until now + retry_after_ms, and the child asks nothing before then
 * (it answers its requests from the refusal). A supervisor that exited idle meanwhile would be
 * started again by all its children at once when that time comes, typically the start of the
 * next window: a cold start (in a cluster, a barrier and a replay) in the path of the window's
 * first grants. So the idle exit waits for the latest such return plus the idle period
 * (on_idle). Only returns within DENY_HOLD_MAX_MS count: a tenant refused for an hour, or for
 * ever (NEVER), does not hold a process that long. */
#define DENY_HOLD_MAX_MS 60000

static void
hold_for_deny(struct sp *s, const struct proto_lease_msg *reply)
{
    uint64_t back;

    if (reply->type != PROTO_LEASE_DENY || (reply->deny.flags & PROTO_LEASE_DENY_NEVER) != 0 ||
        reply->deny.retry_after_ms <= 0 || reply->deny.retry_after_ms > DENY_HOLD_MAX_MS)
        return;
    back = uv_now(&s->loop) + (uint64_t)reply->deny.retry_after_ms;
    if (back > s->deny_back_ms)
        s->deny_back_ms = back;
}

static void cluster_ready(struct sp *s);

static void
on_frame(proto_conn *c, const struct proto_frame *f, void *data)
{
    struct sp *s = data;
    struct proto_lease_msg in;
    struct proto_lease_msg reply;
    int rc;

    if (s->cluster && f->type >= PROTO_JOURNAL_SYNC) {
        sp_cluster_on_frame(s, f, cluster_ready);
        return;
    }
    if (s->cluster && s->ledger == NULL) { /* before READY: answered once the ledger is open */
        if (sp_cluster_keep_early(s, f) != TALLY_OK)
            sp_stop(s, 74);
        return;
    }
    uv_timer_again(&s->idle_timer);
    s->quiet_ticks = 0;
    if (!uv_is_active((uv_handle_t *)&s->reload_timer))
        uv_timer_start(&s->reload_timer, sp_on_reload_tick, RELOAD_CHECK_MS, RELOAD_CHECK_MS);
    if (proto_lease_decode(f, &in) != TALLY_OK) {
        sp_log_event(s, TALLY_LOG_WARN, "bad_frame");
        proto_conn_close(c);
        return;
    }
    if (s->batch.count == s->batch.cap || s->out_len > PROTO_CONN_OUT_MAX / 2)
        sp_flush(s);
    /* The configuration may have changed a moment ago (a new link, a raised limit):
     * look again before answering a request for tokens (the file's stamp, cheap). A link
     * tallyd let through but this snapshot does not know is read again whatever the stamp
     * says: only tallyd's authentication lets a link this far, and a refusal here would be
     * an "unauthorized" for a link that exists. */
    if (in.type == PROTO_LEASE_ACQUIRE || in.type == PROTO_LEASE_SLOT_ACQUIRE) {
        const char *link = in.type == PROTO_LEASE_ACQUIRE ? in.acquire.link : in.slot_acquire.link;

        if (store_snapshot_link_by_id(s->snap, link) == NULL)
            memset(&s->config_stamp, 0, sizeof(s->config_stamp));
        sp_reload(s);
    }
    if (s->stopping)
        return;
    rc = sup_ledger_handle(s->ledger, sp_wall_ms(), &in, &reply, &s->batch);
    if (rc == TALLY_EPROTO) {
        sp_log_event(s, TALLY_LOG_WARN, "bad_message");
        proto_conn_close(c);
        return;
    }
    if (rc != TALLY_OK || sp_queue_reply(s, &reply, f->request_id) != TALLY_OK) {
        sp_stop(s, 74);
        return;
    }
    hold_for_deny(s, &reply);
    arm_expiry(s);
}

static void
on_close(proto_conn *c, int reason, void *data)
{
    struct sp *s = data;

    (void)reason;
    if (s->conn == c)
        s->conn = NULL;
    proto_conn_unref(c);
    sp_flush(s);
    sp_stop(s, s->exit_code); /* tallyd went away: an orphan never grants */
}

static void
on_idle(uv_timer_t *t)
{
    struct sp *s = t->data;
    uint64_t now = uv_now(&s->loop);
    uint64_t idle = uv_timer_get_repeat(t);

    /* Children refused until deny_back_ms come back then: stay for them (hold_for_deny). */
    if (s->deny_back_ms != 0 && s->deny_back_ms + idle > now) {
        uv_timer_start(t, on_idle, s->deny_back_ms + idle - now, idle);
        return;
    }
    sp_flush(s);
    sp_log_event(s, TALLY_LOG_INFO, "supervisor_idle_exit");
    sp_stop(s, 0);
}

static void
on_signal(uv_signal_t *h, int signum)
{
    struct sp *s = h->data;

    (void)signum;
    sp_flush(s);
    sp_stop(s, 0);
}

/* An idle supervisor keeps little memory: each file's page cache is capped at
 * CACHE_KB (a ledger is a few pages, its rows live in the ledger's tables),
 * what the replay and the snapshot load used goes back to SQLite and to the
 * kernel, and the spare's connection to tally.db, read, is closed. */
void
sp_shrink(struct sp *s)
{
    static const char cap[] = "PRAGMA cache_size=-" CACHE_KB;
    sqlite3 *db;

    s->shrink_due = false;
    sp_config_release();
    if (s->journal == NULL)
        return;
    db = store_db_handle(s->journal);
    (void)sqlite3_exec(db, cap, NULL, NULL, NULL);
    (void)sqlite3_db_release_memory(db);
    (void)malloc_trim(0);
}

static int
open_all(struct sp *s)
{
    char path[STORE_PATH_MAX];
    const struct store_snap_tenant *t = NULL;
    struct sup_ledger_config cfg;
    int rc;

    /* Stamped before the read: a commit after it moves the stamp. */
    (void)store_config_stamp_changed(s->o->data, &s->config_stamp);
    rc = sp_load_config(s, &t);
    if (rc != TALLY_OK)
        return rc == TALLY_ENOTFOUND ? TALLY_ENODATA : rc;
    rc = store_path_tenant(s->o->data, s->o->tenant, "ledger.db", path, sizeof(path));
    /* In a cluster the file is this host's copy of the log's records, written by tallyd: read
     * here, never written. */
    if (rc == TALLY_OK)
        rc = store_journal_open(path,
                                STORE_OPEN_CREATE | STORE_OPEN_PERSIST_WAL |
                                    (s->cluster ? 0 : STORE_OPEN_PRIVATE) |
                                    (s->o->strict && !s->cluster ? STORE_OPEN_SYNC_FULL : 0),
                                &sp_journal_upgrade, &s->journal);
    if (rc != TALLY_OK)
        return rc;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.tenant, sizeof(cfg.tenant), "%s", s->o->tenant);
    cfg.plan = *t->plan;
    cfg.endpoints = s->eps;
    cfg.endpoint_count = s->n_eps;
    cfg.link_allows = sp_link_allows;
    cfg.link_ctx = s;
    cfg.keep_ttl_ms = s->o->keep_lease_ms;
    rc = sup_ledger_open(&cfg, &s->ledger);
    if (rc == TALLY_OK)
        rc = sp_replay(s);

    if (rc == TALLY_OK)
        sp_maybe_compact(s);
    /* The EPOCH record waits in the batch for the first turn's commit: it is durable before
     * any answer leaves (every answer waits for its turn's commit), and a first request
     * costs one commit, not two. A supervisor that dies before that commit answered
     * nothing under its epoch, so the next one may take the same number. */
    if (rc == TALLY_OK)
        rc = sup_ledger_start(s->ledger, sp_wall_ms(), &s->batch);
    /* Memory goes back at the first reload tick (sp_on_reload_tick), not on the path of the
     * first answer or of tallyd woken by it: trimming costs a few hundred microseconds. */
    if (rc == TALLY_OK && !s->cluster)
        s->shrink_due = true;
    else if (rc == TALLY_OK)
        sp_shrink(s);
    if (s->cluster) { /* read: tallyd is the copy's only writer from now on */
        store_db_close(s->journal);
        s->journal = NULL;
    }
    return rc;
}

static void
close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

void
sup_process_prepare(void)
{
    static bool done;

    if (done)
        return;
    done = true;
    (void)store_journal_warm(); /* failed, each new ledger makes it again */
    /* strftime (the log's time stamps) reads /etc/localtime at a process's first call: once
     * here, before the fork server forks, rather than in every supervisor's first log line. */
    tzset();
}

/* One supervisor per process. */
static struct sp sp_one;
/* The loop of sp_one was made by sup_process_warm, in a spare, before its tenant came. */
static bool sp_loop_warm;

/* Zeroes everything but the records, which are written before they are read (batch.n counts
 * them): their 120 KB stay untouched, so not resident, until turns fill them. */
static void
sp_clear(struct sp *s)
{
    memset(s, 0, offsetof(struct sp, recs));
    memset((char *)s + offsetof(struct sp, recs) + sizeof(s->recs), 0,
           sizeof(*s) - offsetof(struct sp, recs) - sizeof(s->recs));
}

/* The stack a supervisor's start reaches, written once (each new page is a fault). */
static void __attribute__((noinline)) touch_stack(void)
{
    volatile char b[64 * 1024];

    memset((char *)b, 0, sizeof(b));
}

static void
log_ready(struct sp *s)
{
    struct tally_log l;

    arm_expiry(s);
    if (sp_log_begin(s, &l, TALLY_LOG_INFO, "supervisor_ready")) {
        tally_log_int(&l, "records", (int64_t)s->records_total);
        tally_log_int(&l, "journal_rows", (int64_t)s->journal_rows);
        tally_log_int(&l, "replay_ms", sp_wall_ms() - s->started_ms);
        if (s->cluster)
            tally_log_str(&l, "journal", "cluster");
        tally_log_end(&l);
    }
}

static void
early_frame(struct sp *s, const struct proto_frame *f)
{
    if (s->conn != NULL)
        on_frame(s->conn, f, s);
}

/* In a cluster, READY: every record of the log before the SYNC is in this host's copy. */
static void
cluster_ready(struct sp *s)
{
    int rc = open_all(s);

    if (rc != TALLY_OK) {
        sp_log_error(s, TALLY_LOG_ERROR, "supervisor_open_failed", rc, store_open_errmsg());
        sp_stop(s, sp_exit_code_for(rc));
        return;
    }
    log_ready(s);
    sp_cluster_early_each(s, early_frame); /* what came meanwhile, in order */
}

/* New ledgers are taken from DATA/pool when it holds some (written and synced ahead). */
static void
pool_use(const char *data)
{
    char path[STORE_PATH_MAX];

    store_pool_use(store_path_pool(data, path, sizeof(path)) == TALLY_OK ? path : NULL);
}

/* A spare makes the ledgers the next supervisors take: the write and the fdatasync of a new
 * ledger happen here, while no tenant waits, instead of in a start. */
#define POOL_LEDGERS 2

void
sup_process_warm(const struct sup_process_opts *o)
{
    unsigned made;

    sup_process_prepare();
    sp_clear(&sp_one);
    /* Its descriptors (epoll, the thread pool's wake-up) are made now rather than in the
     * start; its clock is read again when the tenant comes (sup_process_run). */
    sp_loop_warm = uv_loop_init(&sp_one.loop) == 0;
    touch_stack();
    sp_config_warm(o->data);
    pool_use(o->data);
    (void)store_journal_pool_fill(POOL_LEDGERS, &made); /* failed: starts write their own */
}

int
sup_process_run(const struct sup_process_opts *o)
{
    struct sp *s = &sp_one;
    static const struct proto_conn_cbs cbs = {on_frame, on_close};
    char path[STORE_PATH_MAX];
    int64_t started = sp_wall_ms();
    int lock_fd = -1;
    bool loop_live = false;
    int rc;

    if (!sp_loop_warm)
        sp_clear(s); /* a spare's was cleared by sup_process_warm, and holds its loop */
    s->o = o;
    sup_process_prepare();
    s->batch.v = s->recs;
    s->batch.cap = BATCH_RECORDS;
    s->compact_rows = o->journal_compact_rows > 0 ? o->journal_compact_rows : COMPACT_ROWS_DEFAULT;
    if (s->compact_rows < 16)
        s->compact_rows = 16;
    s->sync_ms = o->batch_sync_ms > 0 ? (uint64_t)o->batch_sync_ms : BATCH_SYNC_MS_DEFAULT;
    signal(SIGPIPE, SIG_IGN);
    pool_use(o->data);
    rc = store_tenant_dirs(o->data, o->tenant);
    if (rc == TALLY_OK)
        rc = store_path_tenant(o->data, o->tenant, "supervisor.lock", path, sizeof(path));
    if (rc == TALLY_OK)
        rc = store_lock_take(path, &lock_fd);
    if (rc != TALLY_OK) {
        sp_log_error(s, rc == TALLY_ELOCKED ? TALLY_LOG_WARN : TALLY_LOG_ERROR,
                     "supervisor_refused", rc, NULL);
        return sp_exit_code_for(rc);
    }
    if (sp_loop_warm)
        uv_update_time(&s->loop); /* its timers count from now, not from the spare's start */
    rc = sp_loop_warm ? 0 : uv_loop_init(&s->loop);
    if (rc != 0) {
        sp_log_uv_error(s, "supervisor_loop_failed", "uv_loop_init", rc);
        s->exit_code = 74;
        goto out;
    }
    loop_live = true;
    uv_timer_init(&s->loop, &s->sync_timer);
    s->sync_timer.data = s;
    s->cluster = sp_cluster_detect(o->data);
    rc = s->cluster ? TALLY_OK : open_all(s); /* in a cluster, once READY comes */
    if (rc != TALLY_OK) {
        sp_log_error(s, TALLY_LOG_ERROR, "supervisor_open_failed", rc,
                     s->journal != NULL ? store_db_errmsg(s->journal) : store_open_errmsg());
        s->exit_code = sp_exit_code_for(rc);
        goto out;
    }
    if (proto_conn_open_fd(&s->loop, o->channel_fd, &cbs, s, &s->conn) != TALLY_OK) {
        s->exit_code = 74;
        goto out;
    }
    uv_check_init(&s->loop, &s->check);
    s->check.data = s;
    uv_check_start(&s->check, on_check);
    uv_timer_init(&s->loop, &s->expire_timer);
    s->expire_timer.data = s;
    uv_timer_init(&s->loop, &s->idle_timer);
    s->idle_timer.data = s;
    {
        /* Up to half as long again, by pid: supervisors started in one burst (a deployment's
         * first minute) do not all checkpoint and exit in the same second. */
        uint64_t idle = (uint64_t)(o->idle_exit_ms > 0 ? o->idle_exit_ms : 10000);
        uint64_t spread = idle / 2 > 0 ? (uint64_t)getpid() * 2654435761u % (idle / 2 + 1) : 0;

        uv_timer_start(&s->idle_timer, on_idle, idle + spread, idle + spread);
    }
    uv_timer_init(&s->loop, &s->reload_timer);
    s->reload_timer.data = s;
    uv_timer_start(&s->reload_timer, sp_on_reload_tick, RELOAD_CHECK_MS, RELOAD_CHECK_MS);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigterm.data = s;
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_init(&s->loop, &s->sigint);
    s->sigint.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    s->started_ms = started;
    if (s->cluster ? sp_cluster_sync(s) == TALLY_OK : (log_ready(s), true))
        uv_run(&s->loop, UV_RUN_DEFAULT);
    else
        s->exit_code = 74;
    sp_flush(s);
out:
    if (s->conn != NULL) {
        proto_conn_close(s->conn);
        s->conn = NULL; /* on_close drops the reference */
    }
    s->stopping = true;
    if (loop_live) {
        uv_walk(&s->loop, close_walk, NULL);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        /* Every handle was closed and the loop ran dry: UV_EBUSY means one was
         * left behind, a bug worth a line and a non-zero status. */
        rc = uv_loop_close(&s->loop);
        if (rc != 0) {
            sp_log_uv_error(s, "supervisor_loop_close_failed", "uv_loop_close", rc);
            if (s->exit_code == 0)
                s->exit_code = 74;
        }
    }
    sup_ledger_close(s->ledger);
    sp_config_release();
    sp_cluster_free(s);
    store_db_close(s->journal);
    store_snapshot_free(s->snap);
    tally_free(s->eps);
    tally_free(s->out);
    if (lock_fd >= 0)
        close(lock_fd);
    return s->exit_code;
}

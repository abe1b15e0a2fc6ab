/*
 * The supervisor processes as tallyd sees them (sup_manager.h): a table of
 * tenants, each with at most one process and one framed channel. A process is
 * spawned when a frame must go to a tenant with none; its exit decides what
 * comes next: status 0 is hibernation (spawn again on demand), anything else
 * starts a backoff that doubles up to a ceiling and resets after a healthy
 * run. The table only grows with tenants that sent traffic after auth.
 * Every start and every exit is one log line (tally_log.h).
 *
 * At most max_supervisors processes run at once, going-away ones included: a
 * tenant that needs one while the ceiling is reached asks the least recently
 * used to hibernate (its channel is closed: it persists and exits 0), keeps
 * its frames (bounded; the children retransmit anything dropped) and is
 * spawned when an exit makes room: tenants asking for tokens (a request may be
 * waiting) before those only returning or heartbeating, oldest first.
 */
#include "sup_manager_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto_lease.h"
#include "proto_stream.h"
#include "tally_log.h"
#include "tenant.h"

static void admit_waiting(sup_manager *m);

/* A start that ended before the supervisor's first answer (it crashed replaying, was
 * refused the tenant's lock, or could not be spawned), or the first answer after such
 * starts: stats.failing is what /healthz reads as "supervisors failing to start". */
static void
start_failed(sup_manager *m, struct sup_proc *p, bool failed)
{
    if (failed) {
        m->stats.start_failures++;
        m->stats.start_failed_ms = uv_now(m->loop);
    }
    if (failed != p->start_failed) {
        p->start_failed = failed;
        if (failed)
            m->stats.failing++;
        else
            m->stats.failing--;
    }
}

void
sup__manager_maybe_finish(sup_manager *m)
{
    uint32_t i;

    if (!m->closing || m->pending_handles > 0)
        return;
    for (i = 0; i < m->n_procs; i++) {
        if (m->procs[i]->process_live || m->procs[i]->conn != NULL)
            return;
    }
    if (!sup__fork_release(m))
        return; /* its last handles are closing */
    for (i = 0; i < m->n_procs; i++) {
        tally_free(m->procs[i]->pending);
        tally_free(m->procs[i]);
    }
    tally_free(m->procs);
    tenant_index_release(&m->proc_index);
    if (m->close_cb != NULL)
        m->close_cb(m->close_data);
    tally_free(m);
}

static void
on_process_closed(uv_handle_t *h)
{
    struct sup_proc *p = h->data;
    sup_manager *m = p->m;

    p->process_closing = false;
    m->pending_handles--;
    admit_waiting(m); /* a waiter whose own previous process was going away */
    sup__manager_maybe_finish(m);
}

static void
on_proc_exit(uv_process_t *proc, int64_t status, int term_signal)
{
    struct sup_proc *p = proc->data;

    p->process_closing = true;
    p->m->pending_handles++;
    uv_close((uv_handle_t *)proc, on_process_closed);
    sup__proc_exited(p, status, term_signal);
}

void
sup__proc_exited(struct sup_proc *p, int64_t status, int term_signal)
{
    sup_manager *m = p->m;
    uint64_t now = uv_now(m->loop);
    int code = term_signal != 0 ? 128 + term_signal : (int)status;
    int pid = p->forked ? p->pid : p->process.pid;

    if (!p->process_live)
        return;
    p->process_live = false;
    p->fork_queued = false;
    m->stats.live--;
    if (!p->answered)
        m->stats.starting--;
    if (p->conn != NULL)
        proto_conn_close(p->conn);
    sup__proc_track(p);
    if (code == SUP_EXIT_IDLE && term_signal == 0) {
        m->stats.exits++;
        p->backoff_ms = 0;
    } else {
        m->stats.crashes++;
        if (!p->answered)
            start_failed(m, p, true);
        if (now - p->started_ms > HEALTHY_RUN_MS)
            p->backoff_ms = 0;
        p->backoff_ms = p->backoff_ms == 0 ? m->cfg.backoff_min_ms : p->backoff_ms * 2;
        if (p->backoff_ms > m->cfg.backoff_max_ms)
            p->backoff_ms = m->cfg.backoff_max_ms;
        /* Locked out by a lingering supervisor of a killed tallyd: nothing is broken, it is
         * waiting for that one to see EOF and go, so look again soon. */
        if (code == SUP_EXIT_LOCKED && term_signal == 0 && p->backoff_ms > LOCKED_RETRY_MS)
            p->backoff_ms = LOCKED_RETRY_MS;
        p->not_before_ms = now + (uint64_t)p->backoff_ms;
    }
    sup__manager_log_exit(p, pid, status, term_signal, now - p->started_ms);
    admit_waiting(m); /* before on_down: the oldest waiter gets the room */
    if (!m->closing && m->cbs.on_down != NULL)
        m->cbs.on_down(m->data, p->tenant, code);
    sup__manager_maybe_finish(m);
}

static void make_room(sup_manager *m);

static void
on_conn_frame(proto_conn *c, const struct proto_frame *f, void *data)
{
    struct sup_proc *p = data;

    (void)c;
    if (!p->answered) {
        p->m->stats.starting--;
        sup__manager_log_ready(p, (uv_hrtime() - p->started_ns) / 1000);
    }
    p->answered = true;
    if (p->start_failed)
        start_failed(p->m, p, false);
    sup__proc_touch(p, uv_now(p->m->loop));
    /* A RECALL is pushed by the supervisor, not an answer to a frame sent. */
    if (p->in_flight > 0 && f->type != PROTO_LEASE_RECALL && f->type < PROTO_JOURNAL_SYNC)
        p->in_flight--;
    if (p->m->cbs.on_frame != NULL && !p->m->closing)
        p->m->cbs.on_frame(p->m->data, p->tenant, f);
    if (p->in_flight == 0 && !p->m->closing)
        make_room(p->m); /* it may hibernate now, if a tenant waits */
}

static void
on_conn_close(proto_conn *c, int reason, void *data)
{
    struct sup_proc *p = data;

    (void)reason;
    if (p->conn == c)
        p->conn = NULL;
    sup__proc_track(p);
    proto_conn_unref(c);
    /* The process notices EOF and exits; its exit_cb does the bookkeeping. */
    sup__manager_maybe_finish(p->m);
}

/* Asks the least recently used supervisors to hibernate until the running ones
 * that stay, plus the tenants waiting for a process, fit under the ceiling. One
 * that has not answered yet is never asked: each start serves at least the
 * frames it was started for (else waiters evict each other's cold starts and
 * none progresses). One with frames unanswered is asked only after the oldest
 * waiter waited BUSY_VICTIM_MS (closing its channel drops the replies).
 * Answers make room again (on_conn_frame), as do the waiters' retransmissions. */
static void
make_room(sup_manager *m)
{
    bool patient;

    if (m->n_waiting == 0)
        return; /* the common case, on every frame */
    patient = uv_now(m->loop) - m->wait_head->waiting_since < BUSY_VICTIM_MS;
    while (m->stats.live - m->n_going + m->n_waiting > m->cfg.max_supervisors) {
        struct sup_proc *lru = NULL, *p, *prev;

        /* From the least recently used: the going ones (a channel that closed on its own is
         * counted here) and those that may not be asked yet are passed over. */
        for (p = m->live_tail; p != NULL && lru == NULL; p = prev) {
            prev = p->live_prev;
            if (sup__proc_going(p))
                sup__proc_track(p);
            else if (p->answered && (p->in_flight == 0 || !patient))
                lru = p;
        }
        if (lru == NULL)
            return;
        sup__manager_log_hibernate(lru, m);
        proto_conn_close(lru->conn); /* EOF: the supervisor persists and exits 0 */
        sup__proc_track(lru);
    }
}

static int spawn(sup_manager *m, struct sup_proc *p);

/* Keeps p's frame until a process may be spawned for it (bounded: the children
 * retransmit what is dropped) and makes room. */
static int
wait_for_room(sup_manager *m, struct sup_proc *p, const void *frame, size_t len)
{
    const uint8_t *b = frame;

    sup__wait_add(p, uv_now(m->loop));
    if (len > 5 && (b[5] == PROTO_LEASE_ACQUIRE || b[5] == PROTO_LEASE_SLOT_ACQUIRE))
        p->waiting_acquire = true;
    if (p->pending_len + len <= PENDING_MAX) {
        uint8_t *n = tally_realloc(p->pending, p->pending_len + len);
        if (n != NULL) {
            memcpy(n + p->pending_len, frame, len);
            p->pending = n;
            p->pending_len += len;
            p->pending_frames++;
        }
    }
    make_room(m);
    return TALLY_OK;
}

/* Spawns waiting tenants while there is room: those asking for tokens first,
 * then the oldest. */
static void
admit_waiting(sup_manager *m)
{
    while (!m->closing && m->stats.live < m->cfg.max_supervisors) {
        struct sup_proc *next = NULL, *p;

        /* The oldest that asks for tokens, else the oldest. */
        for (p = m->wait_head; p != NULL; p = p->wait_next) {
            if (p->process_live || p->process_closing)
                continue;
            if (next == NULL || (p->waiting_acquire && !next->waiting_acquire))
                next = p;
            if (next->waiting_acquire)
                break;
        }
        if (next == NULL)
            return;
        sup__wait_remove(next);
        if (spawn(m, next) == TALLY_OK && next->pending_len > 0 &&
            proto_conn_send(next->conn, next->pending, next->pending_len) == TALLY_OK)
            next->in_flight += next->pending_frames;
        tally_free(next->pending);
        next->pending = NULL;
        next->pending_len = 0;
        next->pending_frames = 0;
    }
}

/* Asks the fork server for p's process, the channel a socketpair whose other end
 * it hands over. TALLY_EUNAVAIL when it cannot (the caller uses uv_spawn). */
static int
spawn_forked(sup_manager *m, struct sup_proc *p, proto_conn *conn, bool *opened /* OUT */)
{
    int fds[2];
    int rc;

    *opened = false;
    if (!m->forker.server_live && m->forker.closed)
        return TALLY_EUNAVAIL;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return TALLY_EUNAVAIL;
    if (uv_pipe_open(proto_conn_pipe(conn), fds[0]) != 0) {
        close(fds[0]);
        close(fds[1]);
        return TALLY_EUNAVAIL;
    }
    *opened = true;
    rc = sup__fork_start(m, p, fds[1]);
    close(fds[1]);
    return rc;
}

static int
spawn(sup_manager *m, struct sup_proc *p)
{
    static const struct proto_conn_cbs conn_cbs = {on_conn_frame, on_conn_close};
    struct sup_manager_optbuf ob;
    char *args[16];
    int n;
    uv_stdio_container_t stdio[4];
    uv_process_options_t opts;
    proto_conn *conn = NULL;
    bool restart, opened;
    uint64_t t0 = uv_hrtime();
    int rc;

    if (p->process_live || p->process_closing)
        return TALLY_EUNAVAIL; /* the previous one is still going away */
    rc = proto_conn_pipe_new(m->loop, &conn_cbs, p, &conn);
    if (rc != TALLY_OK)
        return rc;
    if (spawn_forked(m, p, conn, &opened) == TALLY_OK) {
        p->forked = true;
        p->pid = 0;
        goto started;
    }
    if (opened) {
        /* The pipe was opened for the fork server: a fresh one for uv_spawn. */
        proto_conn_close(conn); /* on_conn_close drops our reference */
        conn = NULL;
        rc = proto_conn_pipe_new(m->loop, &conn_cbs, p, &conn);
        if (rc != TALLY_OK)
            return rc;
    }
    p->forked = false;
    args[0] = m->exe;
    args[1] = "--supervise";
    args[2] = p->tenant;
    n = 3 + sup__manager_options(m, args + 3, &ob);
    args[n] = NULL;
    sup__manager_stdio(stdio);
    stdio[3].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
    stdio[3].data.stream = (uv_stream_t *)proto_conn_pipe(conn);
    memset(&opts, 0, sizeof(opts));
    opts.file = m->exe;
    opts.args = args;
    opts.exit_cb = on_proc_exit;
    opts.stdio = stdio;
    opts.stdio_count = 4;
    p->process.data = p;
    if ((rc = uv_spawn(m->loop, &p->process, &opts)) != 0) {
        struct tally_log l;
        if (tally_log_begin(&l, TALLY_LOG_ERROR, "supervisor_spawn_failed")) {
            tally_log_str(&l, "tenant", p->tenant);
            tally_log_str(&l, "error", uv_strerror(rc));
            tally_log_int(&l, "retry_in_ms", m->cfg.backoff_max_ms);
            tally_log_end(&l);
        }
        /* uv_spawn initialised the handle even on failure: close it. */
        p->process_closing = true;
        m->pending_handles++;
        uv_close((uv_handle_t *)&p->process, on_process_closed);
        proto_conn_close(conn); /* on_conn_close drops our reference */
        p->backoff_ms = m->cfg.backoff_max_ms;
        p->not_before_ms = uv_now(m->loop) + (uint64_t)p->backoff_ms;
        start_failed(m, p, true);
        return TALLY_EUNAVAIL;
    }
started:
    if (proto_conn_start(conn) != TALLY_OK) {
        proto_conn_close(conn); /* on_conn_close drops our reference */
        if (!p->forked)
            uv_process_kill(&p->process, SIGKILL);
        /* forked: the supervisor sees EOF on its channel and exits */
        p->process_live = true;
        p->answered = true; /* not starting: its exit is a crash like any other */
        m->stats.live++;
        sup__proc_track(p);
        return TALLY_EUNAVAIL;
    }
    p->conn = conn;
    p->process_live = true;
    sup__proc_touch(p, uv_now(m->loop));
    sup__proc_track(p);
    p->answered = false;
    p->in_flight = 0;
    p->started_ms = uv_now(m->loop);
    p->started_ns = t0;
    restart = m->stats.starts++ > 0 && p->backoff_ms > 0;
    if (restart)
        m->stats.restarts++;
    m->stats.live++;
    if (++m->stats.starting > m->stats.starting_max)
        m->stats.starting_max = m->stats.starting;
    sup__manager_log_start(p, restart);
    return TALLY_OK;
}

uint32_t
sup_max_supervisors_default(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    uint64_t n = mem / 8 / SUP_BUDGET_BYTES;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && n > rl.rlim_cur / 4)
        n = rl.rlim_cur / 4; /* each supervisor holds one of tallyd's descriptors */
    if (n < SUP_DEFAULT_MIN)
        n = SUP_DEFAULT_MIN;
    if (n > SUP_DEFAULT_MAX)
        n = SUP_DEFAULT_MAX;
    return (uint32_t)n;
}

int
sup_manager_open(uv_loop_t *loop, const struct sup_manager_config *cfg,
                 const struct sup_manager_cbs *cbs, void *data, sup_manager **out)
{
    sup_manager *m = tally_calloc(1, sizeof(*m));

    *out = NULL;
    if (m == NULL)
        return TALLY_ENOMEM;
    m->loop = loop;
    m->cfg = *cfg;
    snprintf(m->data_dir, sizeof(m->data_dir), "%s", cfg->data_dir);
    snprintf(m->exe, sizeof(m->exe), "%s", cfg->exe);
    snprintf(m->durability, sizeof(m->durability), "%s",
             cfg->durability != NULL ? cfg->durability : "strict");
    if (m->cfg.idle_exit_ms <= 0)
        m->cfg.idle_exit_ms = 10000;
    if (m->cfg.backoff_min_ms <= 0)
        m->cfg.backoff_min_ms = 10;
    if (m->cfg.backoff_max_ms <= 0)
        m->cfg.backoff_max_ms = 2000;
    if (m->cfg.max_supervisors == 0)
        m->cfg.max_supervisors = sup_max_supervisors_default();
    m->cbs = *cbs;
    m->data = data;
    m->forker.m = m;
    m->forker.ctl = -1;
    (void)sup__fork_open(m); /* without it, supervisors are started by uv_spawn */
    *out = m;
    return TALLY_OK;
}

int
sup_manager_send(sup_manager *m, const char *tenant, const void *frame, size_t len)
{
    struct sup_proc *p;
    int rc;

    if (m->closing)
        return TALLY_EUNAVAIL;
    if (!tenant_name_valid(tenant))
        return TALLY_ENAME;
    p = sup__proc_get(m, tenant);
    if (p == NULL)
        return TALLY_ENOMEM;
    sup__proc_touch(p, uv_now(m->loop));
    if (p->conn == NULL) {
        if (uv_now(m->loop) < p->not_before_ms)
            return TALLY_EUNAVAIL;
        if (p->waiting_room || m->stats.live >= m->cfg.max_supervisors)
            return wait_for_room(m, p, frame, len);
        rc = spawn(m, p);
        if (rc != TALLY_OK)
            return rc;
    }
    rc = proto_conn_send(p->conn, frame, len);
    if (rc == TALLY_OK)
        p->in_flight++;
    return rc == TALLY_OK ? TALLY_OK : TALLY_EUNAVAIL;
}

int
sup_manager_send_ctl(sup_manager *m, const char *tenant, const void *frame, size_t len)
{
    struct sup_proc *p = tenant_name_valid(tenant) ? sup__proc_find(m, tenant) : NULL;

    if (m->closing || p == NULL || p->conn == NULL || proto_conn_is_closing(p->conn))
        return TALLY_EUNAVAIL;
    return proto_conn_send(p->conn, frame, len) == TALLY_OK ? TALLY_OK : TALLY_EUNAVAIL;
}

proto_conn *
sup_manager_cork(sup_manager *m, const char *tenant)
{
    struct sup_proc *p = tenant_name_valid(tenant) ? sup__proc_find(m, tenant) : NULL;

    if (p == NULL || p->conn == NULL || proto_conn_is_closing(p->conn))
        return NULL;
    proto_conn_ref(p->conn);
    proto_conn_cork(p->conn);
    return p->conn;
}

void
sup_manager_uncork(proto_conn *c)
{
    if (c == NULL)
        return;
    proto_conn_uncork(c);
    proto_conn_unref(c);
}

void
sup_manager_prestart(sup_manager *m, const char *tenant)
{
    struct sup_proc *p;

    if (m->closing || !tenant_name_valid(tenant) || m->stats.live >= m->cfg.max_supervisors)
        return;
    p = sup__proc_get(m, tenant);
    if (p == NULL || p->conn != NULL || p->waiting_room || uv_now(m->loop) < p->not_before_ms)
        return;
    sup__proc_touch(p, uv_now(m->loop));
    (void)spawn(m, p); /* a failure is logged; the first frame tries again */
}

void
sup_manager_hibernate_all(sup_manager *m)
{
    struct sup_proc *p, *next;

    for (p = m->live_head; p != NULL; p = next) {
        next = p->live_next;
        if (p->conn == NULL || proto_conn_is_closing(p->conn))
            continue;
        proto_conn_close(p->conn); /* EOF: the supervisor persists and exits 0 */
        sup__proc_track(p);
    }
}

bool
sup_manager_is_up(const sup_manager *m, const char *tenant)
{
    const struct sup_proc *p = sup__proc_find(m, tenant);

    return p != NULL && p->conn != NULL && p->process_live;
}

bool
sup_manager_is_starting(const sup_manager *m, const char *tenant)
{
    const struct sup_proc *p = sup__proc_find(m, tenant);

    return p != NULL && p->process_live && !p->answered;
}

bool
sup_manager_crashed(const sup_manager *m, const char *tenant)
{
    const struct sup_proc *p = sup__proc_find(m, tenant);

    return p != NULL && p->backoff_ms > 0;
}

int64_t
sup_manager_backoff_left_ms(const sup_manager *m, const char *tenant)
{
    const struct sup_proc *p = sup__proc_find(m, tenant);
    uint64_t now = uv_now(m->loop);

    if (p == NULL || p->not_before_ms <= now)
        return 0;
    return (int64_t)(p->not_before_ms - now);
}

int
sup_manager_pid(const sup_manager *m, const char *tenant)
{
    const struct sup_proc *p = sup__proc_find(m, tenant);

    if (p == NULL || !p->process_live)
        return 0;
    return p->forked ? p->pid : p->process.pid;
}

void
sup_manager_stats(const sup_manager *m, struct sup_manager_stats *out)
{
    *out = m->stats;
}

void
sup_manager_close(sup_manager *m, void (*cb)(void *data), void *data)
{
    uint32_t i;

    if (m == NULL)
        return;
    m->closing = true;
    m->close_cb = cb;
    m->close_data = data;
    sup__fork_close(m);
    for (i = 0; i < m->n_procs; i++) {
        if (m->procs[i]->conn != NULL)
            proto_conn_close(m->procs[i]->conn);
        sup__proc_track(m->procs[i]);
    }
    sup__manager_maybe_finish(m);
}

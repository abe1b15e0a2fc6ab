/*
 * The caller authority processes, seen from tallyd (front_callers_int.h): each
 * started on first need as `tallyd --callers S` with its channel on fd 3 (the
 * binary framing of proto_frame.h), restarted after an exit with a backoff of
 * 10 ms doubling to 2 s (none after an idle exit), and ended at shutdown by EOF
 * and SIGTERM, then SIGKILL after KILL_AFTER_MS.
 */
#include "front_callers_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tally_log.h"

static void on_conn_close(proto_conn *c, int reason, void *data);

void
fc__count_down(struct front_callers *fc)
{
    if (--fc->pending == 0 && fc->closed != NULL)
        fc->closed(fc->f);
}

void
fc__on_handle_closed(uv_handle_t *h)
{
    struct front_callers *fc = h->data;

    fc__count_down(fc);
}

bool
fc__any_live(const struct front_callers *fc)
{
    for (unsigned s = 0; s < SUP_CALLER_SHARDS; s++) {
        if (fc->a[s].live)
            return true;
    }
    return false;
}

static void
on_proc_closed(uv_handle_t *h)
{
    struct authority *a = h->data;
    struct front_callers *fc = a->fc;

    a->closing = false;
    if (!a->counted)
        return;
    a->counted = false;
    if (!fc__any_live(fc) && !uv_is_closing((uv_handle_t *)&fc->kill))
        uv_close((uv_handle_t *)&fc->kill, fc__on_handle_closed);
    fc__count_down(fc);
}

static void
on_exit(uv_process_t *p, int64_t status, int signum)
{
    struct authority *a = p->data;
    struct front_callers *fc = a->fc;
    bool failed = status != 0 || signum != 0;

    a->live = false;
    fc->f->stats.callers.authorities_live--;
    if (failed)
        fc->f->stats.callers.authority_crashes++;
    if (a->conn != NULL)
        proto_conn_close(a->conn); /* on_conn_close drops the reference */
    a->backoff_ms = !failed                           ? 0
                    : a->backoff_ms == 0              ? BACKOFF_MIN
                    : a->backoff_ms * 2 > BACKOFF_MAX ? BACKOFF_MAX
                                                      : a->backoff_ms * 2;
    a->not_before = uv_now(fc->f->loop) + (uint64_t)a->backoff_ms;
    if (failed) {
        struct tally_log l;
        if (tally_log_begin(&l, TALLY_LOG_WARN, "callers_authority_exit")) {
            tally_log_int(&l, "shard", (int64_t)a->shard);
            tally_log_int(&l, "status", signum != 0 ? 128 + signum : status);
            tally_log_int(&l, "retry_in_ms", a->backoff_ms);
            tally_log_end(&l);
        }
    }
    a->closing = true;
    uv_close((uv_handle_t *)&a->proc, on_proc_closed);
}

static int
spawn(struct authority *a)
{
    static const struct proto_conn_cbs cbs = {fc__on_frame, on_conn_close};
    sup_front *f = a->fc->f;
    char shard[8], idle[24];
    char *args[12];
    uv_stdio_container_t stdio[4];
    uv_process_options_t opts;
    proto_conn *conn = NULL;
    int n = 0;
    int rc;

    if (a->live || a->closing || uv_now(f->loop) < a->not_before)
        return TALLY_EUNAVAIL;
    rc = proto_conn_pipe_new(f->loop, &cbs, a, &conn);
    if (rc != TALLY_OK)
        return rc;
    snprintf(shard, sizeof(shard), "%u", a->shard);
    snprintf(idle, sizeof(idle), "%lld",
             (long long)(f->cfg.idle_exit_ms > 0 ? f->cfg.idle_exit_ms : 60000));
    args[n++] = f->exe;
    args[n++] = "--callers";
    args[n++] = shard;
    args[n++] = "--data";
    args[n++] = f->data;
    args[n++] = "--durability";
    args[n++] = f->cfg.strict ? "strict" : "batched";
    args[n++] = "--idle-exit-ms";
    args[n++] = idle;
    args[n] = NULL;
    memset(stdio, 0, sizeof(stdio));
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = 1;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = 2;
    stdio[3].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
    stdio[3].data.stream = (uv_stream_t *)proto_conn_pipe(conn);
    memset(&opts, 0, sizeof(opts));
    opts.file = f->exe;
    opts.args = args;
    opts.exit_cb = on_exit;
    opts.stdio = stdio;
    opts.stdio_count = 4;
    a->proc.data = a;
    if (uv_spawn(f->loop, &a->proc, &opts) != 0 || proto_conn_start(conn) != TALLY_OK) {
        proto_conn_close(conn);
        if (uv_is_active((uv_handle_t *)&a->proc)) {
            a->live = true; /* on_exit closes it */
            f->stats.callers.authorities_live++;
            uv_process_kill(&a->proc, SIGKILL);
        } else {
            a->closing = true;
            uv_close((uv_handle_t *)&a->proc, on_proc_closed);
        }
        a->backoff_ms = BACKOFF_MAX;
        a->not_before = uv_now(f->loop) + BACKOFF_MAX;
        return TALLY_EUNAVAIL;
    }
    a->conn = conn;
    a->live = true;
    a->answered = false;
    f->stats.callers.authority_starts++;
    f->stats.callers.authorities_live++;
    return TALLY_OK;
}

int
fc__authority_send(struct authority *a, const uint8_t *frame, size_t len)
{
    if (!a->live && spawn(a) != TALLY_OK)
        return TALLY_EUNAVAIL;
    if (a->conn == NULL)
        return TALLY_EUNAVAIL;
    return proto_conn_send(a->conn, frame, len);
}

void
fc__on_kill(uv_timer_t *t)
{
    struct front_callers *fc = t->data;

    for (unsigned s = 0; s < SUP_CALLER_SHARDS; s++) {
        if (fc->a[s].live)
            uv_process_kill(&fc->a[s].proc, SIGKILL);
    }
}

int
front_callers_pid(const struct front_callers *fc, unsigned shard)
{
    return shard < SUP_CALLER_SHARDS && fc->a[shard].live ? fc->a[shard].proc.pid : 0;
}

static void
on_conn_close(proto_conn *c, int reason, void *data)
{
    struct authority *a = data;

    (void)reason;
    if (a->conn == c)
        a->conn = NULL;
    proto_conn_unref(c);
    /* Nothing to kill: an authority exits when its channel closes (an idle exit closes it
     * first; a SIGTERM racing that exit would turn it into a crash and its backoff). */
}

/*
 * The manager's fork server (sup_manager_int.h): tallyd starts `tallyd
 * --fork-server` once, with a SOCK_SEQPACKET control socket on its fd 3, and
 * asks it for each supervisor (sup_forkserver_run in supervisor/ledger/ has the
 * messages). A start then costs tallyd's loop one sendmsg, never a fork of
 * tallyd itself, starts overlap, and a supervisor is forked from a small process
 * that has already loaded the program: no exec, its pages shared copy-on-write.
 *
 * The supervisors are forked with CLONE_PARENT, so tallyd is their parent: a
 * uv_signal_t on SIGCHLD reaps them by pid (libuv reaps only the pids of its own
 * uv_process_t handles) and hands the status to the same exit path as a
 * supervisor started by uv_spawn. The pid comes back on the control socket in
 * request order; a child that exits before its pid arrives is reaped when it
 * does. If the fork server dies, its pending starts fail (counted as crashes,
 * retried after the backoff), starts go through uv_spawn again, and the fork
 * server is started again on the next start after FORK_RETRY_MS.
 */
#include "sup_manager_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sup_ledger.h"
#include "tally_log.h"

/* Room each forked supervisor writes `--supervise TENANT` into (forkserver.c). */
#define TITLE_ROOM                                                                                 \
    "................................................................................"

static void spares_settle(struct sup_forker *f);

static void
on_poll_closed(uv_handle_t *h)
{
    struct sup_forker *f = h->data;

    f->m->pending_handles--;
    sup__manager_maybe_finish(f->m);
}

static void
on_server_closed(uv_handle_t *h)
{
    struct sup_forker *f = h->data;

    f->m->pending_handles--;
    sup__manager_maybe_finish(f->m);
}

/* Stops talking to the fork server: its control socket closed (it sees EOF and
 * exits) and the starts it had not answered failed. */
static void
forker_down(struct sup_forker *f)
{
    sup_manager *m = f->m;

    if (f->poll_live) {
        uv_poll_stop(&f->poll);
        f->poll_live = false;
        m->pending_handles++;
        uv_close((uv_handle_t *)&f->poll, on_poll_closed);
    }
    if (f->ctl >= 0) {
        close(f->ctl);
        f->ctl = -1;
    }
    while (f->n_queue > 0) {
        struct sup_proc *p = f->queue[f->head];
        f->head = (f->head + 1) % SUP_FORK_QUEUE;
        f->n_queue--;
        if (p != NULL)
            sup__proc_exited(p, 127, 0);
    }
    spares_settle(f);
}

static void
on_server_exit(uv_process_t *proc, int64_t status, int term_signal)
{
    struct sup_forker *f = proc->data;
    sup_manager *m = f->m;
    struct tally_log l;

    f->server_live = false;
    m->pending_handles++;
    uv_close((uv_handle_t *)proc, on_server_closed);
    if (!m->closing && tally_log_begin(&l, TALLY_LOG_WARN, "fork_server_exit")) {
        tally_log_int(&l, "pid", proc->pid);
        tally_log_int(&l, "status", status);
        tally_log_int(&l, "signal", term_signal);
        tally_log_int(&l, "retry_in_ms", FORK_RETRY_MS);
        tally_log_end(&l);
    }
    f->not_before_ms = uv_now(m->loop) + FORK_RETRY_MS;
    forker_down(f);
}

/* p's process exited with wait status st. */
static void
exited_with(struct sup_proc *p, int st)
{
    sup__proc_exited(p, WIFEXITED(st) ? WEXITSTATUS(st) : 0, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Reaps p's process if it has exited. */
static void
reap(struct sup_proc *p)
{
    int st = 0;
    pid_t r;

    do {
        r = waitpid((pid_t)p->pid, &st, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == (pid_t)p->pid)
        exited_with(p, st);
    else if (r < 0 && errno == ECHILD)
        sup__proc_exited(p, 127, 0); /* not ours to wait for: cannot happen with CLONE_PARENT */
}

/* The forked supervisor with this pid, NULL when it is none of them (a process libuv
 * spawned: the fork server, or a supervisor started without it). */
static struct sup_proc *
forked_by_pid(const sup_manager *m, pid_t pid)
{
    for (struct sup_proc *p = m->live_head; p != NULL; p = p->live_next) {
        if (p->forked && p->pid == (int64_t)pid)
            return p;
    }
    return NULL;
}

/* The slot of a spare's pid in f->spares (of a free one for 0), -1 when there is none. With
 * `live`, only a spare not reaped yet: the pid of one reaped may name a new process. */
static int
spare_slot(const struct sup_forker *f, int pid, bool live)
{
    for (int i = 0; pid >= 0 && i < SUP_FORK_SPARES_KNOWN; i++) {
        if (f->spares[i].pid == pid && !(live && f->spares[i].dead))
            return i;
    }
    return -1;
}

/* The spares reaped while starts were queued, now that none is: none of them had a tenant. */
static void
spares_settle(struct sup_forker *f)
{
    if (f->n_queue > 0)
        return;
    for (int i = 0; i < SUP_FORK_SPARES_KNOWN; i++) {
        if (f->spares[i].dead) {
            f->spares[i] = (struct sup_spare){0};
            f->m->stats.spare_exits++;
        }
    }
}

/* Reaps a spare that exited: true iff it had. With no start queued it never had a tenant (a
 * spare exit); with one queued the fork server may have given it that tenant just before it
 * died, and the answer naming it is still to come: its status is kept for that answer. */
static bool
spare_reap(sup_manager *m, int slot)
{
    struct sup_forker *f = &m->forker;
    int st;
    pid_t r;

    do {
        r = waitpid((pid_t)f->spares[slot].pid, &st, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0)
        return false;
    f->spares[slot].dead = true;
    f->spares[slot].status = st;
    spares_settle(f);
    return true;
}

/* Notes a spare the fork server forked, and reaps it at once if it died before its pid came. */
static void
spare_remember(struct sup_forker *f, int pid)
{
    int slot = spare_slot(f, 0, false);

    if (slot < 0) { /* all taken (spares lost track of): the oldest entry goes */
        if (f->spares[0].dead)
            f->m->stats.spare_exits++;
        memmove(f->spares, f->spares + 1, sizeof(f->spares) - sizeof(f->spares[0]));
        slot = SUP_FORK_SPARES_KNOWN - 1;
    }
    f->spares[slot] = (struct sup_spare){.pid = pid};
    (void)spare_reap(f->m, slot);
}

/* Reaps the forked supervisors that exited. waitid(WNOWAIT) names an exited child without
 * reaping it: ours are reaped one by one (a waitpid per exit, not one per live supervisor),
 * and so are the fork server's spares that died before they had a tenant. At the first that
 * is libuv's, every live forked one is polled instead and libuv's own handler reaps its
 * child. */
static void
on_sigchld(uv_signal_t *s, int signum)
{
    sup_manager *m = s->data;

    (void)signum;
    for (uint32_t round = 0; round <= m->n_procs; round++) {
        siginfo_t si;
        struct sup_proc *p;

        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
            break;
        p = forked_by_pid(m, si.si_pid);
        if (p == NULL) {
            int slot = spare_slot(&m->forker, si.si_pid, true);

            if (slot >= 0 && spare_reap(m, slot))
                continue;
            for (uint32_t i = 0; i < m->n_procs; i++) {
                p = m->procs[i];
                if (p->forked && p->process_live && p->pid > 0)
                    reap(p);
            }
            break;
        }
        reap(p);
    }
    sup__manager_maybe_finish(m);
}

static void
on_readable(uv_poll_t *h, int status, int events)
{
    struct sup_forker *f = h->data;
    uint8_t b[8];
    ssize_t n;

    (void)events;
    if (status < 0) {
        forker_down(f);
        return;
    }
    for (;;) {
        struct sup_proc *p;
        int32_t pid;
        struct sup_spare was = {0};
        int slot;

        n = recv(f->ctl, b, sizeof(b), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        pid = (int32_t)((uint32_t)b[1] | (uint32_t)b[2] << 8 | (uint32_t)b[3] << 16 |
                        (uint32_t)b[4] << 24);
        if (n == 5 && b[0] == SUP_FORK_SPARE && pid > 0) {
            spare_remember(f, pid);
            continue;
        }
        if (n != 5 || b[0] != SUP_FORK_VERSION || f->n_queue == 0) {
            forker_down(f); /* EOF, an error or nonsense: the exit callback follows */
            return;
        }
        if (pid > 0 && (slot = spare_slot(f, pid, false)) >= 0) {
            /* a spare given a tenant: a supervisor now, perhaps one reaped already */
            was = f->spares[slot];
            f->spares[slot] = (struct sup_spare){0};
        }
        p = f->queue[f->head];
        f->head = (f->head + 1) % SUP_FORK_QUEUE;
        f->n_queue--;
        spares_settle(f);
        if (p == NULL)
            continue; /* its start was abandoned */
        p->fork_queued = false;
        if (pid <= 0) {
            sup__proc_exited(p, 127, 0);
            continue;
        }
        p->pid = pid;
        if (was.dead)
            exited_with(p, was.status);
        else
            reap(p); /* it may have exited before its pid came back */
    }
}

void
sup__manager_stdio(uv_stdio_container_t stdio[4])
{
    memset(stdio, 0, 4 * sizeof(stdio[0]));
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = 1;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = 2;
}

int
sup__manager_options(const sup_manager *m, char **args, struct sup_manager_optbuf *b)
{
    int n = 0;

    snprintf(b->idle, sizeof(b->idle), "%lld", (long long)m->cfg.idle_exit_ms);
    args[n++] = "--data";
    args[n++] = (char *)m->data_dir;
    args[n++] = "--durability";
    args[n++] = (char *)m->durability;
    args[n++] = "--idle-exit-ms";
    args[n++] = b->idle;
    args[n++] = "--log-level"; /* the supervisor logs at tallyd's level */
    args[n++] = (char *)tally_log_level_name(tally_log_get_level());
    if (m->cfg.batch_sync_ms > 0) {
        snprintf(b->sync_ms, sizeof(b->sync_ms), "%lld", (long long)m->cfg.batch_sync_ms);
        args[n++] = "--batch-sync-ms";
        args[n++] = b->sync_ms;
    }
    if (m->cfg.journal_compact_rows > 0) {
        snprintf(b->compact, sizeof(b->compact), "%llu",
                 (unsigned long long)m->cfg.journal_compact_rows);
        args[n++] = "--journal-compact-rows";
        args[n++] = b->compact;
    }
    if (m->cfg.keep_lease_ms > 0) {
        snprintf(b->keep, sizeof(b->keep), "%lld", (long long)m->cfg.keep_lease_ms);
        args[n++] = "--keep-lease-ms";
        args[n++] = b->keep;
    }
    return n;
}

int
sup__fork_open(sup_manager *m)
{
    struct sup_forker *f = &m->forker;
    struct sup_manager_optbuf ob;
    char title[] = TITLE_ROOM;
    char *args[20];
    uv_stdio_container_t stdio[4];
    uv_process_options_t opts;
    int fds[2] = {-1, -1};
    int n, rc;

    f->m = m;
    if (f->server_live || m->closing)
        return TALLY_EUNAVAIL;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
        return TALLY_EIO;
    (void)fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    n = 0;
    args[n++] = m->exe;
    n += sup__manager_options(m, args + n, &ob);
    args[n++] = "--fork-server"; /* last: the children's titles overwrite it and the room */
    args[n++] = title;
    args[n] = NULL;
    sup__manager_stdio(stdio);
    stdio[3].flags = UV_INHERIT_FD;
    stdio[3].data.fd = fds[1];
    memset(&opts, 0, sizeof(opts));
    opts.file = m->exe;
    opts.args = args;
    opts.exit_cb = on_server_exit;
    opts.stdio = stdio;
    opts.stdio_count = 4;
    f->server.data = f;
    rc = uv_spawn(m->loop, &f->server, &opts);
    close(fds[1]);
    if (rc != 0) {
        m->pending_handles++;
        uv_close((uv_handle_t *)&f->server, on_server_closed);
        close(fds[0]);
        f->not_before_ms = uv_now(m->loop) + FORK_RETRY_MS;
        return TALLY_EUNAVAIL;
    }
    f->server_live = true;
    f->ctl = fds[0];
    f->head = 0;
    f->n_queue = 0;
    if (uv_poll_init(m->loop, &f->poll, f->ctl) != 0) {
        close(f->ctl); /* the server sees EOF and exits */
        f->ctl = -1;
        return TALLY_EUNAVAIL;
    }
    f->poll.data = f;
    f->poll_live = true;
    (void)uv_poll_start(&f->poll, UV_READABLE, on_readable);
    if (!f->sigchld_live) {
        uv_signal_init(m->loop, &f->sigchld);
        f->sigchld.data = m;
        uv_signal_start(&f->sigchld, on_sigchld, SIGCHLD);
        f->sigchld_live = true;
    }
    return TALLY_OK;
}

int
sup__fork_start(sup_manager *m, struct sup_proc *p, int fd)
{
    struct sup_forker *f = &m->forker;
    uint8_t b[1 + TENANT_NAME_MAX];
    size_t len = strlen(p->tenant);
    long n;

    if (!f->server_live && uv_now(m->loop) >= f->not_before_ms && !f->closed)
        (void)sup__fork_open(m);
    if (f->ctl < 0 || f->n_queue == SUP_FORK_QUEUE || len > TENANT_NAME_MAX)
        return TALLY_EUNAVAIL;
    b[0] = SUP_FORK_VERSION;
    memcpy(b + 1, p->tenant, len);
    n = proto_send_with_fd(f->ctl, b, 1 + len, fd, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != (long)(1 + len))
        return TALLY_EUNAVAIL; /* full or gone: this start goes through uv_spawn */
    f->queue[(f->head + f->n_queue) % SUP_FORK_QUEUE] = p;
    f->n_queue++;
    p->fork_queued = true;
    return TALLY_OK;
}

/* No more starts: the fork server is told to go (EOF); SIGCHLD stays watched until
 * every forked supervisor has been reaped (sup__fork_release). */
void
sup__fork_close(sup_manager *m)
{
    m->forker.closed = true;
    forker_down(&m->forker);
}

static void
on_sigchld_closed(uv_handle_t *h)
{
    sup_manager *m = h->data;

    m->pending_handles--;
    sup__manager_maybe_finish(m);
}

/* Every supervisor is gone: the last handles close. True when none was open. */
bool
sup__fork_release(sup_manager *m)
{
    struct sup_forker *f = &m->forker;

    if (f->server_live)
        return false; /* its exit callback comes */
    if (f->sigchld_live) {
        f->sigchld_live = false;
        m->pending_handles++;
        uv_close((uv_handle_t *)&f->sigchld, on_sigchld_closed);
        return false;
    }
    return true;
}

/*
 * The fork server (sup_ledger.h): a small tallyd process, started by tallyd with
 * `--fork-server` and a control socket on fd 3, that forks one supervisor per
 * request. It opens no database and runs no event loop or thread, so a fork
 * copies nothing SQLite or libuv would mind, and the child runs sup_process_run
 * at once: no exec, no dynamic loading, and the pages of the program and its
 * libraries stay shared copy-on-write between every supervisor.
 *
 * A request is one SOCK_SEQPACKET message: version byte 1, then the tenant's
 * name (no terminator), carrying the supervisor's end of its lease channel as
 * SCM_RIGHTS. The answer, in request order, is version byte 1 and the child's
 * pid as 4 bytes little-endian (a negative errno when the fork failed). Children
 * are forked with CLONE_PARENT: tallyd itself is their parent, reaps them and
 * sees their exit status, and a dead fork server orphans nothing. The fork
 * server exits on EOF of its control socket (tallyd went away).
 *
 * Each child writes `--supervise TENANT` over the spare argument the fork server
 * was started with, so ps and /proc/PID/cmdline name the tenant a supervisor
 * serves, as they do for a supervisor tallyd executes directly.
 *
 * Spares: the fork server keeps SPARES children forked ahead of need (also with
 * CLONE_PARENT), each set up as far as a supervisor can be without its tenant
 * (sup_process_warm: the copy-on-write faults of a new process, the connection to
 * tally.db) and waiting on a socket of its own. A request goes to a spare when
 * one is waiting: the same message (name and channel fd) is passed on, and the
 * answer is the spare's pid. A spare that died first fails the hand-over (its
 * socket is closed) and the next one, or a fork, takes the request. Each spare's
 * pid is sent to tallyd when it is forked (SUP_FORK_SPARE): tallyd reaps one that
 * dies before it has a tenant. Spares are forked again once no request came for
 * SPARE_REFILL_IDLE_MS.
 * A spare exits when its socket ends (the fork server went away).
 */
#define _GNU_SOURCE /* syscall(), CLONE_PARENT */
#include "sup_ledger.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proto_stream.h"
#include "tally_log.h"
#include "tenant.h"

/* fork() with the caller's parent as the child's parent. The raw system call
 * returns in the child like fork() does (no new stack); glibc's own fork
 * bookkeeping is not needed: this process has a single thread and no locks. */
static pid_t
fork_sibling(void)
{
    return (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), NULL, NULL, NULL,
                          NULL);
}

/* Receives one request: the tenant's name into name, the channel's fd into *fd.
 * 1 on a request, 0 on EOF, -1 on a malformed one (its fd closed). */
static int
recv_request(int ctl, char *name, size_t name_size, int *fd)
{
    uint8_t buf[1 + TENANT_NAME_MAX + 1];
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctrl;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr msg;
    struct cmsghdr *c;
    ssize_t n;

    *fd = -1;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.space;
    msg.msg_controllen = sizeof(ctrl.space);
    do {
        n = recvmsg(ctl, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n <= 0)
        return 0;
    c = CMSG_FIRSTHDR(&msg);
    if (c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(fd, CMSG_DATA(c), sizeof(int));
    if (*fd < 0 || buf[0] != SUP_FORK_VERSION || n < 2 || (size_t)n - 1 >= name_size ||
        (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return -1;
    }
    memcpy(name, buf + 1, (size_t)n - 1);
    name[n - 1] = '\0';
    if (!tenant_name_valid(name)) {
        close(*fd);
        *fd = -1;
        return -1;
    }
    return 1;
}

#define SPARES 2

static void send_message(int ctl, uint8_t type, int32_t pid);

struct spare {
    pid_t pid;
    int sock; /* the fork server's end of the spare's socket */
};

static struct spare spares[SPARES];
static int n_spares;

/* Closes the sockets of the spares (they exit), or, in a child, its copies of them. */
static void
spares_close(void)
{
    for (int i = 0; i < n_spares; i++)
        close(spares[i].sock);
    n_spares = 0;
}

/* Passes a request on to a waiting spare: 1 when one took it (*pid its pid), else 0. Spares
 * that cannot take it (dead) are dropped. */
static int
spare_take(const char *name, int fd, pid_t *pid)
{
    while (n_spares > 0) {
        struct spare sp = spares[--n_spares];
        uint8_t buf[1 + TENANT_NAME_MAX];
        size_t len = strlen(name);
        long n;

        buf[0] = SUP_FORK_VERSION;
        memcpy(buf + 1, name, len);
        n = proto_send_with_fd(sp.sock, buf, 1 + len, fd, MSG_NOSIGNAL);
        close(sp.sock);
        if (n == (ssize_t)(1 + len)) {
            *pid = sp.pid;
            return 1;
        }
    }
    return 0;
}

static int child_run(const struct sup_process_opts *tmpl, int ctl, int fd, const char *tenant,
                     char *title, size_t title_len);

/* In a spare: set up, then wait for a tenant (or the end of its socket). */
static int
spare_run(const struct sup_process_opts *tmpl, int sock, char *title, size_t title_len)
{
    char name[TENANT_NAME_MAX + 1];
    int fd, got;

    static const char spare_title[] = "--spare-supervisor";

    if (title != NULL && sizeof(spare_title) <= title_len) {
        memset(title, 0, title_len);
        memcpy(title, spare_title, sizeof(spare_title));
    }
    /* fd 3 is the channel's once a tenant comes: held by this socket meanwhile, so that the
     * files the set-up opens take other numbers. */
    if (sock != 3) {
        if (dup2(sock, 3) < 0)
            return 74;
        close(sock);
        sock = 3;
    }
    sup_process_warm(tmpl);
    do {
        got = recv_request(sock, name, sizeof(name), &fd);
    } while (got < 0);
    close(sock);
    return got == 0 ? 0 : child_run(tmpl, -1, fd, name, title, title_len);
}

/* Drops the spares that ended (killed: their end of the socket hung up). */
static void
spares_prune(void)
{
    struct pollfd p[SPARES];
    int n = 0;

    for (int i = 0; i < n_spares; i++)
        p[i] = (struct pollfd){spares[i].sock, 0, 0};
    if (n_spares == 0 || poll(p, (nfds_t)n_spares, 0) <= 0)
        return;
    for (int i = 0; i < n_spares; i++) {
        if (p[i].revents & (POLLHUP | POLLERR | POLLNVAL))
            close(spares[i].sock);
        else
            spares[n++] = spares[i];
    }
    n_spares = n;
}

/* Forks spares until SPARES wait. */
static void
spares_fill(const struct sup_process_opts *tmpl, int ctl, char *title, size_t title_len)
{
    while (n_spares < SPARES) {
        int sv[2];
        pid_t pid;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
            return;
        pid = fork_sibling();
        if (pid == 0) {
            close(ctl);
            close(sv[0]);
            spares_close(); /* the fork server's, not this process's */
            exit(spare_run(tmpl, sv[1], title, title_len));
        }
        close(sv[1]);
        if (pid < 0) {
            close(sv[0]);
            return;
        }
        spares[n_spares].pid = pid;
        spares[n_spares].sock = sv[0];
        n_spares++;
        send_message(ctl, SUP_FORK_SPARE, (int32_t)pid); /* tallyd reaps it if it dies unused */
    }
}

/* Spares are forked again only after this long without a request: a spare's set-up takes
 * a few ms of CPU, which the supervisors just started (and tallyd) need more. */
#define SPARE_REFILL_IDLE_MS 20

/* True iff a request came on ctl (or it ended) within ms. */
static bool
request_within(int ctl, int ms)
{
    struct pollfd p = {ctl, POLLIN, 0};
    int n;

    do {
        n = poll(&p, 1, ms);
    } while (n < 0 && errno == EINTR);
    return n != 0;
}

static void
send_answer(int ctl, int32_t pid)
{
    send_message(ctl, SUP_FORK_VERSION, pid);
}

static void
send_message(int ctl, uint8_t type, int32_t pid)
{
    uint8_t b[5] = {type, (uint8_t)pid, (uint8_t)(pid >> 8), (uint8_t)(pid >> 16),
                    (uint8_t)((uint32_t)pid >> 24)};
    ssize_t n;

    do {
        n = send(ctl, b, sizeof(b), MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
}

/* In the child: the channel on fd 3, the control socket closed, the title. */
static int
child_run(const struct sup_process_opts *tmpl, int ctl, int fd, const char *tenant, char *title,
          size_t title_len)
{
    struct sup_process_opts o = *tmpl;
    static const char flag[] = "--supervise";
    size_t name_len = strlen(tenant);

    if (ctl >= 0)
        close(ctl);
    spares_close();
    if (fd != 3) {
        if (dup2(fd, 3) < 0)
            return 74;
        close(fd);
    }
    if (title != NULL && sizeof(flag) + name_len + 1 <= title_len) {
        memset(title, 0, title_len);
        memcpy(title, flag, sizeof(flag));
        memcpy(title + sizeof(flag), tenant, name_len);
    }
    o.tenant = tenant;
    o.channel_fd = 3;
    return sup_process_run(&o);
}

int
sup_forkserver_run(const struct sup_process_opts *tmpl, int ctl, char *title, size_t title_len)
{
    char name[TENANT_NAME_MAX + 1];
    int fd, got, err;

    /* Children must not inherit a blocked or ignored SIGCHLD from an odd parent. */
    signal(SIGCHLD, SIG_DFL);
    /* SQLite set up once here, not in every child: its built-in functions and
     * extensions registered, its allocator and mutexes made (no thread, no file). */
    sup_process_prepare();
    for (;;) {
        pid_t pid = 0;

        spares_prune();
        if (n_spares < SPARES && !request_within(ctl, SPARE_REFILL_IDLE_MS))
            spares_fill(tmpl, ctl, title, title_len);
        got = recv_request(ctl, name, sizeof(name), &fd);
        if (got == 0)
            break;
        if (got < 0) {
            send_answer(ctl, -EINVAL);
            continue;
        }
        err = 0;
        if (!spare_take(name, fd, &pid)) {
            pid = fork_sibling();
            if (pid == 0)
                exit(child_run(tmpl, ctl, fd, name, title, title_len));
            err = errno;
        }
        close(fd);
        send_answer(ctl, pid > 0 ? (int32_t)pid : -err);
    }
    spares_close();
    return 0;
}

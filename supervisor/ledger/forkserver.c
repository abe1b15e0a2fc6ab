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
 */
#define _GNU_SOURCE /* syscall(), CLONE_PARENT */
#include "sup_ledger.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

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

static void
send_answer(int ctl, int32_t pid)
{
    uint8_t b[5] = {SUP_FORK_VERSION, (uint8_t)pid, (uint8_t)(pid >> 8), (uint8_t)(pid >> 16),
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

    close(ctl);
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
    while ((got = recv_request(ctl, name, sizeof(name), &fd)) != 0) {
        pid_t pid;

        if (got < 0) {
            send_answer(ctl, -EINVAL);
            continue;
        }
        pid = fork_sibling();
        if (pid == 0)
            exit(child_run(tmpl, ctl, fd, name, title, title_len));
        err = errno;
        close(fd);
        send_answer(ctl, pid > 0 ? (int32_t)pid : -err);
    }
    return 0;
}

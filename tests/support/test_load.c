/*
 * The binary-protocol load generator of test_load.h: connections from
 * libtally's blocking client (proto_client_connect), then poll and frames from
 * the client codec. Every connection writes all its
 * requests before reading, so tallyd sees them as concurrently as a socket
 * can deliver them.
 */
#include "test_load.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proto_client.h"

struct lconn {
    int fd;
    int sent;
    int answered;
    int want;
    struct proto_frame_reader r;
    uint8_t buf[PROTO_FRAME_MAX];
};

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connection with the HELLO exchanged (libtally's), -1 when there is none by `deadline`. */
static int
connect_to(const char *path, int64_t deadline)
{
    int64_t left = deadline - mono_ms();
    uint32_t window;
    int fd;

    if (left <= 0 || proto_client_connect(path, (int)left, &fd, &window) != TALLY_OK)
        return -1;
    return fd;
}

static bool
write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void
count(struct test_load_result *out, const struct proto_check_reply *r)
{
    switch (r->status) {
    case PROTO_ADMITTED:
        out->admitted++;
        if (r->flags & PROTO_F_DEGRADED)
            out->degraded++;
        break;
    case PROTO_REFUSED:
        out->refused++;
        break;
    case PROTO_UNAUTHORIZED:
        out->unauthorized++;
        break;
    case PROTO_UNAVAILABLE:
        out->unavailable++;
        break;
    case PROTO_BAD_REQUEST:
        out->bad_request++;
        break;
    default:
        out->other++;
        break;
    }
}

void
test_load_run(const char *socket, const char *const *tokens, int ntokens, const char *endpoint,
              int total, int conns, int timeout_ms, struct test_load_result *out)
{
    struct lconn *c = calloc((size_t)conns, sizeof(*c));
    uint8_t frame[PROTO_CLIENT_MSG_MAX];
    int64_t deadline = mono_ms() + timeout_ms;
    int next_token = 0;
    int i;

    memset(out, 0, sizeof(*out));
    if (c == NULL) {
        out->lost = total;
        return;
    }
    for (i = 0; i < conns; i++) {
        c[i].want = total / conns + (i < total % conns ? 1 : 0);
        c[i].fd = connect_to(socket, deadline);
        proto_frame_reader_init(&c[i].r, c[i].buf, sizeof(c[i].buf));
    }
    /* every request of every connection, before any answer is read */
    for (i = 0; i < conns; i++) {
        while (c[i].fd >= 0 && c[i].sent < c[i].want) {
            struct proto_check m;
            size_t len;
            memset(&m, 0, sizeof(m));
            snprintf(m.token, sizeof(m.token), "%s", tokens[next_token++ % ntokens]);
            snprintf(m.endpoint, sizeof(m.endpoint), "%s", endpoint);
            len = proto_check_encode(frame, (uint32_t)(c[i].sent + 1), &m);
            if (!write_all(c[i].fd, frame, len)) {
                close(c[i].fd);
                c[i].fd = -1;
                break;
            }
            c[i].sent++;
        }
    }
    for (;;) {
        struct pollfd pf[256];
        int map[256];
        int n = 0;
        int64_t left = deadline - mono_ms();
        for (i = 0; i < conns && n < 256; i++) {
            if (c[i].fd >= 0 && c[i].answered < c[i].sent) {
                pf[n].fd = c[i].fd;
                pf[n].events = POLLIN;
                pf[n].revents = 0;
                map[n++] = i;
            }
        }
        if (n == 0 || left <= 0)
            break;
        if (poll(pf, (nfds_t)n, (int)left) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            struct lconn *lc = &c[map[k]];
            struct proto_frame f;
            uint8_t *space;
            size_t room;
            ssize_t got;
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            room = proto_frame_reader_space(&lc->r, &space);
            got = recv(lc->fd, space, room, 0);
            if (got <= 0) {
                close(lc->fd);
                lc->fd = -1;
                continue;
            }
            proto_frame_reader_commit(&lc->r, (size_t)got);
            while (proto_frame_next(&lc->r, &f) == TALLY_OK) {
                struct proto_check_reply r;
                if (f.type == PROTO_C_CHECK_REPLY && proto_check_reply_decode(&f, &r) == TALLY_OK)
                    count(out, &r);
                else
                    out->other++;
                lc->answered++;
            }
        }
    }
    for (i = 0; i < conns; i++) {
        out->lost += c[i].want - c[i].answered;
        if (c[i].fd >= 0)
            close(c[i].fd);
    }
    free(c);
}

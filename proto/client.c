/*
 * libtally's blocking client: one socket, one request at a time, every wait
 * bounded by the handle's timeout (poll). The asynchronous pipelined client
 * shares the codecs of client_codec.c. It is the one blocking client of the
 * project: `tally` (check, stats, reload), tally-bench and the suites connect
 * through it too (proto_client.h: dial, connect, request).
 */
#include "tally.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_int.h"
#include "proto_client.h"
#include "tenant_count.h"

/* memset through a volatile pointer: a wipe the compiler cannot drop (libtally
 * links libc only, so not sodium_memzero). */
static void *(*const volatile wipe_fn)(void *, int, size_t) = memset;

struct tally_client {
    int fd;
    int timeout_ms;
    uint32_t next_id;
    uint32_t max_inflight; /* announced by the server's HELLO_REPLY */
    struct proto_frame_reader reader;
    uint8_t rbuf[PROTO_FRAME_MAX];
    uint8_t wbuf[PROTO_FRAME_MAX];
};

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
connect_unix(const char *path, int *fd_out)
{
    struct sockaddr_un sa;
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path))
        return TALLY_ETOOBIG;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return TALLY_EIO;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(fd);
        return e == EACCES ? TALLY_EPERM : TALLY_EUNAVAIL;
    }
    *fd_out = fd;
    return TALLY_OK;
}

static int
connect_tcp(const char *hostport, int *fd_out)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    struct addrinfo hints, *res = NULL, *ai;
    int fd = -1;

    if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host))
        return TALLY_EINVAL;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
    if (host[0] == '[') { /* [::1] */
        memmove(host, host + 1, strlen(host));
        host[strcspn(host, "]")] = '\0';
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        return TALLY_EINVAL;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return TALLY_EUNAVAIL;
    *fd_out = fd;
    return TALLY_OK;
}

static int
send_all(tally_client *c, const uint8_t *p, size_t len, int64_t deadline)
{
    while (len > 0) {
        struct pollfd pf = {c->fd, POLLOUT, 0};
        int64_t left = deadline - mono_ms();
        ssize_t n;
        if (left <= 0)
            return TALLY_ETIMEDOUT;
        if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
            return TALLY_EIO;
        n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            return TALLY_EUNAVAIL;
        p += n;
        len -= (size_t)n;
    }
    return TALLY_OK;
}

/* Reads until a whole frame answering `id` is there. */
static int
recv_frame(tally_client *c, uint32_t id, struct proto_frame *f, int64_t deadline)
{
    for (;;) {
        uint8_t *space = NULL;
        size_t room;
        struct pollfd pf = {c->fd, POLLIN, 0};
        int64_t left;
        ssize_t n;
        int rc = proto_frame_next(&c->reader, f);

        if (rc == TALLY_OK && f->request_id == id)
            return TALLY_OK;
        if (rc == TALLY_OK)
            continue; /* an answer to an abandoned request: skip it */
        if (rc != TALLY_ENOTFOUND)
            return TALLY_EPROTO;
        left = deadline - mono_ms();
        if (left <= 0)
            return TALLY_ETIMEDOUT;
        if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
            return TALLY_EIO;
        if (!(pf.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        room = proto_frame_reader_space(&c->reader, &space);
        n = recv(c->fd, space, room, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            return TALLY_EUNAVAIL;
        proto_frame_reader_commit(&c->reader, (size_t)n);
    }
}

/* Sends one frame already encoded in `msg` and waits for its answer. */
static int
send_and_wait(tally_client *c, const uint8_t *msg, size_t len, uint32_t id, struct proto_frame *f)
{
    int64_t deadline = mono_ms() + c->timeout_ms;
    int rc;

    if (len == 0)
        return TALLY_EINVAL;
    rc = send_all(c, msg, len, deadline);
    if (rc == TALLY_OK)
        rc = recv_frame(c, id, f, deadline);
    if (rc == TALLY_OK && f->type == PROTO_C_ERROR) {
        int32_t code = 0;
        char text[128];
        rc = proto_error_decode(f, &code, text, sizeof(text)) == TALLY_OK ? code : TALLY_EPROTO;
        if (rc >= 0)
            rc = TALLY_EPROTO;
    }
    return rc;
}

/* Sends one frame already encoded in c->wbuf, wipes it and waits for its answer. */
static int
roundtrip(tally_client *c, size_t len, uint32_t id, struct proto_frame *f)
{
    int rc = send_and_wait(c, c->wbuf, len, id, f);

    wipe_fn(c->wbuf, 0, len); /* CHECK and RELEASE carry the token */
    return rc;
}

int
proto_client_dial(const char *where, int *fd)
{
    *fd = -1;
    return strncmp(where, "tcp:", 4) == 0 ? connect_tcp(where + 4, fd) : connect_unix(where, fd);
}

int
tally_client_open(const char *where, int timeout_ms, tally_client **out)
{
    struct proto_hello hello = {PROTO_VERSION, PROTO_VERSION};
    struct proto_hello_reply hr;
    struct proto_frame f;
    tally_client *c = NULL;
    uint32_t id;
    int rc;

    *out = NULL;
    c = tally_calloc(1, sizeof(*c));
    if (c == NULL)
        return TALLY_ENOMEM;
    c->fd = -1;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    proto_frame_reader_init(&c->reader, c->rbuf, sizeof(c->rbuf));
    rc = proto_client_dial(where, &c->fd);
    if (rc != TALLY_OK)
        goto out;
    id = ++c->next_id;
    rc = roundtrip(c, proto_hello_encode(c->wbuf, id, &hello), id, &f);
    if (rc == TALLY_OK &&
        (f.type != PROTO_C_HELLO_REPLY || proto_hello_reply_decode(&f, &hr) != TALLY_OK ||
         hr.version != PROTO_VERSION || hr.max_inflight == 0))
        rc = TALLY_EPROTO;
    if (rc != TALLY_OK)
        goto out;
    c->max_inflight = hr.max_inflight;
    *out = c;
    c = NULL; /* ownership moved to the caller */
out:
    tally_client_close(c);
    return rc;
}

void
tally_client_close(tally_client *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    tally_free(c);
}

void
tally__client_detach(tally_client *c, int *fd, uint32_t *max_inflight)
{
    *fd = c->fd;
    *max_inflight = c->max_inflight;
    c->fd = -1;
}

int
proto_client_connect(const char *where, int timeout_ms, int *fd, uint32_t *max_inflight)
{
    tally_client *c = NULL;
    int rc = tally_client_open(where, timeout_ms, &c);

    *fd = -1;
    *max_inflight = 0;
    if (rc != TALLY_OK)
        return rc;
    tally__client_detach(c, fd, max_inflight);
    tally_client_close(c);
    return TALLY_OK;
}

uint32_t
proto_client_next_id(tally_client *c)
{
    return ++c->next_id;
}

int
proto_client_request(tally_client *c, const uint8_t *msg, size_t len, uint32_t id,
                     struct proto_frame *reply)
{
    return send_and_wait(c, msg, len, id, reply);
}

int
tally__check_prepare(struct proto_check *m, const char *token, const char *endpoint, int64_t cost)
{
    memset(m, 0, sizeof(*m));
    if (strlen(endpoint) > TENANT_NAME_MAX || cost < 0 || cost > TENANT_COST_MAX)
        return TALLY_EINVAL;
    /* A token longer than the wire allows cannot be valid: send a prefix, so the
     * answer (401) comes from the daemon like every other. */
    snprintf(m->token, sizeof(m->token), "%s", token);
    snprintf(m->endpoint, sizeof(m->endpoint), "%s", endpoint);
    m->cost = cost;
    return TALLY_OK;
}

void
tally__result_from_reply(const struct proto_check_reply *r, struct tally_result *out)
{
    memset(out, 0, sizeof(*out));
    out->status = (enum tally_status)r->status;
    out->scope = tenant_scope_name((enum tenant_scope)r->scope);
    out->degraded = (r->flags & PROTO_F_DEGRADED) != 0;
    out->shadow_refused = (r->flags & PROTO_F_SHADOW_REFUSED) != 0;
    out->never = (r->flags & PROTO_F_NEVER) != 0;
    out->retry_after_ms = r->retry_after_ms;
    out->limit = r->limit;
    out->period_ms = r->period_ms;
    out->remaining = r->remaining;
    out->reset_ms = r->reset_ms;
    out->slot_id = r->slot_id;
    snprintf(out->detail, sizeof(out->detail), "%s", r->detail);
}

int
tally_check(tally_client *c, const char *token, const char *endpoint, int64_t cost,
            struct tally_result *out)
{
    struct proto_check m;
    struct proto_check_reply r;
    struct proto_frame f;
    uint32_t id = ++c->next_id;
    int rc;

    memset(out, 0, sizeof(*out));
    rc = tally__check_prepare(&m, token, endpoint, cost);
    if (rc == TALLY_OK)
        rc = roundtrip(c, proto_check_encode(c->wbuf, id, &m), id, &f);
    wipe_fn(&m, 0, sizeof(m)); /* the token */
    if (rc != TALLY_OK)
        return rc;
    if (f.type != PROTO_C_CHECK_REPLY || proto_check_reply_decode(&f, &r) != TALLY_OK)
        return TALLY_EPROTO;
    tally__result_from_reply(&r, out);
    return TALLY_OK;
}

int
tally_check_callers(tally_client *c, const char *endpoint, const char *const *callers, size_t n,
                    int64_t cost, struct tally_result *out)
{
    struct proto_check_callers m;
    struct proto_check_reply r;
    struct proto_frame f;
    uint32_t id = ++c->next_id;
    size_t len = 0;
    int rc = TALLY_OK;

    memset(out, 0, sizeof(*out));
    memset(&m, 0, sizeof(m));
    if (strlen(endpoint) > TENANT_NAME_MAX || n > PROTO_CALLERS_WIRE_MAX || cost < 0 ||
        cost > TENANT_COST_MAX)
        return TALLY_EINVAL;
    snprintf(m.endpoint, sizeof(m.endpoint), "%s", endpoint);
    m.cost = cost;
    m.n = (uint32_t)n;
    for (size_t i = 0; i < n && rc == TALLY_OK; i++) {
        size_t l = strlen(callers[i]);
        if (l < 1 || l > PROTO_CALLER_WIRE_MAX)
            rc = TALLY_EINVAL;
        else {
            memcpy(m.caller[i], callers[i], l);
            m.len[i] = (uint16_t)l;
        }
    }
    if (rc == TALLY_OK)
        len = proto_check_callers_encode(c->wbuf, id, &m);
    if (rc == TALLY_OK)
        rc = len > 0 ? roundtrip(c, len, id, &f) : TALLY_EINVAL;
    wipe_fn(&m, 0, sizeof(m)); /* the callers */
    if (rc != TALLY_OK)
        return rc;
    if (f.type != PROTO_C_CHECK_REPLY || proto_check_reply_decode(&f, &r) != TALLY_OK)
        return TALLY_EPROTO;
    tally__result_from_reply(&r, out);
    return TALLY_OK;
}

const char *
tally_status_name(enum tally_status status)
{
    static const char *const names[] = {"admitted",    "refused",     "unauthorized",
                                        "unavailable", "bad_request", "internal"};

    return (unsigned)status < sizeof(names) / sizeof(names[0]) ? names[status] : "unknown";
}

int
tally_release(tally_client *c, const char *token, int64_t slot_id)
{
    struct proto_release m;
    struct proto_frame f;
    uint32_t id = ++c->next_id;
    uint8_t status = 0;
    int rc;

    memset(&m, 0, sizeof(m));
    snprintf(m.token, sizeof(m.token), "%s", token);
    m.slot_id = slot_id;
    rc = roundtrip(c, proto_release_encode(c->wbuf, id, &m), id, &f);
    wipe_fn(&m, 0, sizeof(m)); /* the token */
    if (rc == TALLY_OK &&
        (f.type != PROTO_C_RELEASE_REPLY || proto_status_decode(&f, &status) != TALLY_OK))
        rc = TALLY_EPROTO;
    if (rc == TALLY_OK && status == PROTO_UNAUTHORIZED)
        rc = TALLY_EUNAUTH;
    return rc;
}

int
tally_reload(tally_client *c)
{
    struct proto_frame f;
    uint32_t id = ++c->next_id;
    uint8_t status = 0;
    int rc = roundtrip(c, proto_empty_encode(c->wbuf, PROTO_C_RELOAD, id), id, &f);

    if (rc == TALLY_OK &&
        (f.type != PROTO_C_RELOAD_REPLY || proto_status_decode(&f, &status) != TALLY_OK))
        rc = TALLY_EPROTO;
    if (rc == TALLY_OK && status != 0)
        rc = TALLY_EPERM;
    return rc;
}

/*
 * Listeners for framed connections (proto_stream.h) on a Unix socket (a stale
 * socket file left by a kill -9 is removed, a live one is refused) or TCP;
 * each accepted connection goes to proto__stream_on_connection (stream.c).
 */
#include "proto_stream_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* A socket file nobody listens on is stale (a kill -9 left it): remove it. */
static int
clear_stale_socket(const char *path)
{
    struct sockaddr_un sa;
    struct stat sb;
    int fd;
    int rc;

    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? TALLY_OK : TALLY_EIO;
    if (!S_ISSOCK(sb.st_mode))
        return TALLY_EEXIST;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return TALLY_EIO;
    rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    if (rc == 0)
        return TALLY_EINUSE;
    return unlink(path) == 0 ? TALLY_OK : TALLY_EIO;
}

static proto_listener *
listener_new(const struct proto_listener_cbs *cbs, void *data)
{
    proto_listener *l = tally_calloc(1, sizeof(*l));

    if (l == NULL)
        return NULL;
    l->max_frame = cbs->max_frame;
    l->cbs = *cbs;
    l->data = data;
    return l;
}

static void
on_listener_closed(uv_handle_t *h)
{
    proto_listener *l = h->data;

    if (l->close_cb != NULL)
        l->close_cb(l->close_data);
    tally_free(l);
}

int
proto_listener_unix(uv_loop_t *loop, const char *path, int mode,
                    const struct proto_listener_cbs *cbs, void *data, proto_listener **out)
{
    proto_listener *l = NULL;
    int rc;

    *out = NULL;
    if (strlen(path) >= sizeof(l->path))
        return TALLY_ETOOBIG;
    rc = clear_stale_socket(path);
    if (rc != TALLY_OK)
        return rc;
    l = listener_new(cbs, data);
    if (l == NULL)
        return TALLY_ENOMEM;
    l->is_unix = true;
    snprintf(l->path, sizeof(l->path), "%s", path);
    if (uv_pipe_init(loop, &l->h.pipe, 0) != 0) {
        tally_free(l);
        return TALLY_EIO;
    }
    l->h.handle.data = l;
    if (uv_pipe_bind(&l->h.pipe, path) != 0 || chmod(path, (mode_t)mode) != 0 ||
        uv_listen(&l->h.stream, 511, proto__stream_on_connection) != 0) {
        l->path[0] = '\0';
        uv_close(&l->h.handle, on_listener_closed);
        return TALLY_EIO;
    }
    *out = l;
    return TALLY_OK;
}

int
proto_listener_tcp(uv_loop_t *loop, const char *host, int port,
                   const struct proto_listener_cbs *cbs, void *data, proto_listener **out)
{
    struct sockaddr_storage ss;
    proto_listener *l;

    *out = NULL;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return TALLY_EINVAL;
    l = listener_new(cbs, data);
    if (l == NULL)
        return TALLY_ENOMEM;
    if (uv_tcp_init(loop, &l->h.tcp) != 0) {
        tally_free(l);
        return TALLY_EIO;
    }
    l->h.handle.data = l;
    if (uv_tcp_bind(&l->h.tcp, (struct sockaddr *)&ss, 0) != 0 ||
        uv_listen(&l->h.stream, 511, proto__stream_on_connection) != 0) {
        uv_close(&l->h.handle, on_listener_closed);
        return TALLY_EINUSE;
    }
    *out = l;
    return TALLY_OK;
}

int
proto_listener_port(const proto_listener *l)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);

    if (l->is_unix || uv_tcp_getsockname(&l->h.tcp, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

void
proto_listener_close(proto_listener *l, void (*cb)(void *data), void *data)
{
    if (l == NULL)
        return;
    l->close_cb = cb;
    l->close_data = data;
    if (l->is_unix && l->path[0] != '\0')
        unlink(l->path);
    if (!uv_is_closing(&l->h.handle))
        uv_close(&l->h.handle, on_listener_closed);
}

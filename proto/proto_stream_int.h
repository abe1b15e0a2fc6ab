/*
 * What stream.c and listener.c share (proto_stream.h): the listener, and the
 * accept callback that turns a pending connection into a proto_conn.
 */
#ifndef PROTO_STREAM_INT_H
#define PROTO_STREAM_INT_H

#include "proto_stream.h"

#include <stdbool.h>
#include <sys/un.h>

struct proto_listener {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    struct proto_listener_cbs cbs;
    void *data;
    bool is_unix;
    size_t max_frame;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    void (*close_cb)(void *data);
    void *close_data;
};

/** libuv's connection callback of every listener (its data is the proto_listener): accepts
 *  into a new connection, asks the owner (on_accept), starts reading, tells it (on_conn). */
void proto__stream_on_connection(uv_stream_t *server, int status);

#endif /* PROTO_STREAM_INT_H */

/*
 * Layouts shared by the HTTP server's files: the server, the connection and
 * the module-internal functions (proto__http_*). http_listen.c owns the
 * listener and accepting; http_server.c the connections, their timers and
 * lifecycle; http_request.c feeds http_parser and
 * enforces the request limits; http_response.c builds and serialises answers.
 * http_server.c is the centre: http_listen.c hands it each accepted connection
 * and hears from it when a handle is gone; http_request.c tells it when a
 * request begins so that its deadline starts. Those are callbacks between one
 * connection's parts, written as direct calls.
 */
#ifndef PROTO_HTTP_INT_H
#define PROTO_HTTP_INT_H

#include "proto_http.h"

#include <http_parser.h>

/* Room before the body in a connection's write buffer for the status line and
 * headers: fixed headers, handler headers, Content-Length and Connection. The
 * head is written right-aligned so [head][body] goes out as one buffer. */
#define HTTP_CONTENT_TYPE_MAX 128
#define HTTP_HEAD_RESERVE                                                                          \
    (512 + PROTO_HTTP_RESP_HEADERS_MAX * (PROTO_HTTP_RESP_HEADER_LINE_MAX + 2))

/* Rejected connections are accepted into these handles and closed at once, so
 * an over-cap accept allocates nothing. When all are closing, the accept waits
 * in libuv (its listener pauses) until one comes back. */
#define HTTP_REJECT_POOL 8
/* Bytes of answers a connection batches into one write (a pipelining client's). */
#define HTTP_OUT_BATCH 8192
/* Connections beyond max_connections that are read and answered 503
 * too_many_connections (then closed) at once; more go to the reject pool. */
#define HTTP_OVER_CAP_MAX 16

struct http_kept_name {
    char name[PROTO_HTTP_NAME_MAX + 1];
    size_t len;
};

struct http_route {
    char path[PROTO_HTTP_NAME_MAX + 1];
    size_t len;
    unsigned methods;
    int id;
};

/* Limits after defaults were applied. */
struct http_limits {
    size_t max_head_bytes;
    size_t max_url_bytes;
    size_t max_headers;
    size_t max_value_bytes;
    size_t max_body_bytes;
    size_t max_response_bytes;
    size_t read_buffer_bytes;
    uint64_t idle_timeout_ms;
    uint64_t request_timeout_ms;
    uint64_t linger_timeout_ms;
    uint32_t max_connections;
    int backlog;
};

enum http_conn_flags {
    CONN_READING = 1 << 0,      /* uv_read_start in effect */
    CONN_WRITING = 1 << 1,      /* write_req in flight: parsing and reading paused */
    CONN_IN_REQUEST = 1 << 2,   /* a request's first byte was seen: request deadline */
    CONN_HEADERS_DONE = 1 << 3, /* current request's head is complete */
    CONN_MSG_DONE = 1 << 4,     /* parser paused at message end: dispatch it */
    CONN_FINAL = 1 << 5,        /* last answer queued: parse no more */
    CONN_LINGER = 1 << 6,       /* shut down for writing, draining input */
    CONN_CLOSING = 1 << 7,      /* uv_close called on both handles */
    CONN_EOF = 1 << 8,          /* the peer will send nothing more */
    CONN_SHUT_DONE = 1 << 9,    /* our side is shut down for writing */
    CONN_IN_HANDLER = 1 << 10,  /* the handler runs: it may defer */
    CONN_DEFERRED = 1 << 11,    /* the app owns the answer: parse nothing, no deadline */
    CONN_RESUME = 1 << 12,      /* a deferred answer was sent: the timer parses on */
    CONN_OVER_CAP = 1 << 13,    /* beyond max_connections: its request gets 503, then close */
    CONN_IN_BATCH = 1 << 14,    /* conn_process parses: answers wait in obuf for its end */
    CONN_HELD = 1 << 15         /* a deferred answer (in wbuf) waits for the write in flight */
};

/* A deferred answer is its connection's: the request it answers (method,
 * keep-alive) stays in the connection, which parses nothing meanwhile. */
struct proto_http_deferred {
    struct http_conn *conn;
};

enum http_field_state { FIELD_NONE = 0, FIELD_NAME, FIELD_VALUE };

struct http_conn {
    uv_tcp_t tcp; /* tcp.data and timer.data point back here */
    uv_timer_t timer;
    uv_write_t write_req;
    uv_shutdown_t shutdown_req;
    http_parser parser;
    proto_http_server *srv;
    struct http_conn *prev, *next; /* srv->conns */
    unsigned flags;
    int pending_closes;

    /* Deadlines, loop time in ms. */
    uint64_t progress_ms; /* last byte read or write completed */
    uint64_t request_start_ms;
    uint64_t linger_until_ms;
    uint64_t timer_due_ms; /* when the armed timer fires; UINT64_MAX if not armed */

    /* Read buffer: bytes [rpos, rlen) are received but not yet parsed. */
    char *rbuf;
    size_t rpos, rlen;

    /* The request being parsed; reset at its first byte. */
    size_t head_bytes;
    size_t header_count;
    enum http_field_state field_state;
    char field[PROTO_HTTP_NAME_MAX + 1];
    size_t field_len;   /* > PROTO_HTTP_NAME_MAX: too long to be a kept name */
    int kept_cur;       /* index of the kept header being read, or -1 */
    unsigned kept_seen; /* bit i: kept header i present */
    size_t kept_len[PROTO_HTTP_KEPT_MAX];
    char *kept; /* n_kept values of max_value_bytes + 1 each */
    char *url;
    size_t url_len;
    struct http_parser_url url_parts;
    char *body;
    size_t body_len;
    enum proto_http_method method;
    bool keep_alive;
    /* A limit hit inside a parser callback, answered once the parser stops. */
    int reject_status;
    enum proto_http_reject reject_reason;
    const char *reject_detail;

    /* The answer: body in wbuf + HTTP_HEAD_RESERVE, head right-aligned before it. */
    struct proto_http_response resp;
    char *wbuf;
    /* Answers serialised and not yet written: the answers to the requests of one read go
     * out in one write. [0, oflight) is in a write in flight, [oflight, olen) waits. */
    char *obuf;
    size_t olen, oflight;
    uv_buf_t held; /* CONN_HELD: the answer in wbuf that obuf had no room for */
    struct proto_http_deferred deferred; /* handed out while CONN_DEFERRED */
};

struct proto_http_server {
    uv_tcp_t listener;
    uv_loop_t *loop;
    proto_http_handler_fn handler;
    void *app_data;
    proto_http_cancel_fn on_cancel;
    proto_http_close_cb close_cb;
    bool listening;
    bool closing;
    bool accept_waiting; /* a connection libuv holds until we uv_accept() */
    size_t pending;      /* listener + connections + reject handles not yet closed */
    uint32_t over_cap;   /* open connections with CONN_OVER_CAP */

    struct http_limits lim;
    struct http_route routes[PROTO_HTTP_ROUTES_MAX];
    size_t routes_count;
    struct http_kept_name kept[PROTO_HTTP_KEPT_MAX];
    size_t kept_count;
    /* The one allocation per connection: the struct, then its buffers. */
    size_t conn_size;
    size_t off_rbuf, off_url, off_body, off_kept, off_wbuf, off_obuf;

    struct http_conn *conns; /* open connections, doubly linked */
    uv_tcp_t reject[HTTP_REJECT_POOL];
    bool reject_busy[HTTP_REJECT_POOL];
    struct proto_http_stats stats;
};

/* http_server.c */
/** Starts a request at its first byte: resets the request state and arms the
 *  request deadline. */
void proto__http_request_begin(struct http_conn *c);
/** Accepts the connection waiting on the listener (over: beyond max_connections, to be
 *  answered 503); false when there is no memory for it (the caller rejects it). */
bool proto__http_conn_accept(proto_http_server *srv, bool over);
/** Closes every connection (each unlinks itself in its close callback). */
void proto__http_conns_close(proto_http_server *srv);

/* http_listen.c */
/** A handle of the server (listener, connection, reject) is gone for good: the last one
 *  frees a closing server, else a waiting accept goes on. */
void proto__http_handle_gone(proto_http_server *srv);

/* http_request.c */
enum http_feed {
    HTTP_FEED_NEED_MORE, /* every buffered byte parsed, the request is incomplete */
    HTTP_FEED_MESSAGE,   /* a request is complete (parser paused): answer it */
    HTTP_FEED_REJECT     /* refuse with c->reject_status and close */
};
/** Clears c's request state for the next request (the parser keeps going). */
void proto__http_request_reset(struct http_conn *c);
/** Feeds the parser with c's buffered bytes [rpos, rlen). */
enum http_feed proto__http_request_feed(struct http_conn *c);
/** Wipes what held the answered request's secrets (a bearer token): the kept
 *  header values and, when nothing more is buffered, the read buffer. */
void proto__http_request_wipe(struct http_conn *c);
/** Fills req from the complete request of c; called once per request. */
void proto__http_request_view(struct http_conn *c, struct proto_http_request *req /* OUT */);

/* http_response.c */
/** True iff a handler's answer can be sent: no latched error, status 200..599,
 *  content type absent or at most HTTP_CONTENT_TYPE_MAX printable bytes. */
bool proto__http_response_valid(const struct proto_http_response *resp);
/** Resets resp to an empty answer (status 0) whose body lives in `body` of `cap` bytes. */
void proto__http_response_reset(struct proto_http_response *resp, char *body, size_t cap);
/** Writes the head before resp's body in wbuf; returns the buffer to send.
 *  `head_only` omits the body (HEAD). */
uv_buf_t proto__http_response_serialise(struct proto_http_response *resp, char *wbuf,
                                        bool keep_alive, bool head_only);
/** Writes the Allow value for `methods` into buf of `cap` bytes. */
void proto__http_allow_value(unsigned methods, char *buf, size_t cap);

#endif /* PROTO_HTTP_INT_H */

/*
 * The HTTP server's connections and their lifecycle, on the caller's loop
 * (the listener and accepting are http_listen.c).
 * A connection is one allocation made at accept (its handles, parser, read
 * and write buffers) and freed in the last close callback. Requests are read
 * into a capped buffer and parsed as they arrive; each complete one is
 * answered by the handler. The answers to the requests of one read are
 * gathered in the connection's out buffer and written together at the end of
 * the read (uv_try_write, the rest with the connection's own uv_write_t), so a
 * pipelining client costs one write per read, not one per request. While a
 * write is in flight the connection neither parses nor reads, so pipelined
 * requests are answered in order and a client that does not read is held back
 * by TCP. A final answer (Connection: close, or a refused request) is followed
 * by a shutdown and a short drain so the client reads it before the close. One
 * timer per connection enforces the idle, request and drain deadlines lazily:
 * progress only moves a deadline, the timer re-arms itself.
 *
 * A handler may defer its answer (the app waits for something else on the
 * loop). The deferred state is the connection's, so nothing is allocated; the
 * connection parses nothing meanwhile and has no deadline, but keeps reading
 * until its buffer is full, so a client that goes away is seen at once: the
 * close cancels the answer (on_cancel, from the last close callback, just
 * before the block is freed). Finishing sends the answer at once and parses on
 * from the connection's timer: the next handler never runs in the app's call.
 */
#include "proto_http_int.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <string.h>

static void conn_process(struct http_conn *c);
static bool conn_flush(struct http_conn *c, const uv_buf_t *extra);
static void on_conn_timer(uv_timer_t *t);

/* --- connection lifecycle ----------------------------------------------- */

static void
on_conn_handle_closed(uv_handle_t *h)
{
    struct http_conn *c = h->data;
    proto_http_server *srv = c->srv;

    if (--c->pending_closes > 0)
        return;
    if (c->flags & CONN_DEFERRED) {
        /* The last moment d is valid: the app lets go of it before the block goes. */
        c->flags &= ~(unsigned)CONN_DEFERRED;
        srv->stats.deferred_cancelled++;
        srv->on_cancel(srv->app_data, &c->deferred);
    }
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    srv->stats.connections_active--;
    if (c->flags & CONN_OVER_CAP)
        srv->over_cap--;
    sodium_memzero(c, srv->conn_size); /* requests held tokens */
    tally_free(c);
    proto__http_handle_gone(srv);
}

static void
conn_close(struct http_conn *c)
{
    if (c->flags & CONN_CLOSING)
        return;
    /* The write and shutdown callbacks still run (UV_ECANCELED) and see this flag. */
    c->flags |= CONN_CLOSING;
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

/* Arms the timer for `due_ms` unless it already fires earlier. */
static void
conn_arm(struct http_conn *c, uint64_t due_ms)
{
    uint64_t now_ms = uv_now(c->srv->loop);

    if ((c->flags & CONN_CLOSING) || due_ms >= c->timer_due_ms)
        return;
    c->timer_due_ms = due_ms;
    (void)uv_timer_start(&c->timer, on_conn_timer, due_ms > now_ms ? due_ms - now_ms : 0, 0);
}

static uint64_t
conn_deadline(const struct http_conn *c, enum proto_http_reject *why /* OUT */)
{
    const struct http_limits *lim = &c->srv->lim;
    uint64_t due_ms = c->progress_ms + lim->idle_timeout_ms;

    *why = PROTO_HTTP_REJECT_IDLE_TIMEOUT;
    if (c->flags & CONN_DEFERRED) {
        *why = PROTO_HTTP_REJECT_COUNT;
        return UINT64_MAX; /* the app bounds its own wait; a client's EOF still cancels */
    }
    if (c->flags & CONN_LINGER) {
        *why = PROTO_HTTP_REJECT_COUNT; /* an expected end, not counted */
        return c->linger_until_ms;
    }
    if ((c->flags & CONN_IN_REQUEST) && c->request_start_ms + lim->request_timeout_ms <= due_ms) {
        *why = PROTO_HTTP_REJECT_REQUEST_TIMEOUT;
        due_ms = c->request_start_ms + lim->request_timeout_ms;
    }
    return due_ms;
}

static void
on_conn_timer(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    enum proto_http_reject why;
    uint64_t due_ms;

    c->timer_due_ms = UINT64_MAX;
    if (c->flags & CONN_RESUME) {
        c->flags &= ~(unsigned)CONN_RESUME;
        conn_process(c); /* the request after a deferred answer */
        if (c->flags & CONN_CLOSING)
            return;
    }
    due_ms = conn_deadline(c, &why);
    if (uv_now(c->srv->loop) < due_ms) {
        conn_arm(c, due_ms); /* progress moved the deadline */
        return;
    }
    if (why != PROTO_HTTP_REJECT_COUNT)
        c->srv->stats.rejected[why]++;
    conn_close(c);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct http_conn *c = h->data;
    size_t cap = c->srv->lim.read_buffer_bytes;

    (void)suggested;
    if ((c->flags & CONN_LINGER) || c->rpos == c->rlen) {
        c->rpos = 0; /* draining discards; otherwise everything was parsed */
        c->rlen = 0;
    } else if (c->rlen == cap && c->rpos > 0) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    if (c->rlen == cap) {
        *buf = uv_buf_init(NULL, 0); /* the read sees UV_ENOBUFS */
        return;
    }
    *buf = uv_buf_init(c->rbuf + c->rlen, (unsigned)(cap - c->rlen));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Reads while draining (until EOF), while no answer is in flight, or while
 * one is deferred and the buffer has room (to see the client go away). */
static void
conn_update_reading(struct http_conn *c)
{
    bool want;

    if (c->flags & CONN_CLOSING)
        return;
    if (c->flags & CONN_EOF)
        want = false;
    else if (c->flags & CONN_LINGER)
        want = true;
    else if (c->flags & CONN_DEFERRED)
        want = c->rlen - c->rpos < c->srv->lim.read_buffer_bytes;
    else
        want = !(c->flags & (CONN_WRITING | CONN_FINAL));
    if (want && !(c->flags & CONN_READING)) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
            conn_close(c);
            return;
        }
        c->flags |= CONN_READING;
    } else if (!want && (c->flags & CONN_READING)) {
        (void)uv_read_stop((uv_stream_t *)&c->tcp);
        c->flags &= ~(unsigned)CONN_READING;
    }
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    struct http_conn *c = req->handle->data;

    if (c->flags & CONN_CLOSING)
        return;
    c->flags |= CONN_SHUT_DONE;
    if (status < 0 || (c->flags & CONN_EOF))
        conn_close(c);
}

/* After the final answer: shut down our side once it is written, and drain
 * what the client still sends, so closing does not reset the connection
 * before the client has read the answer. */
static void
conn_linger(struct http_conn *c)
{
    c->flags |= CONN_LINGER;
    c->linger_until_ms = uv_now(c->srv->loop) + c->srv->lim.linger_timeout_ms;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    conn_arm(c, c->linger_until_ms);
    conn_update_reading(c);
}

static void
on_write(uv_write_t *req, int status)
{
    struct http_conn *c = req->handle->data;

    c->flags &= ~(unsigned)CONN_WRITING;
    if (c->flags & CONN_CLOSING)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    c->progress_ms = uv_now(c->srv->loop);
    /* Answers queued behind the write (a deferred one) move to the front and go now. */
    memmove(c->obuf, c->obuf + c->oflight, c->olen - c->oflight);
    c->olen -= c->oflight;
    c->oflight = 0;
    if (c->olen > 0 || (c->flags & CONN_HELD)) {
        uv_buf_t held = c->held;
        bool had = c->flags & CONN_HELD;

        c->flags &= ~(unsigned)CONN_HELD;
        if (!conn_flush(c, had ? &held : NULL))
            return;
        if ((c->flags & CONN_FINAL) && !(c->flags & CONN_LINGER))
            conn_linger(c);
    }
    if (c->flags & CONN_LINGER)
        return; /* on_shutdown follows */
    conn_process(c);
}

/* Writes what waits in obuf, then `extra` (an answer in wbuf, or NULL): try_write first,
 * the rest with write_req, whose buffers stay untouched until on_write. False when c was
 * closed. Only when no write is in flight. */
static bool
conn_flush(struct http_conn *c, const uv_buf_t *extra)
{
    uv_buf_t b[2];
    unsigned k = 0, first = 0;
    int n;

    if (c->olen > 0) /* b[0] is obuf when it holds anything */
        b[k++] = uv_buf_init(c->obuf, (unsigned)c->olen);
    if (extra != NULL)
        b[k++] = *extra;
    if (k == 0)
        return true;
    c->srv->stats.writes++;
    n = uv_try_write((uv_stream_t *)&c->tcp, b, k);
    if (n == UV_EAGAIN)
        n = 0;
    if (n < 0) {
        conn_close(c);
        return false;
    }
    for (unsigned i = 0; i < k; i++) { /* what the socket took leaves the front */
        size_t took = (size_t)n < b[i].len ? (size_t)n : b[i].len;
        b[i].base += took;
        b[i].len -= took;
        n -= (int)took;
    }
    while (first < k && b[first].len == 0)
        first++;
    /* obuf's bytes stay where they are while any of them is in flight */
    c->oflight = first == 0 && c->olen > 0 ? c->olen : 0;
    c->olen = c->oflight;
    if (first == k)
        return true;
    if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, b + first, k - first, on_write) != 0) {
        conn_close(c);
        return false;
    }
    c->flags |= CONN_WRITING;
    c->srv->stats.writes_queued++;
    return true;
}

/* Serialises c->resp and queues it: into obuf while a read's requests are being answered
 * (written at the end of conn_process), else written at once with what waits before it. */
static void
conn_send(struct http_conn *c, bool keep_alive, bool head_only)
{
    uv_buf_t b = proto__http_response_serialise(&c->resp, c->wbuf, keep_alive, head_only);
    bool fits = b.len <= HTTP_OUT_BATCH - c->olen;

    if (!keep_alive)
        c->flags |= CONN_FINAL;
    if (fits) {
        memcpy(c->obuf + c->olen, b.base, b.len);
        c->olen += b.len;
    }
    if (c->flags & CONN_WRITING) { /* a deferred answer: after the write in flight */
        if (!fits) {
            c->held = b;
            c->flags |= CONN_HELD;
        }
        return; /* on_write sends it, and lingers after a final one */
    }
    if (fits && (c->flags & CONN_IN_BATCH) && !(c->flags & CONN_FINAL))
        return;
    if (!conn_flush(c, fits ? NULL : &b))
        return;
    if (c->flags & CONN_FINAL)
        conn_linger(c); /* the shutdown follows the writes queued */
}

/* Answers a request the server refuses, then closes. */
static void
conn_refuse(struct http_conn *c)
{
    proto_http_server *srv = c->srv;
    enum proto_http_reject r = c->reject_reason;

    c->flags &= ~(unsigned)CONN_IN_REQUEST;
    srv->stats.requests++;
    srv->stats.rejected[r]++;
    proto__http_response_reset(&c->resp, c->wbuf + HTTP_HEAD_RESERVE, srv->lim.max_response_bytes);
    /* The reason's label is the error: {"error":"too_many_headers","detail":...}. */
    (void)proto_http_response_error(&c->resp, c->reject_status, proto_http_reject_name(r),
                                    c->reject_detail);
    conn_send(c, false, false);
}

static const struct http_route *
route_find(const proto_http_server *srv, const struct proto_http_str *path)
{
    size_t i;

    for (i = 0; i < srv->routes_count; i++) {
        const struct http_route *r = &srv->routes[i];

        if (r->len == path->len && memcmp(r->path, path->ptr, path->len) == 0)
            return r;
    }
    return NULL;
}

/* Sends c->resp for c's current request: checked (an invalid answer of the
 * handler becomes a 500), counted, queued. `refused` says why the server
 * answered itself; PROTO_HTTP_REJECT_COUNT if the handler did. */
static void
conn_answer(struct http_conn *c, enum proto_http_reject refused)
{
    proto_http_server *srv = c->srv;
    struct proto_http_response *resp = &c->resp;
    bool keep_alive;

    srv->stats.requests++;
    if (refused == PROTO_HTTP_REJECT_COUNT && !proto__http_response_valid(resp)) {
        refused = PROTO_HTTP_REJECT_RESPONSE_ERROR;
        proto__http_response_reset(resp, resp->body, resp->body_cap);
        (void)proto_http_response_error(resp, 500, "internal_error", NULL);
    }
    if (refused != PROTO_HTTP_REJECT_COUNT)
        srv->stats.rejected[refused]++;
    /* The request's method and keep-alive stay in c until the next one begins. */
    keep_alive = c->keep_alive && !resp->close && !srv->closing;
    conn_send(c, keep_alive, c->method == PROTO_HTTP_HEAD);
    proto__http_request_wipe(c); /* the request's token is used up */
}

/* Answers one complete request: route, handler, then conn_answer(), unless
 * the handler deferred the answer. */
static void
conn_dispatch(struct http_conn *c)
{
    proto_http_server *srv = c->srv;
    struct proto_http_response *resp = &c->resp;
    struct proto_http_request req;
    enum proto_http_reject refused = PROTO_HTTP_REJECT_COUNT;

    c->flags &= ~(unsigned)(CONN_MSG_DONE | CONN_IN_REQUEST);
    proto__http_request_view(c, &req);
    proto__http_response_reset(resp, c->wbuf + HTTP_HEAD_RESERVE, srv->lim.max_response_bytes);
    if (c->flags & CONN_OVER_CAP) {
        refused = PROTO_HTTP_REJECT_CONN_LIMIT;
        (void)proto_http_response_error(resp, 503, "too_many_connections",
                                        "connection limit reached");
        (void)proto_http_response_header(resp, "Retry-After", "1");
        resp->close = true;
    } else if (srv->routes_count > 0) {
        const struct http_route *r = route_find(srv, &req.path);
        unsigned allowed = r == NULL ? 0 : r->methods;

        if (allowed & PROTO_HTTP_GET)
            allowed |= PROTO_HTTP_HEAD;
        if (r == NULL) {
            refused = PROTO_HTTP_REJECT_NOT_FOUND;
            (void)proto_http_response_error(resp, 404, "not_found", NULL);
        } else if (!(allowed & (unsigned)req.method)) {
            char allow[64];

            refused = PROTO_HTTP_REJECT_METHOD;
            proto__http_allow_value(allowed, allow, sizeof(allow));
            (void)proto_http_response_error(resp, 405, "method_not_allowed", NULL);
            (void)proto_http_response_header(resp, "Allow", allow);
        } else {
            req.route_id = r->id;
        }
    }
    if (refused == PROTO_HTTP_REJECT_COUNT) {
        c->flags |= CONN_IN_HANDLER;
        srv->handler(srv->app_data, &req, resp);
        c->flags &= ~(unsigned)CONN_IN_HANDLER;
        if (c->flags & CONN_DEFERRED)
            return; /* proto_http_deferred_finish() answers */
    }
    conn_answer(c, refused);
}

/* Parses and answers buffered requests until one is in flight or deferred, or
 * bytes run out. */
static void
conn_process(struct http_conn *c)
{
    c->flags |= CONN_IN_BATCH;
    while (!(c->flags & (CONN_WRITING | CONN_FINAL | CONN_CLOSING | CONN_DEFERRED))) {
        enum http_feed f = proto__http_request_feed(c);

        if (f == HTTP_FEED_NEED_MORE)
            break;
        if (f == HTTP_FEED_REJECT)
            conn_refuse(c);
        else
            conn_dispatch(c);
    }
    c->flags &= ~(unsigned)CONN_IN_BATCH;
    if (c->olen > 0 && !(c->flags & (CONN_WRITING | CONN_CLOSING)) && !conn_flush(c, NULL))
        return;
    conn_update_reading(c);
}

void
proto__http_request_begin(struct http_conn *c)
{
    proto__http_request_reset(c);
    c->flags |= CONN_IN_REQUEST;
    c->request_start_ms = uv_now(c->srv->loop);
    conn_arm(c, c->request_start_ms + c->srv->lim.request_timeout_ms);
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = s->data;

    (void)buf;
    if (nread == 0 || (c->flags & CONN_CLOSING))
        return;
    if (nread < 0) {
        if (nread == UV_ENOBUFS && !(c->flags & (CONN_LINGER | CONN_FINAL | CONN_DEFERRED))) {
            c->reject_status = 431; /* cannot happen: the buffer is parsed before reading on */
            c->reject_reason = PROTO_HTTP_REJECT_HEAD_TOO_LARGE;
            c->reject_detail = "request too large";
            conn_refuse(c);
        } else if (nread == UV_EOF && (c->flags & CONN_LINGER) && !(c->flags & CONN_SHUT_DONE)) {
            c->flags |= CONN_EOF; /* the answer is still going out; on_shutdown closes */
            conn_update_reading(c);
        } else {
            conn_close(c);
        }
        return;
    }
    c->rlen += (size_t)nread;
    c->progress_ms = uv_now(c->srv->loop);
    if (c->flags & CONN_LINGER)
        return; /* drained: on_alloc reuses the space */
    conn_process(c);
}

static struct http_conn *
conn_new(proto_http_server *srv)
{
    struct http_conn *c = tally_malloc(srv->conn_size);
    char *base = (char *)c;

    if (c == NULL)
        return NULL;
    /* Only the struct is cleared: the buffers are written before they are read. */
    memset(c, 0, sizeof(*c));
    c->srv = srv;
    c->rbuf = base + srv->off_rbuf;
    c->url = base + srv->off_url;
    c->body = base + srv->off_body;
    c->kept = base + srv->off_kept;
    c->wbuf = base + srv->off_wbuf;
    c->obuf = base + srv->off_obuf;
    c->kept_cur = -1;
    c->timer_due_ms = UINT64_MAX;
    c->deferred.conn = c;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    if (uv_tcp_init(srv->loop, &c->tcp) != 0) {
        tally_free(c);
        return NULL;
    }
    (void)uv_timer_init(srv->loop, &c->timer); /* cannot fail */
    c->tcp.data = c;
    c->timer.data = c;
    c->next = srv->conns;
    if (c->next != NULL)
        c->next->prev = c;
    srv->conns = c;
    srv->pending++;
    srv->stats.connections_active++;
    return c;
}

/* Accepts the connection waiting on srv's listener into a new one (`over`: beyond
 * max_connections, read to be answered 503); false when there is no memory for it. */
bool
proto__http_conn_accept(proto_http_server *srv, bool over)
{
    struct http_conn *c = conn_new(srv);

    if (c == NULL)
        return false;
    if (over) {
        c->flags |= CONN_OVER_CAP;
        srv->over_cap++;
    }
    if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&c->tcp) != 0) {
        srv->stats.rejected[PROTO_HTTP_REJECT_ACCEPT_ERROR]++;
        conn_close(c);
        return true;
    }
    if (!over)
        srv->stats.connections_accepted++;
    (void)uv_tcp_nodelay(&c->tcp, 1);
    c->progress_ms = uv_now(srv->loop);
    conn_arm(c, c->progress_ms + srv->lim.idle_timeout_ms);
    conn_update_reading(c);
    return true;
}

void
proto__http_conns_close(proto_http_server *srv)
{
    for (struct http_conn *c = srv->conns; c != NULL; c = c->next)
        conn_close(c); /* unlinked only in its close callback */
}

proto_http_deferred *
proto_http_defer(struct proto_http_response *resp)
{
    /* The handler's resp lives in its connection. */
    struct http_conn *c = (struct http_conn *)((char *)resp - offsetof(struct http_conn, resp));
    proto_http_deferred *d = NULL;

    if ((c->flags & (CONN_IN_HANDLER | CONN_DEFERRED)) == CONN_IN_HANDLER &&
        c->srv->on_cancel != NULL) {
        c->flags |= CONN_DEFERRED;
        c->srv->stats.deferred++;
        d = &c->deferred;
    }
    return d;
}

struct proto_http_response *
proto_http_deferred_response(proto_http_deferred *d)
{
    return &d->conn->resp;
}

void
proto_http_deferred_finish(proto_http_deferred *d)
{
    struct http_conn *c = d->conn;

    if (NEVER(!(c->flags & CONN_DEFERRED))) /* finished twice, or after on_cancel */
        return;
    c->flags &= ~(unsigned)CONN_DEFERRED;
    if (c->flags & (CONN_IN_HANDLER | CONN_CLOSING))
        return; /* conn_dispatch answers; or the answer is dropped and no on_cancel follows */
    c->progress_ms = uv_now(c->srv->loop); /* the wait was the app's: idle time starts now */
    conn_answer(c, PROTO_HTTP_REJECT_COUNT);
    /* Parse on from the timer, so the next handler does not run inside the app's call. */
    c->flags |= CONN_RESUME;
    conn_arm(c, c->progress_ms);
}

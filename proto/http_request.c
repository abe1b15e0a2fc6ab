/*
 * The request side of the HTTP server. http_parser (static settings) feeds
 * callbacks that copy the request target, the headers the app keeps and the
 * body into the connection's fixed buffers, checking each limit as the bytes
 * arrive: a limit hit inside a callback records the answer (status, reason,
 * detail) and stops the parser, and the server answers once it has returned.
 * The parser is paused twice per request: at the end of the head, so the
 * head's bytes are counted exactly, and at the end of the message, so a
 * pipelined request is not parsed before the previous answer is queued.
 */
#include "proto_http_int.h"

#include <limits.h>
#include <sodium.h>
#include <string.h>

static int on_url(http_parser *p, const char *at, size_t len);
static int on_header_field(http_parser *p, const char *at, size_t len);
static int on_header_value(http_parser *p, const char *at, size_t len);
static int on_headers_complete(http_parser *p);
static int on_body(http_parser *p, const char *at, size_t len);
static int on_message_complete(http_parser *p);

static const http_parser_settings parse_settings = {
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static int
reject(struct http_conn *c, int status, enum proto_http_reject reason, const char *detail)
{
    if (c->reject_status == 0) {
        c->reject_status = status;
        c->reject_reason = reason;
        c->reject_detail = detail;
    }
    return -1; /* stops the parser */
}

static char *
kept_value(struct http_conn *c, int i)
{
    return c->kept + (size_t)i * (c->srv->lim.max_value_bytes + 1);
}

static bool
name_equal(const char *a, size_t a_len, const char *b, size_t b_len)
{
    size_t i;

    if (a_len != b_len)
        return false;
    for (i = 0; i < a_len; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];

        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x + ('a' - 'A'));
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y + ('a' - 'A'));
        if (x != y)
            return false;
    }
    return true;
}

/* The name of a header field is complete: is it one the app keeps? */
static int
field_end(struct http_conn *c)
{
    const proto_http_server *srv = c->srv;
    size_t i;

    c->kept_cur = -1;
    if (c->flags & CONN_HEADERS_DONE)
        return 0; /* a trailer: counted, never kept */
    for (i = 0; i < srv->kept_count; i++) {
        if (!name_equal(c->field, c->field_len, srv->kept[i].name, srv->kept[i].len))
            continue;
        if (c->kept_seen & (1u << i)) {
            /* A name kept in several slots takes the next free one. */
            if (i + 1 < srv->kept_count &&
                name_equal(c->field, c->field_len, srv->kept[i + 1].name, srv->kept[i + 1].len))
                continue;
            /* Two Authorization headers could be read two ways: refuse both. */
            return reject(c, 400, PROTO_HTTP_REJECT_BAD_REQUEST,
                          i > 0 && name_equal(c->field, c->field_len, srv->kept[i - 1].name,
                                              srv->kept[i - 1].len)
                              ? "header field repeated too often"
                              : "duplicate header field");
        }
        c->kept_seen |= 1u << i;
        c->kept_len[i] = 0;
        c->kept_cur = (int)i;
        break;
    }
    return 0;
}

/* The value of a kept header is complete: trim trailing blanks (the parser
 * drops the leading ones) and terminate it. */
static void
value_end(struct http_conn *c)
{
    char *v;
    size_t n;

    if (c->kept_cur < 0)
        return;
    v = kept_value(c, c->kept_cur);
    n = c->kept_len[c->kept_cur];
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    v[n] = '\0';
    c->kept_len[c->kept_cur] = n;
    c->kept_cur = -1;
}

static int
on_url(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;

    if (len > c->srv->lim.max_url_bytes - c->url_len)
        return reject(c, 414, PROTO_HTTP_REJECT_URL_TOO_LONG, "request target too long");
    memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    return 0;
}

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;

    if (c->field_state != FIELD_NAME) {
        if (c->field_state == FIELD_VALUE)
            value_end(c);
        if (++c->header_count > c->srv->lim.max_headers)
            return reject(c, 431, PROTO_HTTP_REJECT_TOO_MANY_HEADERS, "too many header fields");
        c->field_len = 0;
        c->field_state = FIELD_NAME;
    }
    /* http_parser lets "Name : v" through; RFC 9112 §5.1 says refuse it (smuggling). */
    if (memchr(at, ' ', len) != NULL || memchr(at, '\t', len) != NULL)
        return reject(c, 400, PROTO_HTTP_REJECT_BAD_REQUEST, "whitespace in header field name");
    /* A name longer than any kept one only needs to be known as such. */
    if (len <= PROTO_HTTP_NAME_MAX - c->field_len) {
        memcpy(c->field + c->field_len, at, len);
        c->field_len += len;
    } else {
        c->field_len = PROTO_HTTP_NAME_MAX + 1;
    }
    return 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;
    size_t *have;

    if (c->field_state != FIELD_VALUE) {
        if (c->field_state == FIELD_NAME && field_end(c) != 0)
            return -1;
        c->field_state = FIELD_VALUE;
    }
    if (c->kept_cur < 0)
        return 0;
    have = &c->kept_len[c->kept_cur];
    if (len > c->srv->lim.max_value_bytes - *have)
        return reject(c, 431, PROTO_HTTP_REJECT_HEAD_TOO_LARGE, "header value too long");
    memcpy(kept_value(c, c->kept_cur) + *have, at, len);
    *have += len;
    return 0;
}

static enum proto_http_method
method_of(unsigned m)
{
    switch (m) {
    case HTTP_GET:
        return PROTO_HTTP_GET;
    case HTTP_HEAD:
        return PROTO_HTTP_HEAD;
    case HTTP_POST:
        return PROTO_HTTP_POST;
    case HTTP_PUT:
        return PROTO_HTTP_PUT;
    case HTTP_DELETE:
        return PROTO_HTTP_DELETE;
    case HTTP_OPTIONS:
        return PROTO_HTTP_OPTIONS;
    case HTTP_PATCH:
        return PROTO_HTTP_PATCH;
    default:
        return PROTO_HTTP_OTHER;
    }
}

static int
on_headers_complete(http_parser *p)
{
    struct http_conn *c = p->data;
    const struct http_limits *lim = &c->srv->lim;

    if (c->field_state == FIELD_NAME && field_end(c) != 0)
        return -1;
    value_end(c);
    c->field_state = FIELD_NONE;
    c->flags |= CONN_HEADERS_DONE;
    c->method = method_of(p->method);
    if (p->http_major != 1)
        return reject(c, 505, PROTO_HTTP_REJECT_BAD_REQUEST, "unsupported HTTP version");
    http_parser_url_init(&c->url_parts);
    if (c->url_len == 0 ||
        http_parser_parse_url(c->url, c->url_len, p->method == HTTP_CONNECT, &c->url_parts) != 0)
        return reject(c, 400, PROTO_HTTP_REJECT_BAD_REQUEST, "invalid request target");
    /* Refuse a declared body before reading it. */
    if (!(p->flags & F_CHUNKED) && p->content_length != ULLONG_MAX &&
        p->content_length > lim->max_body_bytes)
        return reject(c, 413, PROTO_HTTP_REJECT_BODY_TOO_LARGE, "request body too large");
    http_parser_pause(p, 1); /* lets the caller count the head's bytes */
    return 0;
}

static int
on_body(http_parser *p, const char *at, size_t len)
{
    struct http_conn *c = p->data;

    if (len > c->srv->lim.max_body_bytes - c->body_len)
        return reject(c, 413, PROTO_HTTP_REJECT_BODY_TOO_LARGE, "request body too large");
    memcpy(c->body + c->body_len, at, len);
    c->body_len += len;
    return 0;
}

static int
on_message_complete(http_parser *p)
{
    struct http_conn *c = p->data;

    /* An upgrade (or CONNECT) would switch protocols: answer, then close. */
    c->keep_alive = http_should_keep_alive(p) && !p->upgrade;
    c->flags |= CONN_MSG_DONE;
    http_parser_pause(p, 1);
    return 0;
}

void
proto__http_request_wipe(struct http_conn *c)
{
    size_t i;

    for (i = 0; i < c->srv->kept_count; i++) {
        if (c->kept_seen & (1u << i))
            sodium_memzero(kept_value(c, (int)i), c->kept_len[i] + 1);
    }
    c->kept_seen = 0;
    if (c->rpos == c->rlen) {
        sodium_memzero(c->rbuf, c->rlen);
        c->rpos = 0;
        c->rlen = 0;
    }
}

void
proto__http_request_reset(struct http_conn *c)
{
    c->flags &= ~(unsigned)(CONN_HEADERS_DONE | CONN_MSG_DONE);
    c->head_bytes = 0;
    c->header_count = 0;
    c->field_state = FIELD_NONE;
    c->field_len = 0;
    c->kept_cur = -1;
    c->kept_seen = 0;
    c->url_len = 0;
    c->body_len = 0;
    c->keep_alive = false;
    c->reject_status = 0;
    c->reject_detail = NULL;
}

static enum http_feed
head_too_large(struct http_conn *c)
{
    reject(c, 431, PROTO_HTTP_REJECT_HEAD_TOO_LARGE, "request header section too large");
    return HTTP_FEED_REJECT;
}

enum http_feed
proto__http_request_feed(struct http_conn *c)
{
    while (c->rpos < c->rlen) {
        bool in_head;
        size_t n;
        enum http_errno err;

        if (!(c->flags & CONN_IN_REQUEST))
            proto__http_request_begin(c);
        in_head = !(c->flags & CONN_HEADERS_DONE);
        n = http_parser_execute(&c->parser, &parse_settings, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rpos += n;
        if (in_head)
            c->head_bytes += n;
        err = HTTP_PARSER_ERRNO(&c->parser);
        if (err == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            if (c->flags & CONN_MSG_DONE)
                return HTTP_FEED_MESSAGE;
            /* Paused at the end of the head, before consuming its final LF. */
            c->head_bytes += 1;
            if (c->head_bytes > c->srv->lim.max_head_bytes)
                return head_too_large(c);
            continue;
        }
        if (err != HPE_OK) {
            reject(c, 400, PROTO_HTTP_REJECT_BAD_REQUEST, http_errno_description(err));
            return HTTP_FEED_REJECT;
        }
        if (in_head && c->head_bytes > c->srv->lim.max_head_bytes)
            return head_too_large(c);
    }
    return HTTP_FEED_NEED_MORE;
}

static struct proto_http_str
url_part(struct http_conn *c, enum http_parser_url_fields f)
{
    struct proto_http_str s = {NULL, 0};

    if (c->url_parts.field_set & (1u << f)) {
        char *at = c->url + c->url_parts.field_data[f].off;

        s.len = c->url_parts.field_data[f].len;
        at[s.len] = '\0'; /* overwrites '?', '#' or the spare byte past the target */
        s.ptr = at;
    }
    return s;
}

void
proto__http_request_view(struct http_conn *c, struct proto_http_request *req)
{
    size_t i;

    memset(req, 0, sizeof(*req));
    req->method = c->method;
    req->http_minor = c->parser.http_minor;
    req->keep_alive = c->keep_alive;
    /* The query first: ending the path writes over the '?'. */
    req->query = url_part(c, UF_QUERY);
    req->path = url_part(c, UF_PATH);
    if (req->path.ptr == NULL) /* "http://host" means "/"; CONNECT has no path */
        req->path = c->parser.method == HTTP_CONNECT ? (struct proto_http_str){"", 0}
                                                     : (struct proto_http_str){"/", 1};
    if (c->body_len > 0) {
        c->body[c->body_len] = '\0';
        req->body = (struct proto_http_str){c->body, c->body_len};
    }
    for (i = 0; i < c->srv->kept_count; i++) {
        if (c->kept_seen & (1u << i))
            req->headers[i] = (struct proto_http_str){kept_value(c, (int)i), c->kept_len[i]};
    }
}

int
proto_http_query_get(const struct proto_http_request *req, const char *name,
                     struct proto_http_str *out)
{
    const char *p = req->query.ptr;
    const char *end = p == NULL ? NULL : p + req->query.len;
    size_t name_len = strlen(name);

    out->ptr = NULL;
    out->len = 0;
    while (p != NULL && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp == NULL ? end : amp;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *key_end = eq == NULL ? stop : eq;

        if ((size_t)(key_end - p) == name_len && memcmp(p, name, name_len) == 0) {
            out->ptr = eq == NULL ? stop : eq + 1;
            out->len = (size_t)(stop - out->ptr);
            return TALLY_OK;
        }
        p = amp == NULL ? NULL : amp + 1;
    }
    return TALLY_ENOTFOUND;
}

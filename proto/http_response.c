/*
 * The answer side of the HTTP server: what a handler may put in a response
 * (status, a few headers, a body, JSON errors) and its serialisation. The
 * body is written in place in the connection's write buffer; the head is
 * assembled from constant fragments and copied right-aligned before it, so
 * head and body leave in one write. Headers the server owns (Cache-Control,
 * Content-Length, Content-Type, Connection, Transfer-Encoding) cannot be added
 * by a handler. Any failed call latches, and the server answers 500 instead.
 */
#include "proto_http_int.h"

#include "tally_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const server_headers[] = {
    "cache-control", "connection", "content-length", "content-type", "transfer-encoding",
};

static int
latch(struct proto_http_response *resp, int rc)
{
    if (resp->error == TALLY_OK)
        resp->error = rc;
    return rc;
}

/* RFC 9110 tchar. */
static bool
is_token_char(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return true;
    return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static bool
is_server_header(const char *name, size_t len)
{
    size_t i, j;

    for (i = 0; i < sizeof(server_headers) / sizeof(server_headers[0]); i++) {
        const char *s = server_headers[i];

        if (strlen(s) != len)
            continue;
        for (j = 0; j < len; j++) {
            char ch = name[j];

            if (ch >= 'A' && ch <= 'Z')
                ch = (char)(ch + ('a' - 'A'));
            if (ch != s[j])
                break;
        }
        if (j == len)
            return true;
    }
    return false;
}

bool
proto__http_response_valid(const struct proto_http_response *resp)
{
    const char *ct = resp->content_type;
    size_t i;

    if (resp->error != TALLY_OK || resp->status < 200 || resp->status > 599)
        return false;
    for (i = 0; ct != NULL && ct[i] != '\0'; i++) {
        if (i == HTTP_CONTENT_TYPE_MAX || (unsigned char)ct[i] < 0x20 || ct[i] == 0x7f)
            return false; /* the head has room for this much, without CR or LF */
    }
    return ct == NULL || i > 0;
}

void
proto__http_response_reset(struct proto_http_response *resp, char *body, size_t cap)
{
    resp->status = 0;
    resp->content_type = NULL;
    resp->close = false;
    resp->error = TALLY_OK;
    resp->headers_count = 0;
    resp->body = body;
    resp->body_len = 0;
    resp->body_cap = cap; /* the buffer has one more byte, for vsnprintf's NUL */
}

int
proto_http_response_header(struct proto_http_response *resp, const char *name, const char *value)
{
    size_t name_len = strlen(name), value_len = strlen(value), i;
    char *line;

    if (name_len == 0 || is_server_header(name, name_len))
        return latch(resp, TALLY_EINVAL);
    for (i = 0; i < name_len; i++) {
        if (!is_token_char((unsigned char)name[i]))
            return latch(resp, TALLY_EINVAL);
    }
    for (i = 0; i < value_len; i++) {
        unsigned char ch = (unsigned char)value[i];

        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) /* CR and LF would split the head */
            return latch(resp, TALLY_EINVAL);
    }
    if (resp->headers_count == PROTO_HTTP_RESP_HEADERS_MAX ||
        name_len + 2 + value_len >= PROTO_HTTP_RESP_HEADER_LINE_MAX)
        return latch(resp, TALLY_ETOOBIG);
    line = resp->headers[resp->headers_count++];
    memcpy(line, name, name_len);
    memcpy(line + name_len, ": ", 2);
    memcpy(line + name_len + 2, value, value_len + 1);
    return TALLY_OK;
}

int
proto_http_response_write(struct proto_http_response *resp, const void *data, size_t len)
{
    if (len > resp->body_cap - resp->body_len)
        return latch(resp, TALLY_ETOOBIG);
    memcpy(resp->body + resp->body_len, data, len);
    resp->body_len += len;
    return TALLY_OK;
}

int
proto_http_response_printf(struct proto_http_response *resp, const char *fmt, ...)
{
    size_t room = resp->body_cap - resp->body_len;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(resp->body + resp->body_len, room + 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return latch(resp, TALLY_EINVAL);
    if ((size_t)n > room)
        return latch(resp, TALLY_ETOOBIG);
    resp->body_len += (size_t)n;
    return TALLY_OK;
}

/* ---- RateLimit fields ---- */

#define SF_INTEGER_MAX 999999999999999LL /* RFC 9651 §3.3.1: at most 15 digits */

/* A bounded writer: a failed put marks it, the caller checks once at the end. */
struct sf_out {
    char *p;
    size_t cap, len;
    bool bad;
};

static void
sf_put(struct sf_out *o, const char *s, size_t len)
{
    if (o->bad || len >= o->cap - o->len) {
        o->bad = true;
        return;
    }
    memcpy(o->p + o->len, s, len);
    o->len += len;
}

static void
sf_string(struct sf_out *o, const char *s)
{
    const char *q;

    for (q = s; *q != '\0'; q++) {
        if (*q < 0x20 || *q > 0x7e || *q == '"' || *q == '\\')
            o->bad = true;
    }
    sf_put(o, "\"", 1);
    sf_put(o, s, (size_t)(q - s));
    sf_put(o, "\"", 1);
}

/* ";key=N": a small integer writer, digits right-aligned in a scratch. */
static void
sf_param(struct sf_out *o, char key, int64_t v)
{
    char tmp[19];
    size_t n = 0;

    if (v < 0 || v > SF_INTEGER_MAX) {
        o->bad = true;
        return;
    }
    do {
        tmp[sizeof(tmp) - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    tmp[sizeof(tmp) - ++n] = '=';
    tmp[sizeof(tmp) - ++n] = key;
    tmp[sizeof(tmp) - ++n] = ';';
    sf_put(o, tmp + sizeof(tmp) - n, n);
}

static size_t
sf_end(struct sf_out *o)
{
    if (o->cap == 0)
        return 0;
    if (o->bad)
        o->len = 0;
    o->p[o->len] = '\0';
    return o->len;
}

size_t
proto_ratelimit_policy(char *out, size_t cap, const char *name, int64_t quota, int64_t window_s)
{
    struct sf_out o = {out, cap, 0, cap == 0};

    sf_string(&o, name);
    sf_param(&o, 'q', quota);
    sf_param(&o, 'w', window_s);
    return sf_end(&o);
}

size_t
proto_ratelimit_item(char *out, size_t cap, const char *name, int64_t remaining, int64_t reset_s)
{
    struct sf_out o = {out, cap, 0, cap == 0};

    sf_string(&o, name);
    sf_param(&o, 'r', remaining);
    if (reset_s >= 0)
        sf_param(&o, 't', reset_s);
    return sf_end(&o);
}

static int
write_escaped(struct proto_http_response *resp, const char *s)
{
    size_t room = resp->body_cap - resp->body_len;
    bool cut;
    size_t n = tally_log_escape(resp->body + resp->body_len, room + 1, s, strlen(s), &cut);

    if (cut)
        return latch(resp, TALLY_ETOOBIG);
    resp->body_len += n;
    return TALLY_OK;
}

int
proto_http_response_error(struct proto_http_response *resp, int status, const char *error,
                          const char *detail)
{
    int rc;

    resp->status = status;
    resp->content_type = NULL;
    resp->body_len = 0;
    rc = proto_http_response_write(resp, "{\"error\":\"", 10);
    if (rc == TALLY_OK)
        rc = write_escaped(resp, error);
    if (rc == TALLY_OK && detail != NULL) {
        rc = proto_http_response_write(resp, "\",\"detail\":\"", 12);
        if (rc == TALLY_OK)
            rc = write_escaped(resp, detail);
    }
    if (rc == TALLY_OK)
        rc = proto_http_response_write(resp, "\"}", 2);
    return rc;
}

/* The head is built in a bounded scratch; its size is fixed by construction. */
struct head {
    char buf[HTTP_HEAD_RESERVE];
    size_t len;
};

static void
put(struct head *h, const char *s, size_t len)
{
    if (NEVER(len > sizeof(h->buf) - h->len))
        return;
    memcpy(h->buf + h->len, s, len);
    h->len += len;
}

#define PUT_LIT(h, lit) put((h), (lit), sizeof(lit) - 1)

static void
put_str(struct head *h, const char *s)
{
    put(h, s, strlen(s));
}

static void
put_u64(struct head *h, uint64_t v)
{
    char tmp[20];
    size_t n = 0;

    do {
        tmp[sizeof(tmp) - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    put(h, tmp + sizeof(tmp) - n, n);
}

uv_buf_t
proto__http_response_serialise(struct proto_http_response *resp, char *wbuf, bool keep_alive,
                               bool head_only)
{
    /* 204 and 304 carry no body and no Content-Length (RFC 9110 §8.6). */
    bool has_body = resp->status != 204 && resp->status != 304;
    const char *reason = http_status_str((enum http_status)resp->status);
    struct head h;
    unsigned i;
    char *start;

    h.len = 0;
    PUT_LIT(&h, "HTTP/1.1 ");
    put_u64(&h, (uint64_t)resp->status);
    PUT_LIT(&h, " ");
    if (reason[0] != '<') /* "<unknown>": an empty reason phrase is valid */
        put_str(&h, reason);
    PUT_LIT(&h, "\r\nCache-Control: no-store\r\n");
    if (has_body && resp->body_len > 0) {
        PUT_LIT(&h, "Content-Type: ");
        put_str(&h, resp->content_type != NULL ? resp->content_type : "application/json");
        PUT_LIT(&h, "\r\n");
    }
    for (i = 0; i < resp->headers_count; i++) {
        put_str(&h, resp->headers[i]);
        PUT_LIT(&h, "\r\n");
    }
    if (has_body) {
        PUT_LIT(&h, "Content-Length: ");
        put_u64(&h, resp->body_len);
        PUT_LIT(&h, "\r\n");
    }
    if (keep_alive)
        PUT_LIT(&h, "Connection: keep-alive\r\n\r\n");
    else
        PUT_LIT(&h, "Connection: close\r\n\r\n");
    start = wbuf + HTTP_HEAD_RESERVE - h.len;
    memcpy(start, h.buf, h.len);
    return uv_buf_init(start, (unsigned)(h.len + (has_body && !head_only ? resp->body_len : 0)));
}

void
proto__http_allow_value(unsigned methods, char *buf, size_t cap)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {
        {PROTO_HTTP_GET, "GET"},     {PROTO_HTTP_HEAD, "HEAD"},     {PROTO_HTTP_POST, "POST"},
        {PROTO_HTTP_PUT, "PUT"},     {PROTO_HTTP_DELETE, "DELETE"}, {PROTO_HTTP_OPTIONS, "OPTIONS"},
        {PROTO_HTTP_PATCH, "PATCH"},
    };
    size_t len = 0, i;

    if (methods & PROTO_HTTP_GET)
        methods |= PROTO_HTTP_HEAD;
    buf[0] = '\0';
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int n;

        if (!(methods & names[i].bit))
            continue;
        n = snprintf(buf + len, cap - len, "%s%s", len > 0 ? ", " : "", names[i].name);
        if (n < 0 || (size_t)n >= cap - len)
            return;
        len += (size_t)n;
    }
}

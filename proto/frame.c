/*
 * The binary framing of proto_frame.h: a reader that turns stream bytes into
 * whole frames without allocating, and big-endian cursors for the payload
 * codecs. Every length is checked before it is used; a decoder reads through a
 * cursor that turns overruns into a flag instead of a read past the buffer.
 */
#include "proto_frame.h"

#include <string.h>

/* memset through a volatile pointer: a wipe the compiler cannot drop (frame.c
 * is part of libtally, which links libc only, so not sodium_memzero). */
static void *(*const volatile wipe_fn)(void *, int, size_t) = memset;

void
proto_frame_reader_init(struct proto_frame_reader *r, uint8_t *buf, size_t cap)
{
    r->buf = buf;
    r->cap = cap;
    r->max = cap;
    r->len = 0;
    r->consumed = 0;
}

void
proto_frame_reader_grow_to(struct proto_frame_reader *r, size_t max)
{
    r->max = max > r->cap ? max : r->cap;
}

/* Drops the frames already handed out, so their bytes are free again. */
static void
compact(struct proto_frame_reader *r)
{
    if (r->consumed == 0)
        return;
    memmove(r->buf, r->buf + r->consumed, r->len - r->consumed);
    /* Frames handed out may have carried tokens: their bytes are not left behind. */
    wipe_fn(r->buf + r->len - r->consumed, 0, r->consumed);
    r->len -= r->consumed;
    r->consumed = 0;
}

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

size_t
proto_frame_reader_need(const struct proto_frame_reader *r)
{
    const uint8_t *p = r->buf + r->consumed;

    if (r->len - r->consumed < 4)
        return 0;
    return 4 + (size_t)be32(p);
}

void
proto_frame_reader_move(struct proto_frame_reader *r, uint8_t *buf, size_t cap)
{
    compact(r);
    if (!ALWAYS(r->len <= cap))
        return;
    memcpy(buf, r->buf, r->len);
    wipe_fn(r->buf, 0, r->len);
    r->buf = buf;
    r->cap = cap;
    if (r->max < cap)
        r->max = cap;
}

size_t
proto_frame_reader_space(struct proto_frame_reader *r, uint8_t **out)
{
    compact(r);
    *out = r->buf + r->len;
    return r->cap - r->len;
}

void
proto_frame_reader_commit(struct proto_frame_reader *r, size_t n)
{
    if (ALWAYS(n <= r->cap - r->len))
        r->len += n;
}

int
proto_frame_reader_feed(struct proto_frame_reader *r, const void *data, size_t n)
{
    compact(r);
    if (n > r->cap - r->len)
        return TALLY_ETOOBIG;
    memcpy(r->buf + r->len, data, n);
    r->len += n;
    return TALLY_OK;
}

int
proto_frame_next(struct proto_frame_reader *r, struct proto_frame *f)
{
    const uint8_t *p = r->buf + r->consumed;
    size_t avail = r->len - r->consumed;
    uint32_t len;

    if (avail < 4)
        return TALLY_ENOTFOUND;
    len = be32(p);
    if (len < PROTO_FRAME_HEADER - 4 || len > PROTO_FRAME_MAX - 4 || 4 + (size_t)len > r->max)
        return TALLY_EPROTO; /* out of bounds, or larger than this reader takes */
    if (avail >= 5 && p[4] != PROTO_VERSION)
        return TALLY_EPROTO;
    if (avail < 4 + (size_t)len)
        return TALLY_ENOTFOUND;
    f->version = p[4];
    f->type = p[5];
    f->flags = (uint16_t)(p[6] << 8 | p[7]);
    f->request_id = be32(p + 8);
    f->payload = p + PROTO_FRAME_HEADER;
    f->payload_len = len - (PROTO_FRAME_HEADER - 4);
    r->consumed += 4 + (size_t)len;
    return TALLY_OK;
}

void
proto_frame_header(uint8_t out[PROTO_FRAME_HEADER], uint8_t type, uint16_t flags,
                   uint32_t request_id, size_t payload_len)
{
    uint32_t len = (uint32_t)(payload_len + PROTO_FRAME_HEADER - 4);

    out[0] = (uint8_t)(len >> 24);
    out[1] = (uint8_t)(len >> 16);
    out[2] = (uint8_t)(len >> 8);
    out[3] = (uint8_t)len;
    out[4] = PROTO_VERSION;
    out[5] = type;
    out[6] = (uint8_t)(flags >> 8);
    out[7] = (uint8_t)flags;
    out[8] = (uint8_t)(request_id >> 24);
    out[9] = (uint8_t)(request_id >> 16);
    out[10] = (uint8_t)(request_id >> 8);
    out[11] = (uint8_t)request_id;
}

/* ---- cursors ---- */

void
proto_cursor_init(struct proto_cursor *c, const uint8_t *p, size_t len)
{
    c->p = p;
    c->len = len;
    c->at = 0;
    c->bad = false;
}

/* Returns the next n bytes, or NULL (and sets bad) when they are not there. */
static const uint8_t *
take(struct proto_cursor *c, size_t n)
{
    const uint8_t *p;

    if (c->bad || n > c->len - c->at) {
        c->bad = true;
        return NULL;
    }
    p = c->p + c->at;
    c->at += n;
    return p;
}

uint8_t
proto_get_u8(struct proto_cursor *c)
{
    const uint8_t *p = take(c, 1);

    return p != NULL ? p[0] : 0;
}

uint16_t
proto_get_u16(struct proto_cursor *c)
{
    const uint8_t *p = take(c, 2);

    return p != NULL ? (uint16_t)(p[0] << 8 | p[1]) : 0;
}

uint32_t
proto_get_u32(struct proto_cursor *c)
{
    const uint8_t *p = take(c, 4);

    return p != NULL ? be32(p) : 0;
}

uint64_t
proto_get_u64(struct proto_cursor *c)
{
    const uint8_t *p = take(c, 8);

    return p != NULL ? (uint64_t)be32(p) << 32 | be32(p + 4) : 0;
}

int64_t
proto_get_i64(struct proto_cursor *c)
{
    return (int64_t)proto_get_u64(c);
}

void
proto_get_str(struct proto_cursor *c, char *out, size_t cap)
{
    uint8_t n = proto_get_u8(c);
    const uint8_t *p = take(c, n);

    out[0] = '\0';
    if (p == NULL || (size_t)n + 1 > cap || memchr(p, '\0', n) != NULL) {
        c->bad = true;
        return;
    }
    memcpy(out, p, n);
    out[n] = '\0';
}

void
proto_get_bytes(struct proto_cursor *c, void *out, size_t n)
{
    const uint8_t *p = take(c, n);

    if (p != NULL)
        memcpy(out, p, n);
    else
        memset(out, 0, n);
}

bool
proto_cursor_done(const struct proto_cursor *c)
{
    return !c->bad && c->at == c->len;
}

void
proto_writer_init(struct proto_writer *w, uint8_t *p, size_t cap)
{
    w->p = p;
    w->cap = cap;
    w->at = 0;
    w->bad = false;
}

static uint8_t *
room(struct proto_writer *w, size_t n)
{
    uint8_t *p;

    if (w->bad || n > w->cap - w->at) {
        w->bad = true;
        return NULL;
    }
    p = w->p + w->at;
    w->at += n;
    return p;
}

void
proto_put_u8(struct proto_writer *w, uint8_t v)
{
    uint8_t *p = room(w, 1);

    if (p != NULL)
        p[0] = v;
}

void
proto_put_u16(struct proto_writer *w, uint16_t v)
{
    uint8_t *p = room(w, 2);

    if (p != NULL) {
        p[0] = (uint8_t)(v >> 8);
        p[1] = (uint8_t)v;
    }
}

void
proto_put_u32(struct proto_writer *w, uint32_t v)
{
    uint8_t *p = room(w, 4);

    if (p != NULL) {
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
    }
}

void
proto_put_u64(struct proto_writer *w, uint64_t v)
{
    proto_put_u32(w, (uint32_t)(v >> 32));
    proto_put_u32(w, (uint32_t)v);
}

void
proto_put_i64(struct proto_writer *w, int64_t v)
{
    proto_put_u64(w, (uint64_t)v);
}

void
proto_put_str(struct proto_writer *w, const char *s)
{
    size_t n = strlen(s);

    if (n > 255) {
        w->bad = true;
        return;
    }
    proto_put_u8(w, (uint8_t)n);
    proto_put_bytes(w, s, n);
}

void
proto_put_bytes(struct proto_writer *w, const void *p, size_t n)
{
    uint8_t *d = room(w, n);

    if (d != NULL && n > 0)
        memcpy(d, p, n);
}

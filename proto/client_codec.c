/*
 * Codecs of the client protocol (proto_client.h): one encoder and one decoder
 * per message, over the bounds-checked cursors of frame.c. Decoders accept
 * exactly the documented layout (PROTOCOL.md) and nothing else.
 */
#include "proto_client.h"

#include <stdio.h>
#include <string.h>

#include "tenant_count.h"

/* Finishes a frame whose payload was written after a 12-byte header gap. */
static size_t
finish(uint8_t *out, struct proto_writer *w, uint8_t type, uint16_t flags, uint32_t id)
{
    if (w->bad)
        return 0;
    proto_frame_header(out, type, flags, id, w->at - PROTO_FRAME_HEADER);
    return w->at;
}

static void
start(struct proto_writer *w, uint8_t *out)
{
    proto_writer_init(w, out, PROTO_CLIENT_MSG_MAX);
    w->at = PROTO_FRAME_HEADER;
}

size_t
proto_hello_encode(uint8_t *out, uint32_t id, const struct proto_hello *m)
{
    struct proto_writer w;

    start(&w, out);
    proto_put_u8(&w, m->min_version);
    proto_put_u8(&w, m->max_version);
    return finish(out, &w, PROTO_C_HELLO, 0, id);
}

size_t
proto_hello_reply_encode(uint8_t *out, uint32_t id, const struct proto_hello_reply *m)
{
    struct proto_writer w;

    start(&w, out);
    proto_put_u8(&w, m->version);
    proto_put_u32(&w, m->max_frame);
    proto_put_u32(&w, m->max_inflight);
    return finish(out, &w, PROTO_C_HELLO_REPLY, 0, id);
}

size_t
proto_check_encode(uint8_t *out, uint32_t id, const struct proto_check *m)
{
    struct proto_writer w;

    if (m->cost < 0 || m->cost > TENANT_COST_MAX)
        return 0;
    start(&w, out);
    proto_put_str(&w, m->token);
    proto_put_str(&w, m->endpoint);
    proto_put_i64(&w, m->cost);
    return finish(out, &w, PROTO_C_CHECK, 0, id);
}

size_t
proto_check_callers_encode(uint8_t *out, uint32_t id, const struct proto_check_callers *m)
{
    struct proto_writer w;

    if (m->cost < 0 || m->cost > TENANT_COST_MAX || m->n > PROTO_CALLERS_WIRE_MAX)
        return 0;
    start(&w, out);
    proto_put_str(&w, m->endpoint);
    proto_put_i64(&w, m->cost);
    proto_put_u8(&w, (uint8_t)m->n);
    for (uint32_t i = 0; i < m->n; i++) {
        if (m->len[i] < 1 || m->len[i] > PROTO_CALLER_WIRE_MAX ||
            memchr(m->caller[i], '\0', m->len[i]) != NULL)
            return 0;
        proto_put_u16(&w, m->len[i]);
        proto_put_bytes(&w, m->caller[i], m->len[i]);
    }
    return finish(out, &w, PROTO_C_CHECK_CALLERS, 0, id);
}

size_t
proto_check_reply_encode(uint8_t *out, uint32_t id, const struct proto_check_reply *m)
{
    struct proto_writer w;

    start(&w, out);
    proto_put_u8(&w, m->status);
    proto_put_u8(&w, m->scope);
    proto_put_i64(&w, m->retry_after_ms);
    proto_put_i64(&w, m->limit);
    proto_put_i64(&w, m->period_ms);
    proto_put_i64(&w, m->remaining);
    proto_put_i64(&w, m->reset_ms);
    proto_put_i64(&w, m->slot_id);
    proto_put_str(&w, m->detail);
    return finish(out, &w, PROTO_C_CHECK_REPLY, m->flags, id);
}

size_t
proto_release_encode(uint8_t *out, uint32_t id, const struct proto_release *m)
{
    struct proto_writer w;

    start(&w, out);
    proto_put_str(&w, m->token);
    proto_put_i64(&w, m->slot_id);
    return finish(out, &w, PROTO_C_RELEASE, 0, id);
}

size_t
proto_status_encode(uint8_t *out, uint8_t type, uint32_t id, uint8_t status)
{
    struct proto_writer w;

    start(&w, out);
    proto_put_u8(&w, status);
    return finish(out, &w, type, 0, id);
}

size_t
proto_empty_encode(uint8_t *out, uint8_t type, uint32_t id)
{
    struct proto_writer w;

    start(&w, out);
    return finish(out, &w, type, 0, id);
}

size_t
proto_error_encode(uint8_t *out, uint32_t id, int32_t code, const char *message)
{
    struct proto_writer w;
    char msg[128];

    snprintf(msg, sizeof(msg), "%s", message);
    start(&w, out);
    proto_put_u32(&w, (uint32_t)code);
    proto_put_str(&w, msg);
    return finish(out, &w, PROTO_C_ERROR, 0, id);
}

static int
done(const struct proto_cursor *c)
{
    return proto_cursor_done(c) ? TALLY_OK : TALLY_EPROTO;
}

/* Flags are 0 unless the type defines some (PROTOCOL.md): only CHECK_REPLY does. */
static bool
type_ok(const struct proto_frame *f, uint8_t type)
{
    return f->type == type && f->flags == 0;
}

int
proto_hello_decode(const struct proto_frame *f, struct proto_hello *out)
{
    struct proto_cursor c;

    if (!type_ok(f, PROTO_C_HELLO))
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    out->min_version = proto_get_u8(&c);
    out->max_version = proto_get_u8(&c);
    if (out->min_version > out->max_version)
        return TALLY_EPROTO;
    return done(&c);
}

int
proto_hello_reply_decode(const struct proto_frame *f, struct proto_hello_reply *out)
{
    struct proto_cursor c;

    if (!type_ok(f, PROTO_C_HELLO_REPLY))
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    out->version = proto_get_u8(&c);
    out->max_frame = proto_get_u32(&c);
    out->max_inflight = proto_get_u32(&c);
    return done(&c);
}

int
proto_check_decode(const struct proto_frame *f, struct proto_check *out)
{
    struct proto_cursor c;

    if (!type_ok(f, PROTO_C_CHECK))
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    proto_get_str(&c, out->token, sizeof(out->token));
    proto_get_str(&c, out->endpoint, sizeof(out->endpoint));
    out->cost = proto_get_i64(&c);
    if (out->cost < 0 || out->cost > TENANT_COST_MAX)
        return TALLY_EPROTO;
    return done(&c);
}

int
proto_check_callers_decode(const struct proto_frame *f, struct proto_check_callers *out)
{
    struct proto_cursor c;

    memset(out, 0, sizeof(*out));
    if (!type_ok(f, PROTO_C_CHECK_CALLERS))
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    proto_get_str(&c, out->endpoint, sizeof(out->endpoint));
    out->cost = proto_get_i64(&c);
    out->n = proto_get_u8(&c);
    if (out->cost < 0 || out->cost > TENANT_COST_MAX || out->n > PROTO_CALLERS_WIRE_MAX)
        return TALLY_EPROTO;
    for (uint32_t i = 0; i < out->n; i++) {
        out->len[i] = proto_get_u16(&c);
        if (out->len[i] < 1 || out->len[i] > PROTO_CALLER_WIRE_MAX)
            return TALLY_EPROTO;
        proto_get_bytes(&c, out->caller[i], out->len[i]);
        if (memchr(out->caller[i], '\0', out->len[i]) != NULL)
            return TALLY_EPROTO;
    }
    return done(&c);
}

int
proto_check_reply_decode(const struct proto_frame *f, struct proto_check_reply *out)
{
    struct proto_cursor c;

    if (f->type != PROTO_C_CHECK_REPLY)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    out->flags = f->flags;
    out->status = proto_get_u8(&c);
    out->scope = proto_get_u8(&c);
    out->retry_after_ms = proto_get_i64(&c);
    out->limit = proto_get_i64(&c);
    out->period_ms = proto_get_i64(&c);
    out->remaining = proto_get_i64(&c);
    out->reset_ms = proto_get_i64(&c);
    out->slot_id = proto_get_i64(&c);
    proto_get_str(&c, out->detail, sizeof(out->detail));
    if (out->status > PROTO_INTERNAL || out->scope > TENANT_SCOPE_CALLER)
        return TALLY_EPROTO;
    return done(&c);
}

int
proto_release_decode(const struct proto_frame *f, struct proto_release *out)
{
    struct proto_cursor c;

    if (!type_ok(f, PROTO_C_RELEASE))
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    proto_get_str(&c, out->token, sizeof(out->token));
    out->slot_id = proto_get_i64(&c);
    if (out->slot_id < 1)
        return TALLY_EPROTO;
    return done(&c);
}

int
proto_status_decode(const struct proto_frame *f, uint8_t *status)
{
    struct proto_cursor c;

    *status = 0;
    if (f->flags != 0)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    *status = proto_get_u8(&c);
    return done(&c);
}

int
proto_error_decode(const struct proto_frame *f, int32_t *code, char *msg, size_t cap)
{
    struct proto_cursor c;

    if (!type_ok(f, PROTO_C_ERROR))
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    *code = (int32_t)proto_get_u32(&c);
    proto_get_str(&c, msg, cap);
    return done(&c);
}

/*
 * Codecs of the caller authority channel (proto_caller.h). DECIDE: endpoint
 * (u8 length + bytes), algorithm u8, limit count u8 and per limit n i64 and
 * period_ms i64, max_callers i64, cost i64, key count u8 and 16 bytes per key;
 * flag HOLD. VERDICT: flags u8 (1 admitted, 2 never, 4 sketched, 8 failed),
 * caller u8, then retry_after_ms, limit, period_ms, remaining, reset_ms as i64,
 * entries u64, bytes u64.
 * CANCEL: the HOLD's request id u32. Big-endian like every frame.
 */
#include "proto_caller.h"

#include <string.h>

#include "tenant_count.h"

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
    proto_writer_init(w, out, PROTO_CALLER_MSG_MAX);
    w->at = PROTO_FRAME_HEADER;
}

static bool
limits_ok(const struct tenant_limits *ls)
{
    struct tenant_limits check = {0};

    if (ls->count < 1 || ls->count > TENANT_MAX_WINDOWS)
        return false;
    for (uint32_t i = 0; i < ls->count; i++) {
        const struct tenant_limit *l = &ls->v[i];
        if (l->n < 1 || l->n > TENANT_LIMIT_MAX_N || l->period_ms < 1000 ||
            l->period_ms > TENANT_LIMIT_MAX_PERIOD_MS || l->period_ms % 1000 != 0 ||
            tenant_limits_add(&check, l) != TALLY_OK)
            return false;
    }
    return true;
}

static bool
decide_ok(const struct proto_caller_decide *m)
{
    return tenant_name_valid(m->endpoint) &&
           (m->algorithm == TENANT_ALG_WINDOW || m->algorithm == TENANT_ALG_GCRA) &&
           limits_ok(&m->limits) && m->max_callers >= 1 &&
           m->max_callers <= TENANT_MAX_CALLERS_MAX && m->cost >= 1 && m->cost <= TENANT_COST_MAX &&
           m->n >= 1 && m->n <= TENANT_CALLERS_MAX;
}

size_t
proto_caller_decide_encode(uint8_t *out, uint32_t id, const struct proto_caller_decide *m)
{
    struct proto_writer w;

    if (!decide_ok(m))
        return 0;
    start(&w, out);
    proto_put_str(&w, m->endpoint);
    proto_put_u8(&w, (uint8_t)m->algorithm);
    proto_put_u8(&w, (uint8_t)m->limits.count);
    for (uint32_t i = 0; i < m->limits.count; i++) {
        proto_put_i64(&w, m->limits.v[i].n);
        proto_put_i64(&w, m->limits.v[i].period_ms);
    }
    proto_put_i64(&w, m->max_callers);
    proto_put_i64(&w, m->cost);
    proto_put_u8(&w, (uint8_t)m->n);
    for (uint32_t i = 0; i < m->n; i++)
        proto_put_bytes(&w, m->keys[i], TENANT_CALLER_KEY_BYTES);
    return finish(out, &w, PROTO_CALLER_DECIDE, m->hold ? PROTO_CALLER_F_HOLD : 0, id);
}

int
proto_caller_decide_decode(const struct proto_frame *f, struct proto_caller_decide *out)
{
    struct proto_cursor c;
    uint8_t alg;

    memset(out, 0, sizeof(*out));
    if (f->type != PROTO_CALLER_DECIDE || (f->flags & ~PROTO_CALLER_F_HOLD) != 0)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    proto_get_str(&c, out->endpoint, sizeof(out->endpoint));
    alg = proto_get_u8(&c);
    out->algorithm = alg == 1 ? TENANT_ALG_GCRA : TENANT_ALG_WINDOW;
    out->limits.count = proto_get_u8(&c);
    if (alg > 1 || out->limits.count > TENANT_MAX_WINDOWS)
        return TALLY_EPROTO;
    for (uint32_t i = 0; i < out->limits.count; i++) {
        out->limits.v[i].n = proto_get_i64(&c);
        out->limits.v[i].period_ms = proto_get_i64(&c);
    }
    out->max_callers = proto_get_i64(&c);
    out->cost = proto_get_i64(&c);
    out->n = proto_get_u8(&c);
    if (out->n > TENANT_CALLERS_MAX)
        return TALLY_EPROTO;
    for (uint32_t i = 0; i < out->n; i++)
        proto_get_bytes(&c, out->keys[i], TENANT_CALLER_KEY_BYTES);
    out->hold = (f->flags & PROTO_CALLER_F_HOLD) != 0;
    return proto_cursor_done(&c) && decide_ok(out) ? TALLY_OK : TALLY_EPROTO;
}

size_t
proto_caller_verdict_encode(uint8_t *out, uint32_t id, const struct proto_caller_verdict *m)
{
    struct proto_writer w;

    if (m->caller >= TENANT_CALLERS_MAX ||
        (m->retry_after_ms < 0 && m->retry_after_ms != TENANT_RETRY_NEVER))
        return 0;
    start(&w, out);
    proto_put_u8(&w, (uint8_t)((m->admitted ? 1 : 0) | (m->never ? 2 : 0) | (m->sketched ? 4 : 0) |
                               (m->failed ? 8 : 0)));
    proto_put_u8(&w, m->caller);
    proto_put_i64(&w, m->retry_after_ms);
    proto_put_i64(&w, m->limit);
    proto_put_i64(&w, m->period_ms);
    proto_put_i64(&w, m->remaining);
    proto_put_i64(&w, m->reset_ms);
    proto_put_u64(&w, m->entries);
    proto_put_u64(&w, m->bytes);
    return finish(out, &w, PROTO_CALLER_VERDICT, 0, id);
}

int
proto_caller_verdict_decode(const struct proto_frame *f, struct proto_caller_verdict *out)
{
    struct proto_cursor c;
    uint8_t flags;

    memset(out, 0, sizeof(*out));
    if (f->type != PROTO_CALLER_VERDICT || f->flags != 0)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    flags = proto_get_u8(&c);
    out->caller = proto_get_u8(&c);
    out->retry_after_ms = proto_get_i64(&c);
    out->limit = proto_get_i64(&c);
    out->period_ms = proto_get_i64(&c);
    out->remaining = proto_get_i64(&c);
    out->reset_ms = proto_get_i64(&c);
    out->entries = proto_get_u64(&c);
    out->bytes = proto_get_u64(&c);
    out->admitted = (flags & 1) != 0;
    out->never = (flags & 2) != 0;
    out->sketched = (flags & 4) != 0;
    out->failed = (flags & 8) != 0;
    if (!proto_cursor_done(&c) || (flags & ~15u) != 0 || out->caller >= TENANT_CALLERS_MAX ||
        (out->retry_after_ms < 0 && out->retry_after_ms != TENANT_RETRY_NEVER) ||
        (out->admitted && (out->failed || out->retry_after_ms != 0)))
        return TALLY_EPROTO;
    return TALLY_OK;
}

size_t
proto_caller_cancel_encode(uint8_t *out, uint32_t id, uint32_t hold_id)
{
    struct proto_writer w;

    start(&w, out);
    proto_put_u32(&w, hold_id);
    return finish(out, &w, PROTO_CALLER_CANCEL, 0, id);
}

int
proto_caller_cancel_decode(const struct proto_frame *f, uint32_t *hold_id)
{
    struct proto_cursor c;

    if (f->type != PROTO_CALLER_CANCEL || f->flags != 0)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    *hold_id = proto_get_u32(&c);
    return proto_cursor_done(&c) ? TALLY_OK : TALLY_EPROTO;
}

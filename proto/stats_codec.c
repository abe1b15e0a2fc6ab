/*
 * Codecs of STATS and STATS_REPLY (proto_stats.h), on the cursors of frame.c,
 * kept apart from the check path's codecs: an admin message, larger than the
 * others, decoded only by `tally stats`.
 */
#include "proto_stats.h"

#include <string.h>

/* A frame of `type` whose payload is one tenant name ("" allowed when `empty_ok`). */
static size_t
tenant_msg_encode(uint8_t *out, uint8_t type, uint32_t id, const char *tenant, bool empty_ok)
{
    struct proto_writer w;

    if ((tenant[0] != '\0' || !empty_ok) && !tenant_name_valid(tenant))
        return 0;
    proto_writer_init(&w, out, 512);
    w.at = PROTO_FRAME_HEADER;
    proto_put_str(&w, tenant);
    if (w.bad)
        return 0;
    proto_frame_header(out, type, 0, id, w.at - PROTO_FRAME_HEADER);
    return w.at;
}

static int
tenant_msg_decode(const struct proto_frame *f, uint8_t type, char tenant[TENANT_NAME_MAX + 1],
                  bool empty_ok)
{
    struct proto_cursor c;

    if (f->type != type || f->flags != 0)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    proto_get_str(&c, tenant, TENANT_NAME_MAX + 1);
    if (!proto_cursor_done(&c) || ((tenant[0] != '\0' || !empty_ok) && !tenant_name_valid(tenant)))
        return TALLY_EPROTO;
    return TALLY_OK;
}

size_t
proto_stats_encode(uint8_t *out, uint32_t id, const char *tenant)
{
    return tenant_msg_encode(out, PROTO_C_STATS, id, tenant, true);
}

int
proto_stats_decode(const struct proto_frame *f, char tenant[TENANT_NAME_MAX + 1])
{
    return tenant_msg_decode(f, PROTO_C_STATS, tenant, true);
}

size_t
proto_flush_encode(uint8_t *out, uint32_t id, const char *tenant)
{
    return tenant_msg_encode(out, PROTO_C_FLUSH, id, tenant, false);
}

int
proto_flush_decode(const struct proto_frame *f, char tenant[TENANT_NAME_MAX + 1])
{
    return tenant_msg_decode(f, PROTO_C_FLUSH, tenant, false);
}

size_t
proto_stats_reply_encode(uint8_t *out, size_t cap, uint32_t id, const struct proto_stats_reply *m)
{
    const uint64_t head[] = {m->checks,         m->admitted,    m->refused,    m->unauthorized,
                             m->bad_request,    m->unavailable, m->internal,   m->degraded,
                             m->shadow_refused, m->reloads,     m->sup_starts, m->sup_restarts,
                             m->sup_idle_exits, m->sup_crashes};
    struct proto_writer w;
    size_t i;

    if (m->n_endpoints > PROTO_STATS_ENDPOINTS_MAX || cap < PROTO_FRAME_HEADER)
        return 0;
    proto_writer_init(&w, out, cap);
    w.at = PROTO_FRAME_HEADER;
    for (i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        proto_put_u64(&w, head[i]);
    proto_put_u32(&w, m->sup_live);
    proto_put_u32(&w, m->children);
    proto_put_u32(&w, m->links_live);
    proto_put_u8(&w, m->tenant_status);
    proto_put_u8(&w, m->sup_up);
    proto_put_u32(&w, m->sup_pid);
    proto_put_u8(&w, m->more);
    proto_put_u8(&w, m->n_endpoints);
    for (i = 0; i < m->n_endpoints; i++) {
        const struct proto_stats_endpoint *e = &m->ep[i];
        proto_put_str(&w, e->name);
        proto_put_u8(&w, e->mode);
        proto_put_u8(&w, e->reachable);
        proto_put_u32(&w, e->links);
        proto_put_u32(&w, e->leases);
        proto_put_u64(&w, e->admitted);
        proto_put_u64(&w, e->refused);
        proto_put_u64(&w, e->degraded);
        proto_put_u64(&w, e->unavailable);
    }
    if (w.bad)
        return 0;
    proto_frame_header(out, PROTO_C_STATS_REPLY, 0, id, w.at - PROTO_FRAME_HEADER);
    return w.at;
}

int
proto_stats_reply_decode(const struct proto_frame *f, struct proto_stats_reply *out)
{
    uint64_t *head[] = {&out->checks,         &out->admitted,    &out->refused,
                        &out->unauthorized,   &out->bad_request, &out->unavailable,
                        &out->internal,       &out->degraded,    &out->shadow_refused,
                        &out->reloads,        &out->sup_starts,  &out->sup_restarts,
                        &out->sup_idle_exits, &out->sup_crashes};
    struct proto_cursor c;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (f->type != PROTO_C_STATS_REPLY || f->flags != 0)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    for (i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        *head[i] = proto_get_u64(&c);
    out->sup_live = proto_get_u32(&c);
    out->children = proto_get_u32(&c);
    out->links_live = proto_get_u32(&c);
    out->tenant_status = proto_get_u8(&c);
    out->sup_up = proto_get_u8(&c);
    out->sup_pid = proto_get_u32(&c);
    out->more = proto_get_u8(&c);
    out->n_endpoints = proto_get_u8(&c);
    if (out->n_endpoints > PROTO_STATS_ENDPOINTS_MAX || out->tenant_status > 2 || out->more > 1)
        return TALLY_EPROTO;
    for (i = 0; i < out->n_endpoints && !c.bad; i++) {
        struct proto_stats_endpoint *e = &out->ep[i];
        proto_get_str(&c, e->name, sizeof(e->name));
        e->mode = proto_get_u8(&c);
        e->reachable = proto_get_u8(&c);
        e->links = proto_get_u32(&c);
        e->leases = proto_get_u32(&c);
        e->admitted = proto_get_u64(&c);
        e->refused = proto_get_u64(&c);
        e->degraded = proto_get_u64(&c);
        e->unavailable = proto_get_u64(&c);
        if (!tenant_name_valid(e->name) || e->mode > 2 || e->reachable > 1)
            return TALLY_EPROTO;
    }
    return proto_cursor_done(&c) ? TALLY_OK : TALLY_EPROTO;
}

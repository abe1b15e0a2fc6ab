/*
 * The CLUSTER request and its reply (proto_cluster.h): fixed-width integers,
 * a short string per member address, the member's 32-byte key, its clock's skew.
 */
#include "proto_cluster.h"

#include <string.h>

#include "tally_common.h"

size_t
proto_cluster_encode(uint8_t *out, uint32_t id)
{
    proto_frame_header(out, PROTO_C_CLUSTER, 0, id, 0);
    return PROTO_FRAME_HEADER;
}

int
proto_cluster_decode(const struct proto_frame *f)
{
    return f->type == PROTO_C_CLUSTER && f->flags == 0 && f->payload_len == 0 ? TALLY_OK
                                                                              : TALLY_EPROTO;
}

size_t
proto_cluster_reply_encode(uint8_t *out, size_t cap, uint32_t id,
                           const struct proto_cluster_status *s)
{
    const uint64_t head[] = {s->self,         s->leader,        s->term,
                             s->commit_index, s->applied_index, s->last_index};
    struct proto_writer w;

    if (s->n > PROTO_CLUSTER_MEMBERS_MAX || s->in_cluster > 1 || cap < PROTO_FRAME_HEADER)
        return 0;
    proto_writer_init(&w, out, cap);
    w.at = PROTO_FRAME_HEADER;
    proto_put_u8(&w, s->in_cluster);
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        proto_put_u64(&w, head[i]);
    proto_put_u8(&w, s->n);
    for (size_t i = 0; i < s->n; i++) {
        const struct proto_cluster_member *m = &s->m[i];
        proto_put_u64(&w, m->id);
        proto_put_u8(&w, m->role);
        proto_put_u8(&w, m->log_role);
        proto_put_u8(&w, m->progress_known);
        proto_put_u64(&w, m->match_index);
        proto_put_str(&w, m->address);
        proto_put_bytes(&w, m->pk, sizeof(m->pk));
        proto_put_u8(&w, m->clock_known);
        proto_put_u64(&w, (uint64_t)m->clock_skew_ms);
    }
    if (w.bad)
        return 0;
    proto_frame_header(out, PROTO_C_CLUSTER_REPLY, 0, id, w.at - PROTO_FRAME_HEADER);
    return w.at;
}

int
proto_cluster_reply_decode(const struct proto_frame *f, struct proto_cluster_status *out)
{
    uint64_t *head[] = {&out->self,         &out->leader,        &out->term,
                        &out->commit_index, &out->applied_index, &out->last_index};
    struct proto_cursor c;

    memset(out, 0, sizeof(*out));
    if (f->type != PROTO_C_CLUSTER_REPLY || f->flags != 0)
        return TALLY_EPROTO;
    proto_cursor_init(&c, f->payload, f->payload_len);
    out->in_cluster = proto_get_u8(&c);
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        *head[i] = proto_get_u64(&c);
    out->n = proto_get_u8(&c);
    if (out->in_cluster > 1 || out->n > PROTO_CLUSTER_MEMBERS_MAX)
        return TALLY_EPROTO;
    for (size_t i = 0; i < out->n && !c.bad; i++) {
        struct proto_cluster_member *m = &out->m[i];
        m->id = proto_get_u64(&c);
        m->role = proto_get_u8(&c);
        m->log_role = proto_get_u8(&c);
        m->progress_known = proto_get_u8(&c);
        m->match_index = proto_get_u64(&c);
        proto_get_str(&c, m->address, sizeof(m->address));
        proto_get_bytes(&c, m->pk, sizeof(m->pk));
        m->clock_known = proto_get_u8(&c);
        m->clock_skew_ms = (int64_t)proto_get_u64(&c);
        if (m->role > 1 || m->log_role > 3 || m->progress_known > 1 || m->clock_known > 1)
            return TALLY_EPROTO;
    }
    return proto_cursor_done(&c) ? TALLY_OK : TALLY_EPROTO;
}

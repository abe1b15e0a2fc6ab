/*
 * The lease channel codec (proto_lease.h): one encoder and one decoder per message type over the
 * big-endian cursors of proto_frame.h, dispatched on the frame type. A decoder reads every field
 * through a cursor that turns an overrun into a flag, then insists that the payload was consumed
 * exactly and that the message validates: names by tenant_name_valid and tenant_link_id_valid,
 * numbers inside the bounds of proto_lease.h, flags and codes known. The encoder validates first,
 * so what it writes is always what the decoder accepts.
 */
#include "proto_lease.h"

#include <string.h>

#include "tenant_count.h"

const char *
proto_lease_type_name(uint8_t type)
{
    static const char *const names[] = {
        [PROTO_LEASE_HELLO] = "HELLO",
        [PROTO_LEASE_WELCOME] = "WELCOME",
        [PROTO_LEASE_ACQUIRE] = "ACQUIRE",
        [PROTO_LEASE_GRANT] = "GRANT",
        [PROTO_LEASE_DENY] = "DENY",
        [PROTO_LEASE_RETURN] = "RETURN",
        [PROTO_LEASE_RETURN_ACK] = "RETURN_ACK",
        [PROTO_LEASE_HEARTBEAT] = "HEARTBEAT",
        [PROTO_LEASE_HB_ACK] = "HB_ACK",
        [PROTO_LEASE_SLOT_ACQUIRE] = "SLOT_ACQUIRE",
        [PROTO_LEASE_SLOT_GRANT] = "SLOT_GRANT",
        [PROTO_LEASE_SLOT_DENY] = "SLOT_DENY",
        [PROTO_LEASE_SLOT_RELEASE] = "SLOT_RELEASE",
        [PROTO_LEASE_SLOT_RELEASE_ACK] = "SLOT_RELEASE_ACK",
        [PROTO_LEASE_ERROR] = "ERROR",
        [PROTO_LEASE_RECALL] = "RECALL",
    };

    if (type < PROTO_LEASE_TYPE_MIN || type > PROTO_LEASE_TYPE_MAX)
        return "UNKNOWN";
    return names[type];
}

bool
proto_lease_is_reply(uint8_t type)
{
    switch (type) {
    case PROTO_LEASE_WELCOME:
    case PROTO_LEASE_GRANT:
    case PROTO_LEASE_DENY:
    case PROTO_LEASE_RETURN_ACK:
    case PROTO_LEASE_HB_ACK:
    case PROTO_LEASE_SLOT_GRANT:
    case PROTO_LEASE_SLOT_DENY:
    case PROTO_LEASE_SLOT_RELEASE_ACK:
    case PROTO_LEASE_ERROR:
    case PROTO_LEASE_RECALL:
        return true;
    default:
        return false;
    }
}

/* ---- validation ---- */

static bool
id_ok(uint64_t v)
{
    return v >= 1 && v <= PROTO_LEASE_ID_MAX;
}

static bool
in_range(int64_t v, int64_t lo, int64_t hi)
{
    return v >= lo && v <= hi;
}

/* A wait: 0..PROTO_LEASE_MS_MAX, or TENANT_RETRY_NEVER when `never_ok`. */
static bool
wait_ok(int64_t v, bool never_ok)
{
    return in_range(v, 0, PROTO_LEASE_MS_MAX) || (never_ok && v == TENANT_RETRY_NEVER);
}

static bool
scope_ok(uint8_t scope)
{
    return scope <= TENANT_SCOPE_CONCURRENCY;
}

static bool
acquire_ok(const struct proto_lease_acquire *a)
{
    if (!tenant_name_valid(a->endpoint) || !tenant_link_id_valid(a->link))
        return false;
    if (!in_range(a->need, 0, TENANT_COST_MAX) || !in_range(a->want, 1, PROTO_LEASE_N_MAX) ||
        a->want < a->need || !in_range(a->rate_milli, 0, PROTO_LEASE_RATE_MAX) ||
        !in_range(a->debt, 0, PROTO_LEASE_N_MAX))
        return false;
    if ((a->flags & ~PROTO_LEASE_ACQ_NEXT) != 0 ||
        ((a->flags & PROTO_LEASE_ACQ_NEXT) && a->need != 0))
        return false;
    if (a->report_lease == 0)
        return a->report_used == 0;
    return id_ok(a->report_lease) && in_range(a->report_used, 0, PROTO_LEASE_N_MAX);
}

static bool
grant_ok(const struct proto_lease_grant *g)
{
    return tenant_name_valid(g->endpoint) && tenant_link_id_valid(g->link) && id_ok(g->lease_id) &&
           in_range(g->n, 1, PROTO_LEASE_N_MAX) && in_range(g->ttl_ms, 1, PROTO_LEASE_MS_MAX) &&
           in_range(g->start_ms, 0, g->ttl_ms - 1) &&
           (g->flags & ~(uint32_t)(PROTO_LEASE_GRANT_PASS | PROTO_LEASE_GRANT_KEEP |
                                   PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST)) == 0 &&
           /* the last lease of its windows ends at one */
           (!(g->flags & PROTO_LEASE_GRANT_LAST) || (g->flags & PROTO_LEASE_GRANT_EDGE)) &&
           /* a pass-through grant is never kept */
           !((g->flags & PROTO_LEASE_GRANT_PASS) && (g->flags & PROTO_LEASE_GRANT_KEEP)) &&
           g->holders <= PROTO_LEASE_COUNT_MAX && g->epoch <= PROTO_LEASE_ID_MAX;
}

static bool
deny_ok(const struct proto_lease_deny *d)
{
    bool never = (d->flags & PROTO_LEASE_DENY_NEVER) != 0;

    if (!tenant_name_valid(d->endpoint) || !tenant_link_id_valid(d->link) || !scope_ok(d->scope))
        return false;
    if ((d->flags & ~(PROTO_LEASE_DENY_NEVER | PROTO_LEASE_DENY_PASS)) != 0)
        return false;
    /* "never" and its flag go together. */
    if (never != (d->retry_after_ms == TENANT_RETRY_NEVER))
        return false;
    return wait_ok(d->retry_after_ms, true) && in_range(d->limit, 0, PROTO_LEASE_N_MAX);
}

static bool
heartbeat_ok(const struct proto_lease_heartbeat *h)
{
    if (!tenant_name_valid(h->endpoint) || h->count > PROTO_LEASE_HB_MAX)
        return false;
    for (uint32_t i = 0; i < h->count; i++) {
        const struct proto_lease_hb_entry *e = &h->e[i];

        if (!tenant_link_id_valid(e->link) || !in_range(e->rate_milli, 0, PROTO_LEASE_RATE_MAX) ||
            !in_range(e->debt, 0, PROTO_LEASE_N_MAX))
            return false;
    }
    return true;
}

static bool
body_ok(const struct proto_lease_msg *m)
{
    switch (m->type) {
    case PROTO_LEASE_HELLO:
        return tenant_name_valid(m->hello.tenant);
    case PROTO_LEASE_WELCOME:
        return m->welcome.epoch <= PROTO_LEASE_ID_MAX &&
               m->welcome.children <= PROTO_LEASE_COUNT_MAX &&
               m->welcome.concurrency <= TENANT_CONCURRENCY_MAX &&
               in_range(m->welcome.lease_ttl_ms, 1, PROTO_LEASE_MS_MAX) &&
               in_range(m->welcome.heartbeat_ms, 1, PROTO_LEASE_MS_MAX);
    case PROTO_LEASE_ACQUIRE:
        return acquire_ok(&m->acquire);
    case PROTO_LEASE_GRANT:
        return grant_ok(&m->grant);
    case PROTO_LEASE_DENY:
        return deny_ok(&m->deny);
    case PROTO_LEASE_RETURN:
        return id_ok(m->ret.lease_id) && in_range(m->ret.used, 0, PROTO_LEASE_N_MAX);
    case PROTO_LEASE_RETURN_ACK:
        return id_ok(m->return_ack.lease_id) &&
               in_range(m->return_ack.credited, 0, PROTO_LEASE_N_MAX);
    case PROTO_LEASE_HEARTBEAT:
        return heartbeat_ok(&m->heartbeat);
    case PROTO_LEASE_HB_ACK:
        return m->hb_ack.epoch <= PROTO_LEASE_ID_MAX && m->hb_ack.children <= PROTO_LEASE_COUNT_MAX;
    case PROTO_LEASE_SLOT_ACQUIRE:
        return tenant_name_valid(m->slot_acquire.endpoint) &&
               tenant_link_id_valid(m->slot_acquire.link);
    case PROTO_LEASE_SLOT_GRANT:
        return tenant_link_id_valid(m->slot_grant.link) &&
               in_range(m->slot_grant.slot_id, 0, INT64_MAX) &&
               in_range(m->slot_grant.ttl_ms, 1, PROTO_LEASE_MS_MAX);
    case PROTO_LEASE_SLOT_DENY:
        return tenant_link_id_valid(m->slot_deny.link) &&
               wait_ok(m->slot_deny.retry_after_ms, false) &&
               in_range(m->slot_deny.limit, 0, TENANT_CONCURRENCY_MAX);
    case PROTO_LEASE_SLOT_RELEASE:
        return tenant_link_id_valid(m->slot_release.link) &&
               in_range(m->slot_release.slot_id, 1, INT64_MAX);
    case PROTO_LEASE_SLOT_RELEASE_ACK:
        return tenant_link_id_valid(m->slot_release_ack.link) &&
               in_range(m->slot_release_ack.slot_id, 1, INT64_MAX);
    case PROTO_LEASE_ERROR:
        return m->error.code >= 1 && m->error.code <= PROTO_LEASE_E_MAX &&
               wait_ok(m->error.retry_after_ms, false);
    case PROTO_LEASE_RECALL:
        /* Pushed, not a reply: its origin's seq names the lease, so that the two agree. */
        return tenant_name_valid(m->recall.endpoint) && tenant_link_id_valid(m->recall.link) &&
               id_ok(m->recall.lease_id) && m->origin.seq == m->recall.lease_id;
    default:
        return false;
    }
}

int
proto_lease_validate(const struct proto_lease_msg *m)
{
    if (m == NULL || !tenant_name_valid(m->origin.child) || !id_ok(m->origin.incarnation) ||
        !id_ok(m->origin.seq))
        return TALLY_EPROTO;
    return body_ok(m) ? TALLY_OK : TALLY_EPROTO;
}

/* ---- encoding ---- */

static void
put_body(struct proto_writer *w, const struct proto_lease_msg *m)
{
    switch (m->type) {
    case PROTO_LEASE_HELLO:
        proto_put_str(w, m->hello.tenant);
        break;
    case PROTO_LEASE_WELCOME:
        proto_put_u64(w, m->welcome.epoch);
        proto_put_u32(w, m->welcome.children);
        proto_put_u32(w, m->welcome.concurrency);
        proto_put_i64(w, m->welcome.lease_ttl_ms);
        proto_put_i64(w, m->welcome.heartbeat_ms);
        break;
    case PROTO_LEASE_ACQUIRE:
        proto_put_str(w, m->acquire.endpoint);
        proto_put_str(w, m->acquire.link);
        proto_put_i64(w, m->acquire.want);
        proto_put_i64(w, m->acquire.need);
        proto_put_i64(w, m->acquire.rate_milli);
        proto_put_u64(w, m->acquire.report_lease);
        proto_put_i64(w, m->acquire.report_used);
        proto_put_i64(w, m->acquire.debt);
        proto_put_u8(w, m->acquire.flags);
        break;
    case PROTO_LEASE_GRANT:
        proto_put_str(w, m->grant.endpoint);
        proto_put_str(w, m->grant.link);
        proto_put_u64(w, m->grant.lease_id);
        proto_put_i64(w, m->grant.n);
        proto_put_i64(w, m->grant.ttl_ms);
        proto_put_u32(w, m->grant.flags);
        proto_put_u32(w, m->grant.holders);
        proto_put_u64(w, m->grant.epoch);
        proto_put_i64(w, m->grant.start_ms);
        break;
    case PROTO_LEASE_DENY:
        proto_put_str(w, m->deny.endpoint);
        proto_put_str(w, m->deny.link);
        proto_put_u8(w, m->deny.scope);
        proto_put_u8(w, m->deny.flags);
        proto_put_i64(w, m->deny.retry_after_ms);
        proto_put_i64(w, m->deny.limit);
        break;
    case PROTO_LEASE_RETURN:
        proto_put_u64(w, m->ret.lease_id);
        proto_put_i64(w, m->ret.used);
        break;
    case PROTO_LEASE_RETURN_ACK:
        proto_put_u64(w, m->return_ack.lease_id);
        proto_put_i64(w, m->return_ack.credited);
        break;
    case PROTO_LEASE_HEARTBEAT:
        proto_put_str(w, m->heartbeat.endpoint);
        proto_put_u8(w, (uint8_t)m->heartbeat.count);
        for (uint32_t i = 0; i < m->heartbeat.count; i++) {
            proto_put_str(w, m->heartbeat.e[i].link);
            proto_put_i64(w, m->heartbeat.e[i].rate_milli);
            proto_put_i64(w, m->heartbeat.e[i].debt);
        }
        break;
    case PROTO_LEASE_HB_ACK:
        proto_put_u64(w, m->hb_ack.epoch);
        proto_put_u32(w, m->hb_ack.children);
        break;
    case PROTO_LEASE_SLOT_ACQUIRE:
        proto_put_str(w, m->slot_acquire.endpoint);
        proto_put_str(w, m->slot_acquire.link);
        break;
    case PROTO_LEASE_SLOT_GRANT:
        proto_put_str(w, m->slot_grant.link);
        proto_put_i64(w, m->slot_grant.slot_id);
        proto_put_i64(w, m->slot_grant.ttl_ms);
        break;
    case PROTO_LEASE_SLOT_DENY:
        proto_put_str(w, m->slot_deny.link);
        proto_put_i64(w, m->slot_deny.retry_after_ms);
        proto_put_i64(w, m->slot_deny.limit);
        break;
    case PROTO_LEASE_SLOT_RELEASE:
        proto_put_str(w, m->slot_release.link);
        proto_put_i64(w, m->slot_release.slot_id);
        break;
    case PROTO_LEASE_SLOT_RELEASE_ACK:
        proto_put_str(w, m->slot_release_ack.link);
        proto_put_i64(w, m->slot_release_ack.slot_id);
        proto_put_u8(w, m->slot_release_ack.released ? 1 : 0);
        break;
    case PROTO_LEASE_ERROR:
        proto_put_u16(w, m->error.code);
        proto_put_i64(w, m->error.retry_after_ms);
        break;
    case PROTO_LEASE_RECALL:
        proto_put_str(w, m->recall.endpoint);
        proto_put_str(w, m->recall.link);
        proto_put_u64(w, m->recall.lease_id);
        break;
    default:
        w->bad = true; /* validated before: cannot happen */
        break;
    }
}

int
proto_lease_encode(const struct proto_lease_msg *m, uint32_t request_id, uint8_t *buf, size_t cap,
                   size_t *len)
{
    struct proto_writer w;
    int rc = proto_lease_validate(m);

    *len = 0;
    if (rc != TALLY_OK)
        return rc;
    if (buf == NULL || cap < PROTO_FRAME_HEADER)
        return TALLY_ETOOBIG;
    proto_writer_init(&w, buf + PROTO_FRAME_HEADER, cap - PROTO_FRAME_HEADER);
    proto_put_str(&w, m->origin.child);
    proto_put_u64(&w, m->origin.incarnation);
    proto_put_u64(&w, m->origin.seq);
    put_body(&w, m);
    if (w.bad)
        return TALLY_ETOOBIG;
    proto_frame_header(buf, m->type, 0, request_id, w.at);
    *len = PROTO_FRAME_HEADER + w.at;
    return TALLY_OK;
}

/* ---- decoding ---- */

static void
get_body(struct proto_cursor *c, struct proto_lease_msg *m)
{
    switch (m->type) {
    case PROTO_LEASE_HELLO:
        proto_get_str(c, m->hello.tenant, sizeof(m->hello.tenant));
        break;
    case PROTO_LEASE_WELCOME:
        m->welcome.epoch = proto_get_u64(c);
        m->welcome.children = proto_get_u32(c);
        m->welcome.concurrency = proto_get_u32(c);
        m->welcome.lease_ttl_ms = proto_get_i64(c);
        m->welcome.heartbeat_ms = proto_get_i64(c);
        break;
    case PROTO_LEASE_ACQUIRE:
        proto_get_str(c, m->acquire.endpoint, sizeof(m->acquire.endpoint));
        proto_get_str(c, m->acquire.link, sizeof(m->acquire.link));
        m->acquire.want = proto_get_i64(c);
        m->acquire.need = proto_get_i64(c);
        m->acquire.rate_milli = proto_get_i64(c);
        m->acquire.report_lease = proto_get_u64(c);
        m->acquire.report_used = proto_get_i64(c);
        m->acquire.debt = proto_get_i64(c);
        m->acquire.flags = proto_get_u8(c);
        break;
    case PROTO_LEASE_GRANT:
        proto_get_str(c, m->grant.endpoint, sizeof(m->grant.endpoint));
        proto_get_str(c, m->grant.link, sizeof(m->grant.link));
        m->grant.lease_id = proto_get_u64(c);
        m->grant.n = proto_get_i64(c);
        m->grant.ttl_ms = proto_get_i64(c);
        m->grant.flags = proto_get_u32(c);
        m->grant.holders = proto_get_u32(c);
        m->grant.epoch = proto_get_u64(c);
        m->grant.start_ms = proto_get_i64(c);
        break;
    case PROTO_LEASE_DENY:
        proto_get_str(c, m->deny.endpoint, sizeof(m->deny.endpoint));
        proto_get_str(c, m->deny.link, sizeof(m->deny.link));
        m->deny.scope = proto_get_u8(c);
        m->deny.flags = proto_get_u8(c);
        m->deny.retry_after_ms = proto_get_i64(c);
        m->deny.limit = proto_get_i64(c);
        break;
    case PROTO_LEASE_RETURN:
        m->ret.lease_id = proto_get_u64(c);
        m->ret.used = proto_get_i64(c);
        break;
    case PROTO_LEASE_RETURN_ACK:
        m->return_ack.lease_id = proto_get_u64(c);
        m->return_ack.credited = proto_get_i64(c);
        break;
    case PROTO_LEASE_HEARTBEAT: {
        uint8_t count;

        proto_get_str(c, m->heartbeat.endpoint, sizeof(m->heartbeat.endpoint));
        count = proto_get_u8(c);
        if (count > PROTO_LEASE_HB_MAX) {
            c->bad = true;
            break;
        }
        m->heartbeat.count = count;
        for (uint32_t i = 0; i < count; i++) {
            proto_get_str(c, m->heartbeat.e[i].link, sizeof(m->heartbeat.e[i].link));
            m->heartbeat.e[i].rate_milli = proto_get_i64(c);
            m->heartbeat.e[i].debt = proto_get_i64(c);
        }
        break;
    }
    case PROTO_LEASE_HB_ACK:
        m->hb_ack.epoch = proto_get_u64(c);
        m->hb_ack.children = proto_get_u32(c);
        break;
    case PROTO_LEASE_SLOT_ACQUIRE:
        proto_get_str(c, m->slot_acquire.endpoint, sizeof(m->slot_acquire.endpoint));
        proto_get_str(c, m->slot_acquire.link, sizeof(m->slot_acquire.link));
        break;
    case PROTO_LEASE_SLOT_GRANT:
        proto_get_str(c, m->slot_grant.link, sizeof(m->slot_grant.link));
        m->slot_grant.slot_id = proto_get_i64(c);
        m->slot_grant.ttl_ms = proto_get_i64(c);
        break;
    case PROTO_LEASE_SLOT_DENY:
        proto_get_str(c, m->slot_deny.link, sizeof(m->slot_deny.link));
        m->slot_deny.retry_after_ms = proto_get_i64(c);
        m->slot_deny.limit = proto_get_i64(c);
        break;
    case PROTO_LEASE_SLOT_RELEASE:
        proto_get_str(c, m->slot_release.link, sizeof(m->slot_release.link));
        m->slot_release.slot_id = proto_get_i64(c);
        break;
    case PROTO_LEASE_SLOT_RELEASE_ACK: {
        uint8_t released;

        proto_get_str(c, m->slot_release_ack.link, sizeof(m->slot_release_ack.link));
        m->slot_release_ack.slot_id = proto_get_i64(c);
        released = proto_get_u8(c);
        if (released > 1)
            c->bad = true;
        m->slot_release_ack.released = released == 1;
        break;
    }
    case PROTO_LEASE_ERROR:
        m->error.code = proto_get_u16(c);
        m->error.retry_after_ms = proto_get_i64(c);
        break;
    case PROTO_LEASE_RECALL:
        proto_get_str(c, m->recall.endpoint, sizeof(m->recall.endpoint));
        proto_get_str(c, m->recall.link, sizeof(m->recall.link));
        m->recall.lease_id = proto_get_u64(c);
        break;
    default:
        c->bad = true;
        break;
    }
}

int
proto_lease_decode(const struct proto_frame *f, struct proto_lease_msg *out)
{
    struct proto_cursor c;

    if (f == NULL || out == NULL)
        return TALLY_EPROTO;
    memset(out, 0, sizeof(*out));
    if (f->type < PROTO_LEASE_TYPE_MIN || f->type > PROTO_LEASE_TYPE_MAX || f->flags != 0 ||
        (f->payload == NULL && f->payload_len > 0))
        return TALLY_EPROTO;
    out->type = f->type;
    proto_cursor_init(&c, f->payload, f->payload_len);
    proto_get_str(&c, out->origin.child, sizeof(out->origin.child));
    out->origin.incarnation = proto_get_u64(&c);
    out->origin.seq = proto_get_u64(&c);
    get_body(&c, out);
    if (!proto_cursor_done(&c))
        return TALLY_EPROTO;
    return proto_lease_validate(out);
}

/*
 * One valid lease message of every type, with fields away from zero (proto_lease_sample.h), for
 * the codec's tests.
 */
#include "proto_lease_sample.h"

#include <string.h>

#include "tenant_count.h"

static const char link_a[] = "lnk_0123456789abcdef";
static const char link_b[] = "lnk_fedcba9876543210";

static void
origin(struct proto_lease_msg *m, uint8_t type, uint64_t seq)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    strcpy(m->origin.child, "search");
    m->origin.incarnation = 3;
    m->origin.seq = seq;
}

int
lease_sample(uint8_t type, struct proto_lease_msg *m)
{
    origin(m, type, 1000 + type);
    switch (type) {
    case PROTO_LEASE_HELLO:
        strcpy(m->hello.tenant, "acme");
        break;
    case PROTO_LEASE_WELCOME:
        m->welcome.epoch = 9;
        m->welcome.children = 4;
        m->welcome.concurrency = 10;
        m->welcome.lease_ttl_ms = 5000;
        m->welcome.heartbeat_ms = 1000;
        break;
    case PROTO_LEASE_ACQUIRE:
        strcpy(m->acquire.endpoint, "search");
        strcpy(m->acquire.link, link_a);
        m->acquire.want = 40;
        m->acquire.need = 3;
        m->acquire.rate_milli = 12345;
        m->acquire.report_lease = 77;
        m->acquire.report_used = 5;
        m->acquire.debt = 2;
        break;
    case PROTO_LEASE_GRANT:
        strcpy(m->grant.endpoint, "search");
        strcpy(m->grant.link, link_a);
        m->grant.lease_id = 78;
        m->grant.n = 40;
        m->grant.ttl_ms = 4999;
        m->grant.flags = PROTO_LEASE_GRANT_PASS;
        m->grant.holders = 3;
        m->grant.epoch = 9;
        break;
    case PROTO_LEASE_DENY:
        strcpy(m->deny.endpoint, "search");
        strcpy(m->deny.link, link_b);
        m->deny.scope = TENANT_SCOPE_PLAN;
        m->deny.retry_after_ms = 31000;
        m->deny.limit = 600;
        break;
    case PROTO_LEASE_RETURN:
        m->ret.lease_id = 78;
        m->ret.used = 12;
        break;
    case PROTO_LEASE_RETURN_ACK:
        m->return_ack.lease_id = 78;
        m->return_ack.credited = 28;
        break;
    case PROTO_LEASE_HEARTBEAT:
        strcpy(m->heartbeat.endpoint, "search");
        m->heartbeat.count = 2;
        strcpy(m->heartbeat.e[0].link, link_a);
        m->heartbeat.e[0].rate_milli = 5000;
        m->heartbeat.e[0].debt = 4;
        strcpy(m->heartbeat.e[1].link, link_b);
        m->heartbeat.e[1].rate_milli = 1;
        break;
    case PROTO_LEASE_HB_ACK:
        m->hb_ack.epoch = 9;
        m->hb_ack.children = 4;
        break;
    case PROTO_LEASE_SLOT_ACQUIRE:
        strcpy(m->slot_acquire.endpoint, "export");
        strcpy(m->slot_acquire.link, link_a);
        break;
    case PROTO_LEASE_SLOT_GRANT:
        strcpy(m->slot_grant.link, link_a);
        m->slot_grant.slot_id = 17;
        m->slot_grant.ttl_ms = 30000;
        break;
    case PROTO_LEASE_SLOT_DENY:
        strcpy(m->slot_deny.link, link_a);
        m->slot_deny.retry_after_ms = 2500;
        m->slot_deny.limit = 2;
        break;
    case PROTO_LEASE_SLOT_RELEASE:
        strcpy(m->slot_release.link, link_a);
        m->slot_release.slot_id = 17;
        break;
    case PROTO_LEASE_SLOT_RELEASE_ACK:
        strcpy(m->slot_release_ack.link, link_a);
        m->slot_release_ack.slot_id = 17;
        m->slot_release_ack.released = true;
        break;
    case PROTO_LEASE_ERROR:
        m->error.code = PROTO_LEASE_E_BUSY;
        m->error.retry_after_ms = 100;
        break;
    case PROTO_LEASE_RECALL:
        strcpy(m->recall.endpoint, "search");
        strcpy(m->recall.link, link_b);
        m->recall.lease_id = 77;
        m->origin.seq = 77; /* a push names its lease in the origin's seq */
        break;
    default:
        return -1;
    }
    return 0;
}

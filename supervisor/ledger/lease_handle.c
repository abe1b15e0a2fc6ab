/*
 * Handling one request (sup_ledger_handle): check the origin against the child's registration,
 * answer a duplicate from the dedupe window, then decide. Each decision either builds one record
 * (something changes: the record is applied now and appended for the journal, and its reply is
 * cached in the child's durable window) or answers directly (nothing changes: the reply is cached
 * in the volatile window, lost on restart, which is harmless because re-deciding it changes
 * nothing either). The window covers the last SUP_DEDUPE seqs of an incarnation; anything older
 * is stale and a no-op (a child never has a request outstanding that far back).
 */
#include "sup_lease_int.h"

#include <stdio.h>
#include <string.h>

void
sup__reply_error(struct proto_lease_msg *reply, const struct proto_lease_msg *in, uint16_t code,
                 int64_t retry_after_ms)
{
    memset(reply, 0, sizeof(*reply));
    reply->type = PROTO_LEASE_ERROR;
    reply->origin = in->origin;
    reply->error.code = code;
    reply->error.retry_after_ms = retry_after_ms;
}

/* The reply already given to `seq`, into *reply; false when there is none. */
static bool
dedupe_find(const sup_ledger *l, const struct sup_peer *peer, uint64_t seq,
            struct proto_lease_msg *reply)
{
    const struct sup_record *d = &peer->durable[seq % SUP_DEDUPE];
    const struct sup_cached *v = &peer->volatile_[seq % SUP_DEDUPE];

    if (d->origin.seq == seq) {
        sup__record_reply(l, d, reply);
        return true;
    }
    if (v->seq == seq) {
        *reply = v->reply;
        return true;
    }
    return false;
}

static void
cache_volatile(struct sup_peer *peer, uint64_t seq, const struct proto_lease_msg *reply)
{
    struct sup_cached *v = &peer->volatile_[seq % SUP_DEDUPE];

    v->seq = seq;
    v->reply = *reply;
    if (seq > peer->hwm_volatile)
        peer->hwm_volatile = seq;
}

static void
welcome(const sup_ledger *l, const struct proto_lease_msg *in, struct proto_lease_msg *reply)
{
    struct sup_record rec;

    sup__record_init(l, &rec, SUP_REC_HELLO, in, l->now_ms);
    rec.holders = l->peer_count;
    sup__record_reply(l, &rec, reply);
}

/* HELLO: a new incarnation (or a new child) is a record; the current one is answered again. */
static bool
decide_hello(sup_ledger *l, int64_t now_ms, const struct proto_lease_msg *in,
             struct sup_record *rec, struct proto_lease_msg *reply)
{
    int pi = sup__peer_find(l, in->origin.child);

    if (strcmp(in->hello.tenant, l->tenant) != 0) {
        sup__reply_error(reply, in, PROTO_LEASE_E_INVALID, 0);
        return false;
    }
    if (pi >= 0 && in->origin.incarnation < l->peers[pi]->incarnation) {
        sup__reply_error(reply, in, PROTO_LEASE_E_STALE, 0);
        return false;
    }
    if (pi >= 0 && in->origin.incarnation == l->peers[pi]->incarnation) {
        welcome(l, in, reply);
        return false;
    }
    if (pi < 0 && sup__peer_room(l) != TALLY_OK) {
        sup__reply_error(reply, in, PROTO_LEASE_E_BUSY, 1000);
        return false;
    }
    sup__record_init(l, rec, SUP_REC_HELLO, in, now_ms);
    rec->holders = l->peer_count + (pi < 0 ? 1 : 0);
    return true;
}

/* RETURN: credit n - used once, only from the lease's holder (sup__lease_reportable) and before
 * its deadline (+ margin); after it the lease is closed as spent. Anything else credits
 * nothing. */
static bool
decide_return(sup_ledger *l, int pi, int64_t now_ms, const struct proto_lease_msg *in,
              struct sup_record *rec, struct proto_lease_msg *reply)
{
    struct sup_lease *lease = sup__lease_find(l, in->ret.lease_id);

    sup__record_init(l, rec, SUP_REC_RETURN, in, now_ms);
    rec->report_lease = in->ret.lease_id;
    rec->report_used = in->ret.used;
    if (lease == NULL || !sup__lease_reportable(lease, pi, &in->origin)) {
        sup__record_reply(l, rec, reply);
        return false;
    }
    if (rec->now_ms > lease->deadline_ms + l->margin_ms) {
        rec->flags = SUP_RECF_REPORT_SPENT;
    } else {
        rec->flags = SUP_RECF_REPORT_CREDIT;
        rec->credited = lease->n - (in->ret.used < lease->n ? in->ret.used : lease->n);
    }
    return true;
}

/* HEARTBEAT: degraded debt is a record (charged once, I5); rates alone change nothing. */
static bool
decide_heartbeat(sup_ledger *l, int64_t now_ms, const struct proto_lease_msg *in,
                 struct sup_record *rec, struct proto_lease_msg *reply)
{
    const struct proto_lease_heartbeat *h = &in->heartbeat;

    sup__record_init(l, rec, SUP_REC_DEBT, in, now_ms);
    snprintf(rec->endpoint, sizeof(rec->endpoint), "%s", h->endpoint);
    rec->holders = l->peer_count;
    for (uint32_t i = 0; i < h->count; i++) {
        if (h->e[i].debt == 0)
            continue;
        snprintf(rec->e[rec->count].link, sizeof(rec->e[rec->count].link), "%s", h->e[i].link);
        rec->e[rec->count].debt = h->e[i].debt;
        rec->count++;
    }
    if (rec->count > 0)
        return true;
    sup__record_reply(l, rec, reply);
    return false;
}

/* SLOT_ACQUIRE: one slot per operation, K per link (docs/DESIGN.md §3). */
static bool
decide_slot_acquire(sup_ledger *l, int64_t now_ms, const struct proto_lease_msg *in,
                    struct sup_record *rec, struct proto_lease_msg *reply)
{
    const struct proto_lease_slot_acquire *s = &in->slot_acquire;
    const struct sup_endpoint *ep = sup__endpoint_find(l, s->endpoint);
    const struct sup_link *k = sup__link_find(l, s->link);
    struct tenant_verdict v;

    memset(reply, 0, sizeof(*reply));
    reply->origin = in->origin;
    if (ep == NULL) {
        sup__reply_error(reply, in, PROTO_LEASE_E_ENDPOINT, 1000);
        return false;
    }
    if (l->link_allows != NULL && !l->link_allows(l->link_ctx, s->link, s->endpoint, now_ms)) {
        sup__reply_error(reply, in, PROTO_LEASE_E_LINK, 1000);
        return false;
    }
    if (!ep->policy.expensive || l->plan.concurrency == 0) {
        /* Nothing bounds this operation: no slot to take or release. */
        reply->type = PROTO_LEASE_SLOT_GRANT;
        snprintf(reply->slot_grant.link, sizeof(reply->slot_grant.link), "%s", s->link);
        reply->slot_grant.ttl_ms = l->slot_ttl_ms;
        return false;
    }
    if (!sup__link_available(l, s->link)) {
        sup__reply_error(reply, in, PROTO_LEASE_E_BUSY, 100);
        return false;
    }
    if (k != NULL && k->slot_v != NULL && k->slot_cap >= l->plan.concurrency) {
        if (tenant_slot_check(&k->slots, l->plan.concurrency, sup__eval_ms(l, now_ms), &v) !=
            TALLY_OK) {
            sup__reply_error(reply, in, PROTO_LEASE_E_INVALID, 0);
            return false;
        }
        if (!v.admitted) {
            l->stats.slot_denies++;
            reply->type = PROTO_LEASE_SLOT_DENY;
            snprintf(reply->slot_deny.link, sizeof(reply->slot_deny.link), "%s", s->link);
            reply->slot_deny.retry_after_ms = v.retry_after_ms;
            reply->slot_deny.limit = l->plan.concurrency;
            return false;
        }
    }
    /* No table yet, or one smaller than K (K grew): fewer than K held, the slot fits. */
    sup__record_init(l, rec, SUP_REC_SLOT_GRANT, in, now_ms);
    snprintf(rec->link, sizeof(rec->link), "%s", s->link);
    snprintf(rec->endpoint, sizeof(rec->endpoint), "%s", s->endpoint);
    rec->slot_id = l->slot_seq + 1;
    rec->ttl_ms = l->slot_ttl_ms;
    return true;
}

/* SLOT_RELEASE: idempotent; only a release that frees a held slot is a record. */
static bool
decide_slot_release(sup_ledger *l, int64_t now_ms, const struct proto_lease_msg *in,
                    struct sup_record *rec, struct proto_lease_msg *reply)
{
    const struct proto_lease_slot_release *s = &in->slot_release;
    struct sup_link *k = sup__link_find(l, s->link);

    sup__record_init(l, rec, SUP_REC_SLOT_RELEASE, in, now_ms);
    snprintf(rec->link, sizeof(rec->link), "%s", s->link);
    rec->slot_id = s->slot_id;
    /* tenant_slot_release is the judge of "held"; the record's apply repeats it (a no-op). */
    if (k != NULL && k->slot_v != NULL && tenant_slot_release(&k->slots, s->slot_id, rec->now_ms))
        return true;
    memset(reply, 0, sizeof(*reply));
    reply->type = PROTO_LEASE_SLOT_RELEASE_ACK;
    reply->origin = in->origin;
    snprintf(reply->slot_release_ack.link, sizeof(reply->slot_release_ack.link), "%s", s->link);
    reply->slot_release_ack.slot_id = s->slot_id;
    reply->slot_release_ack.released = false;
    return false;
}

/* A grant or a refusal tells how much a path has left: kept leases on a budget that ran short
 * are recalled (lease_recall.c). */
static void
recall_after(sup_ledger *l, int64_t now_ms, const struct proto_lease_msg *in,
             const struct proto_lease_msg *reply)
{
    if (in->type == PROTO_LEASE_ACQUIRE &&
        (reply->type == PROTO_LEASE_GRANT || reply->type == PROTO_LEASE_DENY))
        sup__recall_check(l, in->acquire.endpoint, in->acquire.link, sup__eval_ms(l, now_ms));
}

/* Checks the origin: registered incarnation, not a duplicate, not stale. Returns the peer index,
 * or -1 with *reply filled. */
static int
origin_check(sup_ledger *l, const struct proto_lease_msg *in, struct proto_lease_msg *reply)
{
    int pi = sup__peer_find(l, in->origin.child);
    const struct sup_peer *peer = pi >= 0 ? l->peers[pi] : NULL;
    uint64_t hwm;

    if (peer == NULL || in->origin.incarnation > peer->incarnation) {
        sup__reply_error(reply, in, PROTO_LEASE_E_HELLO, 0);
        return -1;
    }
    if (in->origin.incarnation < peer->incarnation) {
        l->stats.stale++;
        sup__reply_error(reply, in, PROTO_LEASE_E_STALE, 0);
        return -1;
    }
    if (dedupe_find(l, peer, in->origin.seq, reply)) {
        l->stats.duplicates++;
        return -1;
    }
    hwm = peer->hwm_durable > peer->hwm_volatile ? peer->hwm_durable : peer->hwm_volatile;
    if (in->origin.seq + SUP_DEDUPE <= hwm) {
        l->stats.stale++;
        sup__reply_error(reply, in, PROTO_LEASE_E_STALE, 0);
        return -1;
    }
    return pi;
}

int
sup_ledger_handle(sup_ledger *l, int64_t now_ms, const struct proto_lease_msg *in,
                  struct proto_lease_msg *reply, struct sup_records *out)
{
    struct sup_record rec;
    bool changes = false;
    int pi = -1, rc;

    if (l == NULL || in == NULL || reply == NULL)
        return TALLY_EINVAL;
    memset(reply, 0, sizeof(*reply));
    if (proto_lease_validate(in) != TALLY_OK || proto_lease_is_reply(in->type))
        return TALLY_EPROTO;
    if (now_ms < 0 || now_ms > TENANT_TIME_MAX_MS)
        return TALLY_EINVAL;
    if (out == NULL || out->v == NULL || out->count >= out->cap)
        return TALLY_ETOOBIG;

    if (in->type == PROTO_LEASE_HELLO) {
        pi = sup__peer_find(l, in->origin.child);
        if (pi >= 0 && in->origin.incarnation == l->peers[pi]->incarnation &&
            dedupe_find(l, l->peers[pi], in->origin.seq, reply)) {
            l->stats.duplicates++;
            return TALLY_OK;
        }
        changes = decide_hello(l, now_ms, in, &rec, reply);
    } else {
        pi = origin_check(l, in, reply);
        if (pi < 0)
            return TALLY_OK;
        switch (in->type) {
        case PROTO_LEASE_ACQUIRE:
            changes = sup__decide_acquire(l, pi, now_ms, in, &rec, reply);
            break;
        case PROTO_LEASE_RETURN:
            changes = decide_return(l, pi, now_ms, in, &rec, reply);
            break;
        case PROTO_LEASE_HEARTBEAT:
            changes = decide_heartbeat(l, now_ms, in, &rec, reply);
            break;
        case PROTO_LEASE_SLOT_ACQUIRE:
            changes = decide_slot_acquire(l, now_ms, in, &rec, reply);
            break;
        default:
            changes = decide_slot_release(l, now_ms, in, &rec, reply);
            break;
        }
    }
    if (!changes) {
        recall_after(l, now_ms, in, reply);
        if (reply->type == PROTO_LEASE_ERROR)
            l->stats.errors++;
        else if (reply->type == PROTO_LEASE_DENY)
            l->stats.denies++;
        /* A HELLO's own window is reset by its record; other answers are remembered. */
        if (pi >= 0 && in->type != PROTO_LEASE_HELLO &&
            in->origin.incarnation == l->peers[pi]->incarnation)
            cache_volatile(l->peers[pi], in->origin.seq, reply);
        return TALLY_OK;
    }
    rc = sup__commit(l, &rec, out);
    if (rc != TALLY_OK) {
        memset(reply, 0, sizeof(*reply));
        return rc;
    }
    sup__record_reply(l, &rec, reply);
    recall_after(l, now_ms, in, reply);
    return TALLY_OK;
}

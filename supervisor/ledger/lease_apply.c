/*
 * Records: the only writer of the ledger's durable state. A live decision builds a record and
 * applies it with the same function replay uses, so replaying the journal in order rebuilds the
 * live state exactly (sup_ledger_digest compares them). Applying a record advances the ledger's
 * clock to the record's time, then changes budgets, leases, slots and children, and caches the
 * reply the record answers with, so that a retransmission after a restart still gets the same
 * GRANT. Allocation (a new link, pair, child or slot table) happens before the first change, so a
 * failed apply changes nothing. Also here: the expiry timer, which closes leases as spent.
 */
#include "sup_lease_int.h"

#include <stdio.h>
#include <string.h>

/* Closes `lease`, crediting `credit` tokens (0 = spent). */
static void
lease_close(sup_ledger *l, struct sup_lease *lease, int64_t credit)
{
    struct sup_peer *peer = lease->peer < l->peer_count ? l->peers[lease->peer] : NULL;

    sup__lease_release_cells(l, lease, credit);
    if (ALWAYS(lease->link->leases > 0))
        lease->link->leases--;
    if (peer != NULL && ALWAYS(peer->leases > 0))
        peer->leases--;
    if (credit > 0) {
        l->stats.credits++;
        l->stats.credit_tokens += (uint64_t)credit;
    } else {
        l->stats.spent++;
    }
    sup__lease_closing(l, lease);
    memset(lease, 0, sizeof(*lease));
    l->lease_count--;
    while (l->lease_hw > 0 && l->leases[l->lease_hw - 1].id == 0)
        l->lease_hw--;
}

void
sup__record_init(const sup_ledger *l, struct sup_record *rec, uint32_t kind,
                 const struct proto_lease_msg *in, int64_t now_ms)
{
    memset(rec, 0, sizeof(*rec));
    rec->version = SUP_RECORD_VERSION;
    rec->kind = kind;
    rec->now_ms = sup__eval_ms(l, now_ms);
    rec->epoch = l->epoch;
    if (in != NULL)
        rec->origin = in->origin;
}

void
sup__record_reply(const sup_ledger *l, const struct sup_record *rec, struct proto_lease_msg *reply)
{
    memset(reply, 0, sizeof(*reply));
    reply->origin = rec->origin;
    switch (rec->kind) {
    case SUP_REC_HELLO:
        reply->type = PROTO_LEASE_WELCOME;
        reply->welcome.epoch = rec->epoch;
        reply->welcome.children = rec->holders;
        reply->welcome.concurrency = (uint32_t)l->plan.concurrency;
        reply->welcome.lease_ttl_ms = l->lease_ttl_ms;
        reply->welcome.heartbeat_ms = l->heartbeat_ms;
        break;
    case SUP_REC_ACQUIRE:
        if (rec->error != 0) {
            /* Refused with an ERROR, its report and debt applied all the same. */
            reply->type = PROTO_LEASE_ERROR;
            reply->error.code = (uint16_t)rec->error;
            reply->error.retry_after_ms = rec->retry_after_ms;
        } else if (rec->flags & SUP_RECF_GRANTED) {
            reply->type = PROTO_LEASE_GRANT;
            snprintf(reply->grant.endpoint, sizeof(reply->grant.endpoint), "%s", rec->endpoint);
            snprintf(reply->grant.link, sizeof(reply->grant.link), "%s", rec->link);
            reply->grant.lease_id = rec->lease_id;
            reply->grant.n = rec->n;
            reply->grant.ttl_ms = rec->ttl_ms;
            if (rec->flags & SUP_RECF_NEXT) {
                /* From the decision: the wait until its windows start, then its life. */
                reply->grant.ttl_ms = rec->deadline_ms - rec->now_ms;
                reply->grant.start_ms = reply->grant.ttl_ms - rec->ttl_ms;
            }
            reply->grant.flags = (rec->flags & SUP_RECF_PASS) ? PROTO_LEASE_GRANT_PASS : 0;
            if (rec->flags & SUP_RECF_KEEP)
                reply->grant.flags |= PROTO_LEASE_GRANT_KEEP;
            if (rec->flags & SUP_RECF_EDGE)
                reply->grant.flags |= PROTO_LEASE_GRANT_EDGE;
            if (rec->flags & SUP_RECF_LAST)
                reply->grant.flags |= PROTO_LEASE_GRANT_LAST;
            reply->grant.holders = rec->holders;
            reply->grant.epoch = rec->epoch;
        } else {
            reply->type = PROTO_LEASE_DENY;
            snprintf(reply->deny.endpoint, sizeof(reply->deny.endpoint), "%s", rec->endpoint);
            snprintf(reply->deny.link, sizeof(reply->deny.link), "%s", rec->link);
            reply->deny.scope = (uint8_t)rec->scope;
            reply->deny.flags = (uint8_t)rec->deny_flags;
            reply->deny.retry_after_ms = rec->retry_after_ms;
            reply->deny.limit = rec->limit;
        }
        break;
    case SUP_REC_RETURN:
        reply->type = PROTO_LEASE_RETURN_ACK;
        reply->return_ack.lease_id = rec->report_lease;
        reply->return_ack.credited = rec->credited;
        break;
    case SUP_REC_DEBT:
        reply->type = PROTO_LEASE_HB_ACK;
        reply->hb_ack.epoch = rec->epoch;
        reply->hb_ack.children = rec->holders;
        break;
    case SUP_REC_SLOT_GRANT:
        reply->type = PROTO_LEASE_SLOT_GRANT;
        snprintf(reply->slot_grant.link, sizeof(reply->slot_grant.link), "%s", rec->link);
        reply->slot_grant.slot_id = rec->slot_id;
        reply->slot_grant.ttl_ms = rec->ttl_ms;
        break;
    case SUP_REC_SLOT_RELEASE:
        reply->type = PROTO_LEASE_SLOT_RELEASE_ACK;
        snprintf(reply->slot_release_ack.link, sizeof(reply->slot_release_ack.link), "%s",
                 rec->link);
        reply->slot_release_ack.slot_id = rec->slot_id;
        reply->slot_release_ack.released = true;
        break;
    default:
        break;
    }
}

void
sup__cache_durable(sup_ledger *l, struct sup_peer *peer, const struct sup_record *rec)
{
    struct sup_record *c = &peer->durable[rec->origin.seq % SUP_DEDUPE];

    (void)l;
    /* The record itself, zero-filled plain data: its reply is rebuilt on demand. */
    *c = *rec;
    c->flags &= ~(uint32_t)SUP_RECF_CACHED;
    if (rec->origin.seq > peer->hwm_durable)
        peer->hwm_durable = rec->origin.seq;
}

static int
apply_hello(sup_ledger *l, const struct sup_record *rec)
{
    int pi = sup__peer_find(l, rec->origin.child);
    struct sup_peer *peer;

    if (pi < 0) {
        int rc = sup__peer_room(l);
        if (rc != TALLY_OK)
            return rc;
        peer = tally_calloc(1, sizeof(*peer));
        if (peer == NULL)
            return TALLY_ENOMEM;
        snprintf(peer->name, sizeof(peer->name), "%s", rec->origin.child);
        pi = (int)l->peer_count;
        l->peers[l->peer_count++] = peer;
    }
    peer = l->peers[pi];
    if (rec->origin.incarnation <= peer->incarnation)
        return TALLY_EINVAL;
    /* The older incarnation's leases stay until their deadline: the new one may have resumed
     * them from their rows and report them (sup__lease_reportable); the others expire as
     * spent, never credited. */
    peer->incarnation = rec->origin.incarnation;
    peer->hwm_durable = 0;
    peer->hwm_volatile = 0;
    memset(peer->durable, 0, sizeof(peer->durable));
    memset(peer->volatile_, 0, sizeof(peer->volatile_));
    sup__cache_durable(l, peer, rec);
    return TALLY_OK;
}

/* The requesting child of a record, which must be registered with the record's incarnation. */
static struct sup_peer *
record_peer(const sup_ledger *l, const struct sup_record *rec, int *pi)
{
    *pi = sup__peer_find(l, rec->origin.child);
    if (*pi < 0 || l->peers[*pi]->incarnation != rec->origin.incarnation)
        return NULL;
    return l->peers[*pi];
}

/* Closes the lease a report or RETURN names, as the record says. */
static void
apply_report(sup_ledger *l, const struct sup_record *rec)
{
    struct sup_lease *lease = sup__lease_find(l, rec->report_lease);

    if (lease == NULL || (rec->flags & (SUP_RECF_REPORT_CREDIT | SUP_RECF_REPORT_SPENT)) == 0)
        return;
    lease_close(l, lease, (rec->flags & SUP_RECF_REPORT_CREDIT) ? rec->credited : 0);
}

static int
apply_acquire(sup_ledger *l, const struct sup_record *rec)
{
    struct sup_path p;
    struct sup_lease *lease = NULL;
    int pi, rc = TALLY_OK;
    struct sup_peer *peer = record_peer(l, rec, &pi);
    bool granted = (rec->flags & SUP_RECF_GRANTED) != 0;

    if (peer == NULL)
        return TALLY_EINVAL;
    /* Everything that can fail comes first. */
    if (granted) {
        lease = sup__lease_free_entry(l);
        if (lease == NULL && sup__leases_grow(l) == TALLY_OK)
            lease = sup__lease_free_entry(l);
        if (lease == NULL)
            return TALLY_EFULL;
    }
    if (granted || rec->debt > 0) {
        rc = sup__path_get(l, rec->endpoint, rec->link, &p);
        /* Debt for a link the full table cannot take lands on the wider budgets. */
        if (rc == TALLY_EFULL && !granted)
            rc = TALLY_OK;
        if (rc != TALLY_OK)
            return rc;
    }
    apply_report(l, rec);
    if (rec->debt > 0) {
        rc = sup__path_charge_debt(l, &p, rec->now_ms, rec->debt);
        l->stats.debt_tokens += (uint64_t)rec->debt;
    }
    if (granted && rc == TALLY_OK) {
        /* The report may have closed a lease on this path: look the budgets up again. */
        sup__path_find(l, rec->endpoint, rec->link, &p);
        lease->id = rec->lease_id;
        lease->peer = (uint32_t)pi;
        lease->incarnation = rec->origin.incarnation;
        snprintf(lease->endpoint, sizeof(lease->endpoint), "%s", rec->endpoint);
        lease->link = p.link;
        lease->n = rec->n;
        /* A NEXT lease starts later than the decision: its windows are those of its start. */
        lease->granted_ms =
            (rec->flags & SUP_RECF_NEXT) ? rec->deadline_ms - rec->ttl_ms : rec->now_ms;
        lease->deadline_ms = rec->deadline_ms;
        lease->keep = (rec->flags & SUP_RECF_KEEP) != 0;
        sup__lease_opened(l, lease);
        rc = sup__path_reserve(l, &p, lease, rec->now_ms);
        p.link->leases++;
        peer->leases++;
        l->lease_count++;
        if (rec->lease_id > l->next_lease_id)
            l->next_lease_id = rec->lease_id;
        l->stats.grants++;
        l->stats.grant_tokens += (uint64_t)rec->n;
        if (rec->flags & SUP_RECF_PASS)
            l->stats.pass_grants++;
    } else if (!granted) {
        l->stats.denies++;
    }
    sup__cache_durable(l, peer, rec);
    return rc;
}

static int
apply_debt(sup_ledger *l, const struct sup_record *rec)
{
    struct sup_path p;
    int pi, rc = TALLY_OK;
    struct sup_peer *peer = record_peer(l, rec, &pi);

    if (peer == NULL || rec->count > PROTO_LEASE_HB_MAX)
        return TALLY_EINVAL;
    /* Each entry is charged as soon as its link is found or made. A link made for one entry
     * holds nothing until it is charged, so it is idle, and a full table's next entry could
     * make room by evicting it: charged only after every link was looked up, its debt would
     * land on the wider budgets alone, or not, depending on how far the table had grown (a
     * live ledger and its replay differ there). A failure part way (no memory) stops the
     * supervisor before the record is committed; the replay then never sees the record. */
    for (uint32_t i = 0; i < rec->count && rc == TALLY_OK; i++) {
        rc = sup__path_get(l, rec->endpoint, rec->e[i].link, &p);
        if (rc == TALLY_EFULL)
            rc = TALLY_OK; /* charged on the wider budgets only */
        if (rc == TALLY_OK)
            rc = sup__path_charge_debt(l, &p, rec->now_ms, rec->e[i].debt);
        l->stats.debt_tokens += (uint64_t)rec->e[i].debt;
    }
    if (rc == TALLY_OK)
        sup__cache_durable(l, peer, rec);
    return rc;
}

static int
apply_slot(sup_ledger *l, const struct sup_record *rec)
{
    int pi, rc = TALLY_OK;
    struct sup_peer *peer = record_peer(l, rec, &pi);
    struct sup_link *k;

    if (peer == NULL)
        return TALLY_EINVAL;
    if (rec->kind == SUP_REC_SLOT_GRANT) {
        int64_t id = 0;

        k = sup__link_get(l, rec->link, &rc);
        if (k == NULL)
            return rc;
        rc = sup__slots_ready(l, k);
        if (rc == TALLY_OK && rec->slot_id != l->slot_seq + 1)
            rc = TALLY_EINVAL;
        if (rc != TALLY_OK)
            return rc;
        /* One id counter for the tenant: an evicted link's ids are never handed out again. */
        k->slots.next_id = l->slot_seq;
        rc = tenant_slot_charge(&k->slots, rec->now_ms, rec->ttl_ms, &id);
        if (rc != TALLY_OK)
            return rc;
        l->slot_seq = id;
        l->stats.slot_grants++;
    } else {
        k = sup__link_find(l, rec->link);
        /* Live, the decision released it already; replayed, this releases it. */
        if (k != NULL && k->slot_v != NULL)
            (void)tenant_slot_release(&k->slots, rec->slot_id, rec->now_ms);
        l->stats.slot_releases++;
    }
    sup__cache_durable(l, peer, rec);
    return TALLY_OK;
}

int
sup__apply(sup_ledger *l, const struct sup_record *rec)
{
    struct sup_lease *lease;
    int rc = TALLY_OK;

    if (rec->now_ms > l->now_ms)
        l->now_ms = rec->now_ms;
    if ((rec->flags & SUP_RECF_CACHED) || rec->kind >= SUP_REC_SNAP_LEDGER) {
        rc = sup__apply_snapshot(l, rec);
        if (rc == TALLY_OK)
            l->stats.records++;
        return rc;
    }
    switch (rec->kind) {
    case SUP_REC_HELLO:
        rc = apply_hello(l, rec);
        break;
    case SUP_REC_ACQUIRE:
        rc = apply_acquire(l, rec);
        break;
    case SUP_REC_RETURN: {
        int pi;
        struct sup_peer *peer = record_peer(l, rec, &pi);

        if (peer == NULL)
            return TALLY_EINVAL;
        apply_report(l, rec);
        sup__cache_durable(l, peer, rec);
        break;
    }
    case SUP_REC_DEBT:
        rc = apply_debt(l, rec);
        break;
    case SUP_REC_SLOT_GRANT:
    case SUP_REC_SLOT_RELEASE:
        rc = apply_slot(l, rec);
        break;
    case SUP_REC_EXPIRE:
        lease = sup__lease_find(l, rec->lease_id);
        if (lease != NULL) {
            lease_close(l, lease, 0);
            l->stats.expired++;
        }
        break;
    case SUP_REC_EPOCH:
        l->epoch = rec->epoch;
        break;
    default:
        return TALLY_EINVAL;
    }
    if (rc == TALLY_OK)
        l->stats.records++;
    return rc;
}

static bool
record_names_ok(const struct sup_record *rec)
{
    switch (rec->kind) {
    case SUP_REC_EXPIRE:
    case SUP_REC_EPOCH:
    case SUP_REC_SNAP_LEDGER:
        return true;
    case SUP_REC_SNAP_CELL:
    case SUP_REC_SNAP_PREV:
    case SUP_REC_SNAP_NEXT:
    case SUP_REC_SNAP_GCRA:
        return (rec->endpoint[0] == '\0' || tenant_name_valid(rec->endpoint)) &&
               (rec->link[0] == '\0' || tenant_link_id_valid(rec->link));
    case SUP_REC_SNAP_LEASE:
        return tenant_name_valid(rec->origin.child) && tenant_name_valid(rec->endpoint) &&
               tenant_link_id_valid(rec->link);
    case SUP_REC_SNAP_SLOT:
        return tenant_link_id_valid(rec->link);
    case SUP_REC_ACQUIRE:
        return tenant_name_valid(rec->origin.child) && tenant_link_id_valid(rec->link) &&
               tenant_name_valid(rec->endpoint);
    case SUP_REC_SLOT_GRANT:
    case SUP_REC_SLOT_RELEASE:
        return tenant_name_valid(rec->origin.child) && tenant_link_id_valid(rec->link);
    case SUP_REC_DEBT:
        for (uint32_t i = 0; i < rec->count && i < PROTO_LEASE_HB_MAX; i++) {
            if (!tenant_link_id_valid(rec->e[i].link) || rec->e[i].debt < 0)
                return false;
        }
        return tenant_name_valid(rec->origin.child) && tenant_name_valid(rec->endpoint);
    default:
        return tenant_name_valid(rec->origin.child);
    }
}

int
sup_ledger_replay(sup_ledger *l, const struct sup_record *rec)
{
    if (l == NULL || rec == NULL || rec->version != SUP_RECORD_VERSION || rec->now_ms < 0 ||
        rec->now_ms > TENANT_TIME_MAX_MS || rec->n < 0 || rec->debt < 0 || rec->credited < 0 ||
        rec->ttl_ms < 0 || rec->ttl_ms > PROTO_LEASE_MS_MAX || !record_names_ok(rec))
        return TALLY_EINVAL;
    return sup__apply(l, rec);
}

int
sup__commit(sup_ledger *l, const struct sup_record *rec, struct sup_records *out)
{
    int rc = sup__apply(l, rec);

    if (rc == TALLY_OK)
        out->v[out->count++] = *rec;
    return rc;
}

int
sup_ledger_start(sup_ledger *l, int64_t now_ms, struct sup_records *out)
{
    struct sup_record rec;

    if (l == NULL || now_ms < 0 || now_ms > TENANT_TIME_MAX_MS)
        return TALLY_EINVAL;
    if (out == NULL || out->count >= out->cap)
        return TALLY_ETOOBIG;
    sup__record_init(l, &rec, SUP_REC_EPOCH, NULL, now_ms);
    rec.epoch = l->epoch + 1;
    return sup__commit(l, &rec, out);
}

int
sup_ledger_expire(sup_ledger *l, int64_t now_ms, struct sup_records *out)
{
    int64_t eval_ms;
    int rc = TALLY_OK;

    if (l == NULL || now_ms < 0 || now_ms > TENANT_TIME_MAX_MS || out == NULL)
        return TALLY_EINVAL;
    eval_ms = sup__eval_ms(l, now_ms);
    while (rc == TALLY_OK && out->count < out->cap) {
        struct sup_lease *lease = NULL;
        struct sup_record rec;

        if (!l->exp_lost) {
            lease = sup__expiry_top(l);
        } else {
            for (uint32_t i = 0; i < l->lease_hw && lease == NULL; i++) {
                if (l->leases[i].id != 0 && l->leases[i].deadline_ms + l->margin_ms < eval_ms)
                    lease = &l->leases[i];
            }
        }
        if (lease == NULL || lease->deadline_ms + l->margin_ms >= eval_ms)
            break;
        sup__record_init(l, &rec, SUP_REC_EXPIRE, NULL, now_ms);
        rec.lease_id = lease->id;
        rc = sup__commit(l, &rec, out); /* closes it: its heap entry is dropped as stale */
    }
    return rc;
}

int64_t
sup_ledger_next_expiry_ms(const sup_ledger *l)
{
    int64_t next = sup__expiry_next(l);

    return next == INT64_MAX ? INT64_MAX : next + l->margin_ms + 1;
}

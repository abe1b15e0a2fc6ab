/*
 * Cluster mode: where a child's lease messages go (sup_front_service.h).
 *
 * One member leads the cluster's log; its tallyd runs the tenants' supervisors for every
 * member, so each tenant has one ledger and one authority whatever the number of hosts. A
 * follower's children send their messages to the leader over the cluster (the node's lease
 * link) and get the answers back the same way; the leader's own children use its
 * supervisors directly.
 *
 * A supervisor tells its children apart by name. The children of one endpoint on two hosts
 * are two holders, with incarnations of their own, so in a cluster a child's name at the
 * supervisors carries its member id: "E-hN" (an endpoint name too long for that becomes
 * "x" and 24 hex digits of its hash, then "-hN"). The leader routes an answer by the id in
 * the name, and takes a member's message only for that member's own children.
 */
#include "sup_front_int.h"
#include "sup_manager.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "tally_log.h"

#define ALIAS_HASH_HEX 24

static void
alias_hashed(char out[TENANT_NAME_MAX + 1], const char *e)
{
    unsigned char h[ALIAS_HASH_HEX / 2];

    crypto_generichash(h, sizeof(h), (const unsigned char *)e, strlen(e), NULL, 0);
    out[0] = 'x';
    sodium_bin2hex(out + 1, ALIAS_HASH_HEX + 1, h, sizeof(h));
}

/* The name of this member's child of endpoint e at the supervisors. */
static void
alias_make(char out[TENANT_NAME_MAX + 1], const char *e, uint64_t member)
{
    char suffix[24];
    int sl = snprintf(suffix, sizeof(suffix), "-h%llu", (unsigned long long)member);
    size_t el = strlen(e);

    if (el + (size_t)sl <= TENANT_NAME_MAX) {
        memmove(out, e, el);
    } else {
        alias_hashed(out, e);
        el = 1 + ALIAS_HASH_HEX;
    }
    memcpy(out + el, suffix, (size_t)sl + 1); /* fits: checked, or 25 + at most 22 */
}

/* The member id a name carries ("...-hN", N without leading zeros), and its stem. */
static bool
alias_split(const char *name, uint64_t *member, char stem[TENANT_NAME_MAX + 1])
{
    const char *h = NULL;
    uint64_t id = 0;

    for (const char *p = name; (p = strstr(p, "-h")) != NULL; p++)
        h = p;
    if (h == NULL || h[2] < '1' || h[2] > '9' || strlen(h + 2) > 19)
        return false;
    for (const char *d = h + 2; *d != '\0'; d++) {
        if (*d < '0' || *d > '9')
            return false;
        id = id * 10 + (uint64_t)(*d - '0');
    }
    *member = id;
    snprintf(stem, TENANT_NAME_MAX + 1, "%.*s", (int)(h - name), name);
    return true;
}

/* The endpoint a stem names: itself, or the configured endpoint whose hashed form it is. */
static void
alias_endpoint(const sup_front *f, char stem[TENANT_NAME_MAX + 1])
{
    size_t n = 0;
    const struct tenant_endpoint *eps =
        f->snap != NULL ? store_snapshot_endpoints(f->snap, &n) : NULL;
    char h[TENANT_NAME_MAX + 1];

    if (stem[0] != 'x' || strlen(stem) != 1 + ALIAS_HASH_HEX)
        return;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(eps[i].name, stem) == 0)
            return;
    }
    for (size_t i = 0; i < n; i++) {
        alias_hashed(h, eps[i].name);
        if (strcmp(h, stem) == 0) {
            snprintf(stem, TENANT_NAME_MAX + 1, "%s", eps[i].name);
            return;
        }
    }
}

bool
front_lease_remote(const sup_front *f)
{
    return f->cl_on && !f->cl_leading;
}

bool
front_lease_up(const sup_front *f, const char *tenant)
{
    if (front_lease_remote(f))
        return f->cl_link;
    return sup_manager_is_up(f->mgr, tenant);
}

int
front_lease_send(sup_front *f, const char *tenant, struct proto_lease_msg *m)
{
    size_t len = 0;
    int rc;

    if (f->cl_on) {
        char e[TENANT_NAME_MAX + 1];
        snprintf(e, sizeof(e), "%s", m->origin.child);
        alias_make(m->origin.child, e, f->cl.self);
    }
    if (f->n_firsts > 0 && front_first_take(f, tenant, m, &rc))
        return rc;
    if (proto_lease_encode(m, 0, f->frame, sizeof(f->frame), &len) != TALLY_OK)
        return TALLY_EINVAL;
    if (!front_lease_remote(f))
        return sup_manager_send(f->mgr, tenant, f->frame, len);
    if (!f->cl_link)
        return TALLY_EUNAVAIL;
    return f->cl.send(f->cl.ctx, 0, tenant, f->frame, len);
}

bool
front_lease_route_in(sup_front *f, const char *tenant, struct proto_lease_msg *m)
{
    char stem[TENANT_NAME_MAX + 1];
    uint64_t member = 0;
    size_t len = 0;

    if (!f->cl_on)
        return false;
    if (!alias_split(m->origin.child, &member, stem))
        return true; /* not a cluster child's: nobody to give it to */
    if (member == f->cl.self) {
        alias_endpoint(f, stem);
        snprintf(m->origin.child, sizeof(m->origin.child), "%s", stem);
        return false;
    }
    /* Another member's child: this host leads, the answer goes back over the cluster. A
     * lost one is retransmitted for by the child. */
    if (f->cl_leading &&
        proto_lease_encode(m, 0, f->cl_frame, sizeof(f->cl_frame), &len) == TALLY_OK)
        (void)f->cl.send(f->cl.ctx, member, tenant, f->cl_frame, len);
    return true;
}

/* ---- the node's side ---- */

void
sup_front_cluster_set(sup_front *f, const struct sup_front_cluster *c)
{
    f->cl = *c;
    f->cl_on = true;
    f->cl_leading = false;
    f->cl_link = false;
    sup_manager_hibernate_all(f->mgr); /* a single host's supervisors decide no more */
}

static void
pump_all(sup_front *f)
{
    for (uint32_t i = 0; i < f->n_children; i++)
        front_child_pump_soon(f->children[i]);
}

/* A new way to the supervisors: what is in flight goes again now, not after its backoff (up
 * to a second after an outage). */
static void
resend_all(sup_front *f)
{
    struct sup_time now = front_now();

    for (uint32_t i = 0; i < f->n_children; i++) {
        if (f->children[i]->child != NULL)
            sup_child_resend_now(f->children[i]->child, now);
        front_child_pump_soon(f->children[i]);
    }
}

void
sup_front_cluster_role(sup_front *f, bool leading, bool link_up)
{
    bool was_leading = f->cl_leading, had_link = f->cl_link;
    struct tally_log l;

    if (!f->cl_on)
        return;
    f->cl_leading = leading;
    f->cl_link = !leading && link_up;
    if (was_leading && !leading)
        sup_manager_hibernate_all(f->mgr);
    if (was_leading != leading || had_link != f->cl_link) {
        if (tally_log_begin(&l, TALLY_LOG_INFO, "cluster_leases")) {
            tally_log_str(&l, "from",
                          leading ? "this host's supervisors"
                                  : (f->cl_link ? "the leader" : "nobody (no leader)"));
            tally_log_end(&l);
        }
        resend_all(f); /* what waits goes out now, to where it goes now */
    }
}

/* One frame from the cluster's bytes (whole, nothing after it). */
static int
frame_parse(sup_front *f, const void *bytes, size_t len, struct proto_frame *out)
{
    struct proto_frame_reader r;

    proto_frame_reader_init(&r, f->cl_frame, sizeof(f->cl_frame));
    if (proto_frame_reader_feed(&r, bytes, len) != TALLY_OK ||
        proto_frame_next(&r, out) != TALLY_OK || r.consumed != r.len)
        return TALLY_EPROTO;
    return TALLY_OK;
}

static bool
child_to_sup(uint8_t type)
{
    switch (type) {
    case PROTO_LEASE_HELLO:
    case PROTO_LEASE_ACQUIRE:
    case PROTO_LEASE_RETURN:
    case PROTO_LEASE_HEARTBEAT:
    case PROTO_LEASE_SLOT_ACQUIRE:
    case PROTO_LEASE_SLOT_RELEASE:
        return true;
    default:
        return false;
    }
}

static void
log_refused(uint64_t member, const char *tenant, const char *why)
{
    struct tally_log l;

    if (tally_log_begin(&l, TALLY_LOG_WARN, "cluster_lease_refused")) {
        tally_log_int(&l, "member", (int64_t)member);
        tally_log_str(&l, "tenant", tenant);
        tally_log_str(&l, "why", why);
        tally_log_end(&l);
    }
}

void
sup_front_cluster_frame(sup_front *f, uint64_t member, const char *tenant, const void *bytes,
                        size_t len)
{
    struct proto_frame fr;
    struct proto_lease_msg m;
    char stem[TENANT_NAME_MAX + 1];
    uint64_t named = 0;

    if (!f->cl_on || f->closing || frame_parse(f, bytes, len, &fr) != TALLY_OK)
        return;
    if (member == 0) { /* the leader's answer to this host's children */
        if (!f->cl_leading)
            front_child_on_frame(f, tenant, &fr);
        return;
    }
    /* A member's child asks this host's supervisors: only while this host leads, only for
     * that member's own children and for a tenant the configuration has. */
    if (!f->cl_leading)
        return;
    if (proto_lease_decode(&fr, &m) != TALLY_OK || !child_to_sup(m.type) ||
        !alias_split(m.origin.child, &named, stem) || named != member) {
        log_refused(member, tenant, "not a lease request of that member's children");
        return;
    }
    if (f->snap == NULL || store_snapshot_tenant(f->snap, tenant) == NULL) {
        log_refused(member, tenant, "no such tenant here");
        return;
    }
    (void)sup_manager_send(f->mgr, tenant, bytes, len); /* a failure: the child retransmits */
}

void
sup_front_cluster_down(sup_front *f, const char *tenant)
{
    if (!f->cl_on || f->cl_leading)
        return;
    if (tenant != NULL) {
        front_child_on_down(f, tenant);
        return;
    }
    pump_all(f);
}

/* ---- the supervisors' journals (the leader's) ---- */

static void
journal_answer(sup_front *f, const char *tenant, uint64_t id, bool sync, bool ok)
{
    uint8_t b[PROTO_FRAME_HEADER + 9];

    proto_frame_header(b, sync ? PROTO_JOURNAL_READY : PROTO_JOURNAL_DONE, 0, 0, 9);
    for (int i = 0; i < 8; i++)
        b[PROTO_FRAME_HEADER + i] = (uint8_t)(id >> (56 - 8 * i));
    b[PROTO_FRAME_HEADER + 8] = ok ? 0 : 1;
    (void)sup_manager_send_ctl(f->mgr, tenant, b, sizeof(b)); /* gone: nobody waits */
}

static uint64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

void
front_cluster_journal(sup_front *f, const char *tenant, const struct proto_frame *fr)
{
    bool sync = fr->type == PROTO_JOURNAL_SYNC;
    uint64_t id;
    uint8_t op = 0;
    int rc = TALLY_EUNAVAIL;

    if ((sync && fr->payload_len != 8) ||
        (fr->type == PROTO_JOURNAL_BATCH && fr->payload_len < 9) ||
        (!sync && fr->type != PROTO_JOURNAL_BATCH))
        return; /* not a supervisor's: ignored */
    id = be64(fr->payload);
    if (!sync)
        op = fr->payload[8];
    /* Only the leader's supervisors write: one that runs elsewhere (started before this host
     * lost the lead) hears no and exits. */
    if (f->cl_on && f->cl_leading && (sync || op != 0))
        rc = f->cl.journal(f->cl.ctx, tenant, id, sync, op, sync ? NULL : fr->payload + 9,
                           sync ? 0 : fr->payload_len - 9);
    if (rc != TALLY_OK)
        journal_answer(f, tenant, id, sync, false);
}

void
sup_front_cluster_journal_done(sup_front *f, const char *tenant, uint64_t id, bool sync, int rc)
{
    journal_answer(f, tenant, id, sync, rc == TALLY_OK);
}

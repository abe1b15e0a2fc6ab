/*
 * Lease links: the leader's tallyd runs the supervisors of every tenant, for every member.
 * A follower keeps one channel to the leader on the leader's cluster port (hello
 * CLUSTER_HELLO_LEASE) and sends its children's lease frames over it; the leader answers on
 * the same channel. Leadership decides everything: a follower dials whoever its log says
 * leads (again on every change, and every RECONCILE_MS while it has no link); a member that
 * does not lead refuses lease links and drops those it had when it stops leading, so a
 * deposed leader's supervisors hear from nobody.
 *
 * On the link, after the hello, every message is one of
 *   'F' | tenant length (1) | tenant | one lease frame     a child's frame, or its answer
 *   'D' | tenant length (1) | tenant                       leader: tenant's supervisor went away
 */
#include "cluster_node_int.h"

#include <string.h>

#include "proto_lease.h"
#include "tally_log.h"
#include "tenant.h"

/* The supervisors' BATCH ops are the LEDGER records' (proto_lease.h, cluster_node_int.h). */
_Static_assert(LEDGER_APPEND == PROTO_JOURNAL_APPEND && LEDGER_BEGIN == PROTO_JOURNAL_BEGIN &&
                   LEDGER_CHUNK == PROTO_JOURNAL_CHUNK && LEDGER_END == PROTO_JOURNAL_END,
               "journal ops");

#define LEASE_FRAME   'F'
#define LEASE_DOWN    'D'
#define LEASE_MSG_MAX (2 + TENANT_NAME_MAX + 65536)

static void
tell_role(cluster_node *n)
{
    bool leading = n->lg != NULL && !n->closing && cluster_log_leading(n->lg);
    bool link = !leading && n->lease_out_ready;

    if (n->lease_cbs.on_role == NULL ||
        (n->role_known && n->role_leading == leading && n->role_link == link))
        return;
    n->role_known = true;
    n->role_leading = leading;
    n->role_link = link;
    n->lease_cbs.on_role(n->lease_cbs.ctx, leading, link);
}

/* ---- a follower's link to the leader ---- */

static void
on_out_ready(cluster_conn *c, void *data)
{
    cluster_node *n = data;
    uint8_t hello = CLUSTER_HELLO_LEASE;

    if (cluster_conn_send(c, &hello, 1) != TALLY_OK) {
        cluster_conn_close(c);
        return;
    }
    n->lease_out_ready = true;
    cluster__log_member("cluster_lease_link_up", n->lease_out_to, NULL, NULL);
    tell_role(n);
}

/* A message: its tenant (NUL-terminated into t) and what follows it. */
static int
lease_parse(const uint8_t *msg, size_t len, char t[TENANT_NAME_MAX + 1], const uint8_t **rest,
            size_t *rest_len)
{
    if (len < 2 || msg[1] == 0 || msg[1] > TENANT_NAME_MAX || len < 2 + (size_t)msg[1])
        return TALLY_EPROTO;
    memcpy(t, msg + 2, msg[1]);
    t[msg[1]] = '\0';
    if (!tenant_name_valid(t))
        return TALLY_EPROTO;
    *rest = msg + 2 + msg[1];
    *rest_len = len - 2 - msg[1];
    return TALLY_OK;
}

static void
on_out_msg(cluster_conn *c, const uint8_t *msg, size_t len, void *data)
{
    cluster_node *n = data;
    char tenant[TENANT_NAME_MAX + 1];
    const uint8_t *rest;
    size_t rest_len;

    if (lease_parse(msg, len, tenant, &rest, &rest_len) != TALLY_OK ||
        (msg[0] == LEASE_DOWN && rest_len != 0) ||
        (msg[0] != LEASE_DOWN && msg[0] != LEASE_FRAME)) {
        cluster_conn_close(c);
        return;
    }
    if (n->lease_cbs.on_frame == NULL || n->closing)
        return;
    if (msg[0] == LEASE_FRAME)
        n->lease_cbs.on_frame(n->lease_cbs.ctx, 0, tenant, rest, rest_len);
    else
        n->lease_cbs.on_down(n->lease_cbs.ctx, tenant);
}

static void
on_out_close(cluster_conn *c, int rc, void *data)
{
    cluster_node *n = data;
    bool was_ready = n->lease_out_ready;

    (void)c;
    n->lease_out = NULL;
    n->lease_out_ready = false;
    if (was_ready)
        cluster__log_member("cluster_lease_link_down", n->lease_out_to, NULL, tally_strerror(rc));
    n->lease_out_to = 0;
    if (n->closing) {
        cluster__node_maybe_free(n);
        return;
    }
    if (was_ready && n->lease_cbs.on_down != NULL)
        n->lease_cbs.on_down(n->lease_cbs.ctx, NULL);
    tell_role(n);
}

static const struct cluster_conn_cbs out_cbs = {on_out_ready, on_out_msg, on_out_close, NULL};

static void
dial_leader(cluster_node *n, uint64_t leader)
{
    const struct cluster_member *m = cluster_state_member(&n->st, leader);
    struct cluster_conn_opts o;
    struct sockaddr_storage sa;

    if (m == NULL || cluster_addr_parse(m->address, &sa) != TALLY_OK)
        return; /* not known here yet: the next tick */
    memset(&o, 0, sizeof(o));
    o.self = &n->key;
    o.handshake_ms = 2000;
    o.cbs = &out_cbs;
    o.data = n;
    if (cluster_conn_dial(n->loop, (const struct sockaddr *)&sa, m->pk, &o, &n->lease_out) ==
        TALLY_OK)
        n->lease_out_to = leader;
}

void
cluster__lease_tick(cluster_node *n)
{
    bool leading;
    uint64_t leader;

    if (n->closing || n->lg == NULL)
        return;
    leading = cluster_log_leading(n->lg);
    leader = cluster_log_leader(n->lg);
    if (n->lease_out != NULL && (leading || leader != n->lease_out_to))
        cluster_conn_close(n->lease_out); /* its on_close tells the front */
    if (!leading) {
        for (size_t i = 0; i < CLUSTER_MEMBERS_MAX; i++) {
            if (n->lease_in[i].token != 0)
                cluster_log_lease_close(n->lg, n->lease_in[i].token);
        }
    }
    if (!leading && leader != 0 && leader != n->st.self && n->lease_out == NULL)
        dial_leader(n, leader);
    tell_role(n);
}

bool
cluster__lease_close(cluster_node *n)
{
    if (n->lease_out != NULL)
        cluster_conn_close(n->lease_out);
    return n->lease_out == NULL;
}

/* ---- the leader's side: links from the members ---- */

int
cluster__on_lease_open(void *ctx, uint64_t token, uint64_t member)
{
    cluster_node *n = ctx;

    if (n->closing || !cluster_log_leading(n->lg))
        return TALLY_EUNAVAIL; /* it dials the leader it learns of next */
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX; i++) {
        if (n->lease_in[i].token != 0 && n->lease_in[i].member == member)
            cluster_log_lease_close(n->lg, n->lease_in[i].token); /* its older link */
    }
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX; i++) {
        if (n->lease_in[i].token == 0) {
            n->lease_in[i].token = token;
            n->lease_in[i].member = member;
            return TALLY_OK;
        }
    }
    return TALLY_EUNAVAIL;
}

static size_t
lease_slot(const cluster_node *n, uint64_t token)
{
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX; i++) {
        if (n->lease_in[i].token == token)
            return i;
    }
    return CLUSTER_MEMBERS_MAX;
}

void
cluster__on_lease_msg(void *ctx, uint64_t token, const uint8_t *msg, size_t len)
{
    cluster_node *n = ctx;
    size_t i = lease_slot(n, token);
    char tenant[TENANT_NAME_MAX + 1];
    const uint8_t *rest;
    size_t rest_len;

    if (i == CLUSTER_MEMBERS_MAX)
        return;
    if (msg[0] != LEASE_FRAME || lease_parse(msg, len, tenant, &rest, &rest_len) != TALLY_OK) {
        cluster_log_lease_close(n->lg, token);
        return;
    }
    if (n->lease_cbs.on_frame != NULL && !n->closing && cluster_log_leading(n->lg))
        n->lease_cbs.on_frame(n->lease_cbs.ctx, n->lease_in[i].member, tenant, rest, rest_len);
}

void
cluster__on_lease_close(void *ctx, uint64_t token)
{
    cluster_node *n = ctx;
    size_t i = lease_slot(n, token);

    if (i < CLUSTER_MEMBERS_MAX) {
        n->lease_in[i].token = 0;
        n->lease_in[i].member = 0;
    }
}

/* ---- the front's side ---- */

void
cluster_node_set_lease(cluster_node *n, const struct cluster_lease_cbs *cbs)
{
    n->lease_cbs = *cbs;
    n->role_known = false;
    cluster__lease_tick(n);
}

uint64_t
cluster_node_self(const cluster_node *n)
{
    return n->st.self;
}

static int
lease_put(uint8_t kind, const char *tenant, const uint8_t *frame, size_t len, uint8_t *out,
          size_t *out_len)
{
    size_t tl = strlen(tenant);

    if (tl == 0 || tl > TENANT_NAME_MAX || 2 + tl + len > LEASE_MSG_MAX)
        return TALLY_EINVAL;
    out[0] = kind;
    out[1] = (uint8_t)tl;
    memcpy(out + 2, tenant, tl);
    if (len > 0)
        memcpy(out + 2 + tl, frame, len);
    *out_len = 2 + tl + len;
    return TALLY_OK;
}

int
cluster_node_lease_send(cluster_node *n, uint64_t member, const char *tenant, const uint8_t *frame,
                        size_t len)
{
    static uint8_t b[LEASE_MSG_MAX]; /* loop thread only */
    size_t bl = 0;
    size_t i;

    if (n->closing || lease_put(LEASE_FRAME, tenant, frame, len, b, &bl) != TALLY_OK)
        return TALLY_EUNAVAIL;
    if (member == 0) {
        if (n->lease_out == NULL || !n->lease_out_ready)
            return TALLY_EUNAVAIL;
        return cluster_conn_send(n->lease_out, b, bl) == TALLY_OK ? TALLY_OK : TALLY_EUNAVAIL;
    }
    for (i = 0; i < CLUSTER_MEMBERS_MAX; i++) {
        if (n->lease_in[i].token != 0 && n->lease_in[i].member == member)
            return cluster_log_lease_send(n->lg, n->lease_in[i].token, b, bl) == TALLY_OK
                       ? TALLY_OK
                       : TALLY_EUNAVAIL;
    }
    return TALLY_EUNAVAIL;
}

void
cluster_node_lease_down(cluster_node *n, const char *tenant)
{
    uint8_t b[2 + TENANT_NAME_MAX];
    size_t bl = 0;

    if (n->closing || lease_put(LEASE_DOWN, tenant, NULL, 0, b, &bl) != TALLY_OK)
        return;
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX; i++) {
        if (n->lease_in[i].token != 0)
            (void)cluster_log_lease_send(n->lg, n->lease_in[i].token, b, bl);
    }
}

/* ---- the leader's supervisors' journals, on the log ---- */

#define LEDGER_REC     'J' /* a LEDGER record: 'J' | op | tenant length | tenant | body */
#define LEDGER_BARRIER 'N' /* 'J' 'N': nothing, applied after everything before it */

int
cluster_node_ledger_append(cluster_node *n, const char *tenant, uint8_t op, const uint8_t *body,
                           size_t len, cluster_log_done_fn done, void *req_data)
{
    static uint8_t b[3 + TENANT_NAME_MAX + 65536]; /* loop thread only */
    size_t tl = tenant != NULL ? strlen(tenant) : 0;

    if (n->closing || n->lg == NULL)
        return TALLY_EUNAVAIL;
    b[0] = RECORD_LEDGER; /* 'J' | op | tenant length | tenant | body */
    if (op == 0) {
        b[1] = LEDGER_NOOP; /* nothing, applied after everything before it */
        return cluster_log_append(n->lg, b, 2, done, req_data);
    }
    if (tl == 0 || tl > TENANT_NAME_MAX || len > sizeof(b) - 3 - tl)
        return TALLY_EINVAL;
    b[1] = op;
    b[2] = (uint8_t)tl;
    memcpy(b + 3, tenant, tl);
    if (len > 0)
        memcpy(b + 3 + tl, body, len);
    return cluster_log_append(n->lg, b, 3 + tl + len, done, req_data);
}

/*
 * Requests that come over the cluster port to this host's node (cluster_node_int.h): a
 * stranger's JOIN with an invite, and a member's ADMIN (LEAVE here; CONFIG and CONFIG_WAIT
 * in node_config.c). The leader takes an invite, appends the MEMBER (or LEAVE) record and
 * answers once node.c applies it committed (a JOIN with a copy of tally.db); anything else
 * is refused at once with a reason. Also the bytes of a member as MEMBER records and JOIN
 * answers carry it.
 */
#include "cluster_config_int.h"
#include "cluster_node_int.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "store.h"

/* ---- wire: JOIN, its answer, MEMBER ---- */

void
cluster__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

uint64_t
cluster__get_u64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

size_t
cluster_member_encode(uint8_t *out, const struct cluster_member *m, enum cluster_role role)
{
    size_t al = strlen(m->address);

    cluster__put_u64(out, m->id);
    out[8] = (uint8_t)role;
    out[9] = (uint8_t)al;
    memcpy(out + 10, m->address, al);
    memcpy(out + 10 + al, m->pk, CLUSTER_KEY_BYTES);
    return 10 + al + CLUSTER_KEY_BYTES;
}

int
cluster_member_decode(const uint8_t *p, size_t len, struct cluster_member *m,
                      enum cluster_role *role, size_t *used)
{
    struct sockaddr_storage ss;
    size_t al;

    if (len < 10)
        return TALLY_EPROTO;
    al = p[9];
    if (al == 0 || al >= CLUSTER_ADDR_MAX || len < 10 + al + CLUSTER_KEY_BYTES || p[8] > 1)
        return TALLY_EPROTO;
    memset(m, 0, sizeof(*m));
    m->id = cluster__get_u64(p);
    *role = (enum cluster_role)p[8];
    memcpy(m->address, p + 10, al);
    m->address[al] = '\0';
    memcpy(m->pk, p + 10 + al, CLUSTER_KEY_BYTES);
    if (m->id == 0 || memchr(m->address, '\0', al) != NULL ||
        cluster_addr_parse(m->address, &ss) != TALLY_OK)
        return TALLY_EPROTO;
    *used = 10 + al + CLUSTER_KEY_BYTES;
    return TALLY_OK;
}

/* A refusal to a stranger: status, then a short message. */
void
cluster__join_refuse(cluster_node *n, uint64_t token, uint8_t status, const char *why)
{
    uint8_t b[256];
    size_t ml = strlen(why) < 200 ? strlen(why) : 200;

    b[0] = status;
    b[1] = (uint8_t)ml;
    memcpy(b + 2, why, ml);
    (void)cluster_log_join_answer(n->lg, token, b, 2 + ml);
}

/* Once the stranger's MEMBER record is committed: a copy of tally.db is taken (off the loop),
 * then the answer goes. */
void
cluster__join_accept(cluster_node *n, uint64_t token, uint64_t id)
{
    cluster__config_copy(n, token, id);
}

/* The answer: its id, the deployment key, every member, then the configuration: the applied
 * index of the copy (8), its length (4) and its bytes. */
void
cluster__join_answer(cluster_node *n, uint64_t token, uint64_t id, const uint8_t *config,
                     size_t config_len, uint64_t config_index)
{
    size_t cap =
        64 + CLUSTER_MEMBERS_MAX * (10 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES) + 12 + config_len;
    unsigned char *key = NULL;
    uint8_t *b = NULL;
    size_t off = 0;

    if (store_key_load(n->data, &key) != TALLY_OK || (b = tally_malloc(cap)) == NULL) {
        store_key_free(key);
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY,
                             "the inviting host cannot read its key, or is out of memory");
        return;
    }
    b[off++] = CLUSTER_JOIN_OK;
    cluster__put_u64(b + off, id);
    off += 8;
    memcpy(b + off, key, 32);
    off += 32;
    store_key_free(key);
    b[off++] = (uint8_t)n->st.n;
    for (size_t i = 0; i < n->st.n; i++)
        off += cluster_member_encode(b + off, &n->st.members[i], n->st.roles[i]);
    cluster__put_u64(b + off, config_index);
    off += 8;
    for (int i = 0; i < 4; i++)
        b[off++] = (uint8_t)(config_len >> (24 - 8 * i));
    memcpy(b + off, config, config_len);
    off += config_len;
    (void)cluster_log_join_answer(n->lg, token, b, off);
    sodium_memzero(b, off);
    tally_free(b);
}

/* ---- joins ---- */

bool
cluster__strangers_welcome(void *ctx)
{
    cluster_node *n = ctx;

    return cluster_invites_pending(n->data, cluster__wall_ms());
}

static uint64_t
next_id(const cluster_node *n)
{
    uint64_t id = n->st.next_id > 0 ? n->st.next_id - 1 : 0; /* ids of members who left too */

    for (size_t i = 0; i < n->st.n; i++)
        if (n->st.members[i].id > id)
            id = n->st.members[i].id;
    for (int i = 0; i < JOINS_MAX; i++)
        if (n->joins[i].id > id)
            id = n->joins[i].id;
    return id + 1;
}

static void
on_member_appended(void *req_data, int rc)
{
    (void)req_data;
    (void)rc; /* committed or not, the apply callback is the truth */
}

/* JOIN: secret (32) | role (1) | address length (1) | address. Answered with a refusal at once,
 * or once the MEMBER record is committed (on_apply). */
int
cluster__on_join(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES], const uint8_t *msg,
                 size_t len)
{
    cluster_node *n = ctx;
    struct cluster_member m;
    struct sockaddr_storage ss;
    uint8_t rec[1 + 10 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES];
    enum cluster_role role;
    size_t al, rl;
    int slot = -1, rc;
    char leader[160];

    if (len < 34 || msg[32] > 1 || (al = msg[33]) == 0 || al >= CLUSTER_ADDR_MAX || len != 34 + al)
        return TALLY_EPROTO;
    memset(&m, 0, sizeof(m));
    memcpy(m.address, msg + 34, al);
    m.address[al] = '\0';
    memcpy(m.pk, pk, CLUSTER_KEY_BYTES);
    role = (enum cluster_role)msg[32];
    if (memchr(msg + 34, '\0', al) != NULL || cluster_addr_parse(m.address, &ss) != TALLY_OK)
        return TALLY_EPROTO;
    if (!cluster_log_leading(n->lg)) {
        const struct cluster_member *l = cluster_state_member(&n->st, cluster_log_leader(n->lg));
        snprintf(leader, sizeof(leader), "not the leader now: invite from the leader (%s)",
                 l != NULL ? l->address : "none elected");
        cluster__join_refuse(n, token, CLUSTER_JOIN_NOT_LEADER, leader);
        return TALLY_OK;
    }
    for (size_t i = 0; i < n->st.n; i++)
        if (strcmp(n->st.members[i].address, m.address) == 0 ||
            sodium_memcmp(n->st.members[i].pk, m.pk, CLUSTER_KEY_BYTES) == 0) {
            cluster__join_refuse(n, token, CLUSTER_JOIN_CONFLICT,
                                 "a member has this address or key");
            return TALLY_OK;
        }
    for (int i = 0; i < JOINS_MAX && slot < 0; i++)
        if (n->joins[i].token == 0)
            slot = i;
    if (slot < 0 || n->st.n >= CLUSTER_MEMBERS_MAX) {
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY, "too many members or joins at once");
        return TALLY_OK;
    }
    if (!cluster__config_fits(n, leader, sizeof(leader))) { /* before the invite is used */
        cluster__join_refuse(n, token, CLUSTER_JOIN_REFUSED, leader);
        return TALLY_OK;
    }
    rc = cluster_invite_take(n->data, msg, cluster__wall_ms());
    if (rc != TALLY_OK) {
        cluster__log_member("cluster_join_refused", 0, m.address,
                            "unknown, used or expired invite");
        cluster__join_refuse(n, token, CLUSTER_JOIN_REFUSED, "unknown, used or expired invite");
        return TALLY_OK;
    }
    m.id = next_id(n);
    rec[0] = RECORD_MEMBER;
    rl = 1 + cluster_member_encode(rec + 1, &m, role);
    rc = cluster_log_append(n->lg, rec, rl, on_member_appended, NULL);
    if (rc != TALLY_OK) {
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY, "the log did not take the new member");
        return TALLY_OK;
    }
    n->joins[slot].token = token;
    n->joins[slot].id = m.id;
    cluster__log_member("cluster_join", m.id, m.address, cluster_role_name(role));
    return TALLY_OK;
}

/* ADMIN from a member: LEAVE (1) | id (8). Refused at once, or answered once the LEAVE
 * record is committed (apply_leave). */
int
cluster__on_admin(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES],
                  const uint8_t *msg, size_t len)
{
    cluster_node *n = ctx;
    uint8_t rec[9];
    uint64_t id;
    size_t voters = 0;
    int slot = -1;
    char why[160];

    (void)pk;
    if (len >= 1 && (msg[0] == ADMIN_CONFIG || msg[0] == ADMIN_CONFIG_WAIT))
        return cluster__config_admin(n, token, msg, len);
    if (len != 9 || msg[0] != ADMIN_LEAVE)
        return TALLY_EPROTO;
    id = cluster__get_u64(msg + 1);
    if (!cluster_log_leading(n->lg)) {
        cluster__join_refuse(n, token, CLUSTER_JOIN_NOT_LEADER, "not the leader now: try again");
        return TALLY_OK;
    }
    if (cluster_state_member(&n->st, id) == NULL) {
        snprintf(why, sizeof(why), "no member %llu", (unsigned long long)id);
        cluster__join_refuse(n, token, CLUSTER_JOIN_CONFLICT, why);
        return TALLY_OK;
    }
    if (id == n->st.self) {
        snprintf(why, sizeof(why),
                 "member %llu leads: stop its tallyd so that another leads, then remove it",
                 (unsigned long long)id);
        cluster__join_refuse(n, token, CLUSTER_JOIN_CONFLICT, why);
        return TALLY_OK;
    }
    for (size_t i = 0; i < n->st.n; i++)
        voters += n->st.roles[i] == CLUSTER_ROLE_VOTER && n->st.members[i].id != id;
    for (int i = 0; i < JOINS_MAX && slot < 0; i++)
        if (n->leaves[i].token == 0)
            slot = i;
    if (voters == 0 || slot < 0) {
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY,
                             voters == 0 ? "the last voter cannot leave"
                                         : "too many requests at once");
        return TALLY_OK;
    }
    rec[0] = RECORD_LEAVE;
    memcpy(rec + 1, msg + 1, 8);
    if (cluster_log_append(n->lg, rec, sizeof(rec), on_member_appended, NULL) != TALLY_OK) {
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY, "the log did not take the change");
        return TALLY_OK;
    }
    n->leaves[slot].token = token;
    n->leaves[slot].id = id;
    cluster__log_member("cluster_leave", id, NULL, NULL);
    return TALLY_OK;
}

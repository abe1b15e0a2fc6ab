/*
 * Joining a cluster from the new host's side (cluster_node.h): the join code
 * (the inviting host's address and key, a one-time secret), and the one
 * exchange over the host channel: JOIN out, the answer back, on a loop of its
 * own. The new host proves its freshly made key like any member; the inviting
 * host lets it in only to say JOIN, and only while an invite is outstanding.
 */
#include "cluster_node.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define CODE_PREFIX "tlyj1-"
#define CODE_RAW    (1 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES + 32)

void
cluster_invite_code(const struct cluster_invite *inv, char *out, size_t cap)
{
    uint8_t raw[CODE_RAW];
    size_t al = strlen(inv->address), n = 0;
    char b64[sodium_base64_ENCODED_LEN(CODE_RAW, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];

    raw[n++] = (uint8_t)al;
    memcpy(raw + n, inv->address, al);
    n += al;
    memcpy(raw + n, inv->pk, CLUSTER_KEY_BYTES);
    n += CLUSTER_KEY_BYTES;
    memcpy(raw + n, inv->secret, 32);
    n += 32;
    sodium_bin2base64(b64, sizeof(b64), raw, n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    snprintf(out, cap, CODE_PREFIX "%s", b64);
    sodium_memzero(raw, sizeof(raw));
    sodium_memzero(b64, sizeof(b64));
}

int
cluster_invite_parse(const char *code, struct cluster_invite *out)
{
    uint8_t raw[CODE_RAW];
    size_t n = 0, al;
    const char *end = NULL;
    struct sockaddr_storage ss;
    int rc = TALLY_EINVAL;

    memset(out, 0, sizeof(*out));
    if (code == NULL || strncmp(code, CODE_PREFIX, strlen(CODE_PREFIX)) != 0)
        return TALLY_EINVAL;
    code += strlen(CODE_PREFIX);
    if (sodium_base642bin(raw, sizeof(raw), code, strlen(code), NULL, &n, &end,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
        *end != '\0' || n < 1)
        goto out;
    al = raw[0];
    if (al == 0 || al >= CLUSTER_ADDR_MAX || n != 1 + al + CLUSTER_KEY_BYTES + 32)
        goto out;
    memcpy(out->address, raw + 1, al);
    out->address[al] = '\0';
    if (memchr(out->address, '\0', al) != NULL || cluster_addr_parse(out->address, &ss) != TALLY_OK)
        goto out;
    memcpy(out->pk, raw + 1 + al, CLUSTER_KEY_BYTES);
    memcpy(out->secret, raw + 1 + al + CLUSTER_KEY_BYTES, 32);
    rc = TALLY_OK;
out:
    sodium_memzero(raw, sizeof(raw));
    if (rc != TALLY_OK)
        sodium_memzero(out, sizeof(*out));
    return rc;
}

/* ---- the exchange ---- */

struct join_run {
    const struct cluster_invite *inv;
    const char *listen;
    enum cluster_role role;
    struct cluster_join_result *out;
    uv_timer_t timer;
    cluster_conn *conn;
    int rc;
    bool answered, closed;
};

static int
decode_answer(const uint8_t *p, size_t len, struct cluster_join_result *out)
{
    size_t off = 0;

    if (len < 1)
        return TALLY_EPROTO;
    if (p[0] != CLUSTER_JOIN_OK) {
        size_t ml = len >= 2 ? p[1] : 0;
        if (len != 2 + ml)
            return TALLY_EPROTO;
        snprintf(out->message, sizeof(out->message), "%.*s", (int)ml, (const char *)p + 2);
        return TALLY_EUNAUTH;
    }
    if (len < 1 + 8 + 32 + 1)
        return TALLY_EPROTO;
    off = 1;
    out->id = 0;
    for (int i = 0; i < 8; i++)
        out->id = out->id << 8 | p[off + (size_t)i];
    off += 8;
    memcpy(out->deployment_key, p + off, 32);
    off += 32;
    out->st.n = 0;
    out->st.self = out->id;
    for (unsigned k = p[off++]; k > 0; k--) {
        size_t used = 0;
        if (out->st.n == CLUSTER_MEMBERS_MAX ||
            cluster_member_decode(p + off, len - off, &out->st.members[out->st.n],
                                  &out->st.roles[out->st.n], &used) != TALLY_OK)
            return TALLY_EPROTO;
        out->st.n++;
        off += used;
    }
    if (off != len || cluster_state_member(&out->st, out->id) == NULL)
        return TALLY_EPROTO;
    return TALLY_OK;
}

static void
on_ready(cluster_conn *c, void *data)
{
    struct join_run *j = data;
    uint8_t b[1 + 32 + 2 + CLUSTER_ADDR_MAX];
    size_t al = strlen(j->listen);

    b[0] = CLUSTER_HELLO_JOIN;
    memcpy(b + 1, j->inv->secret, 32);
    b[33] = (uint8_t)j->role;
    b[34] = (uint8_t)al;
    memcpy(b + 35, j->listen, al);
    if (cluster_conn_send(c, b, 35 + al) != TALLY_OK) {
        j->rc = TALLY_EUNAVAIL;
        cluster_conn_close(c);
    }
    sodium_memzero(b, sizeof(b));
}

static void
on_msg(cluster_conn *c, const uint8_t *msg, size_t len, void *data)
{
    struct join_run *j = data;

    j->answered = true;
    j->rc = decode_answer(msg, len, j->out);
    cluster_conn_close(c);
}

static void
on_close(cluster_conn *c, int rc, void *data)
{
    struct join_run *j = data;

    (void)c;
    j->conn = NULL;
    j->closed = true;
    if (!j->answered && rc == TALLY_EUNAVAIL) {
        j->rc = TALLY_EUNAVAIL; /* nobody listens at the inviting host's address */
    } else if (!j->answered) {
        /* Connected, then cut before an answer: the inviting host let this key in only while
         * an invite of its own was outstanding, or its key is not the code's. */
        j->rc = TALLY_EUNAUTH;
        snprintf(j->out->message, sizeof(j->out->message),
                 "the inviting host did not let this host in: the code is used or expired, "
                 "or that host is not the one that made it");
    }
    uv_close((uv_handle_t *)&j->timer, NULL);
}

static void
on_timeout(uv_timer_t *t)
{
    struct join_run *j = t->data;

    if (j->conn != NULL)
        cluster_conn_close(j->conn);
}

static const struct cluster_conn_cbs join_cbs = {on_ready, on_msg, on_close};

int
cluster_join(const struct cluster_invite *inv, const struct cluster_hostkey *key,
             const char *listen, enum cluster_role role, uint32_t timeout_ms,
             struct cluster_join_result *out)
{
    struct cluster_conn_opts o = {key, timeout_ms, &join_cbs, NULL};
    struct sockaddr_storage ss;
    struct join_run j;
    uv_loop_t loop;
    int rc;

    memset(out, 0, sizeof(*out));
    memset(&j, 0, sizeof(j));
    if (cluster_addr_parse(inv->address, &ss) != TALLY_OK || strlen(listen) >= CLUSTER_ADDR_MAX)
        return TALLY_EINVAL;
    if (uv_loop_init(&loop) != 0)
        return TALLY_EUNAVAIL;
    j.inv = inv;
    j.listen = listen;
    j.role = role;
    j.out = out;
    j.rc = TALLY_EUNAVAIL;
    o.data = &j;
    uv_timer_init(&loop, &j.timer);
    j.timer.data = &j;
    rc = cluster_conn_dial(&loop, (const struct sockaddr *)&ss, inv->pk, &o, &j.conn);
    if (rc != TALLY_OK) {
        uv_close((uv_handle_t *)&j.timer, NULL);
        j.rc = rc;
    } else {
        uv_timer_start(&j.timer, on_timeout, timeout_ms, 0);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0 && j.rc == TALLY_OK)
        j.rc = TALLY_EUNAVAIL;
    return j.rc;
}

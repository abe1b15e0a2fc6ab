/*
 * Joining a cluster from the new host's side (cluster_node.h): the join code
 * (the inviting host's address and key, a one-time secret), and the one
 * exchange over the host channel: JOIN out, the answer back, on a loop of its
 * own. The new host proves its freshly made key like any member; the inviting
 * host lets it in only to say JOIN, and only while an invite is outstanding;
 * the answer brings the members, the deployment key and a copy of tally.db.
 * Also a member's ADMIN requests, each one exchange the same way: LEAVE, and
 * CONFIG (a change command's changeset to the leader) and CONFIG_WAIT (until a
 * member applied it).
 */
#include "cluster_config_int.h"
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
    {
        /* Canonical only: the code prints back to itself (no stray bits, no other spelling
         * of the same bytes). */
        char again[2 * CODE_RAW];

        cluster_invite_code(out, again, sizeof(again));
        rc = strcmp(again + strlen(CODE_PREFIX), code) == 0 ? TALLY_OK : TALLY_EINVAL;
        sodium_memzero(again, sizeof(again));
    }
out:
    sodium_memzero(raw, sizeof(raw));
    if (rc != TALLY_OK)
        sodium_memzero(out, sizeof(*out));
    return rc;
}

/* ---- one request, one answer ---- */

struct ask_run {
    const uint8_t *req;
    size_t req_len;
    uint8_t *answer;
    size_t answer_cap, answer_len;
    uv_timer_t timer;
    cluster_conn *conn;
    int rc;
    bool answered;
};

static void
on_ready(cluster_conn *c, void *data)
{
    struct ask_run *a = data;

    if (cluster_conn_send(c, a->req, a->req_len) != TALLY_OK) {
        a->rc = TALLY_EUNAVAIL;
        cluster_conn_close(c);
    }
}

static void
on_msg(cluster_conn *c, const uint8_t *msg, size_t len, void *data)
{
    struct ask_run *a = data;

    if (!a->answered && len <= a->answer_cap) {
        memcpy(a->answer, msg, len);
        a->answer_len = len;
        a->answered = true;
        a->rc = TALLY_OK;
    } else if (!a->answered) {
        a->rc = TALLY_EPROTO;
    }
    cluster_conn_close(c);
}

static void
on_close(cluster_conn *c, int rc, void *data)
{
    struct ask_run *a = data;

    (void)c;
    a->conn = NULL;
    if (!a->answered && a->rc != TALLY_EPROTO)
        /* Nobody listens there (EUNAVAIL), or connected and cut before an answer: the
         * host did not let this key in (EUNAUTH). */
        a->rc = rc == TALLY_EUNAVAIL || rc == TALLY_ETIMEDOUT ? TALLY_EUNAVAIL : TALLY_EUNAUTH;
    uv_close((uv_handle_t *)&a->timer, NULL);
}

static void
on_timeout(uv_timer_t *t)
{
    struct ask_run *a = t->data;

    if (a->conn != NULL)
        cluster_conn_close(a->conn);
}

static const struct cluster_conn_cbs ask_cbs = {on_ready, on_msg, on_close, NULL};

/* Dials address (whose key is pk) as `key`, sends req, waits for one answer (timeout_ms at
 * most) into answer (cap bytes): TALLY_OK (*answer_len set), TALLY_EUNAUTH (not let in),
 * TALLY_EUNAVAIL (no answer) or TALLY_EPROTO. */
static int
ask(const char *address, const uint8_t pk[CLUSTER_KEY_BYTES], const struct cluster_hostkey *key,
    const uint8_t *req, size_t req_len, uint32_t timeout_ms, uint8_t *answer, size_t cap,
    size_t *answer_len)
{
    struct cluster_conn_opts o = {key, timeout_ms, &ask_cbs, NULL};
    struct sockaddr_storage ss;
    struct ask_run a;
    uv_loop_t loop;

    memset(&a, 0, sizeof(a));
    *answer_len = 0;
    if (cluster_addr_parse(address, &ss) != TALLY_OK)
        return TALLY_EINVAL;
    if (uv_loop_init(&loop) != 0)
        return TALLY_EUNAVAIL;
    a.req = req;
    a.req_len = req_len;
    a.answer = answer;
    a.answer_cap = cap;
    a.rc = TALLY_EUNAVAIL;
    o.data = &a;
    uv_timer_init(&loop, &a.timer);
    a.timer.data = &a;
    if (cluster_conn_dial(&loop, (const struct sockaddr *)&ss, pk, &o, &a.conn) != TALLY_OK)
        uv_close((uv_handle_t *)&a.timer, NULL);
    else
        uv_timer_start(&a.timer, on_timeout, timeout_ms, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0 && a.rc == TALLY_OK)
        a.rc = TALLY_EUNAVAIL;
    *answer_len = a.answer_len;
    return a.rc;
}

/* A refusal's text into out->message; TALLY_EUNAUTH, or TALLY_EPROTO if malformed. */
static int
refusal(const uint8_t *p, size_t len, char *msg, size_t cap)
{
    size_t ml = len >= 2 ? p[1] : 0;

    if (len != 2 + ml)
        return TALLY_EPROTO;
    snprintf(msg, cap, "%.*s", (int)ml, (const char *)p + 2);
    return TALLY_EUNAUTH;
}

/* After the members: the applied index of the copy (8), its length (4) and tally.db's bytes. */
static int
decode_config(const uint8_t *p, size_t len, struct cluster_join_result *out)
{
    size_t n = 0;

    if (len < 12)
        return TALLY_EPROTO;
    out->config_index = 0;
    for (int i = 0; i < 8; i++)
        out->config_index = out->config_index << 8 | p[i];
    for (int i = 8; i < 12; i++)
        n = n << 8 | p[i];
    if (n != len - 12 || n == 0)
        return TALLY_EPROTO;
    out->config = tally_malloc(n);
    if (out->config == NULL)
        return TALLY_ENOMEM;
    memcpy(out->config, p + 12, n);
    out->config_len = n;
    return TALLY_OK;
}

static int
decode_answer(const uint8_t *p, size_t len, struct cluster_join_result *out)
{
    size_t off = 0;

    if (len < 1)
        return TALLY_EPROTO;
    if (p[0] != CLUSTER_JOIN_OK)
        return refusal(p, len, out->message, sizeof(out->message));
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
    if (off > len || cluster_state_member(&out->st, out->id) == NULL)
        return TALLY_EPROTO;
    return decode_config(p + off, len - off, out);
}

int
cluster_join(const struct cluster_invite *inv, const struct cluster_hostkey *key,
             const char *listen, enum cluster_role role, uint32_t timeout_ms,
             struct cluster_join_result *out)
{
    uint8_t req[1 + 32 + 2 + CLUSTER_ADDR_MAX];
    uint8_t *answer = NULL; /* the members and a copy of tally.db: one channel message */
    size_t al = strlen(listen), n = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    if (al == 0 || al >= CLUSTER_ADDR_MAX)
        return TALLY_EINVAL;
    answer = tally_malloc(CLUSTER_CHAN_MSG_MAX);
    if (answer == NULL)
        return TALLY_ENOMEM;
    req[0] = CLUSTER_HELLO_JOIN;
    memcpy(req + 1, inv->secret, 32);
    req[33] = (uint8_t)role;
    req[34] = (uint8_t)al;
    memcpy(req + 35, listen, al);
    rc =
        ask(inv->address, inv->pk, key, req, 35 + al, timeout_ms, answer, CLUSTER_CHAN_MSG_MAX, &n);
    sodium_memzero(req, sizeof(req));
    if (rc == TALLY_OK)
        rc = decode_answer(answer, n, out);
    else if (rc == TALLY_EUNAUTH)
        snprintf(out->message, sizeof(out->message),
                 "the inviting host did not let this host in: the code is used or expired, "
                 "or that host is not the one that made it");
    sodium_memzero(answer, n);
    tally_free(answer);
    if (rc != TALLY_OK)
        cluster_join_result_release(out);
    return rc;
}

void
cluster_join_result_release(struct cluster_join_result *r)
{
    tally_free(r->config);
    r->config = NULL;
    r->config_len = 0;
}

int
cluster_admin_leave(const struct cluster_member *leader, const struct cluster_hostkey *key,
                    uint64_t id, uint32_t timeout_ms, char *message, size_t cap)
{
    uint8_t req[10], answer[256];
    size_t n = 0;
    int rc;

    message[0] = '\0';
    req[0] = CLUSTER_HELLO_ADMIN;
    req[1] = 1; /* LEAVE */
    for (int i = 0; i < 8; i++)
        req[2 + i] = (uint8_t)(id >> (56 - 8 * i));
    rc = ask(leader->address, leader->pk, key, req, sizeof(req), timeout_ms, answer, sizeof(answer),
             &n);
    if (rc == TALLY_OK && (n < 1 || answer[0] != CLUSTER_JOIN_OK))
        rc = n >= 1 ? refusal(answer, n, message, cap) : TALLY_EPROTO;
    else if (rc == TALLY_EUNAUTH)
        snprintf(message, cap, "the leader did not let this host in: is it still a member?");
    return rc;
}

/* ---- the configuration: a change to the leader, its apply on a member ---- */

int
cluster_admin_config(const struct cluster_member *m, const struct cluster_hostkey *key,
                     const uint8_t *changeset, size_t len, uint32_t timeout_ms, uint64_t *index,
                     char *message, size_t cap)
{
    uint8_t *req = NULL, answer[256];
    size_t n = 0;
    int rc;

    *index = 0;
    message[0] = '\0';
    if (len == 0 || len > CLUSTER_CONFIG_MAX)
        return TALLY_ETOOBIG;
    req = tally_malloc(2 + len);
    if (req == NULL)
        return TALLY_ENOMEM;
    req[0] = CLUSTER_HELLO_ADMIN;
    req[1] = ADMIN_CONFIG;
    memcpy(req + 2, changeset, len);
    rc = ask(m->address, m->pk, key, req, 2 + len, timeout_ms, answer, sizeof(answer), &n);
    tally_free(req);
    if (rc == TALLY_OK && n == 9 && answer[0] == CLUSTER_JOIN_OK) {
        for (int i = 1; i < 9; i++)
            *index = *index << 8 | answer[i];
        return TALLY_OK;
    }
    if (rc == TALLY_OK && n >= 1 && answer[0] != CLUSTER_JOIN_OK) {
        rc = refusal(answer, n, message, cap);
        if (rc == TALLY_EUNAUTH && answer[0] == CLUSTER_JOIN_NOT_LEADER)
            rc = TALLY_EBUSY;
        else if (rc == TALLY_EUNAUTH && answer[0] == CLUSTER_JOIN_BUSY)
            rc = TALLY_EUNAVAIL; /* it took the change and lost its majority, or was full */
        return rc;
    }
    if (rc == TALLY_OK)
        return TALLY_EPROTO;
    if (rc == TALLY_EUNAUTH)
        snprintf(message, cap, "%s did not let this host in: is it still a member?", m->address);
    return rc;
}

int
cluster_admin_config_wait(const struct cluster_member *m, const struct cluster_hostkey *key,
                          uint64_t index, uint32_t timeout_ms)
{
    uint8_t req[10], answer[256];
    size_t n = 0;
    int rc;

    req[0] = CLUSTER_HELLO_ADMIN;
    req[1] = ADMIN_CONFIG_WAIT;
    for (int i = 0; i < 8; i++)
        req[2 + i] = (uint8_t)(index >> (56 - 8 * i));
    rc = ask(m->address, m->pk, key, req, sizeof(req), timeout_ms, answer, sizeof(answer), &n);
    if (rc == TALLY_OK && (n != 9 || answer[0] != CLUSTER_JOIN_OK))
        rc = n >= 1 && answer[0] != CLUSTER_JOIN_OK ? TALLY_EUNAVAIL : TALLY_EPROTO;
    return rc;
}

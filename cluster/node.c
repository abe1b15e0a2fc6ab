/*
 * tallyd's place in its cluster (cluster_node.h): the files, the log, the
 * status, and membership. A stranger with an invite asks to join (JOIN over
 * the cluster port): the leader takes the invite, appends a MEMBER record
 * (id, address, role, static key) and, once it is committed, answers with the
 * member id, the deployment key and the members. Every member applies MEMBER
 * records to its member list (the keys it lets in). The leader then brings
 * the log's configuration in line with the member list, one change at a time:
 * a new member is added, then made a voter once it caught up (a front: a
 * standby, which replicates but never votes).
 */
#include "cluster_node.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "store.h"
#include "tally_log.h"

#define RECORD_MEMBER 'M'
#define RECORD_LEAVE  'L'
#define ADMIN_LEAVE   1
#define RECONCILE_MS  500
#define JOINS_MAX     4
/* A member that left stays in the log's configuration this long after its LEAVE applied here,
 * so that heartbeats carry the commit to it and it learns it left. */
#define REMOVE_GRACE_MS 1500

struct pending_join {
    uint64_t token; /* the stranger's connection */
    uint64_t id;    /* the member id it will get */
};

struct cluster_node {
    char data[512];
    struct cluster_state st;
    struct cluster_hostkey key;
    cluster_log *lg;
    struct cluster_net_hooks hooks;
    uv_timer_t reconcile;
    bool change_busy;
    struct pending_join joins[JOINS_MAX];
    struct pending_join leaves[JOINS_MAX]; /* ADMIN leave requests waiting for their commit */
    struct {
        uint64_t id;
        uint64_t at_ms; /* uv_now when its LEAVE applied */
    } departed[JOINS_MAX];
    uv_loop_t *loop;
    void (*close_cb)(void *data);
    void *close_data;
};

static int64_t
wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
log_member(const char *event, uint64_t id, const char *address, const char *detail)
{
    struct tally_log l;

    if (tally_log_begin(&l, TALLY_LOG_INFO, event)) {
        tally_log_int(&l, "member", (int64_t)id);
        if (address != NULL)
            tally_log_str(&l, "address", address);
        if (detail != NULL)
            tally_log_str(&l, "detail", detail);
        tally_log_end(&l);
    }
}

/* ---- wire: JOIN, its answer, MEMBER ---- */

static void
put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t
get_u64(const uint8_t *p)
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

    put_u64(out, m->id);
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
    m->id = get_u64(p);
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
static void
join_refuse(cluster_node *n, uint64_t token, uint8_t status, const char *why)
{
    uint8_t b[256];
    size_t ml = strlen(why) < 200 ? strlen(why) : 200;

    b[0] = status;
    b[1] = (uint8_t)ml;
    memcpy(b + 2, why, ml);
    (void)cluster_log_join_answer(n->lg, token, b, 2 + ml);
}

/* The answer once the stranger's MEMBER record is committed: its id, the deployment key and
 * every member. */
static void
join_accept(cluster_node *n, uint64_t token, uint64_t id)
{
    uint8_t b[64 + CLUSTER_MEMBERS_MAX * (10 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES)];
    unsigned char *key = NULL;
    size_t off = 0;

    if (store_key_load(n->data, &key) != TALLY_OK) {
        join_refuse(n, token, CLUSTER_JOIN_BUSY, "the inviting host cannot read its key");
        return;
    }
    b[off++] = CLUSTER_JOIN_OK;
    put_u64(b + off, id);
    off += 8;
    memcpy(b + off, key, 32);
    off += 32;
    store_key_free(key);
    b[off++] = (uint8_t)n->st.n;
    for (size_t i = 0; i < n->st.n; i++)
        off += cluster_member_encode(b + off, &n->st.members[i], n->st.roles[i]);
    (void)cluster_log_join_answer(n->lg, token, b, off);
    sodium_memzero(b, sizeof(b));
}

/* ---- joins ---- */

static bool
strangers_welcome(void *ctx)
{
    cluster_node *n = ctx;

    return cluster_invites_pending(n->data, wall_ms());
}

static uint64_t
next_id(const cluster_node *n)
{
    uint64_t id = 0;

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
static int
on_join(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES], const uint8_t *msg,
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
        join_refuse(n, token, CLUSTER_JOIN_NOT_LEADER, leader);
        return TALLY_OK;
    }
    for (size_t i = 0; i < n->st.n; i++)
        if (strcmp(n->st.members[i].address, m.address) == 0 ||
            sodium_memcmp(n->st.members[i].pk, m.pk, CLUSTER_KEY_BYTES) == 0) {
            join_refuse(n, token, CLUSTER_JOIN_CONFLICT, "a member has this address or key");
            return TALLY_OK;
        }
    for (int i = 0; i < JOINS_MAX && slot < 0; i++)
        if (n->joins[i].token == 0)
            slot = i;
    if (slot < 0 || n->st.n >= CLUSTER_MEMBERS_MAX) {
        join_refuse(n, token, CLUSTER_JOIN_BUSY, "too many members or joins at once");
        return TALLY_OK;
    }
    rc = cluster_invite_take(n->data, msg, wall_ms());
    if (rc != TALLY_OK) {
        log_member("cluster_join_refused", 0, m.address, "unknown, used or expired invite");
        join_refuse(n, token, CLUSTER_JOIN_REFUSED, "unknown, used or expired invite");
        return TALLY_OK;
    }
    m.id = next_id(n);
    rec[0] = RECORD_MEMBER;
    rl = 1 + cluster_member_encode(rec + 1, &m, role);
    rc = cluster_log_append(n->lg, rec, rl, on_member_appended, NULL);
    if (rc != TALLY_OK) {
        join_refuse(n, token, CLUSTER_JOIN_BUSY, "the log did not take the new member");
        return TALLY_OK;
    }
    n->joins[slot].token = token;
    n->joins[slot].id = m.id;
    log_member("cluster_join", m.id, m.address, cluster_role_name(role));
    return TALLY_OK;
}

/* ADMIN from a member: LEAVE (1) | id (8). Refused at once, or answered once the LEAVE
 * record is committed (apply_leave). */
static int
on_admin(void *ctx, uint64_t token, const uint8_t pk[CLUSTER_KEY_BYTES], const uint8_t *msg,
         size_t len)
{
    cluster_node *n = ctx;
    uint8_t rec[9];
    uint64_t id;
    size_t voters = 0;
    int slot = -1;
    char why[160];

    (void)pk;
    if (len != 9 || msg[0] != ADMIN_LEAVE)
        return TALLY_EPROTO;
    id = get_u64(msg + 1);
    if (!cluster_log_leading(n->lg)) {
        join_refuse(n, token, CLUSTER_JOIN_NOT_LEADER, "not the leader now: try again");
        return TALLY_OK;
    }
    if (cluster_state_member(&n->st, id) == NULL) {
        snprintf(why, sizeof(why), "no member %llu", (unsigned long long)id);
        join_refuse(n, token, CLUSTER_JOIN_CONFLICT, why);
        return TALLY_OK;
    }
    if (id == n->st.self) {
        snprintf(why, sizeof(why),
                 "member %llu leads: stop its tallyd so that another leads, then remove it",
                 (unsigned long long)id);
        join_refuse(n, token, CLUSTER_JOIN_CONFLICT, why);
        return TALLY_OK;
    }
    for (size_t i = 0; i < n->st.n; i++)
        voters += n->st.roles[i] == CLUSTER_ROLE_VOTER && n->st.members[i].id != id;
    for (int i = 0; i < JOINS_MAX && slot < 0; i++)
        if (n->leaves[i].token == 0)
            slot = i;
    if (voters == 0 || slot < 0) {
        join_refuse(n, token, CLUSTER_JOIN_BUSY,
                    voters == 0 ? "the last voter cannot leave" : "too many requests at once");
        return TALLY_OK;
    }
    rec[0] = RECORD_LEAVE;
    memcpy(rec + 1, msg + 1, 8);
    if (cluster_log_append(n->lg, rec, sizeof(rec), on_member_appended, NULL) != TALLY_OK) {
        join_refuse(n, token, CLUSTER_JOIN_BUSY, "the log did not take the change");
        return TALLY_OK;
    }
    n->leaves[slot].token = token;
    n->leaves[slot].id = id;
    log_member("cluster_leave", id, NULL, NULL);
    return TALLY_OK;
}

/* ---- the log's configuration follows the member list (leader) ---- */

static void reconcile(cluster_node *n);

static void
on_changed(void *req_data, int rc)
{
    cluster_node *n = req_data;

    n->change_busy = false;
    if (rc == TALLY_OK)
        reconcile(n); /* the next change, if any, now */
}

static void
reconcile(cluster_node *n)
{
    struct cluster_log_status ls;

    if (n->change_busy || n->lg == NULL || !cluster_log_leading(n->lg))
        return;
    cluster_log_status(n->lg, &ls);
    for (size_t k = 0; k < ls.n; k++) { /* a member that left goes first */
        bool waiting = false;

        if (cluster_state_member(&n->st, ls.servers[k].id) != NULL ||
            ls.servers[k].id == n->st.self)
            continue;
        for (int d = 0; d < JOINS_MAX; d++)
            waiting |= n->departed[d].id == ls.servers[k].id &&
                       uv_now(n->loop) - n->departed[d].at_ms < REMOVE_GRACE_MS;
        if (waiting)
            continue; /* it learns it left first */
        if (cluster_log_remove(n->lg, ls.servers[k].id, on_changed, n) == TALLY_OK)
            n->change_busy = true;
        return;
    }
    for (size_t i = 0; i < n->st.n; i++) {
        const struct cluster_member *m = &n->st.members[i];
        enum cluster_log_role want =
            n->st.roles[i] == CLUSTER_ROLE_FRONT ? CLUSTER_LOG_STANDBY : CLUSTER_LOG_VOTER;
        int now = cluster_log_role_of(n->lg, m->id);
        int rc;

        if (now == (int)want)
            continue;
        rc = now < 0 ? cluster_log_add(n->lg, m->id, m->address, on_changed, n)
                     : cluster_log_assign(n->lg, m->id, want, on_changed, n);
        if (rc == TALLY_OK)
            n->change_busy = true;
        return; /* one change at a time; a refused one is tried again on the next tick */
    }
}

static void
on_reconcile_tick(uv_timer_t *t)
{
    reconcile(t->data);
}

/* ---- committed records ---- */

static void
apply_member(cluster_node *n, const uint8_t *p, size_t len)
{
    struct cluster_member m;
    enum cluster_role role;
    size_t used = 0;

    if (cluster_member_decode(p, len, &m, &role, &used) != TALLY_OK || used != len)
        return; /* not a record this version writes: ignored everywhere alike */
    if (cluster_state_member(&n->st, m.id) == NULL && n->st.n < CLUSTER_MEMBERS_MAX) {
        n->st.members[n->st.n] = m;
        n->st.roles[n->st.n] = role;
        n->st.n++;
        if (cluster_state_save(n->data, &n->st) != TALLY_OK)
            log_member("cluster_members_unsaved", m.id, m.address, "members file not written");
        if (cluster_log_set_members(n->lg, n->st.members, n->st.n) != TALLY_OK)
            log_member("cluster_members_unsaved", m.id, m.address, "out of memory");
        log_member("cluster_member_added", m.id, m.address, cluster_role_name(role));
    }
    for (int i = 0; i < JOINS_MAX; i++) {
        if (n->joins[i].token == 0 || n->joins[i].id != m.id)
            continue;
        join_accept(n, n->joins[i].token, m.id);
        n->joins[i].token = 0;
        n->joins[i].id = 0;
    }
    reconcile(n);
}

/* A member left (or was removed): its key is let in no more, the leader takes it out of the
 * log's configuration. The member itself learns it here too and is cut off from then on. */
static void
apply_leave(cluster_node *n, const uint8_t *p, size_t len)
{
    uint64_t id;
    size_t i;

    if (len != 8)
        return;
    id = get_u64(p);
    for (i = 0; i < n->st.n && n->st.members[i].id != id; i++)
        ;
    if (i < n->st.n) {
        char address[CLUSTER_ADDR_MAX];

        snprintf(address, sizeof(address), "%s", n->st.members[i].address);
        memmove(&n->st.members[i], &n->st.members[i + 1],
                (n->st.n - i - 1) * sizeof(n->st.members[0]));
        memmove(&n->st.roles[i], &n->st.roles[i + 1], (n->st.n - i - 1) * sizeof(n->st.roles[0]));
        n->st.n--;
        if (id != n->st.self) {
            if (cluster_state_save(n->data, &n->st) != TALLY_OK)
                log_member("cluster_members_unsaved", id, address, "members file not written");
            if (cluster_log_set_members(n->lg, n->st.members, n->st.n) != TALLY_OK)
                log_member("cluster_members_unsaved", id, address, "out of memory");
        }
        log_member(id == n->st.self ? "cluster_left" : "cluster_member_removed", id, address,
                   id == n->st.self ? "this host is no longer a member: stop tallyd" : NULL);
        {
            int d = 0, oldest = 0;
            for (; d < JOINS_MAX && n->departed[d].id != 0; d++)
                if (n->departed[d].at_ms < n->departed[oldest].at_ms)
                    oldest = d;
            d = d < JOINS_MAX ? d : oldest;
            n->departed[d].id = id;
            n->departed[d].at_ms = uv_now(n->loop);
        }
    }
    for (int k = 0; k < JOINS_MAX; k++) {
        uint8_t ok[2] = {CLUSTER_JOIN_OK, 0};
        if (n->leaves[k].token == 0 || n->leaves[k].id != id)
            continue;
        (void)cluster_log_join_answer(n->lg, n->leaves[k].token, ok, sizeof(ok));
        n->leaves[k].token = 0;
        n->leaves[k].id = 0;
    }
    reconcile(n);
}

static void
on_apply(void *data, uint64_t count, const uint8_t *batch, size_t len)
{
    cluster_node *n = data;

    (void)count;
    if (len >= 1 && batch[0] == RECORD_MEMBER)
        apply_member(n, batch + 1, len - 1);
    else if (len >= 1 && batch[0] == RECORD_LEAVE)
        apply_leave(n, batch + 1, len - 1);
}

static void
on_leader(void *data, uint64_t leader, bool self)
{
    cluster_node *n = data;

    (void)leader;
    if (!self) { /* joins in flight cannot be answered by this host any more */
        for (int i = 0; i < JOINS_MAX; i++)
            if (n->joins[i].token != 0)
                join_refuse(n, n->joins[i].token, CLUSTER_JOIN_BUSY,
                            "leadership moved during the join: try again");
        memset(n->joins, 0, sizeof(n->joins));
        for (int i = 0; i < JOINS_MAX; i++)
            if (n->leaves[i].token != 0)
                join_refuse(n, n->leaves[i].token, CLUSTER_JOIN_BUSY,
                            "leadership moved: see tally cluster status, and try again");
        memset(n->leaves, 0, sizeof(n->leaves));
    }
    n->change_busy = false;
}

/* The state the log's records made: the member list ([n (1)] then each member as MEMBER
 * records carry it). */
static int
on_snapshot(void *data, uint8_t **buf, size_t *len)
{
    cluster_node *n = data;
    uint8_t *b =
        tally_malloc(1 + CLUSTER_MEMBERS_MAX * (10 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES));
    size_t off = 0;

    if (b == NULL)
        return TALLY_ENOMEM;
    b[off++] = (uint8_t)n->st.n;
    for (size_t i = 0; i < n->st.n; i++)
        off += cluster_member_encode(b + off, &n->st.members[i], n->st.roles[i]);
    *buf = b;
    *len = off;
    return TALLY_OK;
}

static int
on_restore(void *data, const uint8_t *p, size_t len)
{
    cluster_node *n = data;
    struct cluster_state st;
    size_t off = 1;

    memset(&st, 0, sizeof(st));
    if (len < 1 || p[0] > CLUSTER_MEMBERS_MAX)
        return TALLY_EPROTO;
    st.self = n->st.self;
    for (unsigned k = 0; k < p[0]; k++) {
        size_t used = 0;
        if (cluster_member_decode(p + off, len - off, &st.members[st.n], &st.roles[st.n], &used) !=
            TALLY_OK)
            return TALLY_EPROTO;
        st.n++;
        off += used;
    }
    if (off != len)
        return TALLY_EPROTO;
    if (cluster_state_member(&st, st.self) == NULL)
        log_member("cluster_left", st.self, NULL, "not in the snapshot's members: stop tallyd");
    else
        n->st = st; /* a host keeps its own entry to start again from its files */
    if (cluster_state_save(n->data, &n->st) != TALLY_OK)
        log_member("cluster_members_unsaved", n->st.self, NULL, "members file not written");
    if (cluster_log_set_members(n->lg, n->st.members, n->st.n) != TALLY_OK)
        log_member("cluster_members_unsaved", n->st.self, NULL, "out of memory");
    return TALLY_OK;
}

static const struct cluster_log_cbs node_cbs = {on_apply, on_leader, on_snapshot, on_restore};

/* ---- open, status, close ---- */

int
cluster_node_open(uv_loop_t *loop, const char *data, unsigned election_ms, cluster_node **out)
{
    struct cluster_log_opts o;
    char raft[512];
    cluster_node *n;
    int rc;

    *out = NULL;
    if (cluster_path(data, "raft", raft, sizeof(raft)) != TALLY_OK ||
        strlen(data) >= sizeof(n->data))
        return TALLY_ETOOBIG;
    n = tally_calloc(1, sizeof(*n));
    if (n == NULL)
        return TALLY_ENOMEM;
    snprintf(n->data, sizeof(n->data), "%s", data);
    n->loop = loop;
    n->hooks.strangers_welcome = strangers_welcome;
    n->hooks.on_join = on_join;
    n->hooks.on_admin = on_admin;
    n->hooks.ctx = n;
    rc = cluster_state_load(data, &n->key, &n->st);
    if (rc == TALLY_OK) {
        memset(&o, 0, sizeof(o));
        o.loop = loop;
        o.dir = raft;
        o.id = n->st.self;
        o.self = &n->key;
        o.members = n->st.members;
        o.n_members = n->st.n;
        o.election_ms = election_ms;
        o.cbs = &node_cbs;
        o.data = n;
        o.hooks = &n->hooks;
        rc = cluster_log_open(&o, &n->lg);
    }
    if (rc != TALLY_OK) {
        cluster_hostkey_wipe(&n->key);
        tally_free(n);
        return rc;
    }
    uv_timer_init(loop, &n->reconcile);
    n->reconcile.data = n;
    uv_timer_start(&n->reconcile, on_reconcile_tick, RECONCILE_MS, RECONCILE_MS);
    *out = n;
    return TALLY_OK;
}

void
cluster_node_status(cluster_node *n, struct proto_cluster_status *out)
{
    struct cluster_log_status ls;

    memset(out, 0, sizeof(*out));
    cluster_log_status(n->lg, &ls);
    out->in_cluster = 1;
    out->self = ls.self;
    out->leader = ls.leader;
    out->term = ls.term;
    out->commit_index = ls.commit_index;
    out->applied_index = ls.applied_index;
    out->last_index = ls.last_index;
    for (size_t i = 0; i < n->st.n && out->n < PROTO_CLUSTER_MEMBERS_MAX; i++) {
        struct proto_cluster_member *m = &out->m[out->n++];

        m->id = n->st.members[i].id;
        m->role = (uint8_t)n->st.roles[i];
        m->log_role = 3; /* not in the log's configuration (yet) */
        snprintf(m->address, sizeof(m->address), "%s", n->st.members[i].address);
        memcpy(m->pk, n->st.members[i].pk, sizeof(m->pk));
        for (size_t k = 0; k < ls.n; k++) {
            if (ls.servers[k].id != m->id)
                continue;
            m->log_role = (uint8_t)ls.servers[k].role;
            m->progress_known = ls.servers[k].progress_known;
            m->match_index = ls.servers[k].match_index;
        }
    }
}

static void
on_log_closed(void *data)
{
    cluster_node *n = data;
    void (*cb)(void *) = n->close_cb;
    void *cb_data = n->close_data;

    cluster_hostkey_wipe(&n->key);
    tally_free(n);
    if (cb != NULL)
        cb(cb_data);
}

static void
on_reconcile_closed(uv_handle_t *h)
{
    cluster_node *n = h->data;

    cluster_log_close(n->lg, on_log_closed, n);
}

void
cluster_node_close(cluster_node *n, void (*cb)(void *data), void *data)
{
    n->close_cb = cb;
    n->close_data = data;
    uv_close((uv_handle_t *)&n->reconcile, on_reconcile_closed);
}

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
#include "cluster_config_int.h"
#include "cluster_node_int.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "store.h"
#include "store_config.h"
#include "tally_log.h"

int64_t
cluster__wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
cluster__log_member(const char *event, uint64_t id, const char *address, const char *detail)
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
    cluster__lease_tick(t->data);
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
    if (cluster_state_note_id(&n->st, m.id) && cluster_state_member(&n->st, m.id) != NULL &&
        cluster_state_save(n->data, &n->st) != TALLY_OK)
        cluster__log_member("cluster_members_unsaved", m.id, m.address, "members file not written");
    if (cluster_state_member(&n->st, m.id) == NULL && n->st.n < CLUSTER_MEMBERS_MAX) {
        n->st.members[n->st.n] = m;
        n->st.roles[n->st.n] = role;
        n->st.n++;
        if (cluster_state_save(n->data, &n->st) != TALLY_OK)
            cluster__log_member("cluster_members_unsaved", m.id, m.address,
                                "members file not written");
        if (cluster_log_set_members(n->lg, n->st.members, n->st.n) != TALLY_OK)
            cluster__log_member("cluster_members_unsaved", m.id, m.address, "out of memory");
        cluster__log_member("cluster_member_added", m.id, m.address, cluster_role_name(role));
    }
    for (int i = 0; i < JOINS_MAX; i++) {
        if (n->joins[i].token == 0 || n->joins[i].id != m.id)
            continue;
        cluster__join_accept(n, n->joins[i].token, m.id);
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
    id = cluster__get_u64(p);
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
                cluster__log_member("cluster_members_unsaved", id, address,
                                    "members file not written");
            if (cluster_log_set_members(n->lg, n->st.members, n->st.n) != TALLY_OK)
                cluster__log_member("cluster_members_unsaved", id, address, "out of memory");
        }
        cluster__log_member(
            id == n->st.self ? "cluster_left" : "cluster_member_removed", id, address,
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
    else if (len >= 1 && batch[0] == RECORD_CONFIG)
        cluster__config_apply(n, count, batch + 1, len - 1);
    else if (len >= 1 && batch[0] == RECORD_LEDGER)
        cluster__ledger_apply(n, count, batch + 1, len - 1);
}

static void
on_leader(void *data, uint64_t leader, bool self)
{
    cluster_node *n = data;

    (void)leader;
    if (!self) { /* joins in flight cannot be answered by this host any more */
        for (int i = 0; i < JOINS_MAX; i++)
            if (n->joins[i].token != 0)
                cluster__join_refuse(n, n->joins[i].token, CLUSTER_JOIN_BUSY,
                                     "leadership moved during the join: try again");
        memset(n->joins, 0, sizeof(n->joins));
        for (int i = 0; i < JOINS_MAX; i++)
            if (n->leaves[i].token != 0)
                cluster__join_refuse(n, n->leaves[i].token, CLUSTER_JOIN_BUSY,
                                     "leadership moved: see tally cluster status, and try again");
        memset(n->leaves, 0, sizeof(n->leaves));
    }
    n->change_busy = false;
    cluster__lease_tick(n); /* leases from this host now, or from the new leader */
}

/* The snapshot's format: cluster_node_int.h. */
#define SNAPSHOT_CONFIG_MAX ((size_t)256 << 20)

static int
on_snapshot(void *data, uint8_t **buf, size_t *len)
{
    cluster_node *n = data;
    size_t members = 2 + CLUSTER_MEMBERS_MAX * (10 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES);
    uint8_t *head, *config = NULL;
    size_t off = 0, config_len = 0;
    uint64_t config_index = 0;
    store_db *db = NULL;
    int rc;

    if (cluster__config_pending(n))
        return TALLY_EBUSY; /* CONFIG records not in tally.db yet: the log keeps them */
    /* tally.db as the CONFIG records so far made it (none is pending: it is all there). */
    rc = store_config_open(n->data, false, &db);
    if (rc == TALLY_OK)
        rc = store_config_copy(db, SNAPSHOT_CONFIG_MAX, &config, &config_len, &config_index);
    store_db_close(db);
    if (rc != TALLY_OK) {
        cluster__log_member("cluster_snapshot_failed", n->st.self, NULL, tally_strerror(rc));
        return rc;
    }
    head = tally_malloc(members + 8 + 12 + config_len);
    if (head == NULL) {
        tally_free(config);
        return TALLY_ENOMEM;
    }
    head[off++] = CLUSTER_SNAPSHOT_VERSION;
    head[off++] = (uint8_t)n->st.n;
    for (size_t i = 0; i < n->st.n; i++)
        off += cluster_member_encode(head + off, &n->st.members[i], n->st.roles[i]);
    cluster__put_u64(head + off, n->st.next_id);
    off += 8;
    cluster__put_u64(head + off, config_index);
    cluster__put_u32(head + off + 8, (uint32_t)config_len);
    memcpy(head + off + 12, config, config_len);
    off += 12 + config_len;
    tally_free(config);
    rc = cluster__ledger_snapshot(n, cluster_log_applied(n->lg), head, off, buf, len);
    tally_free(head);
    return rc;
}

/* The snapshot's tally.db (p: its index, length and bytes, checked by the caller), put in
 * place unless this member's is as far on already. */
static int
restore_config(cluster_node *n, const uint8_t *p)
{
    store_db *db = NULL;
    int rc = store_config_open(n->data, false, &db);

    if (rc == TALLY_OK)
        rc = store_config_restore(db, p + 12, cluster__get_u32(p + 8), cluster__get_u64(p));
    store_db_close(db);
    if (rc != TALLY_OK)
        cluster__log_member("cluster_config_restore_failed", n->st.self, NULL, tally_strerror(rc));
    return rc;
}

int
cluster__node_restore(void *data, const uint8_t *p, size_t len)
{
    cluster_node *n = data;
    struct cluster_state st;
    bool next = len >= 1 && p[0] == CLUSTER_SNAPSHOT_VERSION;
    bool config = next || (len >= 1 && p[0] == CLUSTER_SNAPSHOT_CONFIG);
    bool ledgers = config || (len >= 1 && p[0] == CLUSTER_SNAPSHOT_LEDGERS);
    size_t off = ledgers ? 2 : 1, config_at = 0;
    int rc = TALLY_OK;

    memset(&st, 0, sizeof(st));
    if (len < off || p[off - 1] > CLUSTER_MEMBERS_MAX)
        return TALLY_EPROTO;
    st.self = n->st.self;
    for (unsigned k = 0, count = p[off - 1]; k < count; k++) {
        size_t used = 0;
        if (cluster_member_decode(p + off, len - off, &st.members[st.n], &st.roles[st.n], &used) !=
            TALLY_OK)
            return TALLY_EPROTO;
        (void)cluster_state_note_id(&st, st.members[st.n].id);
        st.n++;
        off += used;
    }
    if (next) {
        if (len - off < 8)
            return TALLY_EPROTO;
        if (cluster__get_u64(p + off) > 0)
            (void)cluster_state_note_id(&st, cluster__get_u64(p + off) - 1);
        off += 8;
    }
    if (config) {
        if (len - off < 12 || cluster__get_u32(p + off + 8) > len - off - 12)
            return TALLY_EPROTO;
        config_at = off;
        off += 12 + cluster__get_u32(p + off + 8);
    }
    /* Every part checked before anything changes: a snapshot cut or spoilt in its ledgers
     * leaves tally.db as it was. */
    if (ledgers)
        rc = cluster__ledger_snap_check(p + off, len - off);
    else /* the first format: the members alone */
        rc = off == len ? TALLY_OK : TALLY_EPROTO;
    if (rc == TALLY_OK && config)
        rc = restore_config(n, p + config_at);
    if (rc == TALLY_OK && ledgers)
        rc = cluster__ledger_restore(n, p + off, len - off);
    if (rc != TALLY_OK)
        return rc;
    /* A host that joined after the snapshot was taken is not in it: its MEMBER record comes
     * later in the log, and it keeps the members its join gave it meanwhile. (A member that
     * left learns it from the LEAVE record.) */
    if (n->st.next_id > 0)
        (void)cluster_state_note_id(&st, n->st.next_id - 1);
    if (cluster_state_member(&st, st.self) == NULL)
        (void)cluster_state_note_id(&n->st, st.next_id - 1);
    else
        n->st = st; /* a host keeps its own entry to start again from its files */
    if (cluster_state_save(n->data, &n->st) != TALLY_OK)
        cluster__log_member("cluster_members_unsaved", n->st.self, NULL,
                            "members file not written");
    /* At start libraft restores its snapshot inside cluster_log_open, before n->lg is set:
     * cluster_node_open hands the log the members then. */
    if (n->lg != NULL && cluster_log_set_members(n->lg, n->st.members, n->st.n) != TALLY_OK)
        cluster__log_member("cluster_members_unsaved", n->st.self, NULL, "out of memory");
    return TALLY_OK;
}

static const struct cluster_log_cbs node_cbs = {on_apply, on_leader, on_snapshot,
                                                cluster__node_restore};

/* ---- open, status, close ---- */

int
cluster_node_open(uv_loop_t *loop, const char *data, unsigned election_ms, unsigned snapshot_every,
                  cluster_node **out)
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
    n->hooks.strangers_welcome = cluster__strangers_welcome;
    n->hooks.on_join = cluster__on_join;
    n->hooks.on_admin = cluster__on_admin;
    n->hooks.on_lease_open = cluster__on_lease_open;
    n->hooks.on_lease_msg = cluster__on_lease_msg;
    n->hooks.on_lease_close = cluster__on_lease_close;
    n->hooks.ctx = n;
    rc = cluster_state_load(data, &n->key, &n->st);
    if (rc == TALLY_OK)
        rc = cluster__ledger_init(n); /* before the log: it restores its snapshot at start */
    if (rc == TALLY_OK) {
        memset(&o, 0, sizeof(o));
        o.loop = loop;
        o.dir = raft;
        o.id = n->st.self;
        o.self = &n->key;
        o.members = n->st.members;
        o.n_members = n->st.n;
        o.election_ms = election_ms;
        o.snapshot_every = snapshot_every;
        o.cbs = &node_cbs;
        o.data = n;
        o.hooks = &n->hooks;
        rc = cluster_log_open(&o, &n->lg);
    }
    if (rc != TALLY_OK) {
        cluster__ledger_close(n);
        cluster_hostkey_wipe(&n->key);
        tally_free(n);
        return rc;
    }
    /* The members as a snapshot restored at start left them (the log took the file's). */
    if (cluster_log_set_members(n->lg, n->st.members, n->st.n) != TALLY_OK)
        cluster__log_member("cluster_members_unsaved", n->st.self, NULL, "out of memory");
    uv_timer_init(loop, &n->reconcile);
    n->reconcile.data = n;
    uv_timer_start(&n->reconcile, on_reconcile_tick, RECONCILE_MS, RECONCILE_MS);
    *out = n;
    return TALLY_OK;
}

/* Member m's clock against the leader's, as far as this member knows it (node_lease.c). */
static void
clock_of(const cluster_node *n, uint64_t leader, struct proto_cluster_member *m)
{
    if (leader == 0)
        return;
    if (m->id == leader) {
        m->clock_known = 1;
        return;
    }
    if (m->id == n->st.self) {
        m->clock_known = n->clock_self.known;
        m->clock_skew_ms = n->clock_self.skew_ms;
        return;
    }
    if (leader != n->st.self)
        return; /* a follower knows its own only */
    for (size_t k = 0; k < CLUSTER_MEMBERS_MAX; k++) {
        if (n->clock_of[k].member == m->id && n->clock_of[k].known) {
            m->clock_known = 1;
            m->clock_skew_ms = n->clock_of[k].skew_ms;
        }
    }
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
        clock_of(n, ls.leader, m);
    }
}

void
cluster__node_maybe_free(cluster_node *n)
{
    void (*cb)(void *) = n->close_cb;
    void *cb_data = n->close_data;

    if (!n->log_closed || cluster__lease_open_any(n))
        return;
    if (cluster__config_close(n))
        return; /* again once tally.db's last write is done */
    /* The log is closed: no record comes any more. */
    cluster__ledger_close(n);
    cluster_hostkey_wipe(&n->key);
    tally_free(n);
    if (cb != NULL)
        cb(cb_data);
}

static void
on_log_closed(void *data)
{
    cluster_node *n = data;

    n->log_closed = true;
    cluster__node_maybe_free(n);
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
    n->closing = true;
    (void)cluster__lease_close(n);
    uv_close((uv_handle_t *)&n->reconcile, on_reconcile_closed);
}

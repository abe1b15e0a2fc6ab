/*
 * tallyd's place in its cluster (cluster_node.h): the files, the log, the
 * status. Committed batches have no reader yet: configuration and ledger
 * records come with the next layers, and each will register its own kind.
 */
#include "cluster_node.h"

#include <stdio.h>
#include <string.h>

struct cluster_node {
    struct cluster_state st;
    struct cluster_hostkey key;
    cluster_log *lg;
    void (*close_cb)(void *data);
    void *close_data;
};

static void
on_apply(void *data, uint64_t n, const uint8_t *batch, size_t len)
{
    (void)data;
    (void)n;
    (void)batch;
    (void)len;
}

static const struct cluster_log_cbs node_cbs = {on_apply, NULL};

int
cluster_node_open(uv_loop_t *loop, const char *data, unsigned election_ms, cluster_node **out)
{
    struct cluster_log_opts o;
    char raft[512];
    cluster_node *n;
    int rc;

    *out = NULL;
    if (cluster_path(data, "raft", raft, sizeof(raft)) != TALLY_OK)
        return TALLY_ETOOBIG;
    n = tally_calloc(1, sizeof(*n));
    if (n == NULL)
        return TALLY_ENOMEM;
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
        rc = cluster_log_open(&o, &n->lg);
    }
    if (rc != TALLY_OK) {
        cluster_hostkey_wipe(&n->key);
        tally_free(n);
        return rc;
    }
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

void
cluster_node_close(cluster_node *n, void (*cb)(void *data), void *data)
{
    n->close_cb = cb;
    n->close_data = data;
    cluster_log_close(n->lg, on_log_closed, n);
}

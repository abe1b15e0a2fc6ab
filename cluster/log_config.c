/*
 * The log's configuration (cluster_log.h): the first one, written by `tally cluster init`
 * into a pristine directory, and the changes the leader makes as members come and go
 * (libraft's add, assign and remove, one at a time).
 */
#include "cluster_log_int.h"

#include <string.h>

int
cluster__bootstrap_conf(struct raft *r, const struct cluster_member *members, size_t n)
{
    struct raft_configuration conf;
    int rv = 0;

    raft_configuration_init(&conf);
    for (size_t i = 0; i < n && rv == 0; i++)
        rv = raft_configuration_add(&conf, members[i].id, members[i].address, RAFT_VOTER);
    if (rv == 0)
        rv = raft_bootstrap(r, &conf);
    raft_configuration_close(&conf);
    return rv;
}

/* ---- membership ---- */

struct change_req {
    struct raft_change req;
    cluster_log_change_fn done;
    void *req_data;
};

static void
on_changed(struct raft_change *req, int status)
{
    struct change_req *c = req->data;

    if (c->done != NULL)
        c->done(c->req_data, status == 0                                          ? TALLY_OK
                             : status == RAFT_SHUTDOWN || status == RAFT_CANCELED ? TALLY_ECANCELED
                                                                                  : TALLY_EUNAVAIL);
    tally_free(c);
}

static struct change_req *
change_new(cluster_log_change_fn done, void *req_data)
{
    struct change_req *c = tally_calloc(1, sizeof(*c));

    if (c != NULL) {
        c->done = done;
        c->req_data = req_data;
        c->req.data = c;
    }
    return c;
}

enum change_kind { CHANGE_ADD, CHANGE_ASSIGN, CHANGE_REMOVE };

/* One membership change through libraft (leader only): done comes later iff TALLY_OK. */
static int
change(cluster_log *lg, enum change_kind kind, uint64_t id, const char *address, int role,
       cluster_log_change_fn done, void *req_data)
{
    struct change_req *c;
    int rv;

    if (!cluster_log_leading(lg))
        return TALLY_EUNAVAIL;
    c = change_new(done, req_data);
    if (c == NULL)
        return TALLY_ENOMEM;
    rv = kind == CHANGE_ADD      ? raft_add(&lg->raft, &c->req, id, address, on_changed)
         : kind == CHANGE_ASSIGN ? raft_assign(&lg->raft, &c->req, id, role, on_changed)
                                 : raft_remove(&lg->raft, &c->req, id, on_changed);
    if (rv != 0) {
        tally_free(c);
        return TALLY_EUNAVAIL; /* another change in flight, or not allowed now */
    }
    return TALLY_OK;
}

int
cluster_log_add(cluster_log *lg, uint64_t id, const char *address, cluster_log_change_fn done,
                void *req_data)
{
    return change(lg, CHANGE_ADD, id, address, 0, done, req_data);
}

int
cluster_log_assign(cluster_log *lg, uint64_t id, enum cluster_log_role role,
                   cluster_log_change_fn done, void *req_data)
{
    int r = role == CLUSTER_LOG_VOTER     ? RAFT_VOTER
            : role == CLUSTER_LOG_STANDBY ? RAFT_STANDBY
                                          : RAFT_SPARE;

    return change(lg, CHANGE_ASSIGN, id, NULL, r, done, req_data);
}

int
cluster_log_remove(cluster_log *lg, uint64_t id, cluster_log_change_fn done, void *req_data)
{
    return change(lg, CHANGE_REMOVE, id, NULL, 0, done, req_data);
}

int
cluster_log_role_of(cluster_log *lg, uint64_t id)
{
    const struct raft_configuration *c = &lg->raft.configuration;

    for (unsigned i = 0; lg->raft_live && i < c->n; i++)
        if (c->servers[i].id == id)
            return c->servers[i].role == RAFT_VOTER     ? CLUSTER_LOG_VOTER
                   : c->servers[i].role == RAFT_STANDBY ? CLUSTER_LOG_STANDBY
                                                        : CLUSTER_LOG_SPARE;
    return -1;
}

bool
cluster_log_leading(cluster_log *lg)
{
    return lg->raft_live && raft_state(&lg->raft) == RAFT_LEADER;
}

int
cluster_log_set_members(cluster_log *lg, const struct cluster_member *m, size_t n)
{
    return cluster_transport_set_members(&lg->transport, m, n);
}

int
cluster_log_lease_send(cluster_log *lg, uint64_t token, const uint8_t *msg, size_t len)
{
    return cluster_transport_lease_send(&lg->transport, token, msg, len);
}

void
cluster_log_lease_close(cluster_log *lg, uint64_t token)
{
    cluster_transport_lease_close(&lg->transport, token);
}

int
cluster_log_join_answer(cluster_log *lg, uint64_t token, const uint8_t *msg, size_t len)
{
    return cluster_transport_join_answer(&lg->transport, token, msg, len);
}

/* ---- the first configuration (`tally cluster init`) ---- */

static void
on_bootstrap_closed(struct raft *r)
{
    *(bool *)r->data = true;
}

int
cluster_log_bootstrap(const char *dir, const struct cluster_hostkey *key,
                      const struct cluster_member *self)
{
    struct cluster_net_cfg net = {NULL, key, self, 1, 1000, NULL};
    struct raft_uv_transport tr;
    struct raft_fsm fsm;
    struct raft_io io;
    struct raft raft;
    uv_loop_t loop;
    bool closed = false;
    int rc = TALLY_EIO, rv;

    memset(&tr, 0, sizeof(tr));
    memset(&io, 0, sizeof(io));
    cluster__fsm_setup(&fsm, NULL);
    if (uv_loop_init(&loop) != 0)
        return TALLY_EIO;
    net.loop = &loop;
    if (cluster_transport_init(&tr, &net) != TALLY_OK)
        goto out_loop;
    rv = raft_uv_init(&io, &loop, dir, &tr);
    if (rv != 0) {
        cluster__log_raft_error("cluster_init_failed", "raft_uv_init", io.errmsg);
        goto out_tr;
    }
    rv = raft_init(&raft, &io, &fsm, self->id, self->address);
    if (rv != 0) {
        cluster__log_raft_error("cluster_init_failed", "raft_init", raft_errmsg(&raft));
        raft_uv_close(&io);
        goto out_tr;
    }
    raft.data = &closed;
    rv = cluster__bootstrap_conf(&raft, self, 1);
    if (rv == 0)
        rc = TALLY_OK;
    else if (rv == RAFT_CANTBOOTSTRAP)
        rc = TALLY_EEXIST;
    else
        cluster__log_raft_error("cluster_init_failed", "raft_bootstrap", raft_errmsg(&raft));
    raft_close(&raft, on_bootstrap_closed);
    while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    raft_uv_close(&io);
out_tr:
    cluster_transport_release(&tr);
out_loop:
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        rc = TALLY_EIO;
    return rc;
}

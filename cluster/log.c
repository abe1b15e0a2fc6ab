/*
 * The replicated log on libraft 0.15 (cluster_log.h). A batch travels as one
 * raft command entry: its length (4 bytes, big-endian), 4 zero bytes, the
 * batch, zero padding to a multiple of 8. The FSM of libraft is a thin
 * adapter: each committed command is unframed and handed to the caller's
 * apply. Leadership is read back after every loop turn (a uv_check) and a
 * change reported, since libraft 0.15 has no callback for it.
 */
#include "cluster_log_int.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "tally_log.h"

#define FRAME_HEAD 8

struct append_req {
    struct raft_apply req;
    cluster_log *lg;
    cluster_log_done_fn done;
    void *req_data;
};

void
cluster__log_raft_error(const char *event, const char *what, const char *msg)
{
    struct tally_log l;

    if (tally_log_begin(&l, TALLY_LOG_ERROR, event)) {
        tally_log_str(&l, "call", what);
        tally_log_str(&l, "error", msg);
        tally_log_end(&l);
    }
}

/* ---- libraft's FSM ---- */

static int
fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    cluster_log *lg = fsm->data;
    const uint8_t *p = buf->base;
    size_t len;

    *result = NULL;
    if (buf->len < FRAME_HEAD)
        return RAFT_MALFORMED;
    len = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
    if (len > buf->len - FRAME_HEAD)
        return RAFT_MALFORMED;
    lg->applied++;
    lg->cbs->apply(lg->data, lg->applied, p + FRAME_HEAD, len);
    return 0;
}

/* Snapshots: [batches applied (8, big-endian)][the state's bytes]. The state is taken on
 * the loop (a consistent point: between two applies); libraft writes it from its thread
 * pool and snapshot_finalize frees it. */
static int
fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    cluster_log *lg = fsm->data;
    uint8_t *state = NULL, *p;
    size_t len = 0;
    struct raft_buffer *b;

    if (lg == NULL || lg->cbs->snapshot == NULL)
        return RAFT_NOTFOUND;
    /* A state that cannot be taken now (work in flight, a copy broken) is no error: libraft
     * 0.15 takes RAFT_BUSY as "later", and any other error as a reason to stop the node. */
    if (lg->cbs->snapshot(lg->data, &state, &len) != TALLY_OK)
        return RAFT_BUSY;
    b = raft_malloc(sizeof(*b));
    p = raft_malloc(8 + len);
    if (b == NULL || p == NULL) {
        raft_free(b);
        raft_free(p);
        tally_free(state);
        return RAFT_NOMEM;
    }
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(lg->applied >> (56 - 8 * i));
    if (len > 0)
        memcpy(p + 8, state, len);
    tally_free(state);
    b->base = p;
    b->len = 8 + len;
    *bufs = b;
    *n_bufs = 1;
    return 0;
}

static int
fsm_snapshot_finalize(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    (void)fsm;
    if (*bufs != NULL) {
        for (unsigned i = 0; i < *n_bufs; i++)
            raft_free((*bufs)[i].base);
        raft_free(*bufs);
    }
    *bufs = NULL;
    *n_bufs = 0;
    return 0;
}

static int
fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    cluster_log *lg = fsm->data;
    const uint8_t *p = buf->base;
    uint64_t applied = 0;
    int rc = RAFT_MALFORMED;

    if (lg != NULL && lg->cbs->restore != NULL && buf->len >= 8) {
        int trc;
        for (int i = 0; i < 8; i++)
            applied = applied << 8 | p[i];
        trc = lg->cbs->restore(lg->data, p + 8, buf->len - 8);
        if (trc == TALLY_OK) {
            lg->applied = applied;
            rc = 0;
        } else {
            cluster__log_raft_error("cluster_snapshot_restore_failed", "restore",
                                    tally_strerror(trc));
        }
    }
    /* libraft frees the buffer of a restore that failed, this one's on success only. */
    if (rc == 0)
        raft_free(buf->base);
    return rc;
}

void
cluster__fsm_setup(struct raft_fsm *fsm, cluster_log *lg)
{
    /* Version 2: libraft 0.15's raft_uv has no async_work, so no asynchronous snapshot
     * (version 3); the bytes are made on the loop, libraft writes them off it. */
    memset(fsm, 0, sizeof(*fsm));
    fsm->version = 2;
    fsm->data = lg;
    fsm->apply = fsm_apply;
    fsm->snapshot = fsm_snapshot;
    fsm->restore = fsm_restore;
    fsm->snapshot_finalize = fsm_snapshot_finalize;
}

/* ---- leadership ---- */

static void
on_check(uv_check_t *h)
{
    cluster_log *lg = h->data;
    uint64_t leader = cluster_log_leader(lg);

    if (leader == lg->leader_seen)
        return;
    lg->leader_seen = leader;
    {
        struct tally_log l;
        if (tally_log_begin(&l, TALLY_LOG_INFO, "cluster_leader")) {
            tally_log_int(&l, "member", (int64_t)lg->id);
            tally_log_int(&l, "leader", (int64_t)leader);
            tally_log_end(&l);
        }
    }
    if (lg->cbs->leader != NULL)
        lg->cbs->leader(lg->data, leader, leader == lg->id);
}

uint64_t
cluster_log_leader(cluster_log *lg)
{
    raft_id id = 0;
    const char *address = NULL;

    if (!lg->raft_live)
        return 0;
    raft_leader(&lg->raft, &id, &address);
    return id;
}

void
cluster_log_status(cluster_log *lg, struct cluster_log_status *out)
{
    const struct raft *r = &lg->raft;
    bool leading;

    memset(out, 0, sizeof(*out));
    out->self = lg->id;
    if (!lg->raft_live)
        return;
    out->leader = cluster_log_leader(lg);
    out->term = r->current_term;
    out->commit_index = r->commit_index;
    out->applied_index = r->last_applied;
    out->last_index = raft_last_index(&lg->raft);
    out->first_index = r->log.offset + 1;
    out->snapshot_index = r->log.snapshot.last_index;
    leading = raft_state(&lg->raft) == RAFT_LEADER && r->leader_state.progress != NULL;
    for (unsigned i = 0; i < r->configuration.n && out->n < CLUSTER_LOG_SERVERS_MAX; i++) {
        const struct raft_server *sv = &r->configuration.servers[i];
        out->servers[out->n].id = sv->id;
        out->servers[out->n].role = sv->role == RAFT_VOTER     ? CLUSTER_LOG_VOTER
                                    : sv->role == RAFT_STANDBY ? CLUSTER_LOG_STANDBY
                                                               : CLUSTER_LOG_SPARE;
        if (leading) {
            out->servers[out->n].progress_known = true;
            out->servers[out->n].match_index =
                sv->id == lg->id ? out->last_index : r->leader_state.progress[i].match_index;
        }
        out->n++;
    }
}

uint64_t
cluster_log_applied(const cluster_log *lg)
{
    return lg->applied;
}

/* ---- appends ---- */

static void
on_applied(struct raft_apply *req, int status, void *result)
{
    struct append_req *a = req->data;
    int rc;

    (void)result;
    if (status == 0)
        rc = TALLY_OK;
    else if (status == RAFT_SHUTDOWN || status == RAFT_CANCELED)
        rc = TALLY_ECANCELED;
    else
        rc = TALLY_EUNAVAIL; /* not the leader any more, or its entry was cut */
    a->done(a->req_data, rc);
    tally_free(a);
}

int
cluster_log_append(cluster_log *lg, const uint8_t *batch, size_t len, cluster_log_done_fn done,
                   void *req_data)
{
    struct raft_buffer buf;
    struct append_req *a;
    uint8_t *p;
    int rv;

    if (len > CLUSTER_CHAN_MSG_MAX / 2)
        return TALLY_ETOOBIG;
    if (!lg->raft_live || raft_state(&lg->raft) != RAFT_LEADER)
        return TALLY_EUNAVAIL;
    buf.len = (FRAME_HEAD + len + 7) / 8 * 8;
    buf.base = raft_calloc(1, buf.len);
    a = tally_calloc(1, sizeof(*a));
    if (buf.base == NULL || a == NULL) {
        raft_free(buf.base);
        tally_free(a);
        return TALLY_ENOMEM;
    }
    p = buf.base;
    p[0] = (uint8_t)(len >> 24);
    p[1] = (uint8_t)(len >> 16);
    p[2] = (uint8_t)(len >> 8);
    p[3] = (uint8_t)len;
    if (len > 0)
        memcpy(p + FRAME_HEAD, batch, len);
    a->lg = lg;
    a->done = done;
    a->req_data = req_data;
    a->req.data = a;
    rv = raft_apply(&lg->raft, &a->req, &buf, 1, on_applied);
    if (rv != 0) {
        raft_free(buf.base);
        tally_free(a);
        return rv == RAFT_NOMEM ? TALLY_ENOMEM : TALLY_EUNAVAIL;
    }
    return TALLY_OK;
}

/* ---- open and close ---- */

static void
free_log(cluster_log *lg)
{
    void (*cb)(void *) = lg->close_cb;
    void *data = lg->close_data;

    if (lg->io_live)
        raft_uv_close(&lg->io);
    if (lg->transport_live) {
        struct cluster_transport_stats st;
        struct tally_log l;
        cluster_transport_stats(&lg->transport, &st);
        if (tally_log_begin(&l, TALLY_LOG_INFO, "cluster_raft_streams")) {
            tally_log_int(&l, "twins", (int64_t)st.twins);
            tally_log_int(&l, "by_primary", (int64_t)st.by_primary);
            tally_log_int(&l, "by_twin", (int64_t)st.by_twin);
            tally_log_int(&l, "duplicates", (int64_t)st.duplicates);
            tally_log_end(&l);
        }
        cluster_transport_release(&lg->transport);
    }
    tally_free(lg);
    if (cb != NULL)
        cb(data);
}

static void
on_check_closed(uv_handle_t *h)
{
    free_log(h->data);
}

static void
on_raft_closed(struct raft *r)
{
    cluster_log *lg = r->data;

    lg->raft_live = false;
    uv_close((uv_handle_t *)&lg->check, on_check_closed);
}

void
cluster_log_close(cluster_log *lg, void (*cb)(void *data), void *data)
{
    lg->close_cb = cb;
    lg->close_data = data;
    uv_check_stop(&lg->check);
    raft_close(&lg->raft, on_raft_closed);
}

int
cluster_log_open(const struct cluster_log_opts *o, cluster_log **out)
{
    struct cluster_net_cfg net;
    const struct cluster_member *me = NULL;
    cluster_log *lg = NULL;
    unsigned election = o != NULL && o->election_ms > 0 ? o->election_ms : 1000;
    int rc = TALLY_EINVAL, rv;

    *out = NULL;
    if (o == NULL || o->loop == NULL || o->dir == NULL || o->self == NULL || o->cbs == NULL ||
        o->cbs->apply == NULL || o->n_members == 0 || o->id == 0)
        return TALLY_EINVAL;
    for (size_t i = 0; i < o->n_members; i++)
        if (o->members[i].id == o->id)
            me = &o->members[i];
    if (me == NULL)
        return TALLY_EINVAL;
    lg = tally_calloc(1, sizeof(*lg));
    if (lg == NULL)
        return TALLY_ENOMEM;
    lg->loop = o->loop;
    lg->cbs = o->cbs;
    lg->data = o->data;
    lg->id = o->id;
    memset(&net, 0, sizeof(net));
    net.loop = o->loop;
    net.self = o->self;
    net.members = o->members;
    net.n_members = o->n_members;
    net.handshake_ms = o->handshake_ms > 0 ? o->handshake_ms : 2000;
    net.hooks = o->hooks;
    rc = cluster_transport_init(&lg->transport, &net);
    if (rc != TALLY_OK)
        goto fail;
    lg->transport_live = true;
    rc = TALLY_EIO;
    rv = raft_uv_init(&lg->io, o->loop, o->dir, &lg->transport);
    if (rv != 0) {
        cluster__log_raft_error("cluster_log_failed", "raft_uv_init", lg->io.errmsg);
        goto fail;
    }
    lg->io_live = true;
    cluster__fsm_setup(&lg->fsm, lg);
    rv = raft_init(&lg->raft, &lg->io, &lg->fsm, o->id, me->address);
    if (rv != 0) {
        cluster__log_raft_error("cluster_log_failed", "raft_init", raft_errmsg(&lg->raft));
        goto fail;
    }
    lg->raft.data = lg;
    lg->raft_live = true;
    raft_set_election_timeout(&lg->raft, election);
    raft_set_heartbeat_timeout(&lg->raft, election / 10 > 0 ? election / 10 : 1);
    raft_set_pre_vote(&lg->raft, true);
    /* A snapshot sent and not answered is sent again after this, not after libraft's 30 s
     * (0.15 may not answer a snapshot it restored); long enough for a large one to cross. */
    raft_set_install_snapshot_timeout(&lg->raft, election * 20 > 10000 ? election * 20 : 10000);
    if (o->cbs->snapshot != NULL && o->cbs->restore != NULL) {
        unsigned every = o->snapshot_every > 0 ? o->snapshot_every : 100000;
        raft_set_snapshot_threshold(&lg->raft, every);
        raft_set_snapshot_trailing(&lg->raft, every / 4 > 0 ? every / 4 : 1);
    } else {
        raft_set_snapshot_threshold(&lg->raft, UINT_MAX); /* no state to snapshot */
    }
    if (o->bootstrap) {
        rv = cluster__bootstrap_conf(&lg->raft, o->members, o->n_members);
        if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) { /* CANTBOOTSTRAP: it has state already */
            cluster__log_raft_error("cluster_log_failed", "raft_bootstrap",
                                    raft_errmsg(&lg->raft)[0] != '\0' ? raft_errmsg(&lg->raft)
                                                                      : raft_strerror(rv));
            goto fail_raft;
        }
    }
    rv = raft_start(&lg->raft);
    if (rv != 0) {
        cluster__log_raft_error("cluster_log_failed", "raft_start", raft_errmsg(&lg->raft));
        goto fail_raft;
    }
    uv_check_init(o->loop, &lg->check);
    lg->check.data = lg;
    uv_check_start(&lg->check, on_check);
    *out = lg;
    return TALLY_OK;
fail_raft:
    /* raft_close frees what raft_init made, then the rest goes; the caller gets the error
     * now and the memory comes back on the loop. */
    uv_check_init(o->loop, &lg->check);
    lg->check.data = lg;
    raft_close(&lg->raft, on_raft_closed);
    return rc;
fail:
    if (lg->io_live)
        raft_uv_close(&lg->io);
    if (lg->transport_live)
        cluster_transport_release(&lg->transport);
    tally_free(lg);
    return rc;
}

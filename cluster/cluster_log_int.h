/*
 * Internals of the replicated log shared by its files: log.c (open, close, appends, the
 * FSM adapter, leadership and status) and log_config.c (the log's configuration: the first
 * one at `tally cluster init`, and membership changes).
 */
#ifndef CLUSTER_LOG_INT_H
#define CLUSTER_LOG_INT_H

#include "cluster_log.h"
#include "cluster_node.h"

struct cluster_log {
    uv_loop_t *loop;
    struct raft raft;
    struct raft_io io;
    struct raft_uv_transport transport;
    struct raft_fsm fsm;
    uv_check_t check;
    const struct cluster_log_cbs *cbs;
    void *data;
    uint64_t id;
    uint64_t applied;
    uint64_t leader_seen;
    bool io_live, transport_live, raft_live;
    void (*close_cb)(void *data);
    void *close_data;
};

/** One error line: libraft's `what` failed with msg. */
void cluster__log_raft_error(const char *event, const char *what, const char *msg);
/** libraft's FSM for lg (NULL: a log that only writes its first configuration). */
void cluster__fsm_setup(struct raft_fsm *fsm, cluster_log *lg);
/** raft_bootstrap with members[] as voters: libraft's result (RAFT_CANTBOOTSTRAP when the
 *  directory holds a log already). */
int cluster__bootstrap_conf(struct raft *r, const struct cluster_member *members, size_t n);

#endif /* CLUSTER_LOG_INT_H */

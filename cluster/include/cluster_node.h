/*
 * This host as a member of its cluster, inside tallyd: its files loaded
 * (cluster_state.h), the replicated log opened on tallyd's loop and listening
 * on the host's cluster port (cluster_log.h), and its status for
 * `tally cluster status` (proto_cluster.h). Loop thread only.
 */
#ifndef CLUSTER_NODE_H
#define CLUSTER_NODE_H

#include "cluster_log.h"
#include "cluster_state.h"
#include "proto_cluster.h"

typedef struct cluster_node cluster_node;

/** Joins the cluster DATA belongs to. *out is the caller's, release with
 *  cluster_node_close(). TALLY_OK, TALLY_ENOTFOUND (DATA is not in a cluster),
 *  TALLY_EKEYMODE, TALLY_ECORRUPT, TALLY_EIO (the log's files or its port: logged) or
 *  TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_node_open(uv_loop_t *loop, const char *data, unsigned election_ms,
                                       cluster_node **out /* OUT */);
/** The cluster as this host sees it now. */
void cluster_node_status(cluster_node *n, struct proto_cluster_status *out /* OUT */);
/** Leaves the log (nothing is changed in the cluster: the member stays a member); cb(data)
 *  once everything is closed and n freed. */
void cluster_node_close(cluster_node *n, void (*cb)(void *data), void *data);

/** `tally cluster init`: writes the first configuration of a new log into DIR (pristine)
 *  with `self` its only voter. Runs a loop of its own; any thread. TALLY_OK, TALLY_EEXIST
 *  (DIR holds a log already) or TALLY_EIO (logged). */
TALLY_MUST_CHECK int cluster_log_bootstrap(const char *dir, const struct cluster_hostkey *key,
                                           const struct cluster_member *self);

#endif /* CLUSTER_NODE_H */

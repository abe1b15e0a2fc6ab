/*
 * The configuration (tally.db) on the log, inside tallyd's node: node_config.c applies the
 * CONFIG records and answers the ADMIN requests about them; node.c hands it the records
 * and its close, node_join.c the copy a new member gets.
 */
#ifndef CLUSTER_CONFIG_INT_H
#define CLUSTER_CONFIG_INT_H

#include "cluster_node_int.h"

/* CONFIG: 'C' | request id (8: the leader's, to answer its asker) | changeset. */
#define RECORD_CONFIG 'C'
/* ADMIN requests after ADMIN_LEAVE (1): CONFIG (2) | changeset, answered OK | index (8) once
 * committed; CONFIG_WAIT (3) | index (8), answered OK | applied (8) once this member's
 * tally.db holds that record. */
#define ADMIN_CONFIG      2
#define ADMIN_CONFIG_WAIT 3

/** A committed CONFIG record (after its type byte), the log's `index`-th batch: applied to
 *  tally.db off the loop, in log order; the leader answers the member that asked for it. */
void cluster__config_apply(cluster_node *n, uint64_t index, const uint8_t *p, size_t len);
/** ADMIN CONFIG or CONFIG_WAIT (msg from its kind byte on). TALLY_OK (answered now or
 *  later) or TALLY_EPROTO. */
int cluster__config_admin(cluster_node *n, uint64_t token, const uint8_t *msg, size_t len);
/** Whether a copy of tally.db fits in a JOIN answer now; if not, why into why[cap]. */
bool cluster__config_fits(cluster_node *n, char *why, size_t cap);
/** Answers JOIN `token` (member id) with a copy of tally.db taken after every CONFIG record
 *  before its MEMBER record applied (cluster__join_answer), or refuses it. */
void cluster__config_copy(cluster_node *n, uint64_t token, uint64_t id);
/** The JOIN answer: the member id, the deployment key, the members and the copy. */
void cluster__join_answer(cluster_node *n, uint64_t token, uint64_t id, const uint8_t *config,
                          size_t config_len, uint64_t config_index);
/** Whether committed CONFIG records are not in tally.db yet (queued, being written, or
 *  stalled): no snapshot may be taken then, or a restart would never apply them. */
bool cluster__config_pending(const cluster_node *n);
/** Ends the configuration's work once the log is closed (its last write finishes first).
 *  True while that runs: cluster__node_maybe_free runs again once it is done. */
bool cluster__config_close(cluster_node *n);

#endif /* CLUSTER_CONFIG_INT_H */

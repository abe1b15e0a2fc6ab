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

/* The answer to a JOIN: its first byte. */
enum cluster_join_status {
    CLUSTER_JOIN_OK = 0,
    CLUSTER_JOIN_REFUSED = 1,    /* the invite is unknown, used or expired */
    CLUSTER_JOIN_NOT_LEADER = 2, /* invites are taken by the leader: invite from there */
    CLUSTER_JOIN_CONFLICT = 3,   /* a member has this address or key */
    CLUSTER_JOIN_BUSY = 4,       /* too many members or joins, or leadership moved: retry */
};

/** A member as MEMBER records and JOIN answers carry it: id (8, big-endian), role (1),
 *  address length (1), address, key (32). Its length; out has room for
 *  10 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES bytes. */
size_t cluster_member_encode(uint8_t *out, const struct cluster_member *m, enum cluster_role role);
/** The reverse; *used the bytes it took. TALLY_OK or TALLY_EPROTO. */
TALLY_MUST_CHECK int cluster_member_decode(const uint8_t *p, size_t len,
                                           struct cluster_member *m /* OUT */,
                                           enum cluster_role *role /* OUT */,
                                           size_t *used /* OUT */);

/* A join code: the inviting host's address and key, and a one-time secret. */
struct cluster_invite {
    char address[CLUSTER_ADDR_MAX];
    uint8_t pk[CLUSTER_KEY_BYTES];
    uint8_t secret[32];
};

/** The printable code of inv ("tlyj1-" and URL-safe base64) into out. */
void cluster_invite_code(const struct cluster_invite *inv, char *out, size_t cap);
/** Parses a join code. TALLY_OK or TALLY_EINVAL. */
TALLY_MUST_CHECK int cluster_invite_parse(const char *code, struct cluster_invite *out /* OUT */);

/* What a join brings home. */
struct cluster_join_result {
    uint64_t id;
    uint8_t deployment_key[32];
    struct cluster_state st; /* every member, this host included; st.self = id */
    char message[256];       /* a refusal's reason */
    uint8_t *config;         /* the leader's tally.db (tally_malloc: cluster_join_result_release) */
    size_t config_len;
    uint64_t config_index; /* the last CONFIG record the copy holds (0: none) */
};

/* A JOIN answer carries a copy of the leader's tally.db in one channel message: the copy may
 * have at most this many bytes (a join is refused with the reason when it has more). */
#define CLUSTER_JOIN_CONFIG_MAX (CLUSTER_CHAN_MSG_MAX - 4096)
/* A change of the configuration is one log record: its changeset may have at most this many
 * bytes (cluster_log_append takes at most half a channel message). */
#define CLUSTER_CONFIG_MAX (CLUSTER_CHAN_MSG_MAX / 2 - 16)

/** `tally cluster join`: dials the inviting host, proves `key`, presents the invite and waits
 *  for the answer (a loop of its own, timeout_ms at most). TALLY_OK (out filled),
 *  TALLY_EUNAUTH (refused: out->message says why), TALLY_EUNAVAIL (no answer) or
 *  TALLY_EPROTO. */
TALLY_MUST_CHECK int cluster_join(const struct cluster_invite *inv,
                                  const struct cluster_hostkey *key, const char *listen,
                                  enum cluster_role role, uint32_t timeout_ms,
                                  struct cluster_join_result *out /* OUT */);
/** Frees what a join brought (the copy of tally.db); r itself is the caller's. */
void cluster_join_result_release(struct cluster_join_result *r);

/** Joins the cluster DATA belongs to. *out is the caller's, release with
 *  cluster_node_close(). TALLY_OK, TALLY_ENOTFOUND (DATA is not in a cluster),
 *  TALLY_EKEYMODE, TALLY_ECORRUPT, TALLY_EIO (the log's files or its port: logged) or
 *  TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_node_open(uv_loop_t *loop, const char *data, unsigned election_ms,
                                       unsigned snapshot_every, cluster_node **out /* OUT */);
/** The cluster as this host sees it now. */
void cluster_node_status(cluster_node *n, struct proto_cluster_status *out /* OUT */);
/* Lease frames between this host's tallyd and the leader's: the leader's supervisors decide
 * for every member's children. */
struct cluster_lease_cbs {
    /** A frame from member's children (member != 0: this host leads), or from the leader for
     *  this host's children (member 0). Valid during the call. */
    void (*on_frame)(void *ctx, uint64_t member, const char *tenant, const uint8_t *frame,
                     size_t len);
    /** The leader's supervisor of `tenant` went away; NULL: the link to the leader is gone. */
    void (*on_down)(void *ctx, const char *tenant);
    /** This host leads now or not, and whether its link to the leader is up. */
    void (*on_role)(void *ctx, bool leading, bool link_up);
    void *ctx;
};
/** Where lease frames from the cluster go (copied); on_role is called at once. */
void cluster_node_set_lease(cluster_node *n, const struct cluster_lease_cbs *cbs);
/** This member's id. */
uint64_t cluster_node_self(const cluster_node *n);
/** Sends a lease frame of `tenant`: member 0, to the leader; else (this host leads) to that
 *  member. TALLY_OK or TALLY_EUNAVAIL (no link). */
int cluster_node_lease_send(cluster_node *n, uint64_t member, const char *tenant,
                            const uint8_t *frame, size_t len);
/** Leader: `tenant`'s supervisor went away; every member linked is told. */
void cluster_node_lease_down(cluster_node *n, const char *tenant);
/** Leader: appends one record of `tenant`'s journal (op and body as a supervisor's BATCH
 *  carries them, proto_lease.h) to the log, as a LEDGER record every member writes into its
 *  copy of the tenant's journal; op 0 appends a barrier (no body; with a tenant, done gets
 *  TALLY_EUNAVAIL when this member's copy of its journal is broken once the barrier applied:
 *  no supervisor may start from it). done as cluster_log_append's: TALLY_OK once committed
 *  and applied here. */
TALLY_MUST_CHECK int cluster_node_ledger_append(cluster_node *n, const char *tenant, uint8_t op,
                                                const uint8_t *body, size_t len,
                                                cluster_log_done_fn done, void *req_data);
/** Leaves the log (nothing is changed in the cluster: the member stays a member); cb(data)
 *  once everything is closed and n freed. */
void cluster_node_close(cluster_node *n, void (*cb)(void *data), void *data);

/** `tally cluster init`: writes the first configuration of a new log into DIR (pristine)
 *  with `self` its only voter. Runs a loop of its own; any thread. TALLY_OK, TALLY_EEXIST
 *  (DIR holds a log already) or TALLY_EIO (logged). */
TALLY_MUST_CHECK int cluster_log_bootstrap(const char *dir, const struct cluster_hostkey *key,
                                           const struct cluster_member *self);

/** `tally cluster leave`: asks the leader (as this host, `key`) to remove member id, and waits
 *  until that is committed. TALLY_OK, TALLY_EUNAUTH (refused: message says why),
 *  TALLY_EUNAVAIL (no answer) or TALLY_EPROTO. */
TALLY_MUST_CHECK int cluster_admin_leave(const struct cluster_member *leader,
                                         const struct cluster_hostkey *key, uint64_t id,
                                         uint32_t timeout_ms, char *message, size_t cap);

/** A `tally` change command in a cluster: asks member m (as this host, `key`) to append the
 *  changeset (borrowed, at most CLUSTER_CONFIG_MAX bytes) as a CONFIG record, and waits until
 *  it is committed: *index is its index in the log. TALLY_OK, TALLY_EBUSY (m does not lead
 *  now: ask another member), TALLY_EUNAUTH (refused: message says why), TALLY_EUNAVAIL (no
 *  answer: m is down, or it lost its majority after it took the change, which may then still
 *  be applied: message says which) or TALLY_EPROTO. */
TALLY_MUST_CHECK int cluster_admin_config(const struct cluster_member *m,
                                          const struct cluster_hostkey *key,
                                          const uint8_t *changeset, size_t len, uint32_t timeout_ms,
                                          uint64_t *index /* OUT */, char *message, size_t cap);
/** Asks member m whether its tally.db holds CONFIG record `index` yet, and waits until it does
 *  (timeout_ms at most). TALLY_OK, TALLY_EUNAVAIL (no answer in time), TALLY_EUNAUTH or
 *  TALLY_EPROTO. */
TALLY_MUST_CHECK int cluster_admin_config_wait(const struct cluster_member *m,
                                               const struct cluster_hostkey *key, uint64_t index,
                                               uint32_t timeout_ms);

#endif /* CLUSTER_NODE_H */

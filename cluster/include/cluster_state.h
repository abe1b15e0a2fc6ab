/*
 * A host's cluster files, under DATA/cluster/ (0700):
 *   host.key   this host's static secret key ("tally-host-key 1" and 64 hex digits), 0600
 *   members    who is in the cluster as this host knows it: a versioned text file
 *              ("tally-cluster 1", "self ID", one "member ID ADDRESS ROLE KEY" line each,
 *              "next ID": no member gets an id below it any more)
 *   raft/      libraft's files (cluster_log.h)
 * A data dir without DATA/cluster/members is a single host. Files are written to a
 * temporary name, synced and renamed, so a crash leaves the old file or the new one.
 * Any thread; not safe against two writers (the `tally` command and tallyd take
 * turns: tallyd writes members, the command writes them only before tallyd runs).
 */
#ifndef CLUSTER_STATE_H
#define CLUSTER_STATE_H

#include "cluster_net.h"

#define CLUSTER_MEMBERS_MAX 16

enum cluster_role {
    CLUSTER_ROLE_VOTER = 0, /* votes and holds the ledgers */
    CLUSTER_ROLE_FRONT = 1, /* decides from leases only: never votes */
};

struct cluster_state {
    uint64_t self;
    /* The lowest id no member ever had: a member that left keeps its id forever (a host that
     * joins again is a new member, with new child counters: an old id would make its children
     * the dead host's, answered from their duplicate windows). Written as "next ID" in the
     * members file; a file without it (or below its members) reads as the highest id + 1. */
    uint64_t next_id;
    size_t n;
    struct cluster_member members[CLUSTER_MEMBERS_MAX];
    enum cluster_role roles[CLUSTER_MEMBERS_MAX];
};

/** "voter" or "front". */
const char *cluster_role_name(enum cluster_role r);
/** Parses "voter" or "front". TALLY_OK or TALLY_EINVAL. */
TALLY_MUST_CHECK int cluster_role_parse(const char *s, enum cluster_role *out /* OUT */);

/** DATA/cluster/NAME into out. TALLY_OK or TALLY_ETOOBIG. */
TALLY_MUST_CHECK int cluster_path(const char *data, const char *name, char *out, size_t cap);
/** True iff DATA is in a cluster (DATA/cluster/members exists). */
bool cluster_state_exists(const char *data);
/** Makes DATA/cluster/ and DATA/cluster/raft/, writes key as host.key and s as members.
 *  TALLY_OK, TALLY_EEXIST (already in a cluster: nothing changed) or TALLY_EIO. */
TALLY_MUST_CHECK int cluster_state_create(const char *data, const struct cluster_hostkey *key,
                                          const struct cluster_state *s);
/** Reads host.key and members. TALLY_OK, TALLY_ENOTFOUND (not in a cluster),
 *  TALLY_EKEYMODE (host.key readable by others), TALLY_ECORRUPT (a file does not parse)
 *  or TALLY_EIO. */
TALLY_MUST_CHECK int cluster_state_load(const char *data, struct cluster_hostkey *key /* OUT */,
                                        struct cluster_state *s /* OUT */);
/** Replaces members with s. TALLY_OK or TALLY_EIO. */
TALLY_MUST_CHECK int cluster_state_save(const char *data, const struct cluster_state *s);
/** Adds a one-time invite: BLAKE2b of `secret` and its expiry (Unix ms) to DATA/cluster/invites
 *  (expired ones are dropped). TALLY_OK or TALLY_EIO. */
TALLY_MUST_CHECK int cluster_invite_add(const char *data, const uint8_t secret[32], int64_t now_ms,
                                        int64_t expires_ms);
/** Uses up the invite of `secret`: TALLY_OK (it was there and unexpired: removed),
 *  TALLY_ENOTFOUND (unknown, used or expired) or TALLY_EIO. */
TALLY_MUST_CHECK int cluster_invite_take(const char *data, const uint8_t secret[32],
                                         int64_t now_ms);
/** True iff an unexpired invite waits. */
bool cluster_invites_pending(const char *data, int64_t now_ms);
/** Member id was given (now or once): s->next_id is above it from now on. True iff it moved. */
bool cluster_state_note_id(struct cluster_state *s, uint64_t id);
/** The entry of member id in s, or NULL. */
const struct cluster_member *cluster_state_member(const struct cluster_state *s, uint64_t id);

#endif /* CLUSTER_STATE_H */

/*
 * The configuration database (DATA/tally.db): plans, endpoint policies,
 * tenants and links (hashes only, never tokens). Counts live elsewhere: in
 * each tenant's supervisor ledger and child counter files. Writers use one transaction
 * per command so a failed command changes nothing.
 *
 * Header-wide rule: handles come from store_config_open(); strings are
 * borrowed for the call; out-structs are caller-owned.
 */
#ifndef STORE_CONFIG_H
#define STORE_CONFIG_H

#include "store.h"

#define STORE_CONFIG_FILE "tally.db"
#define STORE_KEY_FILE    "secret.key"

/* DIR/tally.db as its files show it: every commit changes the stamp. */
struct store_config_stamp {
    int64_t v[9]; /* the file's inode; its WAL's inode, size, checkpoint sequence, salts; the
                     file's size and modification time; the WAL index's change counter */
};

/** Whether DIR/tally.db changed since *stamp was taken, without a connection or a lock:
 *  true when the file's inode, size or time, its WAL's inode, size or header (a new
 *  generation after a checkpoint has new salts), or the change counter in its WAL index
 *  differ; *stamp is then updated. A connection held
 * open costs every reader of the shared file (the kernel keeps one list of locks on it, and a
 *  thousand supervisors make it long); this costs a stat, an open and a read. */
bool store_config_stamp_changed(const char *dir, struct store_config_stamp *stamp);
/** Opens DIR/tally.db (must exist unless `create`). Release with store_db_close(). */
TALLY_MUST_CHECK int store_config_open(const char *dir, bool create, store_db **out /* OUT */);

/* In a cluster (store/config_changes.c), tally.db changes only by the log's CONFIG records:
 * a change command's transaction is captured as an SQLite changeset and rolled back, the
 * changeset goes to the log, and every member applies each committed record in log order,
 * noting the record's index in the file (table cluster_applied) so that none applies twice. */

/** Where a captured change goes: fn(ctx, db, changeset, len) (changeset valid until return).
 *  Its result is the commit's: TALLY_OK once the change is in force, else why not. */
typedef int (*store_config_commit_fn)(void *ctx, store_db *db, const uint8_t *changeset,
                                      size_t len);
/** From now on every transaction of db (a tally.db handle) records its changes from its
 *  BEGIN, and its COMMIT rolls the transaction back and calls fn (ctx borrowed while db is
 *  open) with them instead; a transaction that changed nothing calls nothing. TALLY_OK or
 *  TALLY_ENOMEM. */
TALLY_MUST_CHECK int store_config_capture(store_db *db, store_config_commit_fn fn, void *ctx);

/* What applying one CONFIG record did. */
struct store_config_outcome {
    bool skipped;      /* at or below the applied index already: nothing done */
    bool aborted;      /* it would leave a row without its parent: none of it applied */
    bool malformed;    /* not a changeset: nothing applied */
    unsigned replaced; /* rows whose values differed here: the record's values won */
    unsigned omitted;  /* rows not found, or against a constraint: left out */
};
/** Applies CONFIG record `index` (its changeset) inside the caller's transaction and notes
 *  `index` as applied; a record at or below the applied index does nothing. The conflict
 *  policy makes the same record on the same file give the same file on every member: a row
 *  whose values differ takes the record's, a row not found or against a constraint is left
 *  out, a change that would orphan a row is left out whole. TALLY_OK (*out says what was
 *  done; a skipped, aborted or malformed record is OK: the index moves on) or a storage
 *  error (roll back and try again later). */
TALLY_MUST_CHECK int store_config_apply(store_db *db, uint64_t index, const uint8_t *changeset,
                                        size_t len, struct store_config_outcome *out /* OUT */);
/** The index of the last CONFIG record applied to db (0: none). */
TALLY_MUST_CHECK int store_config_applied(store_db *db, uint64_t *out /* OUT */);
/** A consistent copy of the whole file (one read transaction) and the applied index it
 *  reflects: *bytes from tally_malloc, release with tally_free. TALLY_OK, TALLY_ETOOBIG
 *  (larger than max bytes: *len says how large) or a storage error. */
TALLY_MUST_CHECK int store_config_copy(store_db *db, size_t max, uint8_t **bytes /* OUT */,
                                       size_t *len /* OUT */, uint64_t *index /* OUT */);
/** Puts a copy (store_config_copy's bytes, borrowed) in place as DIR/tally.db with applied
 *  index `index`: written to a temporary file, opened and checked there (migrated if it is
 *  of an older format), synced, then renamed over DIR/tally.db. No process may have
 *  DIR/tally.db open. TALLY_OK, TALLY_ECORRUPT (not a tally.db), TALLY_ESCHEMA (newer than
 *  this binary) or TALLY_EIO. */
TALLY_MUST_CHECK int store_config_install(const char *dir, const uint8_t *bytes, size_t len,
                                          uint64_t index);

/** Makes the open tally.db `db` a snapshot's copy (store_config_copy's bytes, borrowed) that
 *  reflects applied index `index`, in place (every process that has the file open sees it),
 *  unless db has applied that index already. TALLY_OK, TALLY_ECORRUPT (not a database),
 *  TALLY_ESCHEMA (another schema version) or a storage error. */
TALLY_MUST_CHECK int store_config_restore(store_db *db, const uint8_t *bytes, size_t len,
                                          uint64_t index);

/* Plans. */
TALLY_MUST_CHECK int store_plan_put(store_db *db, const struct tenant_plan *p);
TALLY_MUST_CHECK int store_plan_get(store_db *db, const char *name, struct tenant_plan *out);
/** Deletes a plan with no tenant and its plan-specific endpoints; a plan in use is TALLY_EINUSE. */
TALLY_MUST_CHECK int store_plan_delete(store_db *db, const char *name);
typedef int (*store_plan_cb)(void *ctx, const struct tenant_plan *p);
/** Calls cb for each plan by name; a non-zero return from cb stops and is returned. */
TALLY_MUST_CHECK int store_plan_each(store_db *db, store_plan_cb cb, void *ctx);

/* Endpoint policies: plan "" is the default for every plan. */
TALLY_MUST_CHECK int store_endpoint_put(store_db *db, const struct tenant_endpoint *e);
TALLY_MUST_CHECK int store_endpoint_get(store_db *db, const char *plan, const char *name,
                                        struct tenant_endpoint *out);
/** The policy that applies to `name` for tenants on `plan`: the plan's own, else the default. */
TALLY_MUST_CHECK int store_endpoint_resolve(store_db *db, const char *plan, const char *name,
                                            struct tenant_endpoint *out);
TALLY_MUST_CHECK int store_endpoint_delete(store_db *db, const char *plan, const char *name);
/** Distinct endpoint names among every policy (defaults and plan overrides) into *out:
 *  at most TENANT_MAX_ENDPOINTS, checked by `endpoint set` and `apply`. */
TALLY_MUST_CHECK int store_endpoint_names(store_db *db, int64_t *out /* OUT */);
/** Other policies (other plans) of e's endpoint whose key is not e's into *out (one
 *  endpoint, one key: checked by `endpoint set` inside its transaction). */
TALLY_MUST_CHECK int store_endpoint_key_other(store_db *db, const struct tenant_endpoint *e,
                                              int64_t *out /* OUT */);
typedef int (*store_endpoint_cb)(void *ctx, const struct tenant_endpoint *e);
TALLY_MUST_CHECK int store_endpoint_each(store_db *db, store_endpoint_cb cb, void *ctx);

/* Tenants. What a tenant overrides of its plan (a custom contract), as bits of `overrides`. */
#define STORE_OVR_LIMITS      TENANT_OVR_LIMITS
#define STORE_OVR_LINK_LIMITS TENANT_OVR_LINK_LIMITS
#define STORE_OVR_CONCURRENCY TENANT_OVR_CONCURRENCY
struct store_tenant {
    char id[TENANT_NAME_MAX + 1];
    char plan[TENANT_NAME_MAX + 1];
    int64_t created_ms;
    int64_t links_live;  /* filled by get/each */
    int64_t billing_day; /* 1..28: its months start at 00:00 UTC on that day */
    uint32_t overrides;  /* STORE_OVR_*: the values below replace the plan's */
    struct tenant_limits limits, link_limits;
    int64_t concurrency;
};
TALLY_MUST_CHECK int store_tenant_add(store_db *db, const char *id, const char *plan,
                                      int64_t now_ms);
TALLY_MUST_CHECK int store_tenant_get(store_db *db, const char *id, struct store_tenant *out);
/** Moves tenant `id` to `plan` (which must exist: TALLY_ENOTFOUND otherwise, as for an
 *  unknown tenant). Call inside a transaction that has checked the tenant's links. */
TALLY_MUST_CHECK int store_tenant_set_plan(store_db *db, const char *id, const char *plan);
/** Sets the billing day (1..28, else TALLY_EINVAL) of tenant `id`. */
TALLY_MUST_CHECK int store_tenant_set_billing_day(store_db *db, const char *id, int64_t day);
/** Writes t->overrides of tenant t->id with the values they select (the others go back to the
 *  plan's). TALLY_ENOTFOUND for an unknown tenant. */
TALLY_MUST_CHECK int store_tenant_set_overrides(store_db *db, const struct store_tenant *t);
/** The plan as tenant `t` has it: its overrides in place of the plan's values and every month
 *  limit on its billing day. */
void store_tenant_effective(const struct store_tenant *t, const struct tenant_plan *plan,
                            struct tenant_plan *out /* OUT */);
/** Removes the tenant and its links. */
TALLY_MUST_CHECK int store_tenant_remove(store_db *db, const char *id);
typedef int (*store_tenant_cb)(void *ctx, const struct store_tenant *t);
TALLY_MUST_CHECK int store_tenant_each(store_db *db, store_tenant_cb cb, void *ctx);

/* Links. */
#define STORE_LINK_ENDPOINTS_MAX 1024 /* comma-separated endpoint names, "" = every endpoint */
struct store_link {
    char id[TENANT_LINK_ID_LEN + 1];
    char tenant[TENANT_NAME_MAX + 1];
    unsigned char hash[TENANT_HASH_BYTES];
    char endpoints[STORE_LINK_ENDPOINTS_MAX];
    int64_t created_ms;
    int64_t expires_ms; /* 0 = never */
    int64_t revoked_ms; /* 0 = live */
};
TALLY_MUST_CHECK int store_link_insert(store_db *db, const struct store_link *l);
/** Links of `tenant` neither revoked nor expired at now_ms into *out (for the
 *  plan's --max-links; call inside the transaction that inserts). */
TALLY_MUST_CHECK int store_link_live_count(store_db *db, const char *tenant, int64_t now_ms,
                                           int64_t *out /* OUT */);
TALLY_MUST_CHECK int store_link_by_hash(store_db *db, const unsigned char hash[TENANT_HASH_BYTES],
                                        struct store_link *out);
TALLY_MUST_CHECK int store_link_by_id(store_db *db, const char *id, struct store_link *out);
/** Marks the link revoked at now_ms; already revoked is TALLY_OK (idempotent). */
TALLY_MUST_CHECK int store_link_revoke(store_db *db, const char *id, int64_t now_ms);
typedef int (*store_link_cb)(void *ctx, const struct store_link *l);
TALLY_MUST_CHECK int store_link_each(store_db *db, const char *tenant, store_link_cb cb, void *ctx);
/** True iff the link is live at now_ms and may call `endpoint`. */
bool store_link_allows(const struct store_link *l, const char *endpoint, int64_t now_ms);

#endif /* STORE_CONFIG_H */

/*
 * store_snapshot: an immutable in-memory copy of the configuration (plans,
 * endpoint policies, tenants, links by token hash) for the request path, so
 * auth and policy lookups cost a hash probe and no I/O. tallyd loads one at
 * start and a fresh one whenever the database changes (PRAGMA data_version),
 * then swaps; a supervisor loads the part of its own tenant.
 *
 * Header-wide rules: a snapshot is read-only after load; pointers it returns
 * are valid until store_snapshot_free(). Loading allocates; lookups never do.
 */
#ifndef STORE_SNAPSHOT_H
#define STORE_SNAPSHOT_H

#include "store_config.h"

typedef struct store_snapshot store_snapshot;

struct store_snap_tenant {
    char id[TENANT_NAME_MAX + 1];
    const struct tenant_plan *plan; /* as this tenant has it: overrides in place, months on its
                                       billing day (store_tenant_effective) */
    int64_t billing_day;            /* 1..28 */
    uint32_t overrides;             /* STORE_OVR_* */
    size_t links_at, n_links;       /* its links: a range of the snapshot's, in creation order */
};

struct store_snap_link {
    unsigned char hash[TENANT_HASH_BYTES];
    char id[TENANT_LINK_ID_LEN + 1];
    const struct store_snap_tenant *tenant;
    const char *endpoints; /* comma-separated restriction, "" = every endpoint */
    int64_t expires_ms;    /* 0 = never */
    bool revoked;
};

/** Loads every plan and policy; with `tenant` NULL every tenant and every link, else only
 *  that tenant and its links (a supervisor's copy; an unknown tenant leaves none). One read
 *  transaction, so the copy is consistent. *out is owned by the caller, release with
 *  store_snapshot_free(). */
TALLY_MUST_CHECK int store_snapshot_load(store_db *db, const char *tenant,
                                         store_snapshot **out /* OUT */);
void store_snapshot_free(store_snapshot *s);
/** The link whose token hash is `hash` (live or not), or NULL. */
const struct store_snap_link *store_snapshot_link(const store_snapshot *s,
                                                  const unsigned char hash[TENANT_HASH_BYTES]);
/** The links of tenant `t` (revoked and expired ones too), *n of them, in creation order. */
const struct store_snap_link *store_snapshot_tenant_links(const store_snapshot *s,
                                                          const struct store_snap_tenant *t,
                                                          size_t *n /* OUT */);
/** The link with id `id`, or NULL. */
const struct store_snap_link *store_snapshot_link_by_id(const store_snapshot *s, const char *id);
/** True iff the link is live at now_ms and may call `endpoint`. */
bool store_snap_link_allows(const struct store_snap_link *l, const char *endpoint, int64_t now_ms);
const struct store_snap_tenant *store_snapshot_tenant(const store_snapshot *s, const char *id);
/** The policy of `endpoint` for tenants on `plan`: the plan's own, else the default. */
const struct tenant_endpoint *store_snapshot_endpoint(const store_snapshot *s, const char *plan,
                                                      const char *endpoint);
/** The policy of `endpoint` as tenant `t` has it: store_snapshot_endpoint's, with its months on
 *  t's billing day, copied into *out. False (out untouched) when there is none. */
bool store_snapshot_endpoint_for(const store_snapshot *s, const struct store_snap_tenant *t,
                                 const char *endpoint, struct tenant_endpoint *out /* OUT */);
/** Binds every month limit of `e` to `billing_day`. */
void store_endpoint_bind_month(struct tenant_endpoint *e, int64_t billing_day);
/** Every endpoint policy (for a supervisor's ledger). */
const struct tenant_endpoint *store_snapshot_endpoints(const store_snapshot *s, size_t *n);
size_t store_snapshot_link_count(const store_snapshot *s);
/** The database's data_version when the snapshot was read (cheap change check). */
int64_t store_snapshot_version(const store_snapshot *s);
/** The current PRAGMA data_version of `db` (changes when another connection commits). */
int64_t store_data_version(store_db *db);

#endif /* STORE_SNAPSHOT_H */

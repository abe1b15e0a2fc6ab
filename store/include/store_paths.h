/*
 * Where a tenant's files live, and the locks that keep one authority per
 * tenant and one tallyd per data dir. Names are validated before they become
 * paths ([a-z0-9][a-z0-9_-]{0,62}), so no input can walk out of the data dir.
 *
 *   DATA/tallyd.lock                       held by the running tallyd
 *   DATA/tenants/T/                        0700, created on the tenant's first request
 *   DATA/tenants/T/supervisor.lock         held by T's supervisor
 *   DATA/tenants/T/ledger.db               T's supervisor ledger
 *   DATA/tenants/T/endpoints/E.db          the child counter of (T, E)
 */
#ifndef STORE_PATHS_H
#define STORE_PATHS_H

#include <stddef.h>

#include "tally_common.h"

#define STORE_PATH_MAX 4096

/** Writes DATA/tenants/T[/SUFFIX] into buf; TALLY_ENAME for a bad tenant name,
 *  TALLY_ETOOBIG when it does not fit. `suffix` may be NULL. */
TALLY_MUST_CHECK int store_path_tenant(const char *data, const char *tenant, const char *suffix,
                                       char *buf, size_t len);
/** DATA/tenants/T/endpoints/E.db, names validated. */
TALLY_MUST_CHECK int store_path_endpoint_db(const char *data, const char *tenant,
                                            const char *endpoint, char *buf, size_t len);
/** Creates DATA/tenants/T and DATA/tenants/T/endpoints (0700) if missing. */
TALLY_MUST_CHECK int store_tenant_dirs(const char *data, const char *tenant);
/** Creates DATA/callers (0700) if missing and writes its path into buf: the caller
 *  authorities' files (sup_callers.h). */
TALLY_MUST_CHECK int store_callers_dir(const char *data, char *buf, size_t len);
/** DATA/pool: new ledger and child files made ahead (store_pool_use). */
TALLY_MUST_CHECK int store_path_pool(const char *data, char *buf, size_t len);
/** Takes an exclusive, non-blocking lock on `path` (created 0600) and keeps it
 *  for the life of the process (the descriptor is returned in *fd, close-on-exec).
 *  TALLY_ELOCKED when another process holds it. The lock dies with the process,
 *  kill -9 included, so a stale lock file never blocks a restart. */
TALLY_MUST_CHECK int store_lock_take(const char *path, int *fd /* OUT */);

#endif /* STORE_PATHS_H */

/*
 * The members' copies compared, for the cluster suites that run real tallyds: every tenant's
 * ledger copy (DATA/tenants/T/ledger.db: the log position it holds and its journal records,
 * read with SQLite), what `tally usage` reads from it, tally.db as `tally export` prints it, and
 * whether the log has been compacted into a snapshot. Everything here takes a data dir only:
 * `tally` reaches a host's tallyd over DATA/tally.sock, which a suite reaches from the root
 * network namespace too.
 */
#ifndef CLUSTER_DIGEST_H
#define CLUSTER_DIGEST_H

#include <stdbool.h>
#include <stddef.h>

/** One line per tenant whose copy holds anything, tenants sorted by name:
 *  "TENANT applied N records R hash H" (H: FNV-1a over the records in journal order), each
 *  copy read in one transaction. Returns 0, or -1 when a copy could not be read (out then says
 *  which and why). */
int cluster_digest(const char *data, char *out, size_t cap);
/** Waits up to timeout_ms until cluster_digest() of every data dir in data[0..n-1] succeeds and
 *  is the same, with at least one tenant in it. Returns the ms it took, or -1 after the timeout
 *  (the last two copies that differed printed). */
long cluster_digests_agree(const char *const *data, int n, long timeout_ms);
/** `tally usage TENANT` on DATA: the ledger as DATA's copy counts it. Returns tally's exit
 *  status; out is "" when it is not 0 (cluster_last_error() says why). */
int cluster_usage(const char *data, const char *tenant, char *out, size_t cap);
/** What the last cluster_usage() that failed printed on stderr. */
const char *cluster_last_error(void);
/** The sum of the admitted figures of the rows of `tally usage` output whose scope is `scope`
 *  ("plan", "endpoint", "link") and, when endpoint is not NULL, whose endpoint is `endpoint`;
 *  -1 when no row matches. */
long long cluster_usage_sum(const char *usage, const char *scope, const char *endpoint);
/** `tally export` on DATA: its tally.db ("" when it fails). */
void cluster_export(const char *data, char *out, size_t cap);
/** True when DATA/cluster/raft holds a snapshot file (libraft's "snapshot-TERM-INDEX-..."). */
bool cluster_has_snapshot(const char *data);

#endif /* CLUSTER_DIGEST_H */

/*
 * Grant latencies as tallyd reports them, for the cluster suites: the histogram
 * tally_lease_rtt_seconds on a host's /metrics (read inside its namespace), the waits from an
 * ACQUIRE's first send to its answer in a front's debug log, and quantiles of samples.
 */
#ifndef GRANT_FIGURES_H
#define GRANT_FIGURES_H

#include <stddef.h>
#include <stdint.h>

#include "netns_util.h"

#define GRANT_HIST_BUCKETS 19 /* front_obs.c: 18 bounds, then +Inf */

/* Grants as the follower's front saw them in its debug log: for each ACQUIRE, its first
 * lease_sent to the first lease_received (GRANT or DENY) of its seq. */
struct grants {
    int64_t *ms;
    size_t n;
    int retransmits; /* ACQUIREs sent again before their answer */
};

/** The cumulative buckets of tally_lease_rtt_seconds on h, whose HTTP listener is http_addr
 *  inside its namespace. */
void grant_rtt_hist(const struct netns_host *h, const char *http_addr,
                    uint64_t cum[GRANT_HIST_BUCKETS]);
/** The upper bound in ms of the bucket holding the q-quantile of the observations between two
 *  reads a and b (INT64_MAX: past the last bound, -1: none). */
int64_t grant_hist_quantile_ms(const uint64_t a[GRANT_HIST_BUCKETS],
                               const uint64_t b[GRANT_HIST_BUCKETS], double q);
/** The grants in the debug log at path from byte `from` on (g->ms allocated: free it). */
void grants_from_log(const char *path, long from, struct grants *g);
/** The q-quantile of v[0..n-1] (sorted here): the smallest value with at least q of them at or
 *  below it; -1 for none. */
int64_t grant_quantile(int64_t *v, size_t n, double q);

#endif

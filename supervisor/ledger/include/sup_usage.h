/*
 * sup_usage: what a tenant's ledger counted, per budget and window, for `tally usage` (billing).
 * It reads the tenant's journal (DATA/tenants/T/ledger.db) and replays it into a ledger of the
 * tenant's current configuration, as its supervisor does when it starts, so the figures are the
 * ones the supervisor enforces: tokens granted, minus tokens given back, plus degraded debt.
 * Reading never writes: a running supervisor keeps its file, a tenant that never made a
 * request reads as zeros.
 *
 * Header-wide rules: strings are borrowed for the call; rows are valid during the callback.
 */
#ifndef SUP_USAGE_H
#define SUP_USAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "tenant_count.h"

/* One budget's figure for one window of one of its limits. */
struct sup_usage_row {
    enum tenant_scope scope; /* PLAN, LINK, ENDPOINT_TENANT or ENDPOINT_LINK */
    const char *endpoint;    /* "" for plan and link budgets */
    const char *link;        /* "" for plan and tenant-wide endpoint budgets */
    struct tenant_limit limit;
    int64_t start_ms, end_ms; /* the window: [start, end) */
    int64_t admitted;         /* granted - given back + degraded debt in that window */
    uint32_t leases_out;      /* leases still out on the budget: their unused tokens count until
                                 they come back (after 1 s idle, at their deadline at the latest) */
};

typedef int (*sup_usage_fn)(void *ctx, const struct sup_usage_row *row);

/** Calls cb for every budget of `tenant` in data dir `data` and every limit of it: the plan's,
 *  each window endpoint's tenant-wide limits, and the per-link budgets the ledger holds, in the
 *  window holding now_ms or, with `previous`, the one before it. TALLY_OK, TALLY_ENOTFOUND for
 *  an unknown tenant, a store error, or cb's non-zero return. */
TALLY_MUST_CHECK int sup_usage_read(const char *data, const char *tenant, int64_t now_ms,
                                    bool previous, sup_usage_fn cb, void *ctx);

#endif /* SUP_USAGE_H */

/*
 * A fixture for the focused ledger suites (test_sup_ledger.c, test_sup_journal.c): a ledger of
 * tenant "acme" on plan 600/1m + 36000/1h, K = 2, with endpoints search (windows), export
 * (expensive) and smooth (GCRA 60/1m per link), and the journal its records go to.
 */
#ifndef SUP_SIM_FX_H
#define SUP_SIM_FX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sup_lease.h"

#define T0         ((int64_t)1700000000000) /* 20 s into a minute */
#define MINUTE     60000
#define LINK_A     "lnk_000000000000000a"
#define LINK_B     "lnk_000000000000000b"
#define FX_JOURNAL 4096

/* A ledger with its journal, as the process layer keeps it. */
struct fx {
    sup_ledger *l;
    struct sup_ledger_config cfg;
    struct tenant_endpoint eps[3];
    struct sup_record *journal; /* FX_JOURNAL entries */
    size_t nj;
    uint64_t seq[4]; /* per child */
    bool deny_links; /* link_allows refuses LINK_B */
};

void fx_limit(struct tenant_limits *ls, int64_t n, int64_t period_ms);
/** Fills the configuration only (no ledger, no journal). */
void fx_config(struct fx *f);
/** Opens the ledger of the configuration in f->cfg, with an empty journal. */
void fx_start(struct fx *f);
/** fx_config, then fx_start. */
void fx_open(struct fx *f);
/** As fx_open, with kept leases off (l_keep < 0): every grant is what was asked, for T_lease. */
void fx_open_unkept(struct fx *f);
void fx_close(struct fx *f);
/** Handles `m` at `now`; the reply is checked and returned, records appended (count in *records,
 *  which may be NULL). */
struct proto_lease_msg fx_send(struct fx *f, int64_t now, const struct proto_lease_msg *m,
                               size_t *records);
/** Starts a request of `type` from endpoint `child` (0..2), next seq. */
void fx_origin(struct fx *f, struct proto_lease_msg *m, uint8_t type, int child, uint64_t inc);
void fx_hello(struct fx *f, int child, uint64_t inc, int64_t now);
struct proto_lease_msg fx_acquire(struct fx *f, int child, uint64_t inc, const char *link,
                                  int64_t want, int64_t need, int64_t now);
/** An ACQUIRE flagged NEXT (want 1) from endpoint `child` for `link`, at `now`. */
struct proto_lease_msg fx_acquire_next(struct fx *f, int child, uint64_t inc, const char *link,
                                       int64_t now);
/** Starts a HEARTBEAT from child 0 (incarnation 1) on endpoint "search" with debt `a` on
 *  `link_a` and, when link_b is not NULL, debt `b` on `link_b`. */
void fx_heartbeat(struct fx *f, struct proto_lease_msg *m, const char *link_a, int64_t a,
                  const char *link_b, int64_t b);
/** A new ledger of f->cfg that replays f's journal has f's digest. */
void fx_assert_replay(struct fx *f);
/** The plan's cell of `period_ms`. */
struct sup_cell_info fx_plan_cell(struct fx *f, int64_t period_ms);

#endif /* SUP_SIM_FX_H */

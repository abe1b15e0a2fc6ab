/*
 * The supervisor's link table (sup_lease.h): live leases and links past the sizes the tables
 * were made for, growth up to max_links before an idle link is evicted, and debts on new links
 * when the table is full; a replay of the journal agrees each time.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sup_lease.h"
#include "sup_sim_fx.h"
#include "test_support.h"

/* Link `link` takes a lease of 1 at t and returns it used. */
static void
use_one(struct fx *f, const char *link, int64_t t)
{
    struct proto_lease_msg g, m, r;

    g = fx_acquire(f, 0, 1, link, 1, 1, t);
    assert_int_equal(g.type, PROTO_LEASE_GRANT);
    fx_origin(f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = g.grant.lease_id;
    m.ret.used = 1;
    r = fx_send(f, t, &m, NULL);
    assert_int_equal(r.type, PROTO_LEASE_RETURN_ACK);
}

/* More live leases and links than the tables were sized for: they grow, every
 * ACQUIRE is granted, and the journal and a snapshot replay into ledgers sized
 * just as small. */
static void
test_ledger_tables_grow(void **state)
{
    struct sup_records snap = {NULL, 0, 0};
    sup_ledger *again = NULL;
    size_t needed = 0;
    struct fx f;
    char link[32];

    (void)state;
    fx_config(&f);
    f.cfg.max_leases = 2;
    f.cfg.max_links = 2;
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    for (int i = 0; i < 40; i++) {
        struct proto_lease_msg r;
        snprintf(link, sizeof(link), "lnk_%016x", (unsigned)i + 100);
        r = fx_acquire(&f, 0, 1, link, 2, 1, T0 + i);
        assert_int_equal(r.type, PROTO_LEASE_GRANT);
    }
    fx_assert_replay(&f);
    assert_int_equal(sup_ledger_snapshot(f.l, &snap, &needed), TALLY_ETOOBIG);
    snap.v = calloc(needed, sizeof(*snap.v));
    snap.cap = needed;
    assert_int_equal(sup_ledger_snapshot(f.l, &snap, &needed), TALLY_OK);
    assert_int_equal(sup_ledger_open(&f.cfg, &again), TALLY_OK);
    for (size_t i = 0; i < snap.count; i++)
        assert_int_equal(sup_ledger_replay(again, &snap.v[i]), TALLY_OK);
    assert_int_equal(sup_ledger_digest(again), sup_ledger_digest(f.l));
    sup_ledger_close(again);
    free(snap.v);
    fx_close(&f);
}

/* The link table starts small and grows up to max_links before an idle link is evicted:
 * 200 links, each idle once its lease is returned, all stay with the default max_links
 * (4,096), and exactly max_links stay with max_links = 100; a replay agrees either way. */
static void
test_ledger_links_grow_before_eviction(void **state)
{
    static const uint32_t maxes[] = {0, 100};

    (void)state;
    for (size_t c = 0; c < sizeof(maxes) / sizeof(maxes[0]); c++) {
        struct sup_ledger_stats st;
        struct fx f;
        char link[32];

        fx_config(&f);
        f.cfg.max_links = maxes[c];
        fx_start(&f);
        fx_hello(&f, 0, 1, T0);
        for (int i = 0; i < 200; i++) {
            snprintf(link, sizeof(link), "lnk_%016x", (unsigned)i + 1000);
            use_one(&f, link, T0 + i);
        }
        sup_ledger_stats(f.l, &st);
        assert_int_equal(st.links, maxes[c] == 0 ? 200 : maxes[c]);
        fx_assert_replay(&f);
        fx_close(&f);
    }
}

struct link_debt {
    const char *link;
    int64_t debt;
};

static int
find_link_debt(void *ctx, const struct sup_cell_info *c)
{
    struct link_debt *d = ctx;

    if (c->scope == TENANT_SCOPE_LINK && strcmp(c->link, d->link) == 0)
        d->debt += c->debt;
    return 0;
}

static int64_t
link_debt(struct fx *f, const char *link)
{
    struct link_debt d = {link, 0};

    (void)sup_ledger_each_cell(f->l, find_link_debt, &d);
    return d.debt;
}

/* A HEARTBEAT's debts on two links the full table does not hold: each link is made and
 * charged in turn. Made first and charged after, the second link took the first one's place
 * (made a moment before, it held nothing yet, so it was idle), and the first link's debt was
 * charged to the plan and the endpoint only; a replay, whose table had not grown the same
 * way, could keep both. Both links keep their debt, and a replay agrees. */
static void
test_ledger_debt_on_new_links_in_a_full_table(void **state)
{
    struct proto_lease_msg m, r;
    struct fx f;
    int64_t later = T0 + 10 * MINUTE;
    size_t recs;

    (void)state;
    fx_config(&f);
    fx_limit(&f.cfg.plan.link_limits, 100, MINUTE);
    f.cfg.max_links = 2;
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    /* Two links that are idle ten minutes later: the table is full of idle links. */
    for (int i = 0; i < 2; i++) {
        char link[32];

        snprintf(link, sizeof(link), "lnk_%016x", (unsigned)i + 0x100);
        use_one(&f, link, T0 + i);
    }
    fx_heartbeat(&f, &m, LINK_A, 7, LINK_B, 3);
    r = fx_send(&f, later, &m, &recs);
    assert_int_equal(r.type, PROTO_LEASE_HB_ACK);
    assert_int_equal(recs, 1);
    assert_int_equal(link_debt(&f, LINK_A), 7);
    assert_int_equal(link_debt(&f, LINK_B), 3);
    assert_int_equal(fx_plan_cell(&f, MINUTE).debt, 10);
    fx_assert_replay(&f);
    fx_close(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ledger_tables_grow),
        cmocka_unit_test(test_ledger_links_grow_before_eviction),
        cmocka_unit_test(test_ledger_debt_on_new_links_in_a_full_table),
    };

    (void)test_seed();
    return cmocka_run_group_tests_name("sup_ledger_links", tests, NULL, NULL);
}

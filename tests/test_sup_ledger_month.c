/*
 * The supervisor's ledger on calendar months (`N/month`): no lease spans the billing boundary
 * (I3), a refusal waits exactly until it, and a new billing day moves what the running month
 * granted into the new day's month instead of starting it empty (no second allowance), also
 * for a lease that comes back after the change. Cells keep the previous window's figure, also
 * through a snapshot.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>

#include "sup_lease.h"
#include "sup_sim_fx.h"
#include "test_support.h"

#define DAY_MS ((int64_t)86400000)

static int64_t
month_end(int64_t now_ms, int64_t day)
{
    int64_t p = tenant_month_period(day);

    return tenant_window_end_ms(tenant_window_id(now_ms, p), p);
}

/* The fixture with the plan's limits replaced by `n`/month on billing day `day`. */
static void
open_month(struct fx *f, int64_t n, int64_t day)
{
    fx_config(f);
    memset(&f->cfg.plan.limits, 0, sizeof(f->cfg.plan.limits));
    fx_limit(&f->cfg.plan.limits, n, tenant_month_period(day));
    fx_start(f);
}

static void
test_ledger_month_no_lease_spans_the_boundary(void **state)
{
    struct proto_lease_msg r;
    struct fx f;
    int64_t end = month_end(T0, 15);

    (void)state;
    open_month(&f, 1000000, 15);
    fx_hello(&f, 0, 1, end - 3 * DAY_MS);
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 1, end - 700);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_true(r.grant.ttl_ms <= 700);
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 2, end - 100);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.ttl_ms, 100);
    /* Past the boundary the month starts empty. */
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 1, end);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(fx_plan_cell(&f, tenant_month_period(15)).granted, r.grant.n);
    fx_close(&f);
}

static void
test_ledger_month_refusal_waits_for_the_billing_day(void **state)
{
    struct proto_lease_msg r;
    struct fx f;
    int64_t now = T0 + 5 * DAY_MS + 123;

    (void)state;
    open_month(&f, 5, 28);
    fx_hello(&f, 0, 1, now);
    r = fx_acquire(&f, 0, 1, LINK_A, 5, 5, now);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, now + 10);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.scope, TENANT_SCOPE_PLAN);
    assert_int_equal(r.deny.retry_after_ms, month_end(now, 28) - now - 10);
    fx_close(&f);
}

/* Day 1 -> 15 while 5 of 5 are out: the tenant stays refused, until the new day's boundary; the
 * lease's unused tokens still come back to the month that holds them. */
static void
test_ledger_month_new_billing_day_keeps_the_count(void **state)
{
    struct proto_lease_msg r, m;
    struct fx f;
    int64_t now = month_end(T0, 1) + 2 * DAY_MS; /* the 3rd of a month */
    uint64_t lease;

    (void)state;
    open_month(&f, 5, 1);
    fx_hello(&f, 0, 1, now);
    r = fx_acquire(&f, 0, 1, LINK_A, 5, 5, now);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    lease = r.grant.lease_id;
    tenant_limits_bind_month(&f.cfg.plan.limits, 15);
    assert_int_equal(sup_ledger_configure(f.l, &f.cfg.plan, f.eps, 3), TALLY_OK);
    assert_int_equal(fx_plan_cell(&f, tenant_month_period(15)).granted, 5);
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, now + 10);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.retry_after_ms, month_end(now, 15) - now - 10);
    /* The lease returns 3 unused: they are credited to the rekeyed month. */
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = lease;
    m.ret.used = 2;
    r = fx_send(&f, now + 20, &m, NULL);
    assert_int_equal(fx_plan_cell(&f, tenant_month_period(15)).credited, 3);
    r = fx_acquire(&f, 0, 1, LINK_A, 3, 3, now + 30);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, now + 40);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    fx_close(&f);
}

/* The billing day changed while the supervisor was down: its snapshot, written under day 1, is
 * replayed into a ledger configured with day 15, and the month's count moves along. */
static void
test_ledger_month_snapshot_under_an_old_billing_day(void **state)
{
    struct proto_lease_msg r;
    struct sup_records snap;
    struct fx f;
    sup_ledger *rebuilt = NULL;
    int64_t now = month_end(T0, 1) + 2 * DAY_MS;
    size_t needed;

    (void)state;
    open_month(&f, 5, 1);
    fx_hello(&f, 0, 1, now);
    r = fx_acquire(&f, 0, 1, LINK_A, 5, 5, now);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    snap = (struct sup_records){f.journal, 0, FX_JOURNAL};
    assert_int_equal(sup_ledger_snapshot(f.l, &snap, &needed), TALLY_OK);
    f.nj = snap.count;
    tenant_limits_bind_month(&f.cfg.plan.limits, 15);
    assert_int_equal(sup_ledger_open(&f.cfg, &rebuilt), TALLY_OK);
    for (size_t i = 0; i < f.nj; i++)
        assert_int_equal(sup_ledger_replay(rebuilt, &f.journal[i]), TALLY_OK);
    sup_ledger_close(f.l);
    f.l = rebuilt;
    assert_int_equal(fx_plan_cell(&f, tenant_month_period(15)).granted, 5);
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, now + 10);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.retry_after_ms, month_end(now, 15) - now - 10);
    fx_close(&f);
}

/* The previous window stays in the cell (for `tally usage`): minute m's figure, net of what
 * its lease gave back, is kept when minute m + 1 starts counting, and a snapshot replays it. */
static void
test_ledger_keeps_the_previous_window(void **state)
{
    struct proto_lease_msg r, m;
    struct sup_records snap;
    struct sup_cell_info c;
    struct fx f;
    sup_ledger *rebuilt = NULL;
    int64_t t1 = (T0 / MINUTE) * MINUTE + 1000, t2 = t1 + MINUTE;
    size_t needed;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, t1);
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 10, t1);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = r.grant.lease_id;
    m.ret.used = 4;
    r = fx_send(&f, t1 + 10, &m, NULL);
    assert_int_equal(r.type, PROTO_LEASE_RETURN_ACK);
    r = fx_acquire(&f, 0, 1, LINK_A, 3, 3, t2);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    c = fx_plan_cell(&f, MINUTE);
    assert_int_equal(c.window_id, t2 / MINUTE);
    assert_int_equal(c.granted - c.credited, r.grant.n);
    assert_int_equal(c.prev_window_id, t1 / MINUTE);
    assert_int_equal(c.prev_granted - c.prev_credited, 4);
    /* A snapshot keeps the history. */
    snap = (struct sup_records){f.journal, 0, FX_JOURNAL};
    assert_int_equal(sup_ledger_snapshot(f.l, &snap, &needed), TALLY_OK);
    f.nj = snap.count;
    assert_int_equal(sup_ledger_open(&f.cfg, &rebuilt), TALLY_OK);
    for (size_t i = 0; i < f.nj; i++)
        assert_int_equal(sup_ledger_replay(rebuilt, &f.journal[i]), TALLY_OK);
    assert_int_equal(sup_ledger_digest(rebuilt), sup_ledger_digest(f.l));
    sup_ledger_close(f.l);
    f.l = rebuilt;
    c = fx_plan_cell(&f, MINUTE);
    assert_int_equal(c.prev_window_id, t1 / MINUTE);
    assert_int_equal(c.prev_granted - c.prev_credited, 4);
    fx_close(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ledger_month_no_lease_spans_the_boundary),
        cmocka_unit_test(test_ledger_month_refusal_waits_for_the_billing_day),
        cmocka_unit_test(test_ledger_month_new_billing_day_keeps_the_count),
        cmocka_unit_test(test_ledger_month_snapshot_under_an_old_billing_day),
        cmocka_unit_test(test_ledger_keeps_the_previous_window),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The supervisor's grant rule (sup_lease.h), one behaviour at a time: grant sizing under the
 * scarcity cap, pass-through near exhaustion, refusals
 * naming their scope with the exact Retry-After or "never", no lease across a window boundary, swap
 * reports crediting once, expiry as spent, a new incarnation closing the old one's leases, degraded
 * debt charged and blocking, GCRA endpoints in pass-through, refused links, a wall clock stepping
 * back, reconfiguration by period. The link table (growth, eviction): test_sup_ledger_links.c. The
 * journal side (duplicates, slots, replay, allocation) is test_sup_journal.c; kept leases and
 * RECALL: test_sup_ledger_keep.c (the tests of reports here run with kept leases off, so that a
 * grant is what was asked).
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

#define LINK_C "lnk_000000000000000c"
#define LINK_D "lnk_000000000000000d"

static uint64_t seed;

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

/* ---- grant rule ---- */

static void
test_ledger_grant_sizing_and_scarcity_cap(void **state)
{
    struct proto_lease_msg r;
    struct fx f;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    fx_hello(&f, 1, 1, T0);
    /* Plenty left: the ask, up to remaining / (2 * P) with P = 1. */
    r = fx_acquire(&f, 0, 1, LINK_A, 100, 1, T0);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.n, 100);
    assert_int_equal(r.grant.flags, 0);
    assert_int_equal(r.grant.ttl_ms, SUP_LEASE_TTL_MS_DEFAULT);
    /* A greedy second ask: (600 - 100) / (2 * 2) = 125. */
    r = fx_acquire(&f, 1, 1, LINK_B, 100000, 0, T0 + 1);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.n, 125);
    assert_int_equal(r.grant.holders, 2);
    /* Every window of the path reserved it: the minute and the hour. */
    assert_int_equal(fx_plan_cell(&f, MINUTE).granted, 225);
    assert_int_equal(fx_plan_cell(&f, 60 * MINUTE).granted, 225);
    /* Lease ids grow. */
    assert_true(r.grant.lease_id > 1);
    fx_close(&f);
}

static void
test_ledger_pass_through_near_exhaustion(void **state)
{
    struct proto_lease_msg r;
    struct fx f;
    int64_t left;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    /* Drain the minute with leases that stay outstanding. */
    do {
        r = fx_acquire(&f, 0, 1, LINK_A, 1000, 0, T0);
        assert_true(r.type == PROTO_LEASE_GRANT || r.type == PROTO_LEASE_DENY);
    } while (r.type == PROTO_LEASE_GRANT && !(r.grant.flags & PROTO_LEASE_GRANT_PASS));
    left = 600 - fx_plan_cell(&f, MINUTE).granted;
    /* A prefetch near exhaustion is refused with the pass-through hint, nothing reserved. */
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.flags, PROTO_LEASE_DENY_PASS);
    assert_true(left > 0);
    /* A waiting request gets exactly its cost, with the short TTL. */
    r = fx_acquire(&f, 0, 1, LINK_A, 50, 2, T0 + 1);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.n, 2);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_PASS);
    assert_int_equal(r.grant.ttl_ms, SUP_PASS_TTL_MS_DEFAULT);
    assert_int_equal(600 - fx_plan_cell(&f, MINUTE).granted, left - 2);
    fx_close(&f);
}

static void
test_ledger_deny_scope_retry_and_never(void **state)
{
    struct proto_lease_msg r;
    struct fx f;
    int64_t now = T0 + 12345;

    (void)state;
    fx_open(&f);
    fx_limit(&f.cfg.plan.link_limits, 5, MINUTE);
    assert_int_equal(sup_ledger_configure(f.l, &f.cfg.plan, f.eps, 3), TALLY_OK);
    fx_hello(&f, 0, 1, now);
    /* A cost above the link's limit can never be admitted. */
    r = fx_acquire(&f, 0, 1, LINK_A, 6, 6, now);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.scope, TENANT_SCOPE_LINK);
    assert_int_equal(r.deny.retry_after_ms, TENANT_RETRY_NEVER);
    assert_int_equal(r.deny.flags, PROTO_LEASE_DENY_NEVER);
    assert_int_equal(r.deny.limit, 5);
    /* Take the link's 5, then the link refuses until its window ends, exactly. */
    r = fx_acquire(&f, 0, 1, LINK_A, 5, 5, now);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.n, 5);
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, now + 10);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.scope, TENANT_SCOPE_LINK);
    assert_int_equal(r.deny.retry_after_ms, tenant_window_end_ms(now / MINUTE, MINUTE) - now - 10);
    /* The refusal charged nothing anywhere (a narrower refusal never drains a wider budget). */
    assert_int_equal(fx_plan_cell(&f, MINUTE).granted, 5);
    /* Another link is not affected. */
    r = fx_acquire(&f, 0, 1, LINK_B, 3, 1, now + 10);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    fx_close(&f);
}

static void
test_ledger_no_lease_spans_a_boundary(void **state)
{
    struct proto_lease_msg r;
    struct fx f;
    int64_t end = tenant_window_end_ms(T0 / MINUTE, MINUTE);

    (void)state;
    fx_open(&f);
    fx_limit(&f.eps[0].limits, 100, 1000); /* per link per second */
    assert_int_equal(sup_ledger_configure(f.l, &f.cfg.plan, f.eps, 3), TALLY_OK);
    fx_hello(&f, 0, 1, T0);
    /* 1.5 s before the minute ends: the 1 s window ends first. */
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 1, end - 1500);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.ttl_ms, 1000 - (end - 1500) % 1000);
    /* 700 ms before: the minute and the second end together. */
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 1, end - 700);
    assert_int_equal(r.grant.ttl_ms, 700);
    /* 100 ms before (under T_lease / 10): only what a request needs, in pass-through. */
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 2, end - 100);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.n, 2);
    assert_int_equal(r.grant.ttl_ms, 100);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_PASS);
    fx_close(&f);
}

/* ---- reports, expiry, incarnations ---- */

static void
test_ledger_swap_credits_once(void **state)
{
    struct proto_lease_msg m, r, g;
    struct fx f;
    size_t recs;

    (void)state;
    fx_open_unkept(&f);
    fx_hello(&f, 0, 1, T0);
    g = fx_acquire(&f, 0, 1, LINK_A, 10, 1, T0);
    assert_int_equal(g.grant.n, 10);
    /* Renewal: the old lease's leftover is credited and the new one granted in one step. */
    fx_origin(&f, &m, PROTO_LEASE_ACQUIRE, 0, 1);
    strcpy(m.acquire.endpoint, "search");
    strcpy(m.acquire.link, LINK_A);
    m.acquire.want = 10;
    m.acquire.report_lease = g.grant.lease_id;
    m.acquire.report_used = 3;
    r = fx_send(&f, T0 + 100, &m, &recs);
    assert_int_equal(recs, 1);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(fx_plan_cell(&f, MINUTE).credited, 7);
    assert_int_equal(f.journal[f.nj - 1].credited, 7);
    /* The same lease reported again (another seq): closed already, nothing credited. */
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = g.grant.lease_id;
    m.ret.used = 0;
    r = fx_send(&f, T0 + 200, &m, &recs);
    assert_int_equal(r.type, PROTO_LEASE_RETURN_ACK);
    assert_int_equal(r.return_ack.credited, 0);
    assert_int_equal(recs, 0);
    assert_int_equal(fx_plan_cell(&f, MINUTE).credited, 7);
    fx_close(&f);
}

static void
test_ledger_expiry_counts_as_spent(void **state)
{
    struct sup_records out;
    struct proto_lease_msg m, r, g;
    struct sup_ledger_stats st;
    struct fx f;
    int64_t at;

    (void)state;
    fx_open_unkept(&f);
    fx_hello(&f, 0, 1, T0);
    g = fx_acquire(&f, 0, 1, LINK_A, 10, 1, T0);
    at = sup_ledger_next_expiry_ms(f.l);
    assert_int_equal(at, T0 + g.grant.ttl_ms + SUP_MARGIN_MS_DEFAULT + 1);
    out = (struct sup_records){f.journal, f.nj, FX_JOURNAL};
    assert_int_equal(sup_ledger_expire(f.l, at - 1, &out), TALLY_OK);
    assert_int_equal(out.count, f.nj); /* not yet */
    assert_int_equal(sup_ledger_expire(f.l, at, &out), TALLY_OK);
    assert_int_equal(out.count, f.nj + 1);
    assert_int_equal(f.journal[f.nj].kind, SUP_REC_EXPIRE);
    f.nj = out.count;
    assert_int_equal(sup_ledger_next_expiry_ms(f.l), INT64_MAX);
    /* A late RETURN credits nothing: the tokens count as spent. */
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = g.grant.lease_id;
    r = fx_send(&f, at + 10, &m, NULL);
    assert_int_equal(r.return_ack.credited, 0);
    assert_int_equal(fx_plan_cell(&f, MINUTE).granted, 10);
    assert_int_equal(fx_plan_cell(&f, MINUTE).credited, 0);
    sup_ledger_stats(f.l, &st);
    assert_int_equal(st.expired, 1);
    assert_int_equal(st.leases, 0);
    fx_close(&f);
}

static void
test_ledger_new_incarnation_reports_old_leases(void **state)
{
    struct proto_lease_msg m, r, g;
    struct fx f;

    (void)state;
    fx_open_unkept(&f);
    fx_hello(&f, 0, 1, T0);
    g = fx_acquire(&f, 0, 1, LINK_A, 10, 1, T0);
    fx_hello(&f, 0, 2, T0 + 10); /* the child restarted: the lease stays outstanding */
    assert_int_equal(fx_plan_cell(&f, MINUTE).leases_out, 1);
    /* The old incarnation is stale: its RETURN changes nothing. */
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = g.grant.lease_id;
    r = fx_send(&f, T0 + 20, &m, NULL);
    assert_int_equal(r.type, PROTO_LEASE_ERROR);
    assert_int_equal(r.error.code, PROTO_LEASE_E_STALE);
    /* Another child cannot credit it. */
    fx_hello(&f, 1, 1, T0 + 20);
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 1, 1);
    m.ret.lease_id = g.grant.lease_id;
    r = fx_send(&f, T0 + 25, &m, NULL);
    assert_int_equal(r.return_ack.credited, 0);
    assert_int_equal(fx_plan_cell(&f, MINUTE).leases_out, 1);
    /* The new incarnation resumed it from its row: its report credits n - used, once. */
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 2);
    m.ret.lease_id = g.grant.lease_id;
    m.ret.used = 4;
    r = fx_send(&f, T0 + 30, &m, NULL);
    assert_int_equal(r.return_ack.credited, 6);
    assert_int_equal(fx_plan_cell(&f, MINUTE).credited, 6);
    assert_int_equal(fx_plan_cell(&f, MINUTE).leases_out, 0);
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 2);
    m.ret.lease_id = g.grant.lease_id;
    r = fx_send(&f, T0 + 31, &m, NULL);
    assert_int_equal(r.return_ack.credited, 0);
    assert_int_equal(fx_plan_cell(&f, MINUTE).credited, 6);
    /* A request from an incarnation never registered is told to HELLO. */
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 3);
    m.ret.lease_id = 1;
    r = fx_send(&f, T0 + 40, &m, NULL);
    assert_int_equal(r.error.code, PROTO_LEASE_E_HELLO);
    fx_close(&f);
}

static void
test_ledger_debt_blocks_grants(void **state)
{
    struct proto_lease_msg m, r;
    struct fx f;
    size_t recs;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    fx_heartbeat(&f, &m, LINK_A, 590, LINK_B, 0);
    m.heartbeat.e[1].rate_milli = 1000;
    r = fx_send(&f, T0, &m, &recs);
    assert_int_equal(r.type, PROTO_LEASE_HB_ACK);
    assert_int_equal(recs, 1);
    (void)fx_send(&f, T0 + 1, &m, &recs); /* duplicate */
    assert_int_equal(recs, 0);
    assert_int_equal(fx_plan_cell(&f, MINUTE).debt, 590);
    /* 10 left: at most 10 / (2 * 1). */
    r = fx_acquire(&f, 0, 1, LINK_B, 100, 3, T0 + 2);
    assert_int_equal(r.grant.n, 5);
    r = fx_acquire(&f, 0, 1, LINK_B, 100, 8, T0 + 3);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.scope, TENANT_SCOPE_PLAN);
    /* A heartbeat without debt records nothing. */
    m.heartbeat.e[0].debt = 0;
    m.origin.seq = ++f.seq[0];
    (void)fx_send(&f, T0 + 4, &m, &recs);
    assert_int_equal(recs, 0);
    fx_close(&f);
}

/* ---- slots, GCRA, links, clocks ---- */

static void
test_ledger_gcra_endpoint_passes_through(void **state)
{
    struct proto_lease_msg r;
    struct fx f;
    int granted = 0;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 2, 1, T0);
    r = fx_acquire(&f, 2, 1, LINK_A, 50, 0, T0);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(r.deny.flags, PROTO_LEASE_DENY_PASS);
    /* 60/min with burst 60: exactly 60 tokens at once, one request at a time. */
    for (int i = 0; i < 70; i++) {
        r = fx_acquire(&f, 2, 1, LINK_A, 50, 1, T0 + 1);
        if (r.type == PROTO_LEASE_GRANT) {
            assert_int_equal(r.grant.n, 1);
            assert_true(r.grant.flags & PROTO_LEASE_GRANT_PASS);
            granted++;
        } else {
            assert_int_equal(r.deny.scope, TENANT_SCOPE_ENDPOINT_LINK);
            assert_int_equal(r.deny.retry_after_ms, 1000); /* one emission interval */
        }
    }
    assert_int_equal(granted, 60);
    fx_close(&f);
}

static void
test_ledger_refused_link_still_takes_debt(void **state)
{
    struct proto_lease_msg m, r;
    struct fx f;
    size_t recs;

    (void)state;
    fx_open(&f);
    f.deny_links = true;
    fx_hello(&f, 0, 1, T0);
    r = fx_acquire(&f, 0, 1, LINK_B, 5, 1, T0);
    assert_int_equal(r.type, PROTO_LEASE_ERROR);
    assert_int_equal(r.error.code, PROTO_LEASE_E_LINK);
    fx_origin(&f, &m, PROTO_LEASE_ACQUIRE, 0, 1);
    strcpy(m.acquire.endpoint, "search");
    strcpy(m.acquire.link, LINK_B);
    m.acquire.want = 1;
    m.acquire.debt = 3;
    r = fx_send(&f, T0, &m, &recs);
    assert_int_equal(r.error.code, PROTO_LEASE_E_LINK);
    assert_int_equal(recs, 1); /* the debt is charged all the same, once */
    assert_int_equal(fx_plan_cell(&f, MINUTE).debt, 3);
    r = fx_send(&f, T0 + 5, &m, &recs);
    assert_int_equal(r.error.code, PROTO_LEASE_E_LINK);
    assert_int_equal(recs, 0);
    assert_int_equal(fx_plan_cell(&f, MINUTE).debt, 3);
    fx_close(&f);
}

static void
test_ledger_clock_back_keeps_windows(void **state)
{
    struct proto_lease_msg r;
    struct fx f;
    int64_t end = tenant_window_end_ms(T0 / MINUTE, MINUTE);

    (void)state;
    fx_open_unkept(&f);
    fx_hello(&f, 0, 1, end + 10); /* in the next minute */
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 1, end + 10);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    /* The wall clock steps back 30 s: windows stay, TTLs come from the high-water mark. */
    r = fx_acquire(&f, 0, 1, LINK_A, 10, 1, end - 30000);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(fx_plan_cell(&f, MINUTE).window_id, (end + 10) / MINUTE);
    assert_int_equal(fx_plan_cell(&f, MINUTE).granted, 20);
    assert_int_equal(sup_ledger_now_ms(f.l), end + 10);
    fx_close(&f);
}

static void
test_ledger_reconfigure_keeps_counts_by_period(void **state)
{
    struct fx f;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    (void)fx_acquire(&f, 0, 1, LINK_A, 100, 1, T0);
    /* Lower the minute, drop the hour, add a second: the minute keeps its count. */
    memset(&f.cfg.plan.limits, 0, sizeof(f.cfg.plan.limits));
    fx_limit(&f.cfg.plan.limits, 10, 1000);
    fx_limit(&f.cfg.plan.limits, 120, MINUTE);
    assert_int_equal(sup_ledger_configure(f.l, &f.cfg.plan, f.eps, 3), TALLY_OK);
    assert_int_equal(fx_plan_cell(&f, MINUTE).granted, 100);
    assert_int_equal(fx_plan_cell(&f, MINUTE).limit, 120);
    assert_int_equal(fx_plan_cell(&f, 1000).granted, 0);
    /* A bad configuration changes nothing. */
    f.cfg.plan.concurrency = -1;
    assert_int_equal(sup_ledger_configure(f.l, &f.cfg.plan, f.eps, 3), TALLY_ECONFIG);
    assert_int_equal(fx_plan_cell(&f, MINUTE).limit, 120);
    fx_close(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ledger_grant_sizing_and_scarcity_cap),
        cmocka_unit_test(test_ledger_pass_through_near_exhaustion),
        cmocka_unit_test(test_ledger_deny_scope_retry_and_never),
        cmocka_unit_test(test_ledger_no_lease_spans_a_boundary),
        cmocka_unit_test(test_ledger_swap_credits_once),
        cmocka_unit_test(test_ledger_expiry_counts_as_spent),
        cmocka_unit_test(test_ledger_new_incarnation_reports_old_leases),
        cmocka_unit_test(test_ledger_debt_blocks_grants),
        cmocka_unit_test(test_ledger_gcra_endpoint_passes_through),
        cmocka_unit_test(test_ledger_refused_link_still_takes_debt),
        cmocka_unit_test(test_ledger_clock_back_keeps_windows),
        cmocka_unit_test(test_ledger_reconfigure_keeps_counts_by_period),
    };

    return cmocka_run_group_tests_name("sup_ledger", tests, group_setup, NULL);
}

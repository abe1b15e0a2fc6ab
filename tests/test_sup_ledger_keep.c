/*
 * Kept leases (sup_lease.h): a grant within the per-holder share kept while every budget is
 * plentiful, holding that whole share whatever the link's rate and living to its windows' end (at
 * most keep_ttl_ms), and the RECALL of kept leases once a budget runs short, each lease once.
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

static int
group_setup(void **state)
{
    (void)state;
    (void)test_seed();
    return 0;
}

static void
test_ledger_small_grants_kept_while_plenty(void **state)
{
    struct proto_lease_msg r;
    struct fx f;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    /* Plenty (600 a minute, one holder): a small ask gets the holder's share, 600 / 16 = 37,
     * flagged KEEP. */
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, T0);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(r.grant.n, 37);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_KEEP);
    /* Kept to the end of the minute (T0 is 20 s into it), well within SUP_KEEP_TTL_MS_DEFAULT. */
    assert_int_equal(r.grant.ttl_ms, MINUTE - 20000);
    /* A prefetch too (need 0): 2 holders, (600 - 37) / 16 / 2 = 17. */
    r = fx_acquire(&f, 0, 1, LINK_B, 2, 0, T0 + 1);
    assert_int_equal(r.grant.n, 17);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_KEEP);
    /* An ask (or need) over the share, (563 - 17) / 16 / 3 = 11, is granted as asked, not
     * kept. */
    r = fx_acquire(&f, 0, 1, LINK_C, 40, 1, T0 + 2);
    assert_int_equal(r.grant.n, 40);
    assert_int_equal(r.grant.flags, 0);
    r = fx_acquire(&f, 0, 1, LINK_D, 12, 12, T0 + 3); /* share (546 - 40) / 16 / 4 = 7 */
    assert_int_equal(r.grant.n, 12);
    assert_int_equal(r.grant.flags, 0);
    /* 4 holders now: plenty means at least 16 * 5 * 4 = 320 left of the minute. Take it down
     * to 330 with one large lease, then below 320. */
    r = fx_acquire(&f, 0, 1, LINK_A, 600 - 106 - 330, 600 - 106 - 330, T0 + 4);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(600 - fx_plan_cell(&f, MINUTE).granted, 330);
    r = fx_acquire(&f, 0, 1, LINK_B, 1, 1, T0 + 5); /* 6 holders: needs 384 */
    assert_int_equal(r.grant.n, 1);
    assert_int_equal(r.grant.flags, 0);
    fx_close(&f);

    /* Scarce from the start (a link's own 50 a minute is under 16 * 1 * 4 = 64): as asked. */
    fx_open(&f);
    fx_limit(&f.cfg.plan.link_limits, 50, MINUTE);
    assert_int_equal(sup_ledger_configure(f.l, &f.cfg.plan, f.eps, 3), TALLY_OK);
    fx_hello(&f, 0, 1, T0);
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, T0);
    assert_int_equal(r.grant.n, 1);
    assert_int_equal(r.grant.flags, 0);
    fx_close(&f);

    /* l_keep < 0: never kept. */
    fx_config(&f);
    f.cfg.l_keep = -1;
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    r = fx_acquire(&f, 0, 1, LINK_A, 1, 1, T0);
    assert_int_equal(r.grant.n, 1);
    assert_int_equal(r.grant.flags, 0);
    fx_close(&f);
}

/* An ACQUIRE from `child` on LINK_A at `rate_milli`, asking like a quiet link (want 1). */
static struct proto_lease_msg
acquire_at_rate(struct fx *f, int child, const char *link, int64_t rate_milli, int64_t now)
{
    struct proto_lease_msg m;

    fx_origin(f, &m, PROTO_LEASE_ACQUIRE, child, 1);
    strcpy(m.acquire.endpoint, f->eps[child].name);
    strcpy(m.acquire.link, link);
    m.acquire.want = 1;
    m.acquire.need = 1;
    m.acquire.rate_milli = rate_milli;
    return fx_send(f, now, &m, NULL);
}

static void
test_ledger_kept_lease_holds_the_share_for_its_life(void **state)
{
    struct proto_lease_msg r;
    struct fx f;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    /* A link seen once every 20 s gets the whole share, 600 / 16 = 37, to the minute's end
     * (40 s away, under the 60 s cap): the rate it was seen at does not size it. */
    r = acquire_at_rate(&f, 0, LINK_A, 50, T0);
    assert_int_equal(r.grant.flags, PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE);
    assert_int_equal(r.grant.n, 37);
    assert_int_equal(r.grant.ttl_ms, 40000);
    /* All holders keep at most 1/16 of what remains each: (600 - 37) / 16 / 2 holders = 17,
     * then (563 - 17) / 16 / 3 = 11, whatever the rate. */
    r = acquire_at_rate(&f, 0, LINK_B, 500, T0);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_KEEP);
    assert_int_equal(r.grant.n, 17);
    assert_int_equal(r.grant.ttl_ms, 40000);
    r = acquire_at_rate(&f, 0, LINK_C, 0, T0);
    assert_int_equal(r.grant.n, 11);
    /* A busy link whose slow start still asks for 1 (10/s) too: (546 - 11) / 16 / 4 = 8. */
    r = acquire_at_rate(&f, 0, LINK_D, 10000, T0);
    assert_int_equal(r.grant.flags, PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE);
    assert_int_equal(r.grant.n, 8);
    assert_int_equal(r.grant.ttl_ms, 40000);
    fx_close(&f);

    /* A shorter cap on the life: the TTL is the cap; the size is still the share. */
    fx_config(&f);
    f.cfg.keep_ttl_ms = 10000;
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    r = acquire_at_rate(&f, 0, LINK_A, 500, T0);
    assert_int_equal(r.grant.flags, PROTO_LEASE_GRANT_KEEP); /* ends before the window: no EDGE */
    assert_int_equal(r.grant.ttl_ms, 10000);
    assert_int_equal(r.grant.n, 37);
    fx_close(&f);

    /* Only an hour window and a 60 s cap: the life is the cap, not the hour's end. */
    fx_config(&f);
    f.cfg.keep_ttl_ms = 60000;
    memset(&f.cfg.plan.limits, 0, sizeof(f.cfg.plan.limits));
    fx_limit(&f.cfg.plan.limits, 36000, 60 * MINUTE);
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    r = acquire_at_rate(&f, 0, LINK_A, 0, T0);
    assert_int_equal(r.grant.flags, PROTO_LEASE_GRANT_KEEP);
    assert_int_equal(r.grant.ttl_ms, 60000);
    assert_int_equal(r.grant.n, 36000 / 16);
    fx_close(&f);

    /* By default a kept lease lives to the end of its windows (here the hour's). */
    fx_config(&f);
    memset(&f.cfg.plan.limits, 0, sizeof(f.cfg.plan.limits));
    fx_limit(&f.cfg.plan.limits, 36000, 60 * MINUTE);
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    r = acquire_at_rate(&f, 0, LINK_A, 0, T0);
    /* Its only window ends there too: LAST, what is left then is not reported. */
    assert_int_equal(r.grant.flags,
                     PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST);
    assert_int_equal(r.grant.ttl_ms, 60 * MINUTE - T0 % (60 * MINUTE));
    assert_int_equal(r.grant.n, 36000 / 16);
    fx_close(&f);

    /* A minute and an hour (the default plan): the lease ends with the minute (EDGE), but what
     * is left of it then would still count in the hour: no LAST. */
    fx_config(&f);
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    r = acquire_at_rate(&f, 0, LINK_A, 0, T0);
    assert_int_equal(r.grant.flags, PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE);
    assert_int_equal(r.grant.ttl_ms, MINUTE - T0 % MINUTE);
    fx_close(&f);

    /* The same minute for the plan and the endpoint: LAST again. */
    fx_config(&f);
    memset(&f.cfg.plan.limits, 0, sizeof(f.cfg.plan.limits));
    fx_limit(&f.cfg.plan.limits, 6000, MINUTE);
    fx_limit(&f.eps[0].limits, 3000, MINUTE);
    fx_start(&f);
    fx_hello(&f, 0, 1, T0);
    r = acquire_at_rate(&f, 0, LINK_A, 0, T0);
    assert_int_equal(r.grant.flags,
                     PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST);
    assert_int_equal(r.grant.ttl_ms, MINUTE - T0 % MINUTE);
    fx_close(&f);
}

/* A grant that leaves a budget short recalls the kept leases on it, once each; the holder's
 * report then credits what it did not use. */
static void
test_ledger_recall_kept_leases_when_short(void **state)
{
    struct proto_lease_msg r, m, rc_msg;
    struct fx f;
    uint64_t kept;
    int64_t kept_n;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    fx_hello(&f, 1, 1, T0);
    r = acquire_at_rate(&f, 0, LINK_A, 0, T0);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_KEEP);
    kept = r.grant.lease_id;
    kept_n = r.grant.n;
    assert_int_equal(kept_n, 37);
    assert_int_equal(sup_ledger_next_recall(f.l, &rc_msg), TALLY_ENOTFOUND);
    /* Plenty still after a modest grant: 600 - 37 - 100 = 463 >= 16 * 2 * 4. */
    r = fx_acquire(&f, 1, 1, LINK_B, 100, 100, T0 + 1);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(sup_ledger_next_recall(f.l, &rc_msg), TALLY_ENOTFOUND);
    /* 463 - 400 = 63 < 16 * 3 * 4: the plan is short, the kept lease is recalled. */
    r = fx_acquire(&f, 1, 1, LINK_B, 400, 400, T0 + 2);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(sup_ledger_next_recall(f.l, &rc_msg), TALLY_OK);
    assert_int_equal(rc_msg.type, PROTO_LEASE_RECALL);
    assert_int_equal(proto_lease_validate(&rc_msg), TALLY_OK);
    assert_string_equal(rc_msg.origin.child, "search");
    assert_int_equal(rc_msg.origin.incarnation, 1);
    assert_int_equal(rc_msg.recall.lease_id, kept);
    assert_string_equal(rc_msg.recall.link, LINK_A);
    /* Once: neither the queue nor a later refusal on the same budget repeats it. */
    assert_int_equal(sup_ledger_next_recall(f.l, &rc_msg), TALLY_ENOTFOUND);
    r = fx_acquire(&f, 1, 1, LINK_B, 500, 500, T0 + 3);
    assert_int_equal(r.type, PROTO_LEASE_DENY);
    assert_int_equal(sup_ledger_next_recall(f.l, &rc_msg), TALLY_ENOTFOUND);
    /* The holder reports it: 36 of 37 credited. */
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = kept;
    m.ret.used = 1;
    r = fx_send(&f, T0 + 4, &m, NULL);
    assert_int_equal(r.type, PROTO_LEASE_RETURN_ACK);
    assert_int_equal(r.return_ack.credited, kept_n - 1);
    fx_close(&f);

    /* A refusal finds the shortage too: a link of 100 a minute, a kept lease on it, then a
     * request for more than is left. */
    fx_open(&f);
    fx_limit(&f.cfg.plan.link_limits, 100, MINUTE);
    assert_int_equal(sup_ledger_configure(f.l, &f.cfg.plan, f.eps, 3), TALLY_OK);
    fx_hello(&f, 0, 1, T0);
    r = acquire_at_rate(&f, 0, LINK_A, 0, T0);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_KEEP);
    kept = r.grant.lease_id;
    assert_int_equal(r.grant.n, 100 / 16);            /* the link's own share */
    r = fx_acquire(&f, 0, 1, LINK_A, 90, 90, T0 + 1); /* 100 - 6 = 94 left: fits, 4 after */
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(sup_ledger_next_recall(f.l, &rc_msg), TALLY_OK);
    assert_int_equal(rc_msg.recall.lease_id, kept);
    assert_int_equal(sup_ledger_next_recall(f.l, &rc_msg), TALLY_ENOTFOUND);
    fx_close(&f);
}

/* A NEXT ACQUIRE: a kept lease for the windows starting at the path's earliest window end,
 * counted there and not before, decided against what that window holds, given back to it before
 * it starts, and the same after a replay and after a snapshot. */
static void
test_ledger_next_lease_counts_in_the_next_window(void **state)
{
    struct proto_lease_msg r, m;
    struct sup_cell_info c;
    struct sup_records snap = {0};
    sup_ledger *again = NULL;
    size_t needed = 0;
    struct fx f;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    /* 30 s into the minute... */
    r = fx_acquire_next(&f, 0, 1, LINK_A, T0 + 10000);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    /* ... it starts at the minute's end, 30 s on, and lives that next minute: the share of a
     * whole minute, 600 / 16. */
    assert_int_equal(r.grant.start_ms, 30000);
    assert_int_equal(r.grant.ttl_ms, 30000 + MINUTE);
    assert_int_equal(r.grant.n, 37);
    assert_true(r.grant.flags & PROTO_LEASE_GRANT_KEEP);
    c = fx_plan_cell(&f, MINUTE);
    assert_int_equal(c.granted, 0);
    assert_int_equal(c.next_granted, 37);
    assert_int_equal(c.next_window_id, (T0 + 40000) / MINUTE);
    /* The running minute is whole: 563 more fit in it. */
    r = fx_acquire(&f, 0, 1, LINK_B, 600, 600, T0 + 11000);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    assert_int_equal(fx_plan_cell(&f, MINUTE).granted, 600);
    fx_assert_replay(&f);
    /* A second NEXT lease, given back before its window starts: credited there. */
    r = fx_acquire_next(&f, 0, 1, LINK_B, T0 + 12000);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    /* (600 - 37) / 16 / 3 holders: the running minute's lease counts as one. */
    assert_int_equal(r.grant.n, 11);
    fx_origin(&f, &m, PROTO_LEASE_RETURN, 0, 1);
    m.ret.lease_id = r.grant.lease_id;
    m.ret.used = 0;
    (void)fx_send(&f, T0 + 13000, &m, NULL);
    c = fx_plan_cell(&f, MINUTE);
    assert_int_equal(c.next_granted, 48);
    assert_int_equal(c.next_credited, 11);
    /* A snapshot restores the counts ahead and keeps the ledger's clock. */
    snap.v = calloc(256, sizeof(*snap.v));
    snap.cap = 256;
    assert_non_null(snap.v);
    assert_int_equal(sup_ledger_snapshot(f.l, &snap, &needed), TALLY_OK);
    assert_int_equal(sup_ledger_open(&f.cfg, &again), TALLY_OK);
    for (size_t i = 0; i < snap.count; i++)
        assert_int_equal(sup_ledger_replay(again, &snap.v[i]), TALLY_OK);
    assert_int_equal(sup_ledger_digest(again), sup_ledger_digest(f.l));
    sup_ledger_close(again);
    free(snap.v);
    /* The minute rolls: what was reserved ahead is that minute's count, the old one history. */
    r = fx_acquire(&f, 0, 1, LINK_B, 1, 1, T0 + 41000);
    assert_int_equal(r.type, PROTO_LEASE_GRANT);
    c = fx_plan_cell(&f, MINUTE);
    assert_int_equal(c.window_id, (T0 + 40000) / MINUTE);
    assert_int_equal(c.granted - c.credited, 37 + r.grant.n);
    assert_int_equal(c.prev_granted, 600);
    assert_int_equal(c.next_granted, 0);
    fx_assert_replay(&f);
    fx_close(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ledger_next_lease_counts_in_the_next_window),
        cmocka_unit_test(test_ledger_small_grants_kept_while_plenty),
        cmocka_unit_test(test_ledger_kept_lease_holds_the_share_for_its_life),
        cmocka_unit_test(test_ledger_recall_kept_leases_when_short),
    };

    return cmocka_run_group_tests_name("sup_ledger_keep", tests, group_setup, NULL);
}

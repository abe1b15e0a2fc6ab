/*
 * How a child counter's leases go back (sup_child.h, sup_child_host.h): an idle lease after 1 s,
 * a kept one at its deadline (not at all when every window of its path ends then), one recalled by
 * the supervisor (RECALL) at once, every one on a configuration change (sup_child_recall), and a
 * long kept lease renewed in the background once it is old. And how a link asks ahead for its
 * first lease (sup_child_warm) while its tenant's supervisor starts for another link, and how a
 * grant asked ahead for the next windows moves the end of the running last one.
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
#include <string.h>

#include "sup_child_host.h"
#include "sup_child_int.h"
#include "sup_sim_cx.h"
#include "test_support.h"

static int
group_setup(void **state)
{
    (void)state;
    (void)test_seed();
    return 0;
}

/* A child whose link LINK_A holds one lease of n tokens (flags as granted) with one used. */
static uint64_t
one_lease_used_once(struct cx *x, int64_t n, uint32_t flags)
{
    struct proto_lease_msg acq;
    uint64_t id;

    cx_open(x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(x);
    (void)cx_admit(x, LINK_A, 1, 0);
    acq = cx_expect(x, PROTO_LEASE_ACQUIRE);
    (void)cx_grant(x, &acq, n, 5000, flags, &id);
    assert_int_equal(cx_admit(x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    return id;
}

/* The next RETURN due now (a heartbeat may go first: traffic was recent). */
static struct proto_lease_msg
next_return(struct cx *x)
{
    struct proto_lease_msg m;

    do
        assert_int_equal(sup_child_next_message(x->c, x->now, &m), TALLY_OK);
    while (m.type != PROTO_LEASE_RETURN);
    return m;
}

static void
test_child_idle_lease_returned(void **state)
{
    struct proto_lease_msg ret, r;
    uint64_t id;
    struct cx x;

    (void)state;
    id = one_lease_used_once(&x, 10, 0);
    assert_int_equal(sup_child_next_wake_ms(x.c) <= x.now.mono_ms + SUP_CHILD_IDLE_MS_DEFAULT,
                     true);
    cx_at(&x, SUP_CHILD_IDLE_MS_DEFAULT + 1);
    sup_child_tick(x.c, x.now);
    ret = next_return(&x);
    assert_int_equal(ret.ret.lease_id, id);
    assert_int_equal(ret.ret.used, 1);
    cx_reply_to(&ret, &r, PROTO_LEASE_RETURN_ACK);
    r.return_ack.lease_id = id;
    r.return_ack.credited = 9;
    (void)cx_deliver(&x, &r);
    /* Returned means no longer used. */
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    cx_close(&x);
}

/* Messages due now, none of them a RETURN (a heartbeat may go out: traffic was recent). */
static void
expect_no_return(struct cx *x)
{
    struct proto_lease_msg m;

    while (sup_child_next_message(x->c, x->now, &m) == TALLY_OK)
        assert_int_not_equal(m.type, PROTO_LEASE_RETURN);
}

/* A grant flagged KEEP (small, while the budget is plentiful) is not returned after 1 s idle:
 * the link's next request, seconds later, is decided from it with no message; it goes back at
 * its deadline with what it used. */
static void
test_child_kept_lease_lives_to_deadline(void **state)
{
    struct proto_lease_msg ret;
    uint64_t id;
    struct cx x;

    (void)state;
    id = one_lease_used_once(&x, 4, PROTO_LEASE_GRANT_KEEP);
    cx_at(&x, SUP_CHILD_IDLE_MS_DEFAULT + 1);
    sup_child_tick(x.c, x.now);
    expect_no_return(&x);
    cx_at(&x, 3000);
    sup_child_tick(x.c, x.now);
    expect_no_return(&x);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    expect_no_return(&x);
    /* The deadline: 5000 - 2 % - 1 ms after the first send. */
    assert_true(sup_child_next_wake_ms(x.c) <= 5000 - 100 - 1 + 5000);
    cx_at(&x, 5000 - 100 - 1);
    sup_child_tick(x.c, x.now);
    ret = next_return(&x);
    assert_int_equal(ret.ret.lease_id, id);
    assert_int_equal(ret.ret.used, 2);
    cx_close(&x);
}

/* A kept lease whose deadline ends every window of its path (LAST) is not reported then: what
 * is left of it is worth nothing in the next windows, and a RETURN would start a quiet
 * tenant's supervisor for nothing. The link's next request asks for a new lease, with no
 * report riding on it. */
static void
test_child_last_lease_not_reported_at_deadline(void **state)
{
    struct proto_lease_msg acq;
    struct cx x;

    (void)state;
    (void)one_lease_used_once(
        &x, 4, PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST);
    cx_at(&x, 5000 - 100 - 1);
    sup_child_tick(x.c, x.now);
    expect_no_return(&x);
    cx_at(&x, 8000);
    sup_child_tick(x.c, x.now);
    expect_no_return(&x);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    assert_int_equal(acq.acquire.report_lease, 0);
    cx_close(&x);
}

/* A RECALL as the supervisor pushes it: to this child's incarnation `inc`, naming lease `id`. */
static struct sup_child_event
recall(struct cx *x, uint64_t inc, uint64_t id)
{
    struct proto_lease_msg m;

    memset(&m, 0, sizeof(m));
    m.type = PROTO_LEASE_RECALL;
    strcpy(m.origin.child, "search");
    m.origin.incarnation = inc;
    m.origin.seq = id;
    strcpy(m.recall.endpoint, "search");
    strcpy(m.recall.link, LINK_A);
    m.recall.lease_id = id;
    assert_int_equal(proto_lease_validate(&m), TALLY_OK);
    return cx_deliver(x, &m);
}

/* A RECALL retires a kept lease at once: it is reported with what it used (so the supervisor
 * credits the rest) and admits nothing more. One for another incarnation, or a duplicate,
 * changes nothing. */
static void
test_child_recall_retires_kept_lease(void **state)
{
    struct proto_lease_msg ret, acq;
    struct sup_child_event ev;
    struct sup_child_stats st;
    uint64_t id;
    struct cx x;

    (void)state;
    id = one_lease_used_once(&x, 4, PROTO_LEASE_GRANT_KEEP);
    cx_at(&x, 100);
    (void)recall(&x, 8, id); /* a later incarnation's (not this child's): ignored */
    expect_no_return(&x);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    ev = recall(&x, 7, id);
    assert_int_equal(ev.kind, SUP_EV_LINK);
    assert_string_equal(ev.link, LINK_A);
    ret = next_return(&x);
    assert_int_equal(ret.ret.lease_id, id);
    assert_int_equal(ret.ret.used, 2);
    (void)recall(&x, 7, id); /* a duplicate: nothing more */
    expect_no_return(&x);
    sup_child_stats(x.c, x.now, &st);
    assert_int_equal(st.lease_recalls, 1);
    /* The link asks again for its next request. */
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    assert_int_equal(acq.acquire.need, 1);
    cx_close(&x);

    /* A RECALL that overtakes its GRANT: the lease is reported unused as soon as it arrives. */
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    (void)recall(&x, 7, x.next_lease + 1);
    (void)cx_grant(&x, &acq, 4, 5000, PROTO_LEASE_GRANT_KEEP, &id);
    ret = next_return(&x);
    assert_int_equal(ret.ret.lease_id, id);
    assert_int_equal(ret.ret.used, 0);
    assert_int_not_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    cx_close(&x);
}

/* A long kept lease is renewed by the first request after 0.6 of its TTL (a prefetch off the
 * request's path), not by a request that finds it expired. */
static void
test_child_long_lease_renewed_on_use_when_old(void **state)
{
    struct proto_lease_msg acq, m;
    struct sup_admit a;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    (void)cx_grant(&x, &acq, 8, 60000, PROTO_LEASE_GRANT_KEEP, NULL);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    /* Quiet for 30 s: still young, the next request is local and asks nothing. */
    cx_at(&x, 30000);
    sup_child_tick(x.c, x.now);
    expect_no_return(&x);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    while (sup_child_next_message(x.c, x.now, &m) == TALLY_OK)
        assert_int_not_equal(m.type, PROTO_LEASE_ACQUIRE);
    /* 40 s: past 0.6 of 60 s. Admitted locally, and a renewal goes out behind it. */
    cx_at(&x, 40000);
    sup_child_tick(x.c, x.now);
    a = cx_admit(&x, LINK_A, 1, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_OK);
    do
        assert_int_equal(sup_child_next_message(x.c, x.now, &m), TALLY_OK);
    while (m.type != PROTO_LEASE_ACQUIRE);
    assert_int_equal(m.acquire.need, 0);
    cx_close(&x);

    /* One that ends at its window's end (EDGE) is not renewed by age: a renewal could not go
     * past that end either. */
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    (void)cx_grant(&x, &acq, 8, 60000, PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE, NULL);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    cx_at(&x, 40000);
    sup_child_tick(x.c, x.now);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    while (sup_child_next_message(x.c, x.now, &m) == TALLY_OK)
        assert_int_not_equal(m.type, PROTO_LEASE_ACQUIRE);
    cx_close(&x);
}

/* A configuration change (sup_child_recall, as tallyd's front calls it on a lowered limit):
 * the live lease stops admitting at once and is reported with what it used, and a grant that
 * answers an ACQUIRE sent before the recall is handed back unused when it arrives. */
static void
test_child_config_recall_drops_leases_and_late_grants(void **state)
{
    struct proto_lease_msg acq, ret;
    struct sup_child_stats st;
    uint64_t id, late;
    struct cx x;

    (void)state;
    id = one_lease_used_once(&x, 10, 0);
    sup_child_recall(x.c, x.now);
    ret = next_return(&x);
    assert_int_equal(ret.ret.lease_id, id);
    assert_int_equal(ret.ret.used, 1);
    /* The next request asks again: nothing is admitted from the old lease. */
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    /* A recall while that ACQUIRE is in flight: its grant, sized before, is never used. */
    sup_child_recall(x.c, x.now);
    (void)cx_grant(&x, &acq, 10, 5000, 0, &late);
    ret = next_return(&x);
    assert_int_equal(ret.ret.lease_id, late);
    assert_int_equal(ret.ret.used, 0);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    sup_child_stats(x.c, x.now, &st);
    assert_int_equal(st.recalls, 2);
    cx_close(&x);
}

/* sup_child_warm asks once, with need 0, for a link that holds nothing and asks for nothing;
 * the kept lease it gets decides the link's first request with no message. Nothing is asked
 * while that ACQUIRE is in flight, while the lease lives, or for a link refused. */
static void
test_child_warm_asks_ahead_once(void **state)
{
    struct proto_lease_msg acq, deny;
    struct sup_child_stats st;
    uint64_t id;
    bool asked;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    assert_int_equal(sup_child_warm(x.c, LINK_B, x.now, &asked), TALLY_OK);
    assert_true(asked);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    assert_string_equal(acq.acquire.link, LINK_B);
    assert_int_equal(acq.acquire.need, 0);
    assert_int_equal(sup_child_warm(x.c, LINK_B, x.now, &asked), TALLY_OK);
    assert_false(asked);
    cx_expect_nothing(&x);
    (void)cx_grant(&x, &acq, 40, 5000, PROTO_LEASE_GRANT_KEEP, &id);
    cx_at(&x, 3000);
    sup_child_tick(x.c, x.now);
    expect_no_return(&x);
    assert_int_equal(cx_admit(&x, LINK_B, 1, 0).verdict, SUP_ADMIT_OK);
    assert_int_equal(sup_child_warm(x.c, LINK_B, x.now, &asked), TALLY_OK);
    assert_false(asked);
    expect_no_return(&x);

    /* A refused link is not asked for again until its refusal ends. */
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    cx_reply_to(&acq, &deny, PROTO_LEASE_DENY);
    snprintf(deny.deny.endpoint, sizeof(deny.deny.endpoint), "%s", acq.acquire.endpoint);
    snprintf(deny.deny.link, sizeof(deny.deny.link), "%s", LINK_A);
    deny.deny.scope = TENANT_SCOPE_ENDPOINT_TENANT;
    deny.deny.retry_after_ms = 60000;
    (void)cx_deliver(&x, &deny);
    assert_int_equal(sup_child_warm(x.c, LINK_A, x.now, &asked), TALLY_OK);
    assert_false(asked);
    assert_int_equal(sup_child_warm(x.c, "not-a-link", x.now, &asked), TALLY_EINVAL);
    sup_child_stats(x.c, x.now, &st);
    assert_int_equal(st.warms, 1);
    cx_close(&x);
}

#define NEXT_FLAGS (PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST)

/* An hour's kept LAST lease on LINK_A (granted at cx_at 0), in use 200 s before its end, and
 * the ACQUIRE flagged NEXT it sends once its instant to ask ahead has passed (at cx_at *asked). */
static struct proto_lease_msg
last_lease_asking_ahead(struct cx *x, int64_t *asked)
{
    const int64_t hour = 3600000;
    struct proto_lease_msg acq;

    cx_open(x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(x);
    (void)cx_admit(x, LINK_A, 1, 0);
    acq = cx_expect(x, PROTO_LEASE_ACQUIRE);
    (void)cx_grant(x, &acq, 1000000, hour,
                   PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST, NULL);
    cx_at(x, hour - 200000);
    assert_int_equal(cx_admit(x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    /* The latest instant to ask: 30 s before the deadline (hour - 3,696). */
    *asked = hour - 3696 - 30000;
    cx_at(x, *asked);
    sup_child_tick(x->c, x->now);
    acq = cx_expect(x, PROTO_LEASE_ACQUIRE);
    assert_int_equal(acq.acquire.flags, PROTO_LEASE_ACQ_NEXT);
    return acq;
}

/* The NEXT grant names the windows' end again, 33.7 s ahead: the hour's lease then runs until
 * that end less the bound over 33.7 s (100 ms, 29 ms and a tick: 130 ms), not less the bound over
 * its hour (3,696 ms). A grant that comes after the old lease ended does not bring it back. */
static void
test_child_next_grant_moves_the_last_lease_end(void **state)
{
    const int64_t hour = 3600000;
    struct proto_lease_msg acq;
    int64_t asked;
    struct cx x;

    (void)state;
    acq = last_lease_asking_ahead(&x, &asked);
    cx_at(&x, asked + 5);
    (void)cx_grant_next(&x, &acq, 100, hour - asked, hour, NEXT_FLAGS);
    cx_assert_usable_until(&x, LINK_A, cx_at(&x, hour - 130).mono_ms);
    cx_close(&x);

    acq = last_lease_asking_ahead(&x, &asked);
    cx_at(&x, hour - 3000); /* the answer took 30 s: the old lease has ended */
    (void)cx_grant_next(&x, &acq, 100, hour - asked, hour, NEXT_FLAGS);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    cx_close(&x);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_idle_lease_returned),
        cmocka_unit_test(test_child_kept_lease_lives_to_deadline),
        cmocka_unit_test(test_child_last_lease_not_reported_at_deadline),
        cmocka_unit_test(test_child_recall_retires_kept_lease),
        cmocka_unit_test(test_child_long_lease_renewed_on_use_when_old),
        cmocka_unit_test(test_child_config_recall_drops_leases_and_late_grants),
        cmocka_unit_test(test_child_warm_asks_ahead_once),
        cmocka_unit_test(test_child_next_grant_moves_the_last_lease_end),
    };

    return cmocka_run_group_tests_name("sup_child_keep", tests, group_setup, NULL);
}

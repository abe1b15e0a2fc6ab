/*
 * The child counter's registration (sup_child.h), against hand-made replies: HELLO first, the
 * first ACQUIRE right behind it on the wire, no retransmission but the HELLO's until WELCOME,
 * then the GRANT admits; a WELCOME that beats the ACQUIRE's timer sends nothing again, and an
 * ACQUIRE answered E_HELLO goes again right after the new WELCOME.
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
#include "test_alloc.h"
#include "test_support.h"

static int
group_setup(void **state)
{
    (void)state;
    (void)test_seed();
    return 0;
}

static void
test_child_hello_wait_grant_admit(void **state)
{
    struct proto_lease_msg acq;
    struct sup_child_event ev;
    struct sup_admit a;
    uint64_t id;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    a = cx_admit(&x, LINK_A, 2, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    assert_int_equal(a.wait, SUP_WAIT_GRANT);
    assert_int_equal(a.give_up_ms, x.now.mono_ms + SUP_CHILD_WAIT_MS_DEFAULT);
    /* Registration first, the ACQUIRE right behind it on the wire (the supervisor takes both
     * in one turn), then nothing: no retransmission but the HELLO's before WELCOME. */
    (void)cx_expect(&x, PROTO_LEASE_HELLO);
    assert_int_equal(sup_child_next_message(x.c, x.now, &acq), TALLY_OK);
    assert_int_equal(acq.type, PROTO_LEASE_ACQUIRE);
    assert_int_equal(acq.origin.seq, 2);
    cx_expect_nothing(&x);
    cx_at(&x, 3);
    sup_child_tick(x.c, x.now);
    cx_expect_nothing(&x);
    cx_at(&x, 20); /* the HELLO is retransmitted with its seq; the ACQUIRE waits */
    {
        struct proto_lease_msg h = cx_expect(&x, PROTO_LEASE_HELLO), r;

        assert_int_equal(h.origin.seq, 1);
        cx_expect_nothing(&x);
        cx_at(&x, 21);
        cx_reply_to(&h, &r, PROTO_LEASE_WELCOME);
        r.welcome.lease_ttl_ms = 5000;
        r.welcome.heartbeat_ms = 1000;
        (void)cx_deliver(&x, &r);
    }
    /* Its timer (20 ms) ran out meanwhile: it goes again, with its seq. */
    assert_int_equal(cx_expect(&x, PROTO_LEASE_ACQUIRE).origin.seq, 2);
    cx_expect_nothing(&x);
    assert_int_equal(acq.acquire.need, 2);
    assert_true(acq.acquire.want >= 2);
    assert_string_equal(acq.acquire.link, LINK_A);
    assert_int_equal(acq.acquire.report_lease, 0);
    cx_at(&x, 22);
    ev = cx_grant(&x, &acq, 10, 5000, 0, &id);
    assert_int_equal(ev.kind, SUP_EV_LINK);
    assert_string_equal(ev.link, LINK_A);
    a = cx_admit(&x, LINK_A, 2, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_OK);
    assert_false(a.degraded);
    assert_int_equal(a.lease_id, id);
    assert_int_equal(a.left, 8); /* what the lease still holds after this admission */
    a = cx_admit(&x, LINK_A, 3, 0);
    assert_int_equal(a.left, 5);
    /* A duplicated GRANT changes nothing. */
    ev = cx_grant(&x, &acq, 10, 5000, 0, NULL);
    assert_int_equal(ev.kind, SUP_EV_NONE);
    cx_close(&x);
}

/* A WELCOME that comes before the pipelined ACQUIRE's timer sends nothing again: the GRANT is
 * on its way behind it. An ACQUIRE that went out before a new registration (the supervisor
 * forgot this incarnation: E_HELLO) goes again as soon as that registration is welcomed. */
static void
test_child_first_acquire_rides_behind_hello(void **state)
{
    struct proto_lease_msg h, acq, again, r;
    struct sup_admit a;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    (void)cx_admit(&x, LINK_A, 1, 0);
    h = cx_expect(&x, PROTO_LEASE_HELLO);
    assert_int_equal(sup_child_next_message(x.c, x.now, &acq), TALLY_OK);
    assert_int_equal(acq.type, PROTO_LEASE_ACQUIRE);
    cx_at(&x, 5);
    cx_reply_to(&h, &r, PROTO_LEASE_WELCOME);
    r.welcome.lease_ttl_ms = 5000;
    r.welcome.heartbeat_ms = 1000;
    (void)cx_deliver(&x, &r);
    cx_expect_nothing(&x);
    assert_true(sup_child_next_wake_ms(x.c) >= 20);
    (void)cx_grant(&x, &acq, 10, 5000, 0, NULL);
    a = cx_admit(&x, LINK_A, 1, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_OK);
    cx_expect_nothing(&x);

    /* A second link asks; the supervisor answers E_HELLO (a new one, without this
     * incarnation): register again, and the ACQUIRE follows the WELCOME at once. */
    (void)cx_admit(&x, LINK_B, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    cx_at(&x, 6);
    cx_reply_to(&acq, &r, PROTO_LEASE_ERROR);
    r.error.code = PROTO_LEASE_E_HELLO;
    (void)cx_deliver(&x, &r);
    h = cx_expect(&x, PROTO_LEASE_HELLO);
    cx_expect_nothing(&x); /* sent before this HELLO: it waits for the WELCOME */
    cx_reply_to(&h, &r, PROTO_LEASE_WELCOME);
    r.welcome.lease_ttl_ms = 5000;
    r.welcome.heartbeat_ms = 1000;
    (void)cx_deliver(&x, &r);
    again = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    assert_int_equal(again.origin.seq, acq.origin.seq);
    assert_string_equal(again.acquire.link, LINK_B);
    cx_close(&x);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_hello_wait_grant_admit),
        cmocka_unit_test(test_child_first_acquire_rides_behind_hello),
    };

    return cmocka_run_group_tests_name("sup_child_hello", tests, group_setup, NULL);
}

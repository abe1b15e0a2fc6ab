/*
 * The child counter's durability and degraded mode (sup_child.h): strict marks (a new lease
 * admits up to its first row's mark at once, then WAITs until each next mark is durable, the next
 * chunk asked for ahead of need, a lease's row deleted before it is reported), resuming rows after
 * a crash at used := mark with a deadline that neither a wall clock stepping back nor a reboot can
 * stretch, and the supervisor out of reach: open endpoints admit under the degraded limit and
 * report the debt once, closed ones answer unavailable, and a request whose wait is over is decided
 * the same way.
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

#include "sup_child_host.h"
#include "sup_sim_cx.h"
#include "test_support.h"

static int
group_setup(void **state)
{
    (void)state;
    (void)test_seed();
    return 0;
}

static void
test_child_strict_marks(void **state)
{
    struct proto_lease_msg acq, m;
    struct sup_child_persist p;
    struct sup_admit a;
    uint64_t id;
    struct cx x;

    (void)state;
    cx_open(&x, true, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    (void)cx_grant(&x, &acq, 40, 5000, 0, &id);
    /* Before its first row exists, a crash would leave the lease to expire as spent: it admits
     * at once, up to the mark that row carries, without waiting for the fsync. */
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    assert_int_equal(sup_child_next_persist(x.c, &p), TALLY_OK);
    assert_int_equal(p.op, SUP_PERSIST_PUT);
    assert_int_equal(p.rec.lease_id, id);
    assert_int_equal(p.rec.mark, 10); /* a chunk: n / 4 */
    assert_int_equal(p.rec.incarnation, 7);
    assert_int_equal(p.rec.deadline_mono_ms, p.rec.sent_mono_ms + 4899);
    for (int i = 0; i < 9; i++)
        assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    /* Not past it: once that row is durable, a crash resumes from mark 10. */
    a = cx_admit(&x, LINK_A, 1, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    assert_int_equal(a.wait, SUP_WAIT_MARK);
    {
        struct sup_child_event ev;

        sup_child_persisted(x.c, &p, &ev);
        assert_int_equal(ev.kind, SUP_EV_LINK);
    }
    /* From then on, admissions up to the durable mark: the next chunk was asked for at
     * mark - chunk/2 and must be durable before the 11th. */
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT); /* 11 > mark 10 */
    assert_int_equal(sup_child_next_persist(x.c, &p), TALLY_OK);
    assert_int_equal(p.rec.mark, 20);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    sup_child_persisted(x.c, &p, NULL);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_OK);
    /* Retire it: the row goes first, the report after. */
    sup_child_shutdown(x.c, x.now);
    while (sup_child_next_message(x.c, x.now, &m) == TALLY_OK)
        assert_int_not_equal(m.type, PROTO_LEASE_RETURN);
    assert_int_equal(cx_persist_all(&x, &p), 1);
    assert_int_equal(p.op, SUP_PERSIST_DELETE);
    m = cx_expect(&x, PROTO_LEASE_RETURN);
    assert_int_equal(m.ret.lease_id, id);
    assert_int_equal(m.ret.used, 11);
    cx_close(&x);
}

/* One request of a steady stream on LINK_A and one turn of its host. While the disk works,
 * every ACQUIRE is granted n tokens for T_lease and every row is written at once; while it
 * stalls, neither the supervisor's commit nor the child's writes finish, so nothing is
 * answered or written. Returns whether the request had to wait. */
static int
steady_turn(struct cx *x, int64_t n, bool disk_ok)
{
    struct proto_lease_msg m;
    struct sup_admit a = cx_admit(x, LINK_A, 1, 0);

    while (disk_ok && sup_child_next_message(x->c, x->now, &m) == TALLY_OK) {
        if (m.type == PROTO_LEASE_ACQUIRE)
            (void)cx_grant(x, &m, n, 5000, 0, NULL);
    }
    if (disk_ok)
        (void)cx_persist_all(x, NULL);
    return a.verdict == SUP_ADMIT_WAIT;
}

static void
test_child_leads_cover_a_disk_stall(void **state)
{
    const int64_t n = 2000; /* two seconds of the stream: mark chunks of 500 */
    int waits = 0, stalled = 0;
    struct cx x;

    (void)state;
    cx_open(&x, true, TENANT_UNAVAIL_CLOSED);
    (void)cx_admit(&x, LINK_A, 1, 0); /* the first request: HELLO, then its ACQUIRE */
    cx_welcome(&x);
    (void)steady_turn(&x, n, true); /* its grant comes */
    /* 1,000 requests a second with a working disk for 3 s: the rate is known. */
    for (int64_t t = 1; t < 3000; t++) {
        cx_at(&x, t);
        waits += steady_turn(&x, n, true);
    }
    assert_int_equal(waits, 0);
    /* Then the disk holds every write, the supervisor's and the child's, for 800 ms. The
     * next mark and the next lease were asked for a second of the stream ahead (not half a
     * chunk, 250 requests, and a quarter lease): no request waits meanwhile. */
    for (int64_t t = 3000; t < 3800; t++) {
        cx_at(&x, t);
        stalled += steady_turn(&x, n, false);
    }
    assert_int_equal(stalled, 0);
    /* A stall longer than the leads does hold requests: the bound is what the leads give. */
    for (int64_t t = 3800; t < 5000; t++) {
        cx_at(&x, t);
        stalled += steady_turn(&x, n, false);
    }
    assert_true(stalled > 0);
    cx_close(&x);
}

static void
test_child_resume_after_crash(void **state)
{
    struct sup_child_lease_rec rec;
    struct sup_child_persist p;
    struct sup_admit a;
    struct cx x;
    int ok = 0;

    (void)state;
    cx_open(&x, true, TENANT_UNAVAIL_CLOSED);
    memset(&rec, 0, sizeof(rec));
    rec.lease_id = 55;
    rec.incarnation = 6;
    strcpy(rec.link, LINK_A);
    rec.n = 20;
    rec.mark = 12;
    rec.ttl_ms = 5000;
    rec.sent_mono_ms = x.now.mono_ms - 1000;
    rec.deadline_mono_ms = rec.sent_mono_ms + 4900;
    /* The wall clock stepped back 10 s since: the wall deadline looks far away. */
    rec.deadline_wall_ms = x.now.wall_ms + 10000 + 3900;
    assert_int_equal(sup_child_resume(x.c, &rec, x.now), TALLY_OK);
    /* Resumed at used := mark: 8 left, each beyond the mark once the next mark is durable. */
    for (int i = 0; i < 10; i++) {
        a = cx_admit(&x, LINK_A, 1, 0);
        if (a.verdict == SUP_ADMIT_WAIT && a.wait == SUP_WAIT_MARK) {
            assert_true(cx_persist_all(&x, NULL) > 0);
            a = cx_admit(&x, LINK_A, 1, 0);
        }
        ok += a.verdict == SUP_ADMIT_OK;
    }
    assert_int_equal(ok, 8);
    /* Bounded by the monotonic deadline, not the stretched wall one. */
    cx_close(&x);
    cx_open(&x, true, TENANT_UNAVAIL_CLOSED);
    assert_int_equal(sup_child_resume(x.c, &rec, x.now), TALLY_OK);
    x.now.mono_ms = rec.deadline_mono_ms;
    a = cx_admit(&x, LINK_A, 1, SUP_ADMIT_GIVE_UP);
    assert_int_equal(a.verdict, SUP_ADMIT_UNAVAILABLE);
    /* A row whose deadline passed is deleted, then reported from its mark (the supervisor
     * credits it only before its own deadline + margin). */
    assert_int_equal(sup_child_next_persist(x.c, &p), TALLY_OK);
    assert_int_equal(p.op, SUP_PERSIST_DELETE);
    sup_child_persisted(x.c, &p, NULL);
    cx_welcome(&x);
    {
        struct proto_lease_msg acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);

        assert_int_equal(acq.acquire.report_lease, 55);
        assert_int_equal(acq.acquire.report_used, 12);
    }
    /* A rebooted host (monotonic clock went back): not resumed. */
    cx_close(&x);
    cx_open(&x, true, TENANT_UNAVAIL_CLOSED);
    rec.sent_mono_ms = x.now.mono_ms + 100000;
    assert_int_equal(sup_child_resume(x.c, &rec, x.now), TALLY_OK);
    assert_int_equal(cx_admit(&x, LINK_A, 1, SUP_ADMIT_GIVE_UP).verdict, SUP_ADMIT_UNAVAILABLE);
    /* Malformed rows are refused. */
    rec.incarnation = 7;
    assert_int_equal(sup_child_resume(x.c, &rec, x.now), TALLY_EINVAL);
    cx_close(&x);
}

static void
test_child_degraded_open_then_debt(void **state)
{
    struct proto_lease_msg r;
    struct sup_admit a;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_OPEN);
    cx_welcome(&x);
    sup_child_set_connected(x.c, false, x.now);
    assert_false(sup_child_reachable(x.c, x.now));
    for (int i = 0; i < 3; i++) {
        a = cx_admit(&x, LINK_A, 1, 0);
        assert_int_equal(a.verdict, SUP_ADMIT_OK);
        assert_true(a.degraded);
        assert_int_equal(a.left, 2 - i); /* exact: the degraded window is the child's own */
    }
    a = cx_admit(&x, LINK_A, 1, 0); /* the degraded limit: 3 per minute */
    assert_int_equal(a.verdict, SUP_ADMIT_REFUSED);
    assert_true(a.degraded);
    /* Back: the debt rides on the next message for the link, once. */
    sup_child_set_connected(x.c, true, x.now);
    {
        struct proto_lease_msg acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);

        assert_int_equal(acq.acquire.debt, 3);
        cx_reply_to(&acq, &r, PROTO_LEASE_DENY);
        strcpy(r.deny.endpoint, "search");
        strcpy(r.deny.link, LINK_A);
        r.deny.scope = TENANT_SCOPE_PLAN;
        r.deny.retry_after_ms = 100;
        (void)cx_deliver(&x, &r);
    }
    /* The debt charged, traffic alone sends nothing: the supervisor may hibernate. */
    cx_at(&x, 1500);
    sup_child_tick(x.c, x.now);
    cx_expect_nothing(&x);
    cx_close(&x);
}

static void
test_child_degraded_closed_and_give_up(void **state)
{
    struct sup_admit a;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    a = cx_admit(&x, LINK_A, 1, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    (void)cx_expect(&x, PROTO_LEASE_ACQUIRE);
    x.now.mono_ms = a.give_up_ms;
    a = cx_admit(&x, LINK_A, 1, SUP_ADMIT_GIVE_UP);
    assert_int_equal(a.verdict, SUP_ADMIT_UNAVAILABLE);
    assert_true(a.retry_after_ms > 0);
    /* Silent for long: unreachable, no more waiting. */
    cx_at(&x, SUP_CHILD_UNREACHABLE_MS_DEFAULT + 10);
    assert_false(sup_child_reachable(x.c, x.now));
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_UNAVAILABLE);
    cx_close(&x);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_strict_marks),
        cmocka_unit_test(test_child_leads_cover_a_disk_stall),
        cmocka_unit_test(test_child_resume_after_crash),
        cmocka_unit_test(test_child_degraded_open_then_debt),
        cmocka_unit_test(test_child_degraded_closed_and_give_up),
    };

    return cmocka_run_group_tests_name("sup_child_durable", tests, group_setup, NULL);
}

/*
 * The child counter (sup_child.h), one behaviour at a time, against hand-made replies: the
 * deadline is measured from the first send and shortened by epsilon, the watermark
 * prefetch keeps a steady stream from ever waiting, DENYs are cached (by cost) until their
 * Retry-After, retransmissions keep their seq and duplicated replies are ignored, slots (grant,
 * cancel, release), zero allocations over 10,000 admissions on the hot path, bad arguments and
 * failed allocations. Registration (HELLO, WELCOME, the first ACQUIRE and GRANT):
 * test_sup_child_hello.c. Durability and degraded mode: test_sup_child_durable.c; how leases go
 * back (idle, kept, recalled): test_sup_child_keep.c.
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
test_child_deadline_from_first_send(void **state)
{
    struct proto_lease_msg acq;
    struct cx x;
    int64_t sent;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    sent = x.now.mono_ms;
    cx_at(&x, 30); /* retransmitted: the deadline still counts from the first send */
    sup_child_tick(x.c, x.now);
    assert_int_equal(cx_expect(&x, PROTO_LEASE_ACQUIRE).origin.seq, acq.origin.seq);
    (void)cx_grant(&x, &acq, 1000, 5000, 0, NULL);
    /* 5000 ms less 2% (epsilon) and one tick: usable until sent + 4899. */
    cx_assert_usable_until(&x, LINK_A, sent + 4899);
    /* The expired lease is reported: ACQUIRE with the report (the swap). */
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    assert_int_equal(acq.acquire.report_used, 1);
    assert_int_not_equal(acq.acquire.report_lease, 0);
    cx_close(&x);
}

/* A kept lease of an hour (every window of its path ends then): 2 % of its first 5 s (100 ms)
 * and 0.1 % of the rest (3,595 ms), plus one tick, come off its end: 3,696 ms, not 72 s. */
static void
test_child_long_lease_ends_by_the_long_bound(void **state)
{
    const int64_t hour = 3600000;
    struct proto_lease_msg acq;
    struct cx x;
    int64_t sent;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    sent = x.now.mono_ms;
    (void)cx_grant(&x, &acq, 1000000, hour,
                   PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST, NULL);
    cx_assert_usable_until(&x, LINK_A, sent + hour - 3696);
    cx_close(&x);
}

static void
test_child_watermark_prefetch_never_waits(void **state)
{
    struct proto_lease_msg acq, m;
    int waits = 0, acquires = 1;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    (void)cx_grant(&x, &acq, 20, 5000, 0, NULL);
    /* 100 requests/s for 10 s; every ACQUIRE answered 2 ms later. */
    for (int64_t t = 1; t <= 10000; t++) {
        cx_at(&x, t);
        sup_child_tick(x.c, x.now);
        if (t % 10 == 0) {
            struct sup_admit a = cx_admit(&x, LINK_A, 1, 0);

            if (a.verdict != SUP_ADMIT_OK)
                waits++;
        }
        while (sup_child_next_message(x.c, x.now, &m) == TALLY_OK) {
            if (m.type == PROTO_LEASE_ACQUIRE) {
                acq = m;
                acquires++;
                assert_int_equal(m.acquire.need, 0); /* a prefetch, never a waiting request */
                x.now.mono_ms += 2;
                (void)cx_grant(&x, &acq, m.acquire.want, 5000, 0, NULL);
                x.now.mono_ms -= 2;
            } else if (m.type == PROTO_LEASE_HEARTBEAT) {
                struct proto_lease_msg r;

                cx_reply_to(&m, &r, PROTO_LEASE_HB_ACK);
                (void)cx_deliver(&x, &r);
            } else if (m.type == PROTO_LEASE_RETURN) {
                struct proto_lease_msg r;

                cx_reply_to(&m, &r, PROTO_LEASE_RETURN_ACK);
                r.return_ack.lease_id = m.ret.lease_id;
                (void)cx_deliver(&x, &r);
            }
        }
    }
    assert_int_equal(waits, 0);
    /* Slow start, then leases of about rate * T_renew = 200: few round trips. */
    assert_true(acquires < 20);
    cx_close(&x);
}

static void
test_child_deny_cached_by_cost(void **state)
{
    struct proto_lease_msg acq, r;
    struct sup_child_event ev;
    struct sup_admit a;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 3, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    cx_reply_to(&acq, &r, PROTO_LEASE_DENY);
    strcpy(r.deny.endpoint, "search");
    strcpy(r.deny.link, LINK_A);
    r.deny.scope = TENANT_SCOPE_PLAN;
    r.deny.retry_after_ms = 5000;
    r.deny.limit = 600;
    ev = cx_deliver(&x, &r);
    assert_int_equal(ev.kind, SUP_EV_LINK);
    cx_at(&x, 1000);
    a = cx_admit(&x, LINK_A, 3, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_REFUSED);
    assert_int_equal(a.scope, TENANT_SCOPE_PLAN);
    assert_int_equal(a.retry_after_ms, 4000);
    assert_int_equal(a.limit, 600);
    cx_expect_nothing(&x); /* answered locally, no ACQUIRE */
    /* A smaller cost may still fit: asked. */
    a = cx_admit(&x, LINK_A, 1, 0);
    assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    assert_int_equal(cx_expect(&x, PROTO_LEASE_ACQUIRE).acquire.need, 1);
    cx_close(&x);
}

struct live_scan {
    int live;
    int64_t unused;
};

static int
scan_live(void *ctx, const struct sup_child_lease_info *l)
{
    struct live_scan *s = ctx;

    if (l->live) {
        s->live++;
        s->unused += l->n - l->used;
    }
    return 0;
}

/* Requests each costlier than what any lease of the link has left: every one needs a lease of
 * its own, yet the link never holds more than two live leases (its lease and one prefetched, the
 * stranding bound I4); a displaced lease is reported with what it used. */
static void
test_child_live_leases_bounded(void **state)
{
    uint64_t granted[16];
    int grants = 0, reported = 0;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    for (int64_t cost = 1; cost <= 8; cost++) {
        struct live_scan ls = {0, 0};
        struct sup_admit a = cx_admit(&x, LINK_A, cost, 0);
        struct proto_lease_msg m;

        for (int round = 0; a.verdict == SUP_ADMIT_WAIT && round < 4; round++) {
            m = cx_next(&x);
            while (m.type == PROTO_LEASE_RETURN) {
                struct proto_lease_msg r;

                reported++;
                cx_reply_to(&m, &r, PROTO_LEASE_RETURN_ACK);
                r.return_ack.lease_id = m.ret.lease_id;
                (void)cx_deliver(&x, &r);
                assert_int_equal(sup_child_next_message(x.c, x.now, &m), TALLY_OK);
            }
            assert_int_equal(m.type, PROTO_LEASE_ACQUIRE);
            reported += m.acquire.report_lease != 0;
            /* One token more than the cost: what is left never fits the next, costlier one. */
            assert_true(grants < 16);
            (void)cx_grant(&x, &m, cost + 1, 5000, 0, &granted[grants++]);
            a = cx_admit(&x, LINK_A, cost, 0);
        }
        assert_int_equal(a.verdict, SUP_ADMIT_OK);
        (void)sup_child_each_lease(x.c, scan_live, &ls);
        assert_true(ls.live <= 2);
        assert_true(ls.unused <= 2 * (cost + 1));
        cx_at(&x, cost * 10);
    }
    /* Eight leases granted, at most two still live: the others were reported (a RETURN, or
     * riding on the next ACQUIRE). */
    assert_true(grants >= 8);
    assert_true(reported >= grants - 2 - 2);
    cx_close(&x);
}

/* A grant that finds every entry of its link's table busy (here: each waiting for its row's
 * DELETE) is not dropped in silence: it goes straight back in a RETURN with nothing used, so the
 * supervisor credits it, and the child counts it. */
/* The next message is a RETURN of lease `id` with nothing used; the child's stats after it. */
static struct sup_child_stats
expect_handed_back(struct cx *x, uint64_t id)
{
    struct sup_child_stats st;
    struct proto_lease_msg r = cx_expect(x, PROTO_LEASE_RETURN);

    assert_true(r.ret.lease_id == id);
    assert_int_equal(r.ret.used, 0);
    sup_child_stats(x->c, x->now, &st);
    return st;
}

static void
test_child_grant_without_room_is_handed_back(void **state)
{
    struct sup_child_stats st;
    struct proto_lease_msg m;
    struct child_link *k;
    uint64_t id = 0;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    m = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    k = sup__child_link_find(x.c, LINK_A, NULL);
    assert_non_null(k);
    for (int j = 0; j < CHILD_LEASES; j++) {
        k->l[j].state = CL_RETIRED;
        k->l[j].id = 9000 + (uint64_t)j;
        k->l[j].row = true;
    }
    (void)cx_grant(&x, &m, 10, 5000, 0, &id);
    st = expect_handed_back(&x, id);
    assert_int_equal(st.grants_no_room, 1);
    assert_int_equal(st.grants_stranded, 0);
    for (int j = 0; j < CHILD_LEASES; j++)
        memset(&k->l[j], 0, sizeof(k->l[j])); /* the pretend rows were never written */
    cx_close(&x);
}

/* A GRANT naming another link than the ACQUIRE it answers (an answer given to another
 * request under the same seq) is handed back unused: no lease on the asking link, a RETURN of
 * the lease with nothing used, and the request asks again. */
static void
test_child_grant_for_another_link_is_handed_back(void **state)
{
    struct sup_child_stats st;
    struct proto_lease_msg m, g;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    m = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    cx_reply_to(&m, &g, PROTO_LEASE_GRANT);
    strcpy(g.grant.endpoint, m.acquire.endpoint);
    strcpy(g.grant.link, LINK_B);
    g.grant.lease_id = 77;
    g.grant.n = 10;
    g.grant.ttl_ms = 5000;
    (void)cx_deliver(&x, &g);
    st = expect_handed_back(&x, 77);
    assert_int_equal(st.grants_foreign, 1);
    assert_int_equal(st.grants_no_room, 0);
    assert_int_equal(st.live_leases, 0);
    /* Still no lease for link A: the request waits and asks again. */
    assert_int_equal(cx_admit(&x, LINK_A, 1, 0).verdict, SUP_ADMIT_WAIT);
    (void)cx_expect(&x, PROTO_LEASE_ACQUIRE);
    cx_close(&x);
}

static void
test_child_slots(void **state)
{
    struct proto_lease_msg m, r;
    struct sup_child_event ev;
    uint64_t op1, op2;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    assert_int_equal(sup_child_slot_acquire(x.c, LINK_B, x.now, &op1), TALLY_OK);
    m = cx_expect(&x, PROTO_LEASE_SLOT_ACQUIRE);
    assert_int_equal(m.origin.seq, op1);
    cx_reply_to(&m, &r, PROTO_LEASE_SLOT_GRANT);
    strcpy(r.slot_grant.link, LINK_B);
    r.slot_grant.slot_id = 4;
    r.slot_grant.ttl_ms = 30000;
    ev = cx_deliver(&x, &r);
    assert_int_equal(ev.kind, SUP_EV_SLOT_GRANTED);
    assert_int_equal(ev.op, op1);
    assert_int_equal(ev.slot_id, 4);
    /* Given up before the grant came: released as soon as it comes. */
    assert_int_equal(sup_child_slot_acquire(x.c, LINK_B, x.now, &op2), TALLY_OK);
    m = cx_expect(&x, PROTO_LEASE_SLOT_ACQUIRE);
    sup_child_slot_cancel(x.c, op2);
    cx_reply_to(&m, &r, PROTO_LEASE_SLOT_GRANT);
    strcpy(r.slot_grant.link, LINK_B);
    r.slot_grant.slot_id = 5;
    r.slot_grant.ttl_ms = 30000;
    ev = cx_deliver(&x, &r);
    assert_int_equal(ev.kind, SUP_EV_NONE);
    m = cx_expect(&x, PROTO_LEASE_SLOT_RELEASE);
    assert_int_equal(m.slot_release.slot_id, 5);
    /* Released until acknowledged. */
    cx_at(&x, 100);
    assert_int_equal(cx_expect(&x, PROTO_LEASE_SLOT_RELEASE).origin.seq, m.origin.seq);
    cx_reply_to(&m, &r, PROTO_LEASE_SLOT_RELEASE_ACK);
    strcpy(r.slot_release_ack.link, LINK_B);
    r.slot_release_ack.slot_id = 5;
    (void)cx_deliver(&x, &r);
    cx_at(&x, 2000);
    sup_child_tick(x.c, x.now);
    while (sup_child_next_message(x.c, x.now, &m) == TALLY_OK)
        assert_int_not_equal(m.type, PROTO_LEASE_SLOT_RELEASE);
    cx_close(&x);
}

static void
test_child_hot_path_allocates_nothing(void **state)
{
    struct proto_lease_msg acq;
    struct sup_child_persist p;
    uint64_t before;
    struct cx x;

    (void)state;
    cx_open(&x, true, TENANT_UNAVAIL_CLOSED);
    cx_welcome(&x);
    (void)cx_admit(&x, LINK_A, 1, 0);
    acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
    (void)cx_grant(&x, &acq, 1000000, 5000, 0, NULL);
    while (sup_child_next_persist(x.c, &p) == TALLY_OK) {
        p.rec.mark = 1000000; /* as if the caller persisted far ahead */
        sup_child_persisted(x.c, &p, NULL);
    }
    before = tally_alloc_count();
    for (int i = 0; i < 10000; i++) {
        struct sup_admit a;

        assert_int_equal(sup_child_admit(x.c, LINK_A, 1, x.now, 0, &a), TALLY_OK);
        assert_int_equal(a.verdict, SUP_ADMIT_OK);
    }
    assert_int_equal(tally_alloc_count(), before);
    cx_close(&x);
}

/* More busy links than the table was sized for: it grows (the links keep
 * their slots), never answers TALLY_EFULL, and every link is still found. */
static void
test_child_link_table_grows(void **state)
{
    struct sup_child_stats st;
    struct cx x;
    char id[32];
    int i;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    sup_child_close(x.c);
    x.cfg.max_links = 4;
    assert_int_equal(sup_child_open(&x.cfg, &x.c), TALLY_OK);
    for (i = 0; i < 300; i++) {
        struct sup_admit a;
        snprintf(id, sizeof(id), "lnk_%016x", (unsigned)i + 1);
        assert_int_equal(sup_child_admit(x.c, id, 1, x.now, 0, &a), TALLY_OK);
        assert_int_equal(a.verdict, SUP_ADMIT_WAIT); /* each one asks: none is idle */
    }
    for (i = 0; i < 300; i++) {
        struct sup_admit a;
        snprintf(id, sizeof(id), "lnk_%016x", (unsigned)i + 1);
        assert_int_equal(sup_child_admit(x.c, id, 1, x.now, 0, &a), TALLY_OK);
        assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    }
    sup_child_stats(x.c, x.now, &st);
    assert_int_equal(st.links, 300);
    cx_close(&x);
}

/* Refused links outnumber the table (4 slots, 20 links): each one's refusal stays remembered
 * (the table grows rather than drop it), so asking all 20 again sends no ACQUIRE; once the
 * refusals run out, idle links may leave again. */
static void
test_child_refusals_outlive_a_small_table(void **state)
{
    struct sup_child_stats st;
    struct sup_admit a;
    struct cx x;
    char id[20][32];

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    sup_child_close(x.c);
    x.cfg.max_links = 4;
    assert_int_equal(sup_child_open(&x.cfg, &x.c), TALLY_OK);
    cx_welcome(&x);
    for (int i = 0; i < 20; i++) {
        struct proto_lease_msg acq, r;

        snprintf(id[i], sizeof(id[i]), "lnk_%016x", (unsigned)i + 1);
        a = cx_admit(&x, id[i], 1, 0);
        assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
        acq = cx_expect(&x, PROTO_LEASE_ACQUIRE);
        cx_reply_to(&acq, &r, PROTO_LEASE_DENY);
        strcpy(r.deny.endpoint, "search");
        strcpy(r.deny.link, id[i]);
        r.deny.scope = TENANT_SCOPE_ENDPOINT_LINK;
        r.deny.retry_after_ms = 60000;
        (void)cx_deliver(&x, &r);
    }
    cx_at(&x, 1000);
    for (int i = 0; i < 20; i++) {
        a = cx_admit(&x, id[i], 1, 0);
        assert_int_equal(a.verdict, SUP_ADMIT_REFUSED);
        assert_int_equal(a.retry_after_ms, 59000);
    }
    cx_expect_nothing(&x); /* every refusal answered locally */
    sup_child_stats(x.c, x.now, &st);
    assert_int_equal(st.links, 20);
    cx_close(&x);
}

/* A child counter whose link table reached its hard maximum (set tiny here) with every link
 * busy answers a new link TALLY_EFULL (tallyd's 503), never an admission, even fail-open, and
 * goes on serving the links it has (docs/FAILURE-MODES.md §2). */
static void
test_child_link_table_full_refuses(void **state)
{
    struct sup_child_config cfg;
    struct sup_time now = {1000, 1700000000000};
    char links[9][TENANT_LINK_ID_LEN + 1];
    struct proto_lease_msg m;
    struct sup_admit a;
    sup_child *c = NULL;
    int rc;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    strcpy(cfg.tenant, "acme");
    strcpy(cfg.policy.name, "api");
    cfg.policy.cost = 1;
    cfg.policy.on_unavailable = TENANT_UNAVAIL_OPEN; /* even fail-open: no admission */
    cfg.policy.degraded_limits.count = 1;
    cfg.policy.degraded_limits.v[0] = (struct tenant_limit){100, 60000};
    cfg.incarnation = 1;
    cfg.max_links = 4;
    cfg.links_max = 8; /* grows 4 -> 8, then full */
    assert_int_equal(sup_child_open(&cfg, &c), TALLY_OK);
    /* Eight links, each waiting for its first lease: none is idle, none evictable. */
    for (int i = 0; i < 9; i++)
        tenant_link_id_new(links[i]);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(sup_child_admit(c, links[i], 1, now, 0, &a), TALLY_OK);
        assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    }
    rc = sup_child_admit(c, links[8], 1, now, 0, &a);
    assert_int_equal(rc, TALLY_EFULL); /* front_child_run answers PROTO_UNAVAILABLE (503) */
    /* ... also when asked to decide without the supervisor (the give-up path) */
    rc = sup_child_admit(c, links[8], 1, now, SUP_ADMIT_GIVE_UP, &a);
    assert_int_equal(rc, TALLY_EFULL);
    /* The links it has are served as before: their asks go out, they wait. */
    assert_int_equal(sup_child_next_message(c, now, &m), TALLY_OK);
    assert_int_equal(m.type, PROTO_LEASE_HELLO);
    assert_int_equal(sup_child_admit(c, links[0], 1, now, 0, &a), TALLY_OK);
    assert_int_equal(a.verdict, SUP_ADMIT_WAIT);
    sup_child_close(c);
}

static void
test_child_bad_arguments_and_oom(void **state)
{
    struct sup_admit a;
    struct cx x;

    (void)state;
    cx_open(&x, false, TENANT_UNAVAIL_CLOSED);
    assert_int_equal(sup_child_admit(x.c, LINK_A, 0, x.now, 0, &a), TALLY_ECOST);
    assert_int_equal(sup_child_admit(x.c, "not-a-link", 1, x.now, 0, &a), TALLY_EINVAL);
    tally_alloc_fail_at(1);
    assert_int_equal(sup_child_admit(x.c, LINK_B, 1, x.now, 0, &a), TALLY_ENOMEM);
    tally_alloc_fail_at(0);
    assert_int_equal(sup_child_admit(x.c, LINK_B, 1, x.now, 0, &a), TALLY_OK);
    cx_close(&x);
    for (uint64_t n = 1;; n++) {
        sup_child *c = NULL;
        int rc;

        assert_true(n < 10);
        tally_alloc_fail_at(n);
        rc = sup_child_open(&x.cfg, &c);
        tally_alloc_fail_at(0);
        sup_child_close(c);
        if (rc == TALLY_OK)
            break;
        assert_int_equal(rc, TALLY_ENOMEM);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_deadline_from_first_send),
        cmocka_unit_test(test_child_long_lease_ends_by_the_long_bound),
        cmocka_unit_test(test_child_watermark_prefetch_never_waits),
        cmocka_unit_test(test_child_deny_cached_by_cost),
        cmocka_unit_test(test_child_refusals_outlive_a_small_table),
        cmocka_unit_test(test_child_live_leases_bounded),
        cmocka_unit_test(test_child_slots),
        cmocka_unit_test(test_child_hot_path_allocates_nothing),
        cmocka_unit_test(test_child_link_table_grows),
        cmocka_unit_test(test_child_link_table_full_refuses),
        cmocka_unit_test(test_child_grant_without_room_is_handed_back),
        cmocka_unit_test(test_child_grant_for_another_link_is_handed_back),
        cmocka_unit_test(test_child_bad_arguments_and_oom),
    };

    return cmocka_run_group_tests_name("sup_child", tests, group_setup, NULL);
}

/*
 * The supervisor ledger's journal side (sup_lease.h): duplicate requests answered from the cache
 * without a change and stale ones ignored, slots (K, idempotent release, TTL, kept across a
 * restart), a random history replayed from the journal equal to the live ledger, and so is a
 * snapshot of it (a retransmission after the restart gets the same GRANT), records as plain
 * data, every setup allocation failed in turn, and no allocation at all once links and children
 * are known.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdlib.h>
#include <string.h>

#include "sup_lease.h"
#include "sup_sim_fx.h"
#include "test_alloc.h"
#include "test_support.h"

static uint64_t seed;

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

static void
test_ledger_duplicates_change_nothing(void **state)
{
    struct proto_lease_msg m, r1, r2;
    struct fx f;
    uint64_t digest;
    size_t recs;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    fx_origin(&f, &m, PROTO_LEASE_ACQUIRE, 0, 1);
    strcpy(m.acquire.endpoint, "search");
    strcpy(m.acquire.link, LINK_A);
    m.acquire.want = 20;
    m.acquire.need = 1;
    m.acquire.debt = 4;
    r1 = fx_send(&f, T0, &m, &recs);
    assert_int_equal(recs, 1);
    digest = sup_ledger_digest(f.l);
    /* The retransmission, later and with the clock moved: the same GRANT, nothing changed. */
    r2 = fx_send(&f, T0 + 900, &m, &recs);
    assert_int_equal(recs, 0);
    assert_memory_equal(&r1, &r2, sizeof(r1));
    assert_int_equal(sup_ledger_digest(f.l), digest);
    assert_int_equal(fx_plan_cell(&f, MINUTE).debt, 4); /* debt charged once */
    /* Far behind the window of live seqs: stale, a no-op. */
    for (int i = 0; i < SUP_DEDUPE; i++)
        (void)fx_acquire(&f, 0, 1, LINK_A, 1, 0, T0 + 1000);
    r2 = fx_send(&f, T0 + 1000, &m, &recs);
    assert_int_equal(r2.type, PROTO_LEASE_ERROR);
    assert_int_equal(r2.error.code, PROTO_LEASE_E_STALE);
    assert_int_equal(recs, 0);
    fx_close(&f);
}

static void
test_ledger_slots_bounded_and_idempotent(void **state)
{
    struct proto_lease_msg m, r, g1;
    struct fx f;
    size_t recs;
    sup_ledger *again;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 1, 1, T0);
    fx_origin(&f, &m, PROTO_LEASE_SLOT_ACQUIRE, 1, 1);
    strcpy(m.slot_acquire.endpoint, "export");
    strcpy(m.slot_acquire.link, LINK_A);
    g1 = fx_send(&f, T0, &m, &recs);
    assert_int_equal(g1.type, PROTO_LEASE_SLOT_GRANT);
    assert_int_equal(g1.slot_grant.ttl_ms, TENANT_SLOT_TTL_MS_DEFAULT);
    m.origin.seq = ++f.seq[1];
    r = fx_send(&f, T0 + 1000, &m, NULL);
    assert_int_equal(r.type, PROTO_LEASE_SLOT_GRANT);
    m.origin.seq = ++f.seq[1];
    r = fx_send(&f, T0 + 2000, &m, NULL);
    assert_int_equal(r.type, PROTO_LEASE_SLOT_DENY);
    assert_int_equal(r.slot_deny.retry_after_ms, TENANT_SLOT_TTL_MS_DEFAULT - 2000);
    assert_int_equal(sup_ledger_slots_held(f.l, LINK_A, T0 + 2000), 2);
    /* A restart keeps them (I6 across restarts). */
    assert_int_equal(sup_ledger_open(&f.cfg, &again), TALLY_OK);
    for (size_t i = 0; i < f.nj; i++)
        assert_int_equal(sup_ledger_replay(again, &f.journal[i]), TALLY_OK);
    assert_int_equal(sup_ledger_slots_held(again, LINK_A, T0 + 2000), 2);
    sup_ledger_close(again);
    /* Release: once frees, again changes nothing. */
    fx_origin(&f, &m, PROTO_LEASE_SLOT_RELEASE, 1, 1);
    strcpy(m.slot_release.link, LINK_A);
    m.slot_release.slot_id = g1.slot_grant.slot_id;
    r = fx_send(&f, T0 + 3000, &m, &recs);
    assert_true(r.slot_release_ack.released);
    assert_int_equal(recs, 1);
    m.origin.seq = ++f.seq[1];
    r = fx_send(&f, T0 + 3001, &m, &recs);
    assert_false(r.slot_release_ack.released);
    assert_int_equal(recs, 0);
    assert_int_equal(sup_ledger_slots_held(f.l, LINK_A, T0 + 3001), 1);
    /* The other expires at its TTL. */
    assert_int_equal(sup_ledger_slots_held(f.l, LINK_A, T0 + 1000 + TENANT_SLOT_TTL_MS_DEFAULT), 0);
    /* A cheap endpoint needs no slot: slot 0, nothing to release. */
    fx_origin(&f, &m, PROTO_LEASE_SLOT_ACQUIRE, 1, 1);
    strcpy(m.slot_acquire.endpoint, "search");
    strcpy(m.slot_acquire.link, LINK_A);
    r = fx_send(&f, T0 + 3002, &m, &recs);
    assert_int_equal(r.slot_grant.slot_id, 0);
    assert_int_equal(recs, 0);
    fx_close(&f);
}

static void
test_ledger_replay_equals_live(void **state)
{
    uint64_t s = seed ^ 0x5e9a1;
    struct proto_lease_msg last_acquire, first, again;
    uint64_t leases[64];
    int nleases = 0;
    bool have = false;
    sup_ledger *rebuilt;
    struct fx f;
    int64_t now = T0;

    (void)state;
    fx_open(&f);
    memset(&last_acquire, 0, sizeof(last_acquire));
    for (int c = 0; c < 3; c++)
        fx_hello(&f, c, 1, now);
    for (int step = 0; step < 1500 && f.nj < 4000; step++) {
        int c = (int)(test_rand(&s) % 2), kind = (int)(test_rand(&s) % 8);
        const char *link = test_rand(&s) % 2 ? LINK_A : LINK_B;
        struct proto_lease_msg m, r;
        struct sup_records out;

        now += (int64_t)(test_rand(&s) % 700) - (test_rand(&s) % 20 == 0 ? 3000 : 0);
        if (kind <= 3) {
            fx_origin(&f, &m, PROTO_LEASE_ACQUIRE, c, 1);
            strcpy(m.acquire.endpoint, f.eps[c].name);
            strcpy(m.acquire.link, link);
            m.acquire.need = (int64_t)(test_rand(&s) % 4);
            m.acquire.want = m.acquire.need + 1 + (int64_t)(test_rand(&s) % 40);
            m.acquire.debt = test_rand(&s) % 10 == 0 ? 2 : 0;
            if (nleases > 0 && test_rand(&s) % 3 == 0) {
                m.acquire.report_lease = leases[test_rand(&s) % (uint64_t)nleases];
                m.acquire.report_used = (int64_t)(test_rand(&s) % 5);
            }
            r = fx_send(&f, now, &m, NULL);
            if (r.type == PROTO_LEASE_GRANT) {
                if (nleases < 64)
                    leases[nleases++] = r.grant.lease_id;
                else
                    leases[test_rand(&s) % 64] = r.grant.lease_id;
                last_acquire = m;
                first = r;
                have = true;
            }
        } else if (kind == 4 && nleases > 0) {
            fx_origin(&f, &m, PROTO_LEASE_RETURN, c, 1);
            m.ret.lease_id = leases[test_rand(&s) % (uint64_t)nleases];
            m.ret.used = (int64_t)(test_rand(&s) % 5);
            (void)fx_send(&f, now, &m, NULL);
        } else if (kind == 5) {
            fx_origin(&f, &m, PROTO_LEASE_SLOT_ACQUIRE, 1, 1);
            strcpy(m.slot_acquire.endpoint, "export");
            strcpy(m.slot_acquire.link, link);
            r = fx_send(&f, now, &m, NULL);
            if (r.type == PROTO_LEASE_SLOT_GRANT && test_rand(&s) % 2) {
                fx_origin(&f, &m, PROTO_LEASE_SLOT_RELEASE, 1, 1);
                strcpy(m.slot_release.link, link);
                m.slot_release.slot_id = r.slot_grant.slot_id;
                (void)fx_send(&f, now + 5, &m, NULL);
            }
        } else if (kind == 6) {
            out = (struct sup_records){f.journal, f.nj, FX_JOURNAL};
            assert_int_equal(sup_ledger_expire(f.l, now, &out), TALLY_OK);
            f.nj = out.count;
        } else if (test_rand(&s) % 50 == 0) {
            /* A new incarnation of child 2, which sends nothing else: its old leases are
             * spent. (Children 0 and 1 go on with incarnation 1; a new one for them would
             * make every later request of theirs stale, and the journal short.) */
            fx_hello(&f, 2, 1 + (uint64_t)step, now);
        }
    }
    assert_true(have);
    assert_true(f.nj > 100);
    /* Rebuild from the journal: the same state, and the same GRANT for a retransmission. */
    assert_int_equal(sup_ledger_open(&f.cfg, &rebuilt), TALLY_OK);
    for (size_t i = 0; i < f.nj; i++)
        assert_int_equal(sup_ledger_replay(rebuilt, &f.journal[i]), TALLY_OK);
    assert_int_equal(sup_ledger_digest(rebuilt), sup_ledger_digest(f.l));
    sup_ledger_close(f.l);
    f.l = rebuilt;
    /* Compaction: the journal replaced by a snapshot replays to the same state too. */
    {
        struct sup_records snap = {NULL, 0, 0};
        size_t needed;

        assert_int_equal(sup_ledger_snapshot(f.l, &snap, &needed), TALLY_ETOOBIG);
        assert_true(needed > 0 && needed < f.nj);
        snap = (struct sup_records){f.journal, 0, FX_JOURNAL};
        assert_int_equal(sup_ledger_snapshot(f.l, &snap, &needed), TALLY_OK);
        assert_int_equal(snap.count, needed);
        f.nj = snap.count;
        assert_int_equal(sup_ledger_open(&f.cfg, &rebuilt), TALLY_OK);
        for (size_t i = 0; i < f.nj; i++)
            assert_int_equal(sup_ledger_replay(rebuilt, &f.journal[i]), TALLY_OK);
        assert_int_equal(sup_ledger_digest(rebuilt), sup_ledger_digest(f.l));
        sup_ledger_close(f.l);
        f.l = rebuilt;
    }
    {
        struct sup_records out = {f.journal, f.nj, FX_JOURNAL};

        assert_int_equal(sup_ledger_handle(f.l, now, &last_acquire, &again, &out), TALLY_OK);
        if (again.type == PROTO_LEASE_GRANT) {
            assert_int_equal(out.count, f.nj);
            assert_memory_equal(&again, &first, sizeof(first));
        }
    }
    fx_close(&f);
}

static void
test_ledger_records_are_plain_data(void **state)
{
    struct sup_record a, b;
    struct fx f;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    (void)fx_acquire(&f, 0, 1, LINK_A, 10, 1, T0);
    /* A record copied byte for byte (a blob in SQLite) replays the same. */
    a = f.journal[f.nj - 1];
    memcpy(&b, &a, sizeof(a));
    assert_int_equal(a.version, SUP_RECORD_VERSION);
    assert_int_equal(a.kind, SUP_REC_ACQUIRE);
    assert_memory_equal(&a, &b, sizeof(a));
    /* A record of an unknown version or kind is refused. */
    b.version = 99;
    assert_int_equal(sup_ledger_replay(f.l, &b), TALLY_EINVAL);
    b.version = SUP_RECORD_VERSION;
    b.kind = 42;
    assert_int_equal(sup_ledger_replay(f.l, &b), TALLY_EINVAL);
    fx_close(&f);
}

static void
test_ledger_allocation_failures(void **state)
{
    struct fx f;

    (void)state;
    /* Every allocation of open, and of the first link, failed in turn: clean errors. */
    int failures = 0;

    for (uint64_t n = 1;; n++) {
        struct proto_lease_msg m, reply;
        struct sup_records out;
        sup_ledger *l = NULL;
        int rc;

        fx_config(&f);
        f.journal = calloc(8, sizeof(*f.journal));
        assert_non_null(f.journal);
        tally_alloc_fail_at(n); /* the n-th allocation from now fails */
        rc = sup_ledger_open(&f.cfg, &l);
        if (rc == TALLY_OK) {
            out = (struct sup_records){f.journal, 0, 8};
            fx_origin(&f, &m, PROTO_LEASE_HELLO, 0, 1);
            strcpy(m.hello.tenant, "acme");
            rc = sup_ledger_handle(l, T0, &m, &reply, &out);
            if (rc == TALLY_OK) {
                fx_origin(&f, &m, PROTO_LEASE_ACQUIRE, 0, 1);
                strcpy(m.acquire.endpoint, "search");
                strcpy(m.acquire.link, LINK_A);
                m.acquire.want = 5;
                rc = sup_ledger_handle(l, T0, &m, &reply, &out);
            }
        }
        tally_alloc_fail_at(0);
        sup_ledger_close(l);
        free(f.journal);
        if (rc == TALLY_OK)
            break;
        assert_int_equal(rc, TALLY_ENOMEM);
        assert_true(n < 100);
        failures++;
    }
    assert_true(failures >= 6); /* open's tables, the child, the link, its endpoint pair */
}

static void
test_ledger_steady_state_allocates_nothing(void **state)
{
    struct proto_lease_msg m, g;
    uint64_t before;
    struct fx f;

    (void)state;
    fx_open(&f);
    fx_hello(&f, 0, 1, T0);
    fx_hello(&f, 1, 1, T0);
    g = fx_acquire(&f, 0, 1, LINK_A, 5, 1, T0);
    (void)fx_acquire(&f, 1, 1, LINK_A, 5, 1, T0);
    assert_int_equal(g.type, PROTO_LEASE_GRANT);
    /* Known links, children and pairs: swaps, duplicates, heartbeats and expiry allocate
     * nothing. */
    before = tally_alloc_count();
    for (int i = 0; i < 1000; i++) {
        struct sup_records out;
        int64_t now = T0 + i;

        f.nj = 0; /* the caller persisted the last batch */
        fx_origin(&f, &m, PROTO_LEASE_ACQUIRE, 0, 1);
        strcpy(m.acquire.endpoint, "search");
        strcpy(m.acquire.link, LINK_A);
        m.acquire.want = 5;
        m.acquire.report_lease = g.grant.lease_id;
        m.acquire.report_used = 0; /* all credited: the budget never runs out */
        g = fx_send(&f, now, &m, NULL);
        assert_int_equal(g.type, PROTO_LEASE_GRANT);
        (void)fx_send(&f, now, &m, NULL); /* a duplicate */
        fx_origin(&f, &m, PROTO_LEASE_HEARTBEAT, 1, 1);
        strcpy(m.heartbeat.endpoint, "export");
        m.heartbeat.count = 1;
        strcpy(m.heartbeat.e[0].link, LINK_A);
        m.heartbeat.e[0].debt = i % 7 == 0 ? 1 : 0;
        (void)fx_send(&f, now, &m, NULL);
        out = (struct sup_records){f.journal, f.nj, FX_JOURNAL};
        assert_int_equal(sup_ledger_expire(f.l, now, &out), TALLY_OK);
    }
    assert_int_equal(tally_alloc_count(), before);
    fx_close(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ledger_duplicates_change_nothing),
        cmocka_unit_test(test_ledger_slots_bounded_and_idempotent),
        cmocka_unit_test(test_ledger_replay_equals_live),
        cmocka_unit_test(test_ledger_records_are_plain_data),
        cmocka_unit_test(test_ledger_allocation_failures),
        cmocka_unit_test(test_ledger_steady_state_allocates_nothing),
    };

    return cmocka_run_group_tests_name("sup_journal", tests, group_setup, NULL);
}

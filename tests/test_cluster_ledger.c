/*
 * Every member's copy of every tenant's ledger (cluster/node_ledger.c, store/journal_copy.c),
 * on real SQLite files and without libraft: LEDGER records applied as the log hands them
 * over, the copies read back as a supervisor reads its journal.
 *
 * A record applied twice (a restart replays from the last snapshot) is written once; a
 * replacement's BEGIN and CHUNKs leave the journal as it was until its END swaps it in; the
 * bytes and order are the records'. Malformed records are ignored; many tenants go through
 * the cache of open copies. Snapshots: test_cluster_ledger_snap.c.
 */
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
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_ledger_util.h"
#include "store_paths.h"
#include "test_support.h"

static void
test_copy_position_skips_replays(void **state)
{
    struct rec a[3] = {text("a"), text("bb"), text("ccc")}, other[1] = {text("zz")};
    struct recs_list *got = list_new(), *staged = list_new();
    char path[STORE_PATH_MAX];
    store_journal_copy *c = NULL;
    bool known = true;
    uint64_t at = 9;

    (void)state;
    assert_int_equal(store_tenant_dirs(dir, "acme"), TALLY_OK);
    ledger_path(dir, "acme", path, sizeof(path));
    assert_int_equal(store_journal_copy_open(path, &c), TALLY_OK);
    assert_int_equal(store_journal_copy_applied(c, &known, &at), TALLY_OK);
    assert_false(known);
    assert_int_equal(at, 0);
    assert_int_equal(store_journal_copy_append(c, 5, 3, enc_list, a), TALLY_OK);
    /* The same position again, and an older one: nothing written. */
    assert_int_equal(store_journal_copy_append(c, 5, 1, enc_list, other), TALLY_OK);
    assert_int_equal(store_journal_copy_append(c, 4, 1, enc_list, other), TALLY_OK);
    assert_int_equal(store_journal_copy_applied(c, &known, &at), TALLY_OK);
    assert_true(known);
    assert_int_equal(at, 5);
    /* Read while tallyd's handle is open, as a supervisor does. */
    read_copy(dir, "acme", got, staged, &known, &at);
    assert_recs(got, a, 3);
    assert_int_equal(staged->n, 0);
    assert_int_equal(at, 5);
    assert_int_equal(store_journal_copy_append(c, 6, 1, enc_list, other), TALLY_OK);
    store_journal_copy_close(c);
    /* And after a reopen, the position is the file's. */
    read_copy(dir, "acme", got, staged, &known, &at);
    assert_int_equal(got->n, 4);
    assert_memory_equal(got->r[3].b, "zz", 2);
    assert_int_equal(at, 6);
    free(got);
    free(staged);
}

static void
test_copy_staging_swaps_at_once(void **state)
{
    struct rec old[2] = {text("x"), text("y")}, s1[2] = {text("p"), text("q")}, s2[1] = {text("r")};
    struct rec want[3] = {text("p"), text("q"), text("r")};
    struct recs_list *got = list_new(), *staged = list_new();
    char path[STORE_PATH_MAX];
    store_journal_copy *c = NULL;
    bool known;
    uint64_t at;

    (void)state;
    assert_int_equal(store_tenant_dirs(dir, "acme"), TALLY_OK);
    ledger_path(dir, "acme", path, sizeof(path));
    assert_int_equal(store_journal_copy_open(path, &c), TALLY_OK);
    assert_int_equal(store_journal_copy_append(c, 1, 2, enc_list, old), TALLY_OK);
    assert_int_equal(store_journal_copy_stage_begin(c, 2), TALLY_OK);
    assert_int_equal(store_journal_copy_stage(c, 3, 2, enc_list, s1), TALLY_OK);
    assert_int_equal(store_journal_copy_stage(c, 4, 1, enc_list, s2), TALLY_OK);
    assert_int_equal(store_journal_copy_stage(c, 4, 1, enc_list, s2), TALLY_OK); /* replay */
    /* BEGIN and CHUNKs without END: the journal is as it was. */
    read_copy(dir, "acme", got, staged, &known, &at);
    assert_recs(got, old, 2);
    assert_recs(staged, want, 3);
    assert_int_equal(store_journal_copy_stage_end(c, 5), TALLY_OK);
    read_copy(dir, "acme", got, staged, &known, &at);
    assert_recs(got, want, 3);
    assert_int_equal(staged->n, 0);
    assert_int_equal(at, 5);
    /* Replayed, the END and the BEGIN before it change nothing. */
    assert_int_equal(store_journal_copy_stage_begin(c, 2), TALLY_OK);
    assert_int_equal(store_journal_copy_stage_end(c, 5), TALLY_OK);
    read_copy(dir, "acme", got, NULL, NULL, NULL);
    assert_recs(got, want, 3);
    /* An END with nothing staged empties the journal; appends continue after it. */
    assert_int_equal(store_journal_copy_stage_begin(c, 6), TALLY_OK);
    assert_int_equal(store_journal_copy_stage_end(c, 7), TALLY_OK);
    read_copy(dir, "acme", got, NULL, NULL, NULL);
    assert_int_equal(got->n, 0);
    assert_int_equal(store_journal_copy_append(c, 8, 2, enc_list, old), TALLY_OK);
    read_copy(dir, "acme", got, NULL, NULL, NULL);
    assert_recs(got, old, 2);
    store_journal_copy_close(c);
    free(got);
    free(staged);
}

/* ---- LEDGER records through cluster__ledger_apply ---- */

static void
test_apply_records_and_replays(void **state)
{
    struct rec r1[2] = {text("one"), text("two")}, r2[1] = {text("three")};
    struct rec s[1] = {text("snap")}, all[3] = {text("one"), text("two"), text("three")};
    struct recs_list *got = list_new(), *staged = list_new();
    cluster_node *n = node_new(dir);
    uint8_t noop[1] = {LEDGER_NOOP};
    bool known;
    uint64_t at;

    (void)state;
    apply(n, 1, LEDGER_APPEND, "acme", r1, 2);
    cluster__ledger_apply(n, 2, noop, 1);
    apply(n, 3, LEDGER_APPEND, "acme", r2, 1);
    apply(n, 1, LEDGER_APPEND, "acme", r1, 2); /* the log replays after a restart */
    apply(n, 3, LEDGER_APPEND, "acme", r2, 1);
    read_copy(dir, "acme", got, staged, &known, &at);
    assert_recs(got, all, 3);
    assert_int_equal(at, 3);
    /* A compaction: BEGIN and a CHUNK leave the journal; END swaps. */
    apply(n, 4, LEDGER_BEGIN, "acme", NULL, 0);
    apply(n, 5, LEDGER_CHUNK, "acme", s, 1);
    read_copy(dir, "acme", got, staged, &known, &at);
    assert_recs(got, all, 3);
    assert_recs(staged, s, 1);
    apply(n, 6, LEDGER_END, "acme", NULL, 0);
    read_copy(dir, "acme", got, staged, &known, &at);
    assert_recs(got, s, 1);
    assert_int_equal(staged->n, 0);
    assert_int_equal(at, 6);
    /* Closed and opened again (a restart), the replay from an old snapshot changes nothing. */
    node_free(n);
    n = node_new(dir);
    apply(n, 1, LEDGER_APPEND, "acme", r1, 2);
    apply(n, 4, LEDGER_BEGIN, "acme", NULL, 0);
    apply(n, 6, LEDGER_END, "acme", NULL, 0);
    read_copy(dir, "acme", got, NULL, NULL, NULL);
    assert_recs(got, s, 1);
    node_free(n);
    free(got);
    free(staged);
}

static void
test_apply_ignores_malformed(void **state)
{
    struct rec r[1] = {text("ok")};
    struct recs_list *got = list_new();
    cluster_node *n = node_new(dir);
    uint8_t b[2048];
    size_t len;
    bool known;
    uint64_t at;

    (void)state;
    apply(n, 1, LEDGER_APPEND, "acme", r, 1);
    apply(n, 2, 'Z', "acme", NULL, 0);             /* an operation not listed */
    apply(n, 3, LEDGER_APPEND, "Bad!", r, 1);      /* not a tenant name */
    apply(n, 4, LEDGER_APPEND, "../../etc", r, 1); /* nor this */
    cluster__ledger_apply(n, 5, b, 0);             /* nothing after 'J' */
    b[0] = LEDGER_APPEND;
    b[1] = 0; /* no tenant */
    cluster__ledger_apply(n, 6, b, 2);
    b[1] = 64; /* too long a name */
    memset(b + 2, 'a', 64);
    cluster__ledger_apply(n, 7, b, 2 + 64 + 4);
    b[1] = 10; /* a name longer than the record */
    cluster__ledger_apply(n, 8, b, 5);
    len = ledger(b, LEDGER_APPEND, "acme", r, 1);
    cluster__ledger_apply(n, 9, b, len - 1); /* the record cut */
    b[len] = 0;
    cluster__ledger_apply(n, 10, b, len + 1); /* a byte too many */
    cluster__put_u32(b + 2 + 4, 2);           /* two records announced, one there */
    cluster__ledger_apply(n, 11, b, len);
    cluster__put_u32(b + 2 + 4, 1);
    cluster__put_u32(b + 2 + 8, 0); /* an empty record */
    cluster__ledger_apply(n, 12, b, len);
    len = ledger(b, LEDGER_APPEND, "acme", NULL, 0) - 4; /* up to the count */
    cluster__put_u32(b + len, 1);
    cluster__put_u32(b + len + 4, STORE_RECORD_MAX + 1); /* a record over the bound */
    memset(b + len + 8, 'x', STORE_RECORD_MAX + 1);
    cluster__ledger_apply(n, 13, b, len + 8 + STORE_RECORD_MAX + 1);
    len = ledger(b, LEDGER_END, "acme", NULL, 0);
    b[len] = 'x'; /* END with a body */
    cluster__ledger_apply(n, 14, b, len + 1);
    read_copy(dir, "acme", got, NULL, NULL, NULL);
    assert_recs(got, r, 1);
    assert_false(exists(dir, "aaaaaaaaaa"));
    {
        struct recs_list *staged = list_new();
        read_copy(dir, "acme", got, staged, &known, &at);
        assert_int_equal(at, 1); /* none of them moved the position */
        free(staged);
    }
    /* A record at the bound itself is taken. */
    r[0].len = STORE_RECORD_MAX;
    memset(r[0].b, 0xA5, STORE_RECORD_MAX);
    apply(n, 15, LEDGER_APPEND, "acme", r, 1);
    read_copy(dir, "acme", got, NULL, NULL, NULL);
    assert_int_equal(got->n, 2);
    assert_int_equal(got->r[1].len, STORE_RECORD_MAX);
    node_free(n);
    free(got);
}

/* More tenants than copies kept open: each file is opened again when its turn comes. */
static void
test_apply_many_tenants(void **state)
{
    struct recs_list *got = list_new();
    cluster_node *n = node_new(dir);
    uint64_t count = 0;
    char tenant[16];

    (void)state;
    for (int round = 0; round < 3; round++) {
        for (int t = 0; t < 40; t++) {
            struct rec r;

            snprintf(tenant, sizeof(tenant), "t%02d", t);
            r.len = (size_t)snprintf((char *)r.b, sizeof(r.b), "%s/%d", tenant, round);
            apply(n, ++count, LEDGER_APPEND, tenant, &r, 1);
        }
    }
    for (int t = 0; t < 40; t++) {
        snprintf(tenant, sizeof(tenant), "t%02d", t);
        read_copy(dir, tenant, got, NULL, NULL, NULL);
        assert_int_equal(got->n, 3);
        for (int round = 0; round < 3; round++) {
            char want[32];
            int wl = snprintf(want, sizeof(want), "%s/%d", tenant, round);
            assert_int_equal(got->r[round].len, wl);
            assert_memory_equal(got->r[round].b, want, (size_t)wl);
        }
    }
    node_free(n);
    free(got);
}

/* ---- a random history, and a second member from a snapshot made halfway ---- */

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copy_position_skips_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_staging_swaps_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_records_and_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_ignores_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_many_tenants, setup, teardown),
    };

    return cmocka_run_group_tests_name("cluster_ledger", tests, group_setup, NULL);
}

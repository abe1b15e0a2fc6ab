/*
 * tally.db in a cluster (store/config_changes.c) on real SQLite files: a captured
 * transaction hands its changeset over and leaves the file as it was; applying the
 * changeset to another member's copy gives the same rows and notes the index, and the same
 * index again does nothing; the conflict policy (a row changed meanwhile takes the record's
 * values, an insert of a key that exists keeps the row there, a row gone is left out, an
 * orphan link leaves the whole record out, bytes that are no changeset apply nothing) with
 * the index moving on in every case; a copy of the file put in place elsewhere, a copy too
 * large refused, bytes that are no database refused with the file left as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_config.h"
#include "tenant_config.h"
#include "test_support.h"

static char root[64], a_dir[128], b_dir[128];

/* What the capture handed over last. */
static struct {
    uint8_t bytes[65536];
    size_t len;
    int calls;
    int rc; /* what the callback answers */
} got;

static int
keep(void *ctx, store_db *db, const uint8_t *changeset, size_t len)
{
    (void)ctx;
    (void)db;
    assert_true(len <= sizeof(got.bytes));
    memcpy(got.bytes, changeset, len);
    got.len = len;
    got.calls++;
    return got.rc;
}

static void
plan_free(store_db *db)
{
    struct tenant_plan p;
    char err[128];
    char *argv[] = {"free", "--limit", "100/1m", NULL};

    assert_int_equal(tenant_plan_parse_args(3, argv, &p, err, sizeof(err)), TALLY_OK);
    assert_int_equal(store_db_begin(db), TALLY_OK);
    assert_int_equal(store_db_end(db, store_plan_put(db, &p)), TALLY_OK);
}

/* A has plan free and tenant acme; B is a copy of A put in place (store_config_install). */
static int
setup(void **state)
{
    store_db *a = NULL, *b = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    uint64_t index = 9;

    (void)state;
    memset(&got, 0, sizeof(got));
    test_tmpdir(root, sizeof(root));
    snprintf(a_dir, sizeof(a_dir), "%s/a", root);
    snprintf(b_dir, sizeof(b_dir), "%s/b", root);
    assert_int_equal(store_datadir_init(a_dir), TALLY_OK);
    assert_int_equal(store_datadir_init(b_dir), TALLY_OK);
    assert_int_equal(store_config_open(a_dir, false, &a), TALLY_OK);
    plan_free(a);
    assert_int_equal(store_db_begin(a), TALLY_OK);
    assert_int_equal(store_db_end(a, store_tenant_add(a, "acme", "free", 1000)), TALLY_OK);
    assert_int_equal(store_config_copy(a, 1 << 20, &bytes, &len, &index), TALLY_OK);
    assert_int_equal(index, 0);
    assert_true(len > 0);
    store_db_close(a);
    assert_int_equal(store_config_install(b_dir, bytes, len, 0), TALLY_OK);
    tally_free(bytes);
    assert_int_equal(store_config_open(b_dir, false, &b), TALLY_OK);
    {
        struct store_tenant t;
        assert_int_equal(store_tenant_get(b, "acme", &t), TALLY_OK);
        assert_string_equal(t.plan, "free");
    }
    store_db_close(b);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    test_rmtree(root);
    return 0;
}

/* Opens A with capture on, runs `change` in one transaction and commits it (captured). */
static int
capture(int (*change)(store_db *db))
{
    store_db *a = NULL;
    int rc;

    assert_int_equal(store_config_open(a_dir, false, &a), TALLY_OK);
    assert_int_equal(store_config_capture(a, keep, NULL), TALLY_OK);
    rc = store_db_begin(a);
    if (rc == TALLY_OK)
        rc = store_db_end(a, change(a));
    store_db_close(a);
    return rc;
}

static struct store_config_outcome
apply_b(uint64_t index, const uint8_t *bytes, size_t len)
{
    struct store_config_outcome out;
    store_db *b = NULL;

    assert_int_equal(store_config_open(b_dir, false, &b), TALLY_OK);
    assert_int_equal(store_db_begin(b), TALLY_OK);
    assert_int_equal(store_config_apply(b, index, bytes, len, &out), TALLY_OK);
    assert_int_equal(store_db_commit(b), TALLY_OK);
    store_db_close(b);
    return out;
}

static uint64_t
applied(const char *dir)
{
    store_db *db = NULL;
    uint64_t v = 99;

    assert_int_equal(store_config_open(dir, false, &db), TALLY_OK);
    assert_int_equal(store_config_applied(db, &v), TALLY_OK);
    store_db_close(db);
    return v;
}

static int
tenant_of(const char *dir, const char *id, struct store_tenant *t)
{
    store_db *db = NULL;
    int rc;

    assert_int_equal(store_config_open(dir, false, &db), TALLY_OK);
    rc = store_tenant_get(db, id, t);
    store_db_close(db);
    return rc;
}

static int
add_beta(store_db *db)
{
    return store_tenant_add(db, "beta", "free", 2000);
}

static int
nothing(store_db *db)
{
    (void)db;
    return TALLY_OK;
}

static void
test_capture_hands_the_change_over_and_commits_nothing(void **state)
{
    struct store_tenant t;
    struct store_config_outcome out;

    (void)state;
    assert_int_equal(capture(add_beta), TALLY_OK);
    assert_int_equal(got.calls, 1);
    assert_true(got.len > 0);
    assert_int_equal(tenant_of(a_dir, "beta", &t), TALLY_ENOTFOUND); /* rolled back */

    out = apply_b(1, got.bytes, got.len);
    assert_false(out.skipped || out.aborted || out.malformed);
    assert_int_equal(out.replaced + out.omitted, 0);
    assert_int_equal(tenant_of(b_dir, "beta", &t), TALLY_OK);
    assert_int_equal(t.created_ms, 2000);
    assert_int_equal(applied(b_dir), 1);

    /* The same record again (a replay after a restart): nothing. */
    out = apply_b(1, got.bytes, got.len);
    assert_true(out.skipped);
    assert_int_equal(applied(b_dir), 1);

    /* A transaction that changed nothing calls nothing. */
    assert_int_equal(capture(nothing), TALLY_OK);
    assert_int_equal(got.calls, 1);
    /* The callback's failure is the commit's, and nothing changed. */
    got.rc = TALLY_EUNAVAIL;
    assert_int_equal(capture(add_beta), TALLY_EUNAVAIL);
    assert_int_equal(tenant_of(a_dir, "beta", &t), TALLY_ENOTFOUND);
}

static int
acme_day_15(store_db *db)
{
    return store_tenant_set_billing_day(db, "acme", 15);
}

static int
remove_acme(store_db *db)
{
    return store_tenant_remove(db, "acme");
}

static int
add_acme_link(store_db *db)
{
    struct store_link l;

    memset(&l, 0, sizeof(l));
    snprintf(l.id, sizeof(l.id), "lnk_aaaaaaaaaaaaaaaa");
    snprintf(l.tenant, sizeof(l.tenant), "acme");
    memset(l.hash, 7, sizeof(l.hash));
    l.created_ms = 3000;
    return store_link_insert(db, &l);
}

static void
set_day_b(int64_t day)
{
    store_db *b = NULL;

    assert_int_equal(store_config_open(b_dir, false, &b), TALLY_OK);
    assert_int_equal(store_db_begin(b), TALLY_OK);
    assert_int_equal(store_db_end(b, store_tenant_set_billing_day(b, "acme", day)), TALLY_OK);
    store_db_close(b);
}

static void
test_conflicts_are_decided_the_same_everywhere(void **state)
{
    struct store_config_outcome out;
    struct store_tenant t;
    uint8_t link[65536], remove[65536];
    size_t link_len, remove_len;

    (void)state;
    /* An update of a row that changed meanwhile: the record's values win. */
    assert_int_equal(capture(acme_day_15), TALLY_OK);
    set_day_b(20);
    out = apply_b(1, got.bytes, got.len);
    assert_int_equal(out.replaced, 1);
    assert_int_equal(tenant_of(b_dir, "acme", &t), TALLY_OK);
    assert_int_equal(t.billing_day, 15);

    /* An insert of a key that exists: the row there stays. */
    assert_int_equal(capture(add_beta), TALLY_OK);
    out = apply_b(2, got.bytes, got.len);
    assert_int_equal(out.omitted, 0);
    out = apply_b(3, got.bytes, got.len); /* the same insert as another record */
    assert_int_equal(out.omitted, 1);
    assert_int_equal(applied(b_dir), 3);

    /* A link whose tenant is gone: none of the record applies, the index moves on. */
    assert_int_equal(capture(add_acme_link), TALLY_OK);
    memcpy(link, got.bytes, got.len);
    link_len = got.len;
    assert_int_equal(capture(remove_acme), TALLY_OK);
    memcpy(remove, got.bytes, got.len);
    remove_len = got.len;
    out = apply_b(4, remove, remove_len);
    assert_false(out.aborted);
    assert_int_equal(tenant_of(b_dir, "acme", &t), TALLY_ENOTFOUND);
    out = apply_b(5, link, link_len);
    assert_true(out.aborted);
    assert_int_equal(applied(b_dir), 5);
    {
        store_db *b = NULL;
        struct store_link l;
        assert_int_equal(store_config_open(b_dir, false, &b), TALLY_OK);
        assert_int_equal(store_link_by_id(b, "lnk_aaaaaaaaaaaaaaaa", &l), TALLY_ENOTFOUND);
        store_db_close(b);
    }
    /* A delete of a row that is gone: left out. */
    out = apply_b(6, remove, remove_len);
    assert_true(out.omitted >= 1);
    /* Bytes that are no changeset: nothing applied, the index moves on. */
    out = apply_b(7, (const uint8_t *)"not a changeset at all", 22);
    assert_true(out.malformed);
    assert_int_equal(applied(b_dir), 7);
}

static void
test_copies_too_large_or_not_a_database_are_refused(void **state)
{
    store_db *a = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    uint64_t index = 0;
    struct store_tenant t;
    static const uint8_t junk[8192] = {1, 2, 3};

    (void)state;
    assert_int_equal(store_config_open(a_dir, false, &a), TALLY_OK);
    assert_int_equal(store_config_copy(a, 1024, &bytes, &len, &index), TALLY_ETOOBIG);
    assert_null(bytes);
    assert_true(len > 1024);
    store_db_close(a);
    assert_int_equal(store_config_install(b_dir, junk, sizeof(junk), 1), TALLY_ECORRUPT);
    assert_int_equal(tenant_of(b_dir, "acme", &t), TALLY_OK); /* as it was */
    assert_int_equal(applied(b_dir), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_capture_hands_the_change_over_and_commits_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_conflicts_are_decided_the_same_everywhere, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_copies_too_large_or_not_a_database_are_refused, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("store_config_changes", tests, NULL, NULL);
}

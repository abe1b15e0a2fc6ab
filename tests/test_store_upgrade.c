/*
 * Files written by format 1 (tally 0.1.0: raw struct records) open with today's code: copies of
 * the fixtures in tests/fixtures/v1 (see its README for how they were made and what they hold)
 * are upgraded in place, in one transaction, and every count survives: the journals replayed
 * into a ledger give the budgets, leases and counters recorded when the fixtures were made; the
 * child file's rows give the same lease ids, tokens and marks, and resume into a child counter.
 * A file stamped with a newer format is refused with TALLY_ESCHEMA and one clear message and is
 * left byte for byte as it was, its WAL included; an upgrade that fails leaves the file as it
 * was too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store_child.h"
#include "store_config.h"
#include "store_journal.h"
#include "store_snapshot.h"
#include "sup_child_codec.h"
#include "sup_journal_codec.h"
#include "test_support.h"
#include "upgrade_util.h"

/* ---- what the fixtures hold (tests/fixtures/v1/README.md) ---- */

#define LINK_1 "lnk_0e01823b50c5194f" /* tok1: every endpoint */
#define LINK_2 "lnk_35a37ae5e45bb7c6" /* tok2: search only */

struct cell_want {
    enum tenant_scope scope;
    const char *endpoint, *link;
    int64_t limit, period_ms, window_id, granted, credited, debt;
    uint32_t leases_out;
    bool seen;
};

struct lease_want {
    uint64_t id;
    const char *child;
    int64_t n;
};

struct journal_want {
    const char *fixture;
    int records;
    uint64_t grants, grant_tokens, credits, credit_tokens, spent, expired;
    uint32_t leases, links, children;
    struct cell_want cells[6];
    struct lease_want lease[5];
};

static const struct journal_want journals[] = {
    {"ledger.db",
     55,
     33,
     260,
     13,
     14,
     15,
     3,
     5,
     2,
     2,
     {
         {TENANT_SCOPE_PLAN, "", "", 100000, 86400000, 20788, 260, 14, 0, 5, false},
         {TENANT_SCOPE_LINK, "", LINK_1, 50000, 86400000, 20788, 192, 2, 0, 4, false},
         {TENANT_SCOPE_ENDPOINT_LINK, "upload", LINK_1, 200, 60000, 29935593, 20, 2, 0, 2, false},
         {TENANT_SCOPE_ENDPOINT_LINK, "search", LINK_1, 1000, 3600000, 498926, 172, 0, 0, 2, false},
         {TENANT_SCOPE_LINK, "", LINK_2, 50000, 86400000, 20788, 68, 12, 0, 1, false},
         {TENANT_SCOPE_ENDPOINT_LINK, "search", LINK_2, 1000, 3600000, 498926, 68, 12, 0, 1, false},
     },
     {{26, "search", 8},
      {27, "search", 16},
      {31, "search", 8},
      {32, "upload", 4},
      {33, "upload", 4}}},
    {"ledger-compacted.db",
     39,
     2,
     8,
     2,
     5,
     5,
     5,
     0,
     2,
     2,
     {
         {TENANT_SCOPE_PLAN, "", "", 100000, 86400000, 20788, 268, 19, 0, 0, false},
         {TENANT_SCOPE_LINK, "", LINK_1, 50000, 86400000, 20788, 200, 7, 0, 0, false},
         {TENANT_SCOPE_ENDPOINT_LINK, "upload", LINK_1, 200, 60000, 29935594, 8, 5, 0, 0, false},
         {TENANT_SCOPE_ENDPOINT_LINK, "search", LINK_1, 1000, 3600000, 498926, 172, 0, 0, 0, false},
         {TENANT_SCOPE_LINK, "", LINK_2, 50000, 86400000, 20788, 68, 12, 0, 0, false},
         {TENANT_SCOPE_ENDPOINT_LINK, "search", LINK_2, 1000, 3600000, 498926, 68, 12, 0, 0, false},
     },
     {{0, NULL, 0}}},
};

/* The two live lease rows of endpoints/search.db (incarnation 2). */
static const struct sup_child_lease_rec rows_want[] = {
    {27, 2, LINK_1, 16, 4, 5000, 479578, 484477, 1796135641625, 0},
    {31, 2, LINK_2, 8, 8, 5000, 479671, 484570, 1796135641718, 0},
};

/* Every record of `table` starts with format byte `format`. */
static int
rows_of_format(store_db *db, const char *table, int format)
{
    char text[128];
    sqlite3_stmt *st = NULL;
    int n = 0;

    snprintf(text, sizeof(text), "SELECT rec FROM %s", table);
    assert_int_equal(sqlite3_prepare_v2(store_db_handle(db), text, -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const uint8_t *p = sqlite3_column_blob(st, 0);
        assert_true(sqlite3_column_bytes(st, 0) > 0);
        assert_int_equal(p[0], format);
        n++;
    }
    sqlite3_finalize(st);
    return n;
}

/* ---- the journals ---- */

struct replay {
    sup_ledger *l;
    int records;
};

static int
replay_one(void *ctx, const uint8_t *p, size_t len)
{
    struct replay *r = ctx;
    struct sup_record rec;
    int rc = sup_record_decode(p, len, &rec);

    if (rc == TALLY_OK)
        rc = sup_ledger_replay(r->l, &rec);
    r->records++;
    return rc;
}

static int
check_cell(void *ctx, const struct sup_cell_info *c)
{
    struct journal_want *w = ctx;
    size_t i;

    for (i = 0; i < 6; i++) {
        struct cell_want *x = &w->cells[i];
        if (x->scope != c->scope || strcmp(x->endpoint, c->endpoint) != 0 ||
            strcmp(x->link, c->link) != 0)
            continue;
        assert_false(x->seen);
        x->seen = true;
        assert_int_equal(c->limit, x->limit);
        assert_int_equal(c->period_ms, x->period_ms);
        assert_int_equal(c->window_id, x->window_id);
        assert_int_equal(c->granted, x->granted);
        assert_int_equal(c->credited, x->credited);
        assert_int_equal(c->debt, x->debt);
        assert_int_equal(c->leases_out, x->leases_out);
        return 0;
    }
    fail_msg("unexpected cell: scope %d endpoint '%s' link '%s'", (int)c->scope, c->endpoint,
             c->link);
    return 1;
}

static int
check_lease(void *ctx, const struct sup_lease_info *l)
{
    struct journal_want *w = ctx;
    size_t i;

    for (i = 0; i < 5 && w->lease[i].id != 0; i++) {
        if (w->lease[i].id != l->id)
            continue;
        assert_string_equal(l->child, w->lease[i].child);
        assert_string_equal(l->endpoint, w->lease[i].child);
        assert_int_equal(l->incarnation, 2);
        assert_int_equal(l->n, w->lease[i].n);
        return 0;
    }
    fail_msg("unexpected lease %llu", (unsigned long long)l->id);
    return 1;
}

/* Replays the journal into a fresh ledger configured from the fixture's tally.db and compares
 * every count with what the fixture held when it was made. */
static void
replay_and_check(store_db *journal, const struct journal_want *want)
{
    struct journal_want w = *want;
    struct sup_ledger_config cfg;
    struct sup_ledger_stats st;
    struct replay r = {NULL, 0};
    const struct store_snap_tenant *t;
    store_snapshot *snap = NULL;
    store_db *config = NULL;
    size_t n = 0, i;

    assert_int_equal(store_config_open(data, false, &config), TALLY_OK);
    assert_int_equal(store_snapshot_load(config, "acme", &snap), TALLY_OK);
    t = store_snapshot_tenant(snap, "acme");
    assert_non_null(t);
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.tenant, sizeof(cfg.tenant), "acme");
    cfg.plan = *t->plan;
    cfg.endpoints = store_snapshot_endpoints(snap, &n);
    cfg.endpoint_count = n;
    assert_int_equal(sup_ledger_open(&cfg, &r.l), TALLY_OK);
    assert_int_equal(store_journal_each(journal, replay_one, &r), TALLY_OK);
    assert_int_equal(r.records, want->records);
    sup_ledger_stats(r.l, &st);
    assert_int_equal(st.grants, want->grants);
    assert_int_equal(st.grant_tokens, want->grant_tokens);
    assert_int_equal(st.credits, want->credits);
    assert_int_equal(st.credit_tokens, want->credit_tokens);
    assert_int_equal(st.spent, want->spent);
    assert_int_equal(st.expired, want->expired);
    assert_int_equal(st.leases, want->leases);
    assert_int_equal(st.links, want->links);
    assert_int_equal(st.children, want->children);
    assert_int_equal(sup_ledger_each_cell(r.l, check_cell, &w), 0);
    for (i = 0; i < 6; i++)
        assert_true(w.cells[i].seen);
    assert_int_equal(sup_ledger_each_lease(r.l, check_lease, &w), 0);
    sup_ledger_close(r.l);
    store_snapshot_free(snap);
    store_db_close(config);
}

static void
test_v1_journals_upgrade_with_every_count(void **state)
{
    char path[512];
    store_db *db = NULL;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(journals) / sizeof(journals[0]); i++) {
        place(journals[i].fixture, "tenants/acme/ledger.db");
        path_of(path, sizeof(path), "tenants/acme/ledger.db");
        assert_int_equal(file_version(path), 1);
        assert_int_equal(
            store_journal_open(path, STORE_OPEN_SYNC_FULL | STORE_OPEN_PRIVATE, &journal_up, &db),
            TALLY_OK);
        assert_int_equal(user_version(store_db_handle(db)), STORE_JOURNAL_FORMAT);
        assert_int_equal(rows_of_format(db, "journal", SUP_RECORD_FORMAT), journals[i].records);
        replay_and_check(db, &journals[i]);
        store_db_close(db);
        /* Opened again: nothing left to upgrade, the same counts. */
        assert_int_equal(
            store_journal_open(path, STORE_OPEN_SYNC_FULL | STORE_OPEN_PRIVATE, &journal_up, &db),
            TALLY_OK);
        replay_and_check(db, &journals[i]);
        store_db_close(db);
    }
}

/* ---- the child file ---- */

struct rows {
    struct sup_child_lease_rec v[8];
    size_t n;
};

static int
collect_row(void *ctx, uint64_t id, const uint8_t *p, size_t len)
{
    struct rows *r = ctx;

    assert_true(r->n < 8);
    assert_int_equal(sup_child_rec_decode(p, len, &r->v[r->n]), TALLY_OK);
    assert_int_equal(r->v[r->n].lease_id, id);
    r->n++;
    return TALLY_OK;
}

static int
check_child_lease(void *ctx, const struct sup_child_lease_info *l)
{
    int *seen = ctx;
    size_t i;

    for (i = 0; i < 2; i++) {
        if (l->lease_id != rows_want[i].lease_id)
            continue;
        assert_string_equal(l->link, rows_want[i].link);
        assert_int_equal(l->n, rows_want[i].n);
        assert_int_equal(l->mark, rows_want[i].mark);
        assert_int_equal(l->used, rows_want[i].mark); /* resumed at used := its durable mark */
        /* never later than the stored deadline (the wall clock may bound it sooner) */
        assert_true(l->deadline_mono_ms <= rows_want[i].deadline_mono_ms);
        assert_true(l->deadline_mono_ms > 479800);
        if (rows_want[i].mark < rows_want[i].n)
            assert_true(l->live); /* tokens left: in use again (a spent one is retired) */
        (*seen)++;
        return 0;
    }
    fail_msg("unexpected lease %llu", (unsigned long long)l->lease_id);
    return 1;
}

struct batch {
    const struct sup_child_lease_rec *put;
    uint64_t del;
};

static int
write_two(void *ctx, size_t i, uint64_t *id, uint8_t *buf, size_t cap, size_t *len)
{
    const struct batch *b = ctx;

    *len = 0;
    if (i == 1) {
        *id = b->del;
        return TALLY_OK;
    }
    *id = b->put->lease_id;
    return sup_child_rec_encode(b->put, buf, cap, len);
}

static void
test_v1_child_file_upgrades_and_resumes(void **state)
{
    static const struct sup_child_lease_rec fresh = {40, 3, LINK_2, 12, 4, 5000, 1, 2, 3, 0};
    char path[512];
    struct sup_child_config cfg;
    const struct tenant_endpoint *ep;
    store_snapshot *snap = NULL;
    store_db *config = NULL, *db = NULL;
    sup_child *c = NULL;
    struct rows rows = {{{0}}, 0};
    struct sup_time now;
    struct batch b = {&fresh, 27};
    uint64_t inc = 0;
    int seen = 0;
    size_t i;

    (void)state;
    place("endpoints/search.db", "tenants/acme/endpoints/search.db");
    path_of(path, sizeof(path), "tenants/acme/endpoints/search.db");
    assert_int_equal(file_version(path), 1);
    assert_int_equal(
        store_child_open(path, STORE_OPEN_SYNC_FULL | STORE_OPEN_PRIVATE, &child_up, &db),
        TALLY_OK);
    assert_int_equal(user_version(store_db_handle(db)), STORE_CHILD_FORMAT);
    assert_int_equal(rows_of_format(db, "lease", SUP_CHILD_REC_FORMAT), 2);
    /* The incarnation carried over: the next start is the third. */
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 3);
    assert_int_equal(store_child_each(db, collect_row, &rows), TALLY_OK);
    assert_int_equal(rows.n, 2);
    for (i = 0; i < 2; i++)
        assert_memory_equal(&rows.v[i], &rows_want[i], sizeof(rows_want[i]));

    /* They resume into a child counter, as they would have after the kill -9. */
    assert_int_equal(store_config_open(data, false, &config), TALLY_OK);
    assert_int_equal(store_snapshot_load(config, "acme", &snap), TALLY_OK);
    ep = store_snapshot_endpoint(snap, "pro", "search");
    assert_non_null(ep);
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.tenant, sizeof(cfg.tenant), "acme");
    cfg.policy = *ep;
    cfg.incarnation = inc;
    cfg.persist_marks = true;
    assert_int_equal(sup_child_open(&cfg, &c), TALLY_OK);
    now.mono_ms = 479800; /* a moment after the last grant, before either deadline */
    now.wall_ms = 1796135637000;
    for (i = 0; i < rows.n; i++)
        assert_int_equal(sup_child_resume(c, &rows.v[i], now), TALLY_OK);
    assert_int_equal(sup_child_each_lease(c, check_child_lease, &seen), 0);
    assert_int_equal(seen, 2);
    sup_child_close(c);
    store_snapshot_free(snap);
    store_db_close(config);

    /* Written in today's format from now on: a put and a delete in one batch. */
    assert_int_equal(store_child_write(db, 2, write_two, &b), TALLY_OK);
    rows.n = 0;
    assert_int_equal(store_child_each(db, collect_row, &rows), TALLY_OK);
    assert_int_equal(rows.n, 2);
    assert_memory_equal(&rows.v[0], &rows_want[1], sizeof(rows_want[1]));
    assert_memory_equal(&rows.v[1], &fresh, sizeof(fresh));
    store_db_close(db);
    /* Opened again: the same rows, the next incarnation. */
    assert_int_equal(
        store_child_open(path, STORE_OPEN_SYNC_FULL | STORE_OPEN_PRIVATE, &child_up, &db),
        TALLY_OK);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 4);
    rows.n = 0;
    assert_int_equal(store_child_each(db, collect_row, &rows), TALLY_OK);
    assert_int_equal(rows.n, 2);
    store_db_close(db);
}

/* A format-1 child file without rows: the incarnation alone carries over. */
static void
test_v1_child_file_without_rows_upgrades(void **state)
{
    char path[512];
    store_db *db = NULL;
    struct rows rows = {{{0}}, 0};
    uint64_t inc = 0;

    (void)state;
    place("endpoints/upload.db", "tenants/acme/endpoints/upload.db");
    path_of(path, sizeof(path), "tenants/acme/endpoints/upload.db");
    assert_int_equal(file_version(path), 1);
    assert_int_equal(store_child_open(path, STORE_OPEN_PRIVATE, &child_up, &db), TALLY_OK);
    assert_int_equal(user_version(store_db_handle(db)), STORE_CHILD_FORMAT);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 3);
    assert_int_equal(store_child_each(db, collect_row, &rows), TALLY_OK);
    assert_int_equal(rows.n, 0);
    store_db_close(db);
}

/* A format-1 row the old code skipped (not 88 bytes) is dropped by the upgrade; the rest stay. */
static void
test_v1_child_file_unreadable_row_dropped(void **state)
{
    char path[512];
    sqlite3 *sql = NULL;
    store_db *db = NULL;
    struct rows rows = {{{0}}, 0};

    (void)state;
    place("endpoints/search.db", "tenants/acme/endpoints/search.db");
    path_of(path, sizeof(path), "tenants/acme/endpoints/search.db");
    assert_int_equal(sqlite3_open(path, &sql), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(sql, "INSERT INTO lease(id, rec) VALUES(99, x'0102')", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(sql);
    assert_int_equal(store_child_open(path, STORE_OPEN_PRIVATE, &child_up, &db), TALLY_OK);
    assert_int_equal(store_child_each(db, collect_row, &rows), TALLY_OK);
    assert_int_equal(rows.n, 2);
    assert_int_equal(rows.v[0].lease_id, 27);
    assert_int_equal(rows.v[1].lease_id, 31);
    store_db_close(db);
}

/* tally.db of 0.1.0 upgrades to format 5 (3 added caller endpoints, 5 the cluster's applied
 * index): every tenant on billing day 1, without overrides, and both can be set on the upgraded
 * file. Last: it changes acme (and puts it back). */
static void
test_v1_config_gets_billing_days(void **state)
{
    char path[256];
    struct store_tenant t;
    store_db *db = NULL;

    (void)state;
    path_of(path, sizeof(path), "tally.db");
    assert_int_equal(store_config_open(data, false, &db), TALLY_OK);
    assert_int_equal(user_version(store_db_handle(db)), 5);
    assert_int_equal(store_tenant_get(db, "acme", &t), TALLY_OK);
    assert_int_equal(t.billing_day, 1);
    assert_int_equal(t.overrides, 0);
    assert_int_equal(store_db_begin(db), TALLY_OK);
    assert_int_equal(store_tenant_set_billing_day(db, "acme", 15), TALLY_OK);
    assert_int_equal(store_tenant_set_billing_day(db, "acme", 29), TALLY_EINVAL);
    t.overrides = STORE_OVR_CONCURRENCY;
    t.concurrency = 7;
    assert_int_equal(store_tenant_set_overrides(db, &t), TALLY_OK);
    assert_int_equal(store_db_end(db, TALLY_OK), TALLY_OK);
    assert_int_equal(store_tenant_get(db, "acme", &t), TALLY_OK);
    assert_int_equal(t.billing_day, 15);
    assert_int_equal(t.overrides, STORE_OVR_CONCURRENCY);
    assert_int_equal(t.concurrency, 7);
    assert_int_equal(store_db_begin(db), TALLY_OK);
    assert_int_equal(store_tenant_set_billing_day(db, "acme", 1), TALLY_OK);
    t.overrides = 0;
    assert_int_equal(store_tenant_set_overrides(db, &t), TALLY_OK);
    assert_int_equal(store_db_end(db, TALLY_OK), TALLY_OK);
    store_db_close(db);
    assert_int_equal(file_version(path), 5);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_journals_upgrade_with_every_count),
        cmocka_unit_test(test_v1_child_file_upgrades_and_resumes),
        cmocka_unit_test(test_v1_child_file_without_rows_upgrades),
        cmocka_unit_test(test_v1_child_file_unreadable_row_dropped),
        cmocka_unit_test(test_v1_config_gets_billing_days),
    };

    return cmocka_run_group_tests_name("store_upgrade", tests, upgrade_setup, upgrade_teardown);
}

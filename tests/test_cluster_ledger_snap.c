/*
 * The members' ledger copies in the log's snapshots (cluster/node_ledger_snap.c), on real
 * SQLite files and without libraft. A seeded random history of appends, replacements, no-ops
 * and replays over a few tenants keeps every copy equal to a model, also on a second member
 * that took a snapshot made halfway (a replacement in flight) and then the rest of the log;
 * every cut of a snapshot is refused and changes nothing. A copy that cannot be written is
 * logged, skipped from then on, blocks snapshots, and is healed by a snapshot; an empty
 * snapshot empties stale copies and keeps those further on. A whole snapshot of the node
 * (members, tally.db, ledgers) cut anywhere in its ledgers changes neither tally.db nor a
 * copy; whole, it puts both in place.
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
#include "store_config.h"
#include "store_paths.h"
#include "tenant_config.h"
#include "test_support.h"

struct model {
    struct rec *j, *s;
    size_t nj, ns;
};

struct step {
    uint64_t count;
    size_t len;
    uint8_t *b;
};

static void
random_rec(uint64_t *rs, struct rec *r)
{
    /* Mostly small, sometimes at the bound; every byte value, zero included. */
    r->len = test_rand_range(rs, 0, 9) == 0 ? STORE_RECORD_MAX : (size_t)test_rand_range(rs, 1, 40);
    for (size_t i = 0; i < r->len; i++)
        r->b[i] = (uint8_t)test_rand(rs);
}

static void
check_model(const char *data, const char *const *tenants, size_t nt, const struct model *m,
            struct recs_list *got, struct recs_list *staged)
{
    for (size_t t = 0; t < nt; t++) {
        bool known;
        uint64_t at;

        if (!exists(data, tenants[t])) {
            assert_int_equal(m[t].nj + m[t].ns, 0);
            continue;
        }
        read_copy(data, tenants[t], got, staged, &known, &at);
        assert_recs(got, m[t].j, m[t].nj);
        assert_recs(staged, m[t].s, m[t].ns);
    }
}

static void
test_random_history_and_snapshot(void **state)
{
    static const char *const tenants[] = {"acme", "b", "c-3", "d_4", "e5"};
    enum { NT = 5, STEPS = 400, HALF = 200 };
    struct model m[NT];
    struct step *hist = calloc(STEPS, sizeof(*hist));
    struct recs_list *got = list_new(), *staged = list_new();
    cluster_node *a = node_new(dir), *b = NULL;
    uint64_t rs = seed, count = 0;
    uint8_t *snap = NULL;
    size_t snap_len = 0, n_hist = 0;

    (void)state;
    assert_non_null(hist);
    for (int t = 0; t < NT; t++) {
        m[t].j = calloc(RECS_MAX, sizeof(struct rec));
        m[t].s = calloc(RECS_MAX, sizeof(struct rec));
        m[t].nj = m[t].ns = 0;
        assert_true(m[t].j != NULL && m[t].s != NULL);
    }
    for (int i = 0; i < STEPS; i++) {
        static uint8_t buf[8 * (STORE_RECORD_MAX + 4) + 128];
        int t = (int)test_rand_range(&rs, 0, NT - 1), dice = (int)test_rand_range(&rs, 0, 99);
        struct rec r[4];
        size_t nr = (size_t)test_rand_range(&rs, 1, 4), len;
        char op;

        if (i == HALF) {
            /* A snapshot now, to a member that fell behind after the first batches and holds
             * a copy the snapshot does not have. */
            static const uint8_t head[] = "HEAD";
            struct rec stale[1] = {text("stale")};

            assert_int_equal(cluster__ledger_snapshot(a, count, head, 4, &snap, &snap_len),
                             TALLY_OK);
            assert_memory_equal(snap, "HEAD", 4);
            b = node_new(dir2);
            for (size_t k = 0; k < n_hist / 4; k++)
                cluster__ledger_apply(b, hist[k].count, hist[k].b, hist[k].len);
            apply(b, 7, LEDGER_APPEND, "zz", stale, 1);
            assert_int_equal(cluster__ledger_restore(b, snap + 4, snap_len - 4), TALLY_OK);
            check_model(dir2, tenants, NT, m, got, staged);
            read_copy(dir2, "zz", got, staged, &(bool){false}, &(uint64_t){0});
            assert_int_equal(got->n + staged->n, 0);
            /* Restored again (its own snapshot at a restart): nothing moves. */
            assert_int_equal(cluster__ledger_restore(b, snap + 4, snap_len - 4), TALLY_OK);
            check_model(dir2, tenants, NT, m, got, staged);
        }
        if (dice < 8 && n_hist > 0) {
            /* A replay of an earlier batch: no change anywhere. */
            const struct step *h = &hist[test_rand_range(&rs, 0, (int64_t)n_hist - 1)];

            cluster__ledger_apply(a, h->count, h->b, h->len);
            if (b != NULL)
                cluster__ledger_apply(b, h->count, h->b, h->len);
            continue;
        }
        if (dice < 12)
            op = LEDGER_NOOP;
        else if (dice < 22)
            op = LEDGER_BEGIN;
        else if (dice < 40)
            op = LEDGER_CHUNK;
        else if (dice < 50)
            op = LEDGER_END;
        else
            op = LEDGER_APPEND;
        if ((op == LEDGER_APPEND && m[t].nj + nr > RECS_MAX) ||
            (op == LEDGER_CHUNK && m[t].ns + nr > RECS_MAX))
            op = LEDGER_BEGIN; /* the model's bound: start over */
        for (size_t k = 0; k < nr; k++)
            random_rec(&rs, &r[k]);
        if (op == LEDGER_NOOP) {
            buf[0] = LEDGER_NOOP;
            len = 1;
        } else {
            len = ledger(buf, op, tenants[t], r, nr);
        }
        count++;
        cluster__ledger_apply(a, count, buf, len);
        if (b != NULL)
            cluster__ledger_apply(b, count, buf, len);
        hist[n_hist].count = count;
        hist[n_hist].len = len;
        hist[n_hist].b = malloc(len);
        assert_non_null(hist[n_hist].b);
        memcpy(hist[n_hist++].b, buf, len);
        switch (op) {
        case LEDGER_APPEND:
            memcpy(m[t].j + m[t].nj, r, nr * sizeof(r[0]));
            m[t].nj += nr;
            break;
        case LEDGER_BEGIN:
            m[t].ns = 0;
            break;
        case LEDGER_CHUNK:
            memcpy(m[t].s + m[t].ns, r, nr * sizeof(r[0]));
            m[t].ns += nr;
            break;
        case LEDGER_END:
            memcpy(m[t].j, m[t].s, m[t].ns * sizeof(r[0]));
            m[t].nj = m[t].ns;
            m[t].ns = 0;
            break;
        default:
            break;
        }
        if (i % 50 == 49)
            check_model(dir, tenants, NT, m, got, staged);
    }
    check_model(dir, tenants, NT, m, got, staged);
    check_model(dir2, tenants, NT, m, got, staged);
    /* Every prefix of the snapshot, and a byte too many, is refused before anything moves. */
    {
        uint8_t *longer = malloc(snap_len + 1);

        for (size_t cut = 4; cut < snap_len; cut += 1 + cut / 64)
            assert_int_equal(cluster__ledger_restore(b, snap + 4, cut - 4), TALLY_EPROTO);
        memcpy(longer, snap, snap_len);
        longer[snap_len] = 0;
        assert_int_equal(cluster__ledger_restore(b, longer + 4, snap_len - 3), TALLY_EPROTO);
        free(longer);
        check_model(dir2, tenants, NT, m, got, staged);
    }
    for (size_t i = 0; i < n_hist; i++)
        free(hist[i].b);
    for (int t = 0; t < NT; t++) {
        free(m[t].j);
        free(m[t].s);
    }
    free(hist);
    free(snap);
    node_free(a);
    node_free(b);
    free(got);
    free(staged);
}

/* ---- failures ---- */

static void
test_failed_copy_is_skipped_until_a_snapshot(void **state)
{
    struct rec r1[1] = {text("r1")}, r2[1] = {text("r2")}, r3[1] = {text("r3")};
    struct recs_list *got = list_new(), *staged = list_new();
    cluster_node *n = node_new(dir), *good = node_new(dir2);
    char path[STORE_PATH_MAX], bad[STORE_PATH_MAX + 8];
    uint8_t *snap = NULL;
    size_t snap_len = 0;
    bool known;
    uint64_t at;
    FILE *f;

    (void)state;
    /* A directory where the file should be: it cannot be opened. */
    assert_int_equal(store_tenant_dirs(dir, "sick"), TALLY_OK);
    ledger_path(dir, "sick", path, sizeof(path));
    assert_int_equal(mkdir(path, 0700), 0);
    apply(n, 1, LEDGER_APPEND, "sick", r1, 1);
    apply(n, 2, LEDGER_APPEND, "well", r1, 1);
    /* A file that is not a database. */
    assert_int_equal(store_tenant_dirs(dir, "junk"), TALLY_OK);
    ledger_path(dir, "junk", bad, sizeof(bad));
    f = fopen(bad, "w");
    assert_non_null(f);
    for (int i = 0; i < 512; i++)
        fputs("this is not a database file ", f);
    fclose(f);
    apply(n, 3, LEDGER_APPEND, "junk", r1, 1);
    /* The path works again, but the copy is behind: later records are not written on it. */
    assert_int_equal(rmdir(path), 0);
    apply(n, 4, LEDGER_APPEND, "sick", r2, 1);
    assert_false(exists(dir, "sick"));
    apply(n, 5, LEDGER_APPEND, "well", r2, 1);
    read_copy(dir, "well", got, NULL, NULL, NULL);
    assert_int_equal(got->n, 2);
    /* No supervisor starts from a broken copy (its barrier answers no), one starts from a whole
     * one. */
    assert_int_equal(cluster__ledger_ready(n, "sick"), TALLY_EUNAVAIL);
    assert_int_equal(cluster__ledger_ready(n, "well"), TALLY_OK);
    /* No snapshot while a copy is broken: it would carry the gap past the log's end. */
    assert_int_equal(cluster__ledger_snapshot(n, 5, NULL, 0, &snap, &snap_len), TALLY_EIO);
    assert_null(snap);
    /* A snapshot from a member whose copies are whole heals them. */
    apply(good, 1, LEDGER_APPEND, "sick", r1, 1);
    apply(good, 2, LEDGER_APPEND, "well", r1, 1);
    apply(good, 4, LEDGER_APPEND, "sick", r2, 1);
    apply(good, 5, LEDGER_APPEND, "well", r2, 1);
    assert_int_equal(cluster__ledger_snapshot(good, 5, NULL, 0, &snap, &snap_len), TALLY_OK);
    assert_int_equal(unlink(bad), 0); /* the operator moved the junk away */
    assert_int_equal(cluster__ledger_restore(n, snap, snap_len), TALLY_OK);
    free(snap);
    snap = NULL;
    read_copy(dir, "sick", got, staged, &known, &at);
    assert_int_equal(got->n, 2);
    assert_int_equal(at, 4);
    assert_int_equal(cluster__ledger_ready(n, "sick"), TALLY_OK);
    apply(n, 6, LEDGER_APPEND, "sick", r3, 1);
    read_copy(dir, "sick", got, NULL, NULL, NULL);
    assert_int_equal(got->n, 3);
    assert_memory_equal(got->r[2].b, "r3", 2);
    assert_int_equal(cluster__ledger_snapshot(n, 6, NULL, 0, &snap, &snap_len), TALLY_OK);
    free(snap);
    node_free(n);
    node_free(good);
    free(got);
    free(staged);
}

/* A snapshot with no tenant empties every copy that is not ahead of it. */
static void
test_restore_empty_snapshot(void **state)
{
    struct rec r[1] = {text("r")};
    struct recs_list *got = list_new();
    cluster_node *n = node_new(dir), *empty = node_new(dir2);
    uint8_t *snap = NULL;
    size_t snap_len = 0;

    (void)state;
    apply(n, 3, LEDGER_APPEND, "old", r, 1);
    apply(n, 12, LEDGER_APPEND, "ahead", r, 1);
    assert_int_equal(cluster__ledger_snapshot(empty, 10, NULL, 0, &snap, &snap_len), TALLY_OK);
    assert_int_equal(snap_len, 12);
    assert_int_equal(cluster__ledger_restore(n, snap, snap_len), TALLY_OK);
    read_copy(dir, "old", got, NULL, NULL, NULL);
    assert_int_equal(got->n, 0);
    read_copy(dir, "ahead", got, NULL, NULL, NULL);
    assert_int_equal(got->n, 1);
    free(snap);
    node_free(n);
    node_free(empty);
    free(got);
}

/* Whether DATA/tally.db has plan `free`. */
static bool
has_plan(const char *data)
{
    store_db *db = NULL;
    struct tenant_plan p;
    int rc;

    assert_int_equal(store_config_open(data, false, &db), TALLY_OK);
    rc = store_plan_get(db, "free", &p);
    store_db_close(db);
    assert_true(rc == TALLY_OK || rc == TALLY_ENOTFOUND);
    return rc == TALLY_OK;
}

static void
test_cut_node_snapshot_changes_nothing(void **state)
{
    struct rec r[2] = {text("first"), text("second")};
    struct recs_list *got = list_new();
    cluster_node *a = node_new(dir), *b = node_new(dir2);
    uint8_t *cfg = NULL, *head, *snap = NULL;
    size_t cfg_len = 0, off = 0, snap_len = 0, ledgers_at;
    uint64_t cfg_at = 0;
    store_db *db = NULL;

    (void)state;
    /* tally.db on both, a's with plan free, put in the snapshot as of CONFIG record 9 */
    assert_int_equal(store_config_open(dir, true, &db), TALLY_OK);
    {
        struct tenant_plan p;
        char err[128];
        char *argv[] = {"free", "--limit", "100/1m", NULL};
        assert_int_equal(tenant_plan_parse_args(3, argv, &p, err, sizeof(err)), TALLY_OK);
        assert_int_equal(store_db_begin(db), TALLY_OK);
        assert_int_equal(store_db_end(db, store_plan_put(db, &p)), TALLY_OK);
    }
    assert_int_equal(store_config_copy(db, 1u << 24, &cfg, &cfg_len, &cfg_at), TALLY_OK);
    store_db_close(db);
    assert_int_equal(store_config_open(dir2, true, &db), TALLY_OK);
    store_db_close(db);
    apply(a, 4, LEDGER_APPEND, "acme", r, 2);
    head = tally_malloc(2 + 8 + 12 + cfg_len);
    assert_non_null(head);
    head[off++] = CLUSTER_SNAPSHOT_VERSION;
    head[off++] = 0; /* no member: b keeps its own */
    cluster__put_u64(head + off, 3);
    off += 8;
    cluster__put_u64(head + off, 9);
    cluster__put_u32(head + off + 8, (uint32_t)cfg_len);
    memcpy(head + off + 12, cfg, cfg_len);
    off += 12 + cfg_len;
    ledgers_at = off;
    assert_int_equal(cluster__ledger_snapshot(a, 4, head, off, &snap, &snap_len), TALLY_OK);
    assert_true(snap_len > ledgers_at + 12);
    for (size_t cut = ledgers_at; cut < snap_len; cut += 1 + (snap_len - ledgers_at) / 40) {
        assert_int_equal(cluster__node_restore(b, snap, cut), TALLY_EPROTO);
        assert_false(has_plan(dir2));
        assert_false(exists(dir2, "acme"));
    }
    assert_int_equal(cluster__node_restore(b, snap, snap_len), TALLY_OK);
    assert_true(has_plan(dir2));
    read_copy(dir2, "acme", got, NULL, NULL, NULL);
    assert_recs(got, r, 2);
    tally_free(head);
    tally_free(cfg);
    free(snap);
    node_free(a);
    node_free(b);
    free(got);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_random_history_and_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_copy_is_skipped_until_a_snapshot, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restore_empty_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_node_snapshot_changes_nothing, setup, teardown),
    };

    return cmocka_run_group_tests_name("cluster_ledger_snap", tests, group_setup, NULL);
}

/*
 * Every member's copy of every tenant's ledger (cluster/node_ledger.c, node_ledger_snap.c,
 * store/journal_copy.c), on real SQLite files and without libraft: LEDGER records applied as
 * the log hands them over, the copies read back as a supervisor reads its journal.
 *
 * A record applied twice (a restart replays from the last snapshot) is written once; a
 * replacement's BEGIN and CHUNKs leave the journal as it was until its END swaps it in; the
 * bytes and order are the records'. A seeded random history of appends, replacements, no-ops
 * and replays over a few tenants keeps every copy equal to a model, also on a second member
 * that took a snapshot made halfway (a replacement in flight) and then the rest of the log.
 * Malformed records are ignored; a copy that cannot be written is logged, skipped from then
 * on, blocks snapshots, and is healed by a snapshot.
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

#include "node_ledger_int.h"
#include "store_paths.h"
#include "test_support.h"

#define RECS_MAX 600 /* records a tenant of the model holds at most */

static char dir[128], dir2[128];
static uint64_t seed;

struct rec {
    size_t len;
    uint8_t b[STORE_RECORD_MAX];
};

struct recs_list {
    size_t n;
    struct rec r[RECS_MAX];
};

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

static int
setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    test_tmpdir(dir2, sizeof(dir2));
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    test_rmtree(dir);
    test_rmtree(dir2);
    return 0;
}

/* A node with nothing but its data dir: what the ledger code uses of it. */
static cluster_node *
node_new(const char *data)
{
    cluster_node *n = calloc(1, sizeof(*n));

    assert_non_null(n);
    snprintf(n->data, sizeof(n->data), "%s", data);
    assert_int_equal(cluster__ledger_init(n), TALLY_OK);
    return n;
}

static void
node_free(cluster_node *n)
{
    cluster__ledger_close(n);
    free(n);
}

/* A LEDGER record after its type byte: op, tenant and, for APPEND and CHUNK, the records. */
static size_t
ledger(uint8_t *out, char op, const char *tenant, const struct rec *r, size_t n)
{
    size_t off = 0;

    out[off++] = (uint8_t)op;
    out[off++] = (uint8_t)strlen(tenant);
    memcpy(out + off, tenant, strlen(tenant));
    off += strlen(tenant);
    if (op == LEDGER_APPEND || op == LEDGER_CHUNK) {
        cluster__put_u32(out + off, (uint32_t)n);
        off += 4;
        for (size_t i = 0; i < n; i++) {
            cluster__put_u32(out + off, (uint32_t)r[i].len);
            memcpy(out + off + 4, r[i].b, r[i].len);
            off += 4 + r[i].len;
        }
    }
    return off;
}

static void
apply(cluster_node *n, uint64_t count, char op, const char *tenant, const struct rec *r, size_t nr)
{
    static uint8_t b[64 * 1024];

    cluster__ledger_apply(n, count, b, ledger(b, op, tenant, r, nr));
}

static struct rec
text(const char *s)
{
    struct rec r;

    r.len = strlen(s);
    memcpy(r.b, s, r.len);
    return r;
}

static void
ledger_path(const char *data, const char *tenant, char *path, size_t cap)
{
    assert_int_equal(store_path_tenant(data, tenant, "ledger.db", path, cap), TALLY_OK);
}

static int
collect(void *ctx, const uint8_t *rec, size_t len)
{
    struct recs_list *l = ctx;

    assert_true(l->n < RECS_MAX && len <= STORE_RECORD_MAX);
    l->r[l->n].len = len;
    memcpy(l->r[l->n].b, rec, len);
    l->n++;
    return TALLY_OK;
}

/* The journal as a supervisor replays it (its own connection, no ledger codec needed for a
 * file of the current format), the staging table and the position. */
static void
read_copy(const char *data, const char *tenant, struct recs_list *journal, struct recs_list *staged,
          bool *known, uint64_t *at)
{
    char path[STORE_PATH_MAX];
    store_journal_copy *c = NULL;
    store_db *db = NULL;

    ledger_path(data, tenant, path, sizeof(path));
    journal->n = 0;
    assert_int_equal(store_journal_open(path, STORE_OPEN_PERSIST_WAL, NULL, &db), TALLY_OK);
    assert_int_equal(store_journal_each(db, collect, journal), TALLY_OK);
    store_db_close(db);
    if (staged == NULL)
        return;
    staged->n = 0;
    assert_int_equal(store_journal_copy_open(path, &c), TALLY_OK);
    assert_int_equal(store_journal_copy_each_staged(c, collect, staged), TALLY_OK);
    assert_int_equal(store_journal_copy_applied(c, known, at), TALLY_OK);
    store_journal_copy_close(c);
}

static void
assert_recs(const struct recs_list *got, const struct rec *want, size_t n)
{
    assert_int_equal(got->n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(got->r[i].len, want[i].len);
        assert_memory_equal(got->r[i].b, want[i].b, want[i].len);
    }
}

static struct recs_list *
list_new(void)
{
    struct recs_list *l = calloc(1, sizeof(*l));

    assert_non_null(l);
    return l;
}

static bool
exists(const char *data, const char *tenant)
{
    char path[STORE_PATH_MAX];
    struct stat sb;

    ledger_path(data, tenant, path, sizeof(path));
    return stat(path, &sb) == 0;
}

/* ---- the store's copy ---- */

static int
enc_list(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len)
{
    const struct rec *r = ctx;

    assert_true(r[i].len <= cap);
    memcpy(buf, r[i].b, r[i].len);
    *len = r[i].len;
    return TALLY_OK;
}

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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copy_position_skips_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_staging_swaps_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_records_and_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_ignores_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_many_tenants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_history_and_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_copy_is_skipped_until_a_snapshot, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restore_empty_snapshot, setup, teardown),
    };

    return cmocka_run_group_tests_name("cluster_ledger", tests, group_setup, NULL);
}

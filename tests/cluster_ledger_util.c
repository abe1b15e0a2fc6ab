/* What the suites of the members' ledger copies share (cluster_ledger_util.h). */
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
char dir[128], dir2[128];
uint64_t seed;

int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    return 0;
}

int
setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    test_tmpdir(dir2, sizeof(dir2));
    return 0;
}

int
teardown(void **state)
{
    (void)state;
    test_rmtree(dir);
    test_rmtree(dir2);
    return 0;
}

/* A node with nothing but its data dir: what the ledger code uses of it. */
cluster_node *
node_new(const char *data)
{
    cluster_node *n = calloc(1, sizeof(*n));

    assert_non_null(n);
    snprintf(n->data, sizeof(n->data), "%s", data);
    assert_int_equal(cluster__ledger_init(n), TALLY_OK);
    return n;
}

void
node_free(cluster_node *n)
{
    cluster__ledger_close(n);
    free(n);
}

/* A LEDGER record after its type byte: op, tenant and, for APPEND and CHUNK, the records. */
size_t
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

void
apply(cluster_node *n, uint64_t count, char op, const char *tenant, const struct rec *r, size_t nr)
{
    static uint8_t b[64 * 1024];

    cluster__ledger_apply(n, count, b, ledger(b, op, tenant, r, nr));
}

struct rec
text(const char *s)
{
    struct rec r;

    r.len = strlen(s);
    memcpy(r.b, s, r.len);
    return r;
}

void
ledger_path(const char *data, const char *tenant, char *path, size_t cap)
{
    assert_int_equal(store_path_tenant(data, tenant, "ledger.db", path, cap), TALLY_OK);
}

int
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
void
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

void
assert_recs(const struct recs_list *got, const struct rec *want, size_t n)
{
    assert_int_equal(got->n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(got->r[i].len, want[i].len);
        assert_memory_equal(got->r[i].b, want[i].b, want[i].len);
    }
}

struct recs_list *
list_new(void)
{
    struct recs_list *l = calloc(1, sizeof(*l));

    assert_non_null(l);
    return l;
}

bool
exists(const char *data, const char *tenant)
{
    char path[STORE_PATH_MAX];
    struct stat sb;

    ledger_path(data, tenant, path, sizeof(path));
    return stat(path, &sb) == 0;
}

/* ---- the store's copy ---- */

int
enc_list(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len)
{
    const struct rec *r = ctx;

    assert_true(r[i].len <= cap);
    memcpy(buf, r[i].b, r[i].len);
    *len = r[i].len;
    return TALLY_OK;
}

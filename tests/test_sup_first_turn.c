/*
 * A first turn (sup_ledger.h: sup_first_turn_*) on a real ledger file: what it answers is what
 * a supervisor replaying its journal knows, and it never writes while another process holds
 * the tenant's lock or over a ledger that exists.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_journal.h"
#include "store_paths.h"
#include "sup_journal_codec.h"
#include "sup_ledger.h"
#include "test_support.h"

#include "sup_sim_fx.h"

struct env {
    char dir[256];
    struct fx fx; /* its configuration only: the ledger is the first turn's */
    struct sup_first_turn turn;
};

static int
setup(void **state)
{
    static struct env e;

    memset(&e, 0, sizeof(e));
    test_tmpdir(e.dir, sizeof(e.dir));
    fx_config(&e.fx);
    e.turn = (struct sup_first_turn){
        .tenant = "acme",
        .plan = &e.fx.cfg.plan,
        .endpoints = e.fx.eps,
        .endpoint_count = 3,
        .link_allows = e.fx.cfg.link_allows,
        .link_ctx = e.fx.cfg.link_ctx,
    };
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    test_rmtree(e->dir);
    return 0;
}

/* A HELLO and two ACQUIREs from endpoint "search" (child 0), incarnation 1. */
static size_t
requests(struct env *e, struct proto_lease_msg *in)
{
    fx_origin(&e->fx, &in[0], PROTO_LEASE_HELLO, 0, 1);
    strcpy(in[0].hello.tenant, "acme");
    for (int i = 1; i < 3; i++) {
        fx_origin(&e->fx, &in[i], PROTO_LEASE_ACQUIRE, 0, 1);
        strcpy(in[i].acquire.endpoint, "search");
        strcpy(in[i].acquire.link, i == 1 ? LINK_A : LINK_B);
        in[i].acquire.want = 5;
        in[i].acquire.need = 1;
    }
    return 3;
}

static int
replay_one(void *ctx, const uint8_t *p, size_t len)
{
    struct sup_record rec;
    int rc = sup_record_decode(p, len, &rec);

    return rc == TALLY_OK ? sup_ledger_replay(ctx, &rec) : rc;
}

struct seen {
    uint64_t id;
    int64_t n;
    int count;
};

static int
one_lease(void *ctx, const struct sup_lease_info *l)
{
    struct seen *s = ctx;

    s->count++;
    s->id = l->id;
    s->n = l->n;
    return 0;
}

/* The supervisor after the turn: its ledger file replayed into a new ledger. */
static sup_ledger *
replayed(struct env *e)
{
    char path[STORE_PATH_MAX];
    store_db *db = NULL;
    sup_ledger *l = NULL;

    assert_int_equal(store_path_tenant(e->dir, "acme", "ledger.db", path, sizeof(path)), TALLY_OK);
    assert_int_equal(store_journal_open(path, STORE_OPEN_PRIVATE, NULL, &db), TALLY_OK);
    assert_int_equal(sup_ledger_open(&e->fx.cfg, &l), TALLY_OK);
    assert_int_equal(store_journal_each(db, replay_one, l), TALLY_OK);
    store_db_close(db);
    return l;
}

static void
test_first_turn_is_what_the_supervisor_replays(void **state)
{
    struct env *e = *state;
    struct proto_lease_msg in[3], out[8], m;
    sup_first_ledger *fl = NULL;
    struct seen seen = {0};
    size_t n_in = requests(e, in), n = 0;
    sup_ledger *l;

    assert_int_equal(sup_first_turn_open(e->dir, &e->turn, &fl), TALLY_OK);
    assert_int_equal(sup_first_turn_run(fl, in, n_in, out, 8, &n), TALLY_OK);
    sup_first_turn_close(fl);
    assert_true(n >= n_in);
    assert_int_equal(out[0].type, PROTO_LEASE_WELCOME);
    assert_int_equal(out[1].type, PROTO_LEASE_GRANT);
    assert_int_equal(out[2].type, PROTO_LEASE_GRANT);
    assert_int_equal(out[1].origin.seq, in[1].origin.seq);
    assert_true(out[1].grant.n >= 1);

    /* The supervisor knows both leases and the child: the same request is answered again
     * from its dedupe window, not granted twice. */
    l = replayed(e);
    assert_int_equal(sup_ledger_each_lease(l, one_lease, &seen), 0);
    assert_int_equal(seen.count, 2);
    assert_int_equal(seen.id, out[2].grant.lease_id);
    assert_int_equal(seen.n, out[2].grant.n);
    {
        struct sup_record recs[4];
        struct sup_records batch = {recs, 0, 4};

        assert_int_equal(sup_ledger_start(l, test_wall_ms(), &batch), TALLY_OK);
        assert_int_equal(sup_ledger_handle(l, test_wall_ms(), &in[1], &m, &batch), TALLY_OK);
        assert_int_equal(m.type, PROTO_LEASE_GRANT);
        assert_int_equal(m.grant.lease_id, out[1].grant.lease_id);
        assert_int_equal(batch.count, 1); /* the EPOCH only: nothing granted again */
    }
    sup_ledger_close(l);
}

static void
test_first_turn_never_over_a_ledger(void **state)
{
    struct env *e = *state;
    struct proto_lease_msg in[3], out[8];
    sup_first_ledger *fl = NULL;
    size_t n_in = requests(e, in), n = 0;

    assert_int_equal(sup_first_turn_open(e->dir, &e->turn, &fl), TALLY_OK);
    assert_int_equal(sup_first_turn_run(fl, in, n_in, out, 8, &n), TALLY_OK);
    sup_first_turn_close(fl);
    fl = NULL;
    assert_int_equal(sup_first_turn_open(e->dir, &e->turn, &fl), TALLY_EEXIST);
    assert_null(fl);
}

/* Another process's lock (here another open file description of the lock file: flock locks
 * belong to those) keeps the first turn out, and no ledger is made. */
static void
test_first_turn_never_under_another_lock(void **state)
{
    struct env *e = *state;
    char path[STORE_PATH_MAX];
    sup_first_ledger *fl = NULL;
    struct stat sb;
    int fd;

    assert_int_equal(store_tenant_dirs(e->dir, "acme"), TALLY_OK);
    assert_int_equal(store_path_tenant(e->dir, "acme", "supervisor.lock", path, sizeof(path)),
                     TALLY_OK);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(sup_first_turn_open(e->dir, &e->turn, &fl), TALLY_ELOCKED);
    assert_null(fl);
    assert_int_equal(store_path_tenant(e->dir, "acme", "ledger.db", path, sizeof(path)), TALLY_OK);
    assert_int_not_equal(stat(path, &sb), 0);
    close(fd);
    assert_int_equal(sup_first_turn_open(e->dir, &e->turn, &fl), TALLY_OK);
    sup_first_turn_close(fl);
}

/* A turn opened and closed without a request leaves a ledger with nothing in it (its epoch
 * never committed), which a supervisor replays as empty. */
static void
test_first_turn_closed_unused_leaves_nothing(void **state)
{
    struct env *e = *state;
    sup_first_ledger *fl = NULL;
    struct seen seen = {0};
    sup_ledger *l;

    assert_int_equal(sup_first_turn_open(e->dir, &e->turn, &fl), TALLY_OK);
    sup_first_turn_close(fl);
    l = replayed(e);
    assert_int_equal(sup_ledger_each_lease(l, one_lease, &seen), 0);
    assert_int_equal(seen.count, 0);
    sup_ledger_close(l);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_turn_is_what_the_supervisor_replays, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_first_turn_never_over_a_ledger, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_turn_never_under_another_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_turn_closed_unused_leaves_nothing, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

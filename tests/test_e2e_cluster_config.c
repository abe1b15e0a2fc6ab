/*
 * The configuration of a cluster, through the real binaries: three data dirs and tallyds on
 * 127.0.0.1 form a cluster (`tally cluster init`, `invite`, `join`); a `tally` change
 * command on any member goes through the cluster's log.
 *
 * - The joiners copy the first host's tally.db (made before `cluster init`): their export is
 *   its export, its link authenticates on them.
 * - A plan, an endpoint, a tenant and a link made on the leader, and a tenant and a link made
 *   on a follower, are in force on every member when the command returns: every host's
 *   export is the same, and the new link is admitted over HTTP on another host at once.
 * - A link revoked on host 3 is refused on hosts 1 and 2 at once.
 * - A fourth host (a front) joining after all that gets it all.
 * - kill -9 and restart of a tallyd applies nothing twice (the applied index of its
 *   tally.db and its log say so), and the next change applies once.
 * - A change made on a host whose tallyd is stopped is committed, and applied there when
 *   tallyd starts; a change larger than a log record may hold is refused, nothing changed;
 *   a join is refused (the invite unused) when tally.db is more than a join carries.
 * - Two of three voters killed: a change command exits 3 saying no leader is reachable, and
 *   nothing changed anywhere, after the two are back too.
 */
#define _DEFAULT_SOURCE /* usleep */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve_util.h"

#define HOSTS 4 /* three voters, then a front */

struct host {
    struct serve_env e;
    char listen[64];
};

static struct host hosts[HOSTS];
static struct host big; /* a cluster of its own, its tally.db too large to copy */
static char root[48];
static char base_token[128];  /* acme's link, made before `cluster init` */
static char beta_token[128];  /* made on the leader */
static char gamma_token[128]; /* made on a follower */

static void
wait_leader(const struct host *h, unsigned long long want, int timeout_ms)
{
    if (!test_cluster_wait_leader(h->e.data, want, timeout_ms))
        fail_msg("%s: no leader %llu within %d ms", h->e.data, want, timeout_ms);
}

static void
start(struct host *h)
{
    serve_start(&h->e, "--election-timeout-ms", "300");
}

static void
join(struct host *h, const char *role)
{
    struct test_out o;
    char code[256];

    assert_int_equal(test_tally(hosts[0].e.data, &o, "cluster", "invite", NULL), 0);
    snprintf(code, sizeof(code), "%.200s", o.out);
    code[strcspn(code, "\n")] = '\0';
    if (test_tally(h->e.data, &o, "cluster", "join", code, "--listen", h->listen, "--role", role,
                   NULL) != 0)
        fail_msg("join: exit %d: %s", o.code, o.err);
    assert_non_null(strstr(o.out, "configuration copied from the leader"));
}

/* `tally export` of h, which must succeed. */
static void
export_of(const struct host *h, struct test_out *o)
{
    if (test_tally(h->e.data, o, "export", NULL) != 0)
        fail_msg("export of %s: exit %d: %s", h->e.data, o->code, o->err);
}

/* Every running host's export and acme's, beta's and gamma's links are host 1's. */
static void
same_everywhere(int n)
{
    static const char *const tenants[] = {"acme", "beta", "gamma"};
    struct test_out want, got;

    export_of(&hosts[0], &want);
    for (int i = 1; i < n; i++) {
        export_of(&hosts[i], &got);
        if (strcmp(want.out, got.out) != 0)
            fail_msg("host %d's configuration is not host 1's:\n%s\n---\n%s", i + 1, got.out,
                     want.out);
    }
    for (size_t t = 0; t < sizeof(tenants) / sizeof(tenants[0]); t++) {
        if (test_tally(hosts[0].e.data, &want, "link", "list", tenants[t], NULL) != 0)
            continue;
        for (int i = 1; i < n; i++) {
            assert_int_equal(test_tally(hosts[i].e.data, &got, "link", "list", tenants[t], NULL),
                             0);
            assert_string_equal(got.out, want.out);
        }
    }
}

static int
check(const struct host *h, const char *token)
{
    struct serve_http r;

    serve_check(&h->e, token, "search", &r);
    return r.status;
}

/* The CONFIG record DATA/tally.db holds last (cluster_applied), read as any reader would. */
static long long
applied_index(const struct host *h)
{
    char path[256];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long v = 0;

    snprintf(path, sizeof(path), "%s/tally.db", h->e.data);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT idx FROM cluster_applied WHERE id = 1", -1, &st, NULL),
        SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Host 1 holds a configuration before it is a cluster; hosts 2 and 3 join with empty data
 * dirs. */
static int
setup(void **state)
{
    struct test_out o;

    (void)state;
    /* The counts below are against limits of an hour: all within one. */
    test_within_one_window(3600000, 60000);
    memset(hosts, 0, sizeof(hosts));
    test_tmpdir(root, sizeof(root));
    for (int i = 0; i < HOSTS; i++) {
        snprintf(hosts[i].e.root, sizeof(hosts[i].e.root), "%.48s", root);
        snprintf(hosts[i].e.data, sizeof(hosts[i].e.data), "%.48s/h%d", root, i + 1);
        snprintf(hosts[i].listen, sizeof(hosts[i].listen), "127.0.0.1:%d", test_free_port());
    }
    assert_int_equal(test_tally(hosts[0].e.data, &o, "init", NULL), 0);
    serve_tally_ok(&hosts[0].e, NULL, 0, "plan", "set", "free", "--limit", "1000/1h", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "endpoint", "set", "search", "--limit", "100000/1h", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "acme", "--plan", "free", NULL);
    serve_tally_ok(&hosts[0].e, base_token, sizeof(base_token), "link", "create", "acme", NULL);
    assert_int_equal(
        test_tally(hosts[0].e.data, &o, "cluster", "init", "--listen", hosts[0].listen, NULL), 0);
    start(&hosts[0]);
    wait_leader(&hosts[0], 1, 5000);
    for (int i = 1; i < 3; i++) {
        join(&hosts[i], "voter");
        start(&hosts[i]);
    }
    for (int i = 0; i < 3; i++)
        wait_leader(&hosts[i], 1, 5000);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    for (int i = 0; i < HOSTS; i++)
        if (hosts[i].e.d.pid > 0)
            test_daemon_kill9(&hosts[i].e.d);
    if (big.e.d.pid > 0)
        test_daemon_kill9(&big.e.d);
    test_rmtree(root);
    return 0;
}

static void
test_joiners_copy_the_configuration(void **state)
{
    (void)state;
    same_everywhere(3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(check(&hosts[i], base_token), 200);
    assert_int_equal(applied_index(&hosts[1]), 0); /* nothing on the log yet */
}

/* Made on the leader, then on a follower: in force on every member as the command returns
 * (no wait here). */
static void
test_changes_are_in_force_everywhere_when_the_command_returns(void **state)
{
    struct test_out o;

    (void)state;
    serve_tally_ok(&hosts[0].e, NULL, 0, "plan", "set", "pro", "--limit", "5000/1h", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "endpoint", "set", "upload", "--plan", "pro", "--limit",
                   "50/1m", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "beta", "--plan", "pro", NULL);
    serve_tally_ok(&hosts[0].e, beta_token, sizeof(beta_token), "link", "create", "beta", NULL);
    assert_int_equal(check(&hosts[2], beta_token), 200);
    assert_int_equal(check(&hosts[1], beta_token), 200);
    same_everywhere(3);
    assert_int_equal(
        test_tally(hosts[2].e.data, &o, "endpoint", "show", "upload", "--plan", "pro", NULL), 0);

    /* From a follower: host 2 asks the leader. */
    assert_int_equal(test_cluster_leader(hosts[1].e.data), 1);
    serve_tally_ok(&hosts[1].e, NULL, 0, "tenant", "add", "gamma", "--plan", "free", NULL);
    serve_tally_ok(&hosts[1].e, gamma_token, sizeof(gamma_token), "link", "create", "gamma", NULL);
    assert_int_equal(check(&hosts[0], gamma_token), 200);
    assert_int_equal(check(&hosts[2], gamma_token), 200);
    same_everywhere(3);
    /* Six records on the log, every member's file holds them. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(applied_index(&hosts[i]), applied_index(&hosts[0]));
    assert_true(applied_index(&hosts[0]) >= 6);
    /* A change that changes nothing sends nothing. */
    {
        long long index = applied_index(&hosts[0]);
        serve_tally_ok(&hosts[1].e, NULL, 0, "tenant", "set", "gamma", "--plan", "free", NULL);
        assert_int_equal(applied_index(&hosts[0]), index);
    }
}

static void
test_a_revoke_on_one_host_is_refused_on_the_others(void **state)
{
    struct test_out o;

    (void)state;
    assert_int_equal(check(&hosts[0], beta_token), 200);
    assert_int_equal(test_tally(hosts[2].e.data, &o, "link", "revoke", beta_token, NULL), 0);
    assert_int_equal(check(&hosts[0], beta_token), 401);
    assert_int_equal(check(&hosts[1], beta_token), 401);
    assert_int_equal(check(&hosts[2], beta_token), 401);
    assert_int_equal(check(&hosts[0], gamma_token), 200);
    same_everywhere(3);
}

static void
test_a_joiner_gets_the_configuration(void **state)
{
    struct host *h = &hosts[3];

    (void)state;
    join(h, "front");
    assert_int_equal(applied_index(h), applied_index(&hosts[0]));
    same_everywhere(4);
    start(h);
    wait_leader(h, 1, 5000);
    assert_int_equal(check(h, gamma_token), 200);
    assert_int_equal(check(h, beta_token), 401);
    /* ... and the changes after it. */
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "delta", "--plan", "free", NULL);
    same_everywhere(4);
}

static void
test_a_restart_applies_nothing_twice(void **state)
{
    struct host *h = &hosts[1];
    const char *line = "\"event\":\"cluster_config_applied\"";
    long long index = applied_index(h);
    int lines = serve_log_count(&h->e, line);
    int64_t until;

    (void)state;
    assert_true(lines > 0);
    test_daemon_kill9(&h->e.d);
    start(h);
    wait_leader(h, 1, 5000);
    /* It has replayed the log once its commit index is the leader's and it applied it. */
    until = test_now_ms() + 5000;
    for (;;) {
        struct test_out a, b;
        unsigned long long ca = 0, aa = 0, cb = 0;
        const char *pa, *pb;
        test_tally(hosts[0].e.data, &a, "cluster", "status", NULL);
        test_tally(h->e.data, &b, "cluster", "status", NULL);
        pa = strstr(a.out, "log    commit ");
        pb = strstr(b.out, "log    commit ");
        if (pa != NULL && pb != NULL && sscanf(pa, "log    commit %llu", &ca) == 1 &&
            sscanf(pb, "log    commit %llu  applied %llu", &cb, &aa) == 2 && cb >= ca && aa >= ca)
            break;
        if (test_now_ms() > until)
            fail_msg("host 2 did not catch up:\n%s\n%s", a.out, b.out);
        usleep(50 * 1000);
    }
    usleep(300 * 1000); /* a job in flight would be done */
    assert_int_equal(applied_index(h), index);
    assert_int_equal(serve_log_count(&h->e, line), lines);
    /* The next change applies once. */
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "epsilon", "--plan", "free", NULL);
    assert_int_equal(applied_index(h), index + 1);
    assert_int_equal(serve_log_count(&h->e, line), lines + 1);
    same_everywhere(4);
}

/* Host 3's tallyd stopped: a change made there is committed, and applied there once its
 * tallyd is back. */
static void
test_a_change_where_tallyd_is_down(void **state)
{
    struct host *h = &hosts[2];
    struct test_out o;

    (void)state;
    serve_stop(&h->e);
    assert_int_equal(test_tally(h->e.data, &o, "tenant", "add", "eta", "--plan", "free", NULL), 0);
    assert_non_null(strstr(o.err, "tallyd is not running: it applies the change when it starts"));
    assert_int_equal(test_tally(hosts[0].e.data, &o, "tenant", "show", "eta", NULL), 0);
    assert_int_equal(test_tally(h->e.data, &o, "tenant", "show", "eta", NULL), 1);
    start(h);
    for (int64_t until = test_now_ms() + 5000; applied_index(h) < applied_index(&hosts[0]);) {
        if (test_now_ms() > until)
            fail_msg("host 3 did not apply the change within 5 s of its start");
        usleep(50 * 1000);
    }
    same_everywhere(4);
}

/* A change larger than one log record may hold: refused, nothing changed. */
static void
test_a_change_too_large_is_refused(void **state)
{
    char path[128];
    struct test_out o, before;
    FILE *f;

    (void)state;
    export_of(&hosts[0], &before);
    snprintf(path, sizeof(path), "%s/big.conf", root);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(before.out, f);
    for (int i = 0; i < 9000; i++) /* a file holds 10,000 items at most */
        fprintf(f, "tenant customer-with-a-rather-long-name-for-this-test-%05d --plan free\n", i);
    fclose(f);
    assert_int_equal(test_tally(hosts[1].e.data, &o, "apply", path, NULL), 1);
    assert_non_null(strstr(o.err, "make it in smaller steps; nothing changed"));
    export_of(&hosts[0], &o);
    assert_string_equal(o.out, before.out);
}

/* A tally.db larger than a JOIN answer carries: the join is refused with the reason before
 * the invite is used, and the new host's data dir is not made. */
static void
test_a_join_past_the_copy_limit_is_refused(void **state)
{
    struct host newcomer;
    char path[128], code[256];
    struct test_out o;
    FILE *f;

    (void)state;
    memset(&big, 0, sizeof(big));
    memset(&newcomer, 0, sizeof(newcomer));
    snprintf(big.e.data, sizeof(big.e.data), "%s/big", root);
    snprintf(newcomer.e.data, sizeof(newcomer.e.data), "%s/newcomer", root);
    snprintf(big.listen, sizeof(big.listen), "127.0.0.1:%d", test_free_port());
    snprintf(newcomer.listen, sizeof(newcomer.listen), "127.0.0.1:%d", test_free_port());
    snprintf(path, sizeof(path), "%s/big.conf", root);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("plan free --limit 100/1m\n", f);
    for (int i = 0; i < 9000; i++) /* about 1.3 MB of tally.db */
        fprintf(f, "tenant customer-with-a-rather-long-name-for-this-test-%05d --plan free\n", i);
    fclose(f);
    assert_int_equal(test_tally(big.e.data, &o, "init", NULL), 0);
    assert_int_equal(test_tally(big.e.data, &o, "apply", path, NULL), 0);
    assert_int_equal(test_tally(big.e.data, &o, "cluster", "init", "--listen", big.listen, NULL),
                     0);
    start(&big);
    wait_leader(&big, 1, 5000);
    assert_int_equal(test_tally(big.e.data, &o, "cluster", "invite", NULL), 0);
    snprintf(code, sizeof(code), "%.200s", o.out);
    code[strcspn(code, "\n")] = '\0';
    for (int i = 0; i < 2; i++) { /* the invite is still good: the same reason again */
        assert_int_equal(test_tally(newcomer.e.data, &o, "cluster", "join", code, "--listen",
                                    newcomer.listen, NULL),
                         1);
        assert_non_null(strstr(o.err, "is more than a join carries"));
        assert_int_not_equal(access(newcomer.e.data, F_OK), 0);
    }
    assert_int_equal(test_daemon_stop(&big.e.d), 0);
}

static void
test_without_a_majority_nothing_changes(void **state)
{
    struct test_out o, before;

    (void)state;
    export_of(&hosts[0], &before);
    test_daemon_kill9(&hosts[1].e.d);
    test_daemon_kill9(&hosts[2].e.d);
    wait_leader(&hosts[0], 0, 5000); /* it stepped down */
    assert_int_equal(
        test_tally(hosts[0].e.data, &o, "tenant", "add", "omega", "--plan", "free", NULL), 3);
    assert_non_null(strstr(o.err, "no leader reachable"));
    assert_non_null(strstr(o.err, "nothing changed"));
    /* The front (not a voter) says the same. */
    assert_int_equal(test_tally(hosts[3].e.data, &o, "link", "create", "acme", NULL), 3);
    assert_string_equal(o.out, ""); /* no token printed */
    assert_non_null(strstr(o.err, "no leader reachable"));
    export_of(&hosts[0], &o);
    assert_string_equal(o.out, before.out);

    /* The two back: a leader again, and nothing of the refused changes anywhere. */
    start(&hosts[1]);
    start(&hosts[2]);
    for (int64_t until = test_now_ms() + 10000; test_cluster_leader(hosts[0].e.data) == 0;) {
        if (test_now_ms() > until)
            fail_msg("no leader 10 s after the two voters came back");
        usleep(50 * 1000);
    }
    serve_tally_ok(&hosts[2].e, NULL, 0, "tenant", "add", "zeta", "--plan", "free", NULL);
    same_everywhere(4);
    export_of(&hosts[0], &o);
    assert_null(strstr(o.out, "omega"));
    assert_non_null(strstr(o.out, "zeta"));
    assert_int_equal(test_tally(hosts[0].e.data, &o, "link", "list", "acme", NULL),
                     0); /* one link only */
    assert_null(strchr(strchr(o.out, '\n') + 1, '\n'));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_joiners_copy_the_configuration),
        cmocka_unit_test(test_changes_are_in_force_everywhere_when_the_command_returns),
        cmocka_unit_test(test_a_revoke_on_one_host_is_refused_on_the_others),
        cmocka_unit_test(test_a_joiner_gets_the_configuration),
        cmocka_unit_test(test_a_restart_applies_nothing_twice),
        cmocka_unit_test(test_a_change_where_tallyd_is_down),
        cmocka_unit_test(test_a_change_too_large_is_refused),
        cmocka_unit_test(test_a_join_past_the_copy_limit_is_refused),
        cmocka_unit_test(test_without_a_majority_nothing_changes),
    };

    return cmocka_run_group_tests_name("e2e_cluster_config", tests, setup, teardown);
}

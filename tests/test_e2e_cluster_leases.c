/*
 * One cap across hosts, through the real binaries: three data dirs and tallyds on
 * 127.0.0.1 form a cluster (`tally cluster init`, `invite`, `join`); every host's
 * children lease from the leader's supervisors over the cluster port.
 *
 * - A plan of 1,000 an hour, one client per host, all at once: between 990 and 1,000
 *   are admitted in all (each host some), never more, and a refusal names the plan.
 * - kill -9 of every process of the leader's host after about 400 admissions of a plan of
 *   1,000: a new leader grants within the election and a wait, the total stays at most 1,000,
 *   and the old host, started again, holds the same ledger as the others within 5 s.
 * - A host whose data dir is wiped leaves and joins again from nothing: the log has been
 *   compacted (a snapshot every 32 batches), so it gets the leader's snapshot, and its copies
 *   of the ledgers and of tally.db are the others'.
 * - Two of the three tallyds killed: the survivor has no leader, and a fail-closed
 *   endpoint answers 503 within 6 s; once one host is back, grants come within 2 s of
 *   its tallyd answering.
 */
#define _DEFAULT_SOURCE /* usleep */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster_digest.h"
#include "serve_util.h"
#include "test_load.h"

#define HOSTS 3

struct host {
    struct serve_env e;
    char listen[64];
    char token[128];  /* acme's link for this host's client */
    char gtok[128];   /* gamma's, for the failover */
    char gfresh[128]; /* delta's (a tenant nobody used): first used after the leader is gone */
};

static struct host hosts[HOSTS];
static char root[48];
static char fresh[128]; /* beta's link, used first once the majority is gone */
/* The log's snapshots: rare (the default) until the last test asks for them every 32 batches.
 * A member that missed more than the log keeps gets a snapshot, and libraft 0.15 makes that
 * take its install-snapshot timeout (10 s) more: rare snapshots keep restarts fast. */
static const char *snapshot_every = "--snapshot-every=100000";

static void
wait_leader(const struct host *h, unsigned long long want, int timeout_ms)
{
    if (!test_cluster_wait_leader(h->e.data, want, timeout_ms))
        fail_msg("%s: no leader %llu within %d ms", h->e.data, want, timeout_ms);
}

static void
start(struct host *h)
{
    serve_start(&h->e, "--election-timeout-ms=300", snapshot_every);
}

/* Host 1 holds the configuration (a plan of 1,000 an hour over two endpoints, one of them
 * fail-closed; a tenant; one link per host) and starts the cluster; hosts 2 and 3 join
 * with empty data dirs and get it all. */
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
    serve_tally_ok(&hosts[0].e, NULL, 0, "plan", "set", "pro", "--limit", "1000/1h", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "endpoint", "set", "search", "--limit", "100000/1h", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "endpoint", "set", "pay", "--limit", "100000/1h",
                   "--on-unavailable", "closed", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "plan", "set", "big", "--limit", "100000/1h", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "beta", "--plan", "big", NULL);
    serve_tally_ok(&hosts[0].e, fresh, sizeof(fresh), "link", "create", "beta", NULL);
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "gamma", "--plan", "pro", NULL);
    /* delta's links hold no lease before the failover: the tenant's other links ask ahead
     * when one of them starts its supervisor, so a fresh link of a used tenant may not ask. */
    serve_tally_ok(&hosts[0].e, NULL, 0, "tenant", "add", "delta", "--plan", "pro", NULL);
    for (int i = 0; i < HOSTS; i++) {
        serve_tally_ok(&hosts[0].e, hosts[i].gtok, sizeof(hosts[i].gtok), "link", "create", "gamma",
                       NULL);
        serve_tally_ok(&hosts[0].e, hosts[i].gfresh, sizeof(hosts[i].gfresh), "link", "create",
                       "delta", NULL);
    }
    for (int i = 0; i < HOSTS; i++)
        serve_tally_ok(&hosts[0].e, hosts[i].token, sizeof(hosts[i].token), "link", "create",
                       "acme", NULL);
    assert_int_equal(
        test_tally(hosts[0].e.data, &o, "cluster", "init", "--listen", hosts[0].listen, NULL), 0);
    start(&hosts[0]);
    wait_leader(&hosts[0], 1, 5000);
    for (int i = 1; i < HOSTS; i++) {
        char code[256];
        assert_int_equal(test_tally(hosts[0].e.data, &o, "cluster", "invite", NULL), 0);
        snprintf(code, sizeof(code), "%.200s", o.out);
        code[strcspn(code, "\n")] = '\0';
        assert_int_equal(test_tally(hosts[i].e.data, &o, "cluster", "join", code, "--listen",
                                    hosts[i].listen, NULL),
                         0);
        start(&hosts[i]);
    }
    for (int i = 0; i < HOSTS; i++)
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
    test_rmtree(root);
    return 0;
}

struct client {
    const struct host *h;
    const char *token; /* NULL: the host's acme link */
    const char *endpoint;
    int total;
    struct test_load_result r;
};

static void *
client_run(void *arg)
{
    struct client *c = arg;
    const char *tok = c->token != NULL ? c->token : c->h->token;

    test_load_run(c->h->e.d.socket, &tok, 1, c->endpoint, c->total, (c->total + 9) / 10, 60000,
                  &c->r);
    return NULL;
}

/* The status of one check on h. */
static int
check_status(const struct host *h, const char *token, const char *endpoint, struct serve_http *out)
{
    serve_check(&h->e, token, endpoint, out);
    return out->status;
}

static void
test_cluster_cap_is_exact_across_three_hosts(void **state)
{
    struct client c[HOSTS];
    pthread_t th[HOSTS];
    struct serve_http r;
    int admitted = 0;

    (void)state;
    /* Every host's link to the leader is up once a request of it is answered. */
    for (int i = 0; i < HOSTS; i++)
        assert_int_equal(check_status(&hosts[i], hosts[i].token, "search", &r), 200);
    for (int i = 0; i < HOSTS; i++) {
        c[i] = (struct client){.h = &hosts[i], .endpoint = "search", .total = 600};
        assert_int_equal(pthread_create(&th[i], NULL, client_run, &c[i]), 0);
    }
    for (int i = 0; i < HOSTS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        print_message("host %d: admitted %d refused %d unavailable %d lost %d\n", i + 1,
                      c[i].r.admitted, c[i].r.refused, c[i].r.unavailable, c[i].r.lost);
        assert_int_equal(c[i].r.unauthorized + c[i].r.lost + c[i].r.other + c[i].r.bad_request, 0);
        assert_int_equal(c[i].r.degraded, 0);
        assert_true(c[i].r.admitted > 0);
        admitted += c[i].r.admitted;
    }
    admitted += HOSTS; /* the first request of each */
    print_message("admitted in all: %d of a plan of 1000\n", admitted);
    assert_true(admitted <= 1000);
    assert_true(admitted >= 990);
    for (int i = 0; i < HOSTS; i++) {
        assert_int_equal(check_status(&hosts[i], hosts[i].token, "search", &r), 429);
        assert_non_null(strstr(r.body, "\"scope\":\"plan\""));
    }
}

/* Sends `each` checks of gamma from every live host at once; the admitted total. */
static int
gamma_round(int each, bool *live)
{
    struct client c[HOSTS];
    pthread_t th[HOSTS];
    int admitted = 0;

    for (int i = 0; i < HOSTS; i++) {
        c[i] = (struct client){
            .h = &hosts[i], .token = hosts[i].gtok, .endpoint = "search", .total = each};
        if (live[i])
            assert_int_equal(pthread_create(&th[i], NULL, client_run, &c[i]), 0);
    }
    for (int i = 0; i < HOSTS; i++) {
        if (!live[i])
            continue;
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(c[i].r.unauthorized + c[i].r.other + c[i].r.bad_request, 0);
        admitted += c[i].r.admitted;
    }
    return admitted;
}

static void
test_cluster_failover_keeps_the_cap(void **state)
{
    bool live[HOSTS] = {true, true, true};
    unsigned long long leader = test_cluster_leader(hosts[0].e.data);
    struct host *old;
    struct serve_http r;
    pid_t sups[16];
    int n_sups, admitted, k = -1;
    int64_t t0, t_back;
    char u0[4096], u[4096];

    (void)state;
    assert_true(leader >= 1 && leader <= HOSTS);
    old = &hosts[leader - 1];
    admitted = gamma_round(134, live); /* about 400 */
    print_message("before the failover: %d admitted\n", admitted);
    /* Every process of the leader's host: tallyd, then the supervisors it ran. */
    n_sups = test_supervisor_pids(old->e.data, "gamma", sups, 16);
    test_daemon_kill9(&old->e.d);
    for (int i = 0; i < n_sups; i++)
        kill(sups[i], SIGKILL);
    live[leader - 1] = false;
    t0 = test_now_ms();
    for (int i = 0; i < HOSTS && k < 0; i++)
        if (live[i])
            k = i;
    /* A link of a tenant nobody used holds no lease: it asks the new leader. */
    while (check_status(&hosts[k], hosts[k].gfresh, "search", &r) != 200) {
        assert_true(test_now_ms() - t0 < 8000);
        usleep(50 * 1000);
    }
    print_message("a new leader granted %lld ms after the kill\n", (long long)(test_now_ms() - t0));
    assert_true(test_now_ms() - t0 < 2000); /* the election, then a cold start on the new leader */
    admitted += 1 + gamma_round(800, live);
    print_message("in all: %d admitted of a plan of 1000\n", admitted);
    assert_true(admitted <= 1000);
    /* The old host comes back and catches up: every host's copy of the ledger is the same
     * (`tally usage` reads it). */
    start(old);
    t_back = test_now_ms();
    /* The ledger still moves (leases returned, expired): compare both copies as they are. */
    for (;;) {
        bool same = true;
        cluster_usage(hosts[k].e.data, "gamma", u0, sizeof(u0));
        assert_true(u0[0] != '\0');
        for (int i = 0; i < HOSTS; i++) {
            cluster_usage(hosts[i].e.data, "gamma", u, sizeof(u));
            same = same && strcmp(u, u0) == 0;
        }
        if (same)
            break;
        if (test_now_ms() - t_back >= 5000)
            print_message("a copy:\n%s\nthe new leader's:\n%s\n", u, u0);
        assert_true(test_now_ms() - t_back < 5000);
        usleep(100 * 1000);
    }
    print_message("every copy of the ledger equal %lld ms after the old leader's restart\n",
                  (long long)(test_now_ms() - t_back));
}

static void
test_cluster_wiped_host_rejoins_from_a_snapshot(void **state)
{
    struct host *h = &hosts[2];
    struct test_out o;
    char code[256], a[8192], b[8192];
    int64_t t0;

    (void)state;
    /* Snapshots every 32 batches from now on: the log forgets early. */
    snapshot_every = "--snapshot-every=32";
    for (int i = 0; i < 2; i++) {
        if (hosts[i].e.d.pid > 0)
            assert_int_equal(test_daemon_stop(&hosts[i].e.d), 0);
        start(&hosts[i]);
    }
    /* Host 3 loses its disk: it leaves, and joins again from nothing as a new member. */
    if (h->e.d.pid > 0)
        test_daemon_kill9(&h->e.d);
    t0 = test_now_ms();
    while (test_cluster_leader(hosts[0].e.data) == 0 ||
           test_cluster_leader(hosts[0].e.data) != test_cluster_leader(hosts[1].e.data)) {
        assert_true(test_now_ms() - t0 < 5000);
        usleep(50 * 1000);
    }
    assert_int_equal(test_tally(hosts[0].e.data, &o, "cluster", "leave", "3", NULL), 0);
    test_rmtree(h->e.data);
    t0 = test_now_ms();
    while (test_cluster_leader(hosts[0].e.data) == 0) { /* two voters now: both vote */
        assert_true(test_now_ms() - t0 < 5000);
        usleep(50 * 1000);
    }
    {
        /* The leader's log forgot its start (a snapshot every 32 batches; configuration
         * changes are batches too), so a joiner needs one. */
        unsigned long long l = test_cluster_leader(hosts[0].e.data);
        assert_true(l == 1 || l == 2);
        for (int k = 0; k < 80 && !cluster_has_snapshot(hosts[l - 1].e.data); k++) {
            char tok[128];
            struct serve_http r;
            serve_tally_ok(&hosts[0].e, tok, sizeof(tok), "link", "create", "delta", NULL);
            (void)check_status(&hosts[0], tok, "search", &r); /* its lease: a LEDGER batch */
        }
        assert_true(cluster_has_snapshot(hosts[l - 1].e.data));
    }
    /* Invites are taken by the leader (asked again if leadership moved meanwhile). */
    for (int attempt = 0;; attempt++) {
        unsigned long long l = test_cluster_leader(hosts[0].e.data);
        test_rmtree(h->e.data);
        if (l >= 1 && l <= 2 &&
            test_tally(hosts[l - 1].e.data, &o, "cluster", "invite", NULL) == 0) {
            snprintf(code, sizeof(code), "%.200s", o.out);
            code[strcspn(code, "\n")] = '\0';
            if (test_tally(h->e.data, &o, "cluster", "join", code, "--listen", h->listen, NULL) ==
                0)
                break;
        }
        if (attempt == 4)
            fail_msg("join again: %s", o.err);
        usleep(500 * 1000);
    }
    /* A new member, never the id of the one that left: with it, the new host's children would
     * be the dead host's (same names), answered from their duplicate windows. */
    print_message("%s", o.out);
    assert_non_null(strstr(o.out, "joined the cluster as member 4 "));
    start(h);
    t0 = test_now_ms();
    /* Its ledgers and its configuration are the others', from the leader's snapshot. */
    for (;;) {
        cluster_usage(hosts[0].e.data, "gamma", a, sizeof(a));
        cluster_usage(h->e.data, "gamma", b, sizeof(b));
        if (a[0] != '\0' && strcmp(a, b) == 0)
            break;
        if (test_now_ms() - t0 > 30000)
            fail_msg("the new member's ledger copy:\n%s\nthe leader's:\n%s", b, a);
        usleep(200 * 1000);
    }
    print_message("a wiped host's ledgers equal the others' %lld ms after it joined again\n",
                  (long long)(test_now_ms() - t0));
    cluster_export(hosts[0].e.data, a, sizeof(a));
    cluster_export(h->e.data, b, sizeof(b));
    assert_string_equal(a, b);
}

static void
test_cluster_without_a_majority_answers_503_then_heals(void **state)
{
    struct serve_http r;
    int64_t t0, t_back;

    (void)state;
    /* The leader (host 1) keeps only itself: it steps down, nobody grants. Leases held keep
     * deciding (a kept one up to an hour): a link that holds none asks. */
    test_daemon_kill9(&hosts[1].e.d);
    test_daemon_kill9(&hosts[2].e.d);
    t0 = test_now_ms();
    wait_leader(&hosts[0], 0, 3000); /* it stepped down: a lease granted now would be kept */
    assert_int_equal(check_status(&hosts[0], fresh, "pay", &r), 503);
    print_message("503 %lld ms after the majority was lost\n", (long long)(test_now_ms() - t0));
    assert_true(test_now_ms() - t0 < 6000);
    assert_non_null(strstr(r.body, "unavailable"));
    /* One host back: a majority again, and grants within 2 s of its tallyd answering. */
    start(&hosts[1]);
    t_back = test_now_ms();
    while (check_status(&hosts[0], fresh, "pay", &r) != 200) {
        assert_true(r.status == 503);
        assert_true(test_now_ms() - t_back < 2000);
        usleep(50 * 1000);
    }
    print_message("granted %lld ms after a host came back\n", (long long)(test_now_ms() - t_back));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_cap_is_exact_across_three_hosts),
        cmocka_unit_test(test_cluster_failover_keeps_the_cap),
        cmocka_unit_test(test_cluster_without_a_majority_answers_503_then_heals),
        cmocka_unit_test(test_cluster_wiped_host_rejoins_from_a_snapshot),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}

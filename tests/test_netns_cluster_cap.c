/*
 * One cap across hosts that are network namespaces of their own (netns_util.h: each host its
 * data dir, its tallyd and one veth into a bridge; the hosts talk over their cluster ports
 * only). A plan of 1,000 an hour; the clients run in this process, in the root namespace, and
 * reach each tallyd over its Unix socket with libtally's pipelined client; `tally` runs inside
 * the host's namespace. Every tallyd runs with --wait-ms 3000, as in test_e2e_cluster_leases.
 *   - Exact cap: one client per host, all at once: between 990 and 1,000 admitted in all,
 *     each host some, and every refusal names the plan.
 *   - kill -9 of every process of the leader's host (tallyd and its supervisors) at about
 *     400 admitted: a new leader grants within 2 s of the kill, the total stays at most 1,000,
 *     and the old host, started again, holds the same ledger copies as the others within 5 s.
 *   - The leader's data dir wiped: it is killed, removed from the cluster (`tally cluster
 *     leave`), and joins again from nothing with an invite from whoever leads; the log is
 *     compacted (--snapshot-every 32), so it gets a snapshot, and its ledger copies and
 *     tally.db equal the others'; it grants again, the cap still one cap.
 * Each scenario ends with every member's ledger copies equal (cluster_digest.h: the log
 * position of each tenant's copy and its records) and `tally usage` at most the cap.
 * Needs root and `ip netns` (iproute2): without them every test is skipped, with the reason
 * on one line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_digest.h"
#include "netns_util.h"
#include "tally.h"

#define HOSTS NETNS_HOSTS
#define CAP   1000
#define CONNS 6 /* connections of one client */

static struct netns_net net;
static char acme[HOSTS][128];  /* acme's link for each host's client */
static char delta[HOSTS][128]; /* delta's (a tenant nobody used): first used after a failover */
/* --snapshot-every of every tallyd from the test's start on. */
static const char *snapshot_every;

static void
start(struct netns_host *h)
{
    netns_start_args(h, "--wait-ms", "3000", "--snapshot-every", snapshot_every, NULL);
}

static const char *
data_of(int i)
{
    return net.h[i].data;
}

/* `tally ARGS...` in h's namespace; its first line into out (when not NULL). */
static void
tally_ok(struct netns_host *h, char *out, size_t cap, ...)
{
    static struct test_out o;
    const char *a[8] = {NULL};
    va_list ap;
    int n = 0;

    va_start(ap, cap);
    while (n < 7 && (a[n] = va_arg(ap, const char *)) != NULL)
        n++;
    va_end(ap);
    if (netns_tally(h, &o, a[0], a[1], a[2], a[3], a[4], a[5], a[6], NULL) != 0)
        fail_msg("tally %s %s %s: exit %d: %s", a[0], a[1] != NULL ? a[1] : "",
                 a[2] != NULL ? a[2] : "", o.code, o.err);
    if (out != NULL) {
        snprintf(out, cap, "%s", o.out);
        out[strcspn(out, "\n")] = '\0';
    }
}

/* The cluster, its configuration through the log (a plan of 1,000 an hour, an endpoint, two
 * tenants with a link per host each), and every tallyd started again with the test's
 * arguments. */
static int
setup_with(const char *every)
{
    snapshot_every = every;
    /* The counts below are against a plan of an hour: all within one. */
    test_within_one_window(3600000, 60000);
    assert_int_equal(netns_cluster_make(&net), 0);
    if (!net.up)
        return 0;
    tally_ok(&net.h[0], NULL, 0, "plan", "set", "pro", "--limit", "1000/1h", NULL);
    tally_ok(&net.h[0], NULL, 0, "endpoint", "set", "search", "--limit", "100000/1h", NULL);
    tally_ok(&net.h[0], NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    tally_ok(&net.h[0], NULL, 0, "tenant", "add", "delta", "--plan", "pro", NULL);
    for (int i = 0; i < HOSTS; i++) {
        tally_ok(&net.h[0], acme[i], sizeof(acme[i]), "link", "create", "acme", NULL);
        tally_ok(&net.h[0], delta[i], sizeof(delta[i]), "link", "create", "delta", NULL);
    }
    for (int i = 0; i < HOSTS; i++) {
        assert_int_equal(test_daemon_stop(&net.h[i].d), 0);
        start(&net.h[i]);
    }
    assert_true(netns_agreed(&net, 7u, 0, 5000) != 0);
    return 0;
}

static int
setup(void **state)
{
    (void)state;
    return setup_with("100000"); /* the default: rare snapshots keep restarts fast */
}

static int
setup_snapshots(void **state)
{
    (void)state;
    return setup_with("32");
}

static int
teardown(void **state)
{
    (void)state;
    if (net.up)
        netns_keep_logs(&net);
    netns_cluster_destroy(&net);
    return 0;
}

#define SKIP_UNLESS_NET() NETNS_SKIP_UNLESS_UP(net)

/* One host's client: `total` checks of `token` on `search` over CONNS pipelined connections
 * (libtally's async client), every answer counted; a refusal naming another scope than the
 * plan is counted apart. */
struct client {
    const char *socket;
    const char *token;
    int total;
    int admitted, refused, unavailable, degraded, lost, other;
    int refused_not_plan;
    char bad_scope[16];
};

static void
on_answer(void *user, int rc, const struct tally_result *r)
{
    struct client *c = user;

    if (rc != TALLY_OK) {
        c->lost++;
        return;
    }
    switch (r->status) {
    case TALLY_ADMITTED:
        c->admitted++;
        c->degraded += r->degraded ? 1 : 0;
        break;
    case TALLY_REFUSED:
        c->refused++;
        if (strcmp(r->scope, "plan") != 0) {
            c->refused_not_plan++;
            snprintf(c->bad_scope, sizeof(c->bad_scope), "%s", r->scope);
        }
        break;
    case TALLY_UNAVAILABLE:
        c->unavailable++;
        break;
    default:
        c->other++;
        break;
    }
}

static void *
client_run(void *arg)
{
    struct client *c = arg;
    tally_async *a[CONNS] = {NULL};
    int64_t deadline = test_now_ms() + 60000;

    for (int i = 0; i < CONNS; i++) {
        int share = c->total / CONNS + (i < c->total % CONNS ? 1 : 0);

        if (tally_async_open(c->socket, 10000, 0, &a[i]) != TALLY_OK) {
            a[i] = NULL;
            c->lost += share;
            continue;
        }
        for (int k = 0; k < share; k++)
            if (tally_async_check(a[i], c->token, "search", 0, on_answer, c) != TALLY_OK)
                c->lost++;
    }
    for (;;) {
        struct pollfd pf[CONNS];
        int map[CONNS], n = 0;
        int64_t left = deadline - test_now_ms();

        for (int i = 0; i < CONNS; i++) {
            if (a[i] == NULL || tally_async_pending(a[i]) == 0)
                continue;
            pf[n] = (struct pollfd){
                .fd = tally_async_fd(a[i]),
                .events = (short)(POLLIN | (tally_async_wants_write(a[i]) ? POLLOUT : 0))};
            map[n++] = i;
        }
        if (n == 0 || left <= 0)
            break;
        if (poll(pf, (nfds_t)n, (int)left) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (pf[k].revents == 0)
                continue;
            if (tally_async_process(a[map[k]]) < 0) { /* every pending callback ran: lost */
                tally_async_close(a[map[k]]);
                a[map[k]] = NULL;
            }
        }
    }
    for (int i = 0; i < CONNS; i++)
        tally_async_close(a[i]); /* what is still pending: lost */
    return NULL;
}

/* `each[i]` checks of tokens[i] from every host i with each[i] > 0, all at once; fills c and
 * returns the admitted total. */
static int
round_of(const int *each, char tokens[HOSTS][128], struct client *c)
{
    pthread_t th[HOSTS];
    int admitted = 0;

    for (int i = 0; i < HOSTS; i++) {
        c[i] = (struct client){.socket = net.h[i].d.socket, .token = tokens[i], .total = each[i]};
        if (each[i] > 0)
            assert_int_equal(pthread_create(&th[i], NULL, client_run, &c[i]), 0);
    }
    for (int i = 0; i < HOSTS; i++) {
        if (each[i] == 0)
            continue;
        assert_int_equal(pthread_join(th[i], NULL), 0);
        print_message("  host %d: admitted %d refused %d unavailable %d lost %d of %d\n", i + 1,
                      c[i].admitted, c[i].refused, c[i].unavailable, c[i].lost, c[i].total);
        if (c[i].refused_not_plan > 0)
            fail_msg("host %d: %d refusals name the scope \"%s\", not the plan", i + 1,
                     c[i].refused_not_plan, c[i].bad_scope);
        assert_int_equal(c[i].lost + c[i].other + c[i].degraded, 0);
        admitted += c[i].admitted;
    }
    return admitted;
}

/* One check of token on h's socket (a fresh connection); the answer into *r, TALLY_OK or the
 * client's error. */
static int
check_one(struct netns_host *h, const char *token, struct tally_result *r)
{
    tally_client *c;
    int rc = tally_client_open(h->d.socket, 10000, &c);

    if (rc != TALLY_OK)
        return rc;
    rc = tally_check(c, token, "search", 0, r);
    tally_client_close(c);
    return rc;
}

/* What `tally usage TENANT` reads on every member, equal everywhere within timeout_ms: at
 * least `admitted` (what the clients counted), at most the cap; and every member's ledger
 * copies equal. */
static void
copies_agree(const char *tenant, int admitted, long timeout_ms)
{
    static char u[HOSTS][8192];
    const char *datas[HOSTS];
    int64_t t0 = test_now_ms();
    long long plan;
    int differs;

    for (int i = 0; i < HOSTS; i++)
        datas[i] = data_of(i);
    /* Each `tally usage` has its host's children give their leases back first: read again
     * until every member reads the same. */
    do {
        differs = 0;
        for (int i = 0; i < HOSTS; i++) {
            if (cluster_usage(datas[i], tenant, u[i], sizeof(u[i])) != 0)
                print_message("host %d: %s", i + 1, cluster_last_error());
            if (differs == 0 && (u[i][0] == '\0' || strcmp(u[i], u[0]) != 0))
                differs = i + 1;
        }
        if (differs != 0 && test_now_ms() - t0 > timeout_ms)
            fail_msg("tally usage %s on host %d:\n%s\non host 1:\n%s", tenant, differs,
                     u[differs - 1], u[0]);
        if (differs != 0)
            netns_sleep_ms(100);
    } while (differs != 0);
    assert_true(cluster_digests_agree(datas, HOSTS, timeout_ms) >= 0);
    plan = cluster_usage_sum(u[0], "plan", NULL);
    print_message("every member's ledger copies equal; %s's plan counts %lld (clients: %d)\n",
                  tenant, plan, admitted);
    if (plan < admitted || plan > CAP)
        fail_msg("the clients counted %d admitted, the plan's row of the ledger %lld, the cap %d; "
                 "tally usage %s:\n%s",
                 admitted, plan, CAP, tenant, u[0]);
}

static void
test_netns_cap_is_exact_across_three_hosts(void **state)
{
    struct client c[HOSTS];
    struct tally_result r;
    int each[HOSTS] = {600, 600, 600};
    int admitted = 0;
    struct timespec t0;

    (void)state;
    SKIP_UNLESS_NET();
    /* Every host's link to the leader is up once a request of it is admitted. */
    for (int i = 0; i < HOSTS; i++) {
        assert_int_equal(check_one(&net.h[i], acme[i], &r), TALLY_OK);
        assert_int_equal(r.status, TALLY_ADMITTED);
    }
    admitted = HOSTS;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    admitted += round_of(each, acme, c);
    print_message("3 x 600 checks at once in %.0f ms: %d admitted in all of a plan of 1000\n",
                  netns_ms_since(&t0), admitted);
    for (int i = 0; i < HOSTS; i++)
        assert_true(c[i].admitted > 0);
    assert_true(admitted <= CAP);
    assert_true(admitted >= 990);
    /* A check more on each host is refused, naming the plan: once the leases other hosts held
     * went back, what they did not use may still be admitted first, within the cap. */
    for (int i = 0; i < HOSTS; i++) {
        for (;;) {
            assert_int_equal(check_one(&net.h[i], acme[i], &r), TALLY_OK);
            if (r.status != TALLY_ADMITTED)
                break;
            admitted++;
            assert_true(admitted <= CAP);
        }
        assert_int_equal(r.status, TALLY_REFUSED);
        assert_string_equal(r.scope, "plan");
    }
    print_message("then a check on each host refused, naming the plan: %d admitted in all\n",
                  admitted);
    copies_agree("acme", admitted, 10000);
}

/* Every process of h's host: tallyd, then the supervisors it ran. */
static void
kill_host(struct netns_host *h)
{
    static const char *const tenants[] = {"acme", "delta"};
    pid_t sups[2][16];
    int n[2];

    for (int t = 0; t < 2; t++)
        n[t] = test_supervisor_pids(h->data, tenants[t], sups[t], 16);
    test_daemon_kill9(&h->d);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < n[t]; i++)
            kill(sups[t][i], SIGKILL);
}

static void
test_netns_failover_keeps_the_cap(void **state)
{
    struct client c[HOSTS];
    struct tally_result r;
    int each[HOSTS] = {134, 134, 134};
    unsigned long long l;
    struct timespec t0;
    const char *datas[HOSTS];
    int admitted, li, k = -1;
    double first_grant;
    long caught_up;

    (void)state;
    SKIP_UNLESS_NET();
    l = netns_agreed(&net, 7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    li = (int)l - 1;
    admitted = round_of(each, acme, c); /* about 400 */
    print_message("before the failover: %d admitted (leader: host %d)\n", admitted, li + 1);
    kill_host(&net.h[li]);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    k = (li + 1) % HOSTS;
    /* A link of a tenant nobody used holds no lease: it asks the new leader. */
    for (;;) {
        assert_int_equal(check_one(&net.h[k], delta[k], &r), TALLY_OK);
        if (r.status == TALLY_ADMITTED)
            break;
        assert_int_equal(r.status, TALLY_UNAVAILABLE);
        assert_true(netns_ms_since(&t0) < 8000);
        netns_sleep_ms(50);
    }
    first_grant = netns_ms_since(&t0);
    print_message("a new leader (member %llu) granted on host %d %.0f ms after the kill\n",
                  netns_agreed(&net, 7u & ~(1u << li), l, 5000), k + 1, first_grant);
    assert_true(first_grant < 2000); /* the election, then a cold start on the new leader */
    for (int i = 0; i < HOSTS; i++)
        each[i] = i == li ? 0 : 800;
    admitted += round_of(each, acme, c);
    print_message("in all: %d admitted of a plan of 1000\n", admitted);
    assert_true(admitted <= CAP);
    /* The old host comes back and catches up: every member's copies of the ledgers equal. */
    start(&net.h[li]);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < HOSTS; i++)
        datas[i] = data_of(i);
    caught_up = cluster_digests_agree(datas, HOSTS, 5000);
    print_message("the old leader's ledger copies equal the others' %.0f ms after its restart\n",
                  netns_ms_since(&t0));
    assert_true(caught_up >= 0);
    copies_agree("acme", admitted, 10000);
}

static void
test_netns_wiped_leader_rejoins_from_a_snapshot(void **state)
{
    static char a[16384], b[16384];
    struct client c[HOSTS];
    struct tally_result r;
    struct test_out o;
    char code[256], id[24];
    int each[HOSTS] = {150, 150, 150};
    unsigned long long l, l2 = 0, self;
    struct timespec t0;
    const char *datas[HOSTS];
    struct netns_host *h;
    int admitted, li, k;
    long ms;

    (void)state;
    SKIP_UNLESS_NET();
    l = netns_agreed(&net, 7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    li = (int)l - 1;
    h = &net.h[li];
    k = (li + 1) % HOSTS;
    admitted = round_of(each, acme, c);
    print_message("before the wipe: %d admitted (leader: host %d)\n", admitted, li + 1);
    /* The leader loses its disk: every process of it killed, the two others elect another,
     * which removes it. */
    kill_host(h);
    l2 = netns_agreed(&net, 7u & ~(1u << li), l, 5000);
    assert_true(l2 != 0);
    snprintf(id, sizeof(id), "%llu", l);
    if (netns_tally(&net.h[k], &o, "cluster", "leave", id, NULL) != 0)
        fail_msg("cluster leave %s on host %d: %s", id, k + 1, o.err);
    test_rmtree(h->data);
    /* The leader's log forgot its start (a snapshot every 32 batches; the grants and the
     * configuration changes are batches too), so a joiner needs one. */
    for (int n = 0; n < 80; n++) {
        char tok[128];
        l2 = netns_agreed(&net, 7u & ~(1u << li), 0, 5000);
        assert_true(l2 != 0);
        if (cluster_has_snapshot(net.h[l2 - 1].data))
            break;
        tally_ok(&net.h[k], tok, sizeof(tok), "link", "create", "delta", NULL);
        (void)check_one(&net.h[k], tok, &r); /* its lease: a LEDGER batch */
    }
    assert_true(cluster_has_snapshot(net.h[l2 - 1].data));
    /* Joins again from nothing, with an invite from whoever leads (asked again if leadership
     * moved meanwhile), at its old address. */
    for (int attempt = 0;; attempt++) {
        l2 = netns_agreed(&net, 7u & ~(1u << li), 0, 5000);
        test_rmtree(h->data);
        if (l2 != 0 && netns_tally(&net.h[l2 - 1], &o, "cluster", "invite", NULL) == 0) {
            snprintf(code, sizeof(code), "%.200s", o.out);
            code[strcspn(code, "\n")] = '\0';
            if (netns_tally(h, &o, "cluster", "join", code, "--listen", h->addr, NULL) == 0)
                break;
        }
        if (attempt == 4)
            fail_msg("join again: %s", o.err);
        netns_sleep_ms(500);
    }
    start(h);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Its ledger copies and its tally.db are the others', from the leader's snapshot. */
    for (int i = 0; i < HOSTS; i++)
        datas[i] = data_of(i);
    ms = cluster_digests_agree(datas, HOSTS, 30000);
    assert_true(ms >= 0);
    for (;;) {
        cluster_export(net.h[l2 - 1].data, a, sizeof(a));
        cluster_export(h->data, b, sizeof(b));
        if (a[0] != '\0' && strcmp(a, b) == 0)
            break;
        if (netns_ms_since(&t0) > 30000)
            fail_msg("the new member's tally.db:\n%s\nthe leader's:\n%s", b, a);
        netns_sleep_ms(100);
    }
    if (netns_tally(h, &o, "cluster", "status", NULL) != 0 ||
        sscanf(o.out, "member %llu", &self) != 1)
        self = 0;
    print_message("the wiped leader (host %d, member %llu, member %llu once joined again; %llu "
                  "leads) holds the others' ledger copies and tally.db %.0f ms after its tallyd "
                  "started\n",
                  li + 1, l, self, l2, netns_ms_since(&t0));
    /* It grants again, and the cap is still one: all three at once up to it. */
    for (int i = 0; i < HOSTS; i++)
        each[i] = 400;
    admitted += round_of(each, acme, c);
    print_message("in all: %d admitted of a plan of 1000 (the rejoined host %d)\n", admitted,
                  c[li].admitted);
    assert_true(c[li].admitted > 0);
    copies_agree("acme", admitted, 10000);
    assert_true(admitted <= CAP);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_netns_cap_is_exact_across_three_hosts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_netns_failover_keeps_the_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_netns_wiped_leader_rejoins_from_a_snapshot,
                                        setup_snapshots, teardown),
    };

    if (getenv("TALLY_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TALLY_TEST_FILTER"));
    return cmocka_run_group_tests_name("netns_cluster_cap", tests, NULL, NULL);
}

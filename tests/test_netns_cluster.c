/*
 * Cluster mode across network namespaces: three hosts, each a namespace of
 * its own (its data dir, its tallyd, one veth into a bridge that lives in a
 * fourth namespace), talking over their cluster ports only. The first host is
 * made with `tally cluster init`, the others join with codes from `tally
 * cluster invite`, each from inside its namespace. Then, on that network:
 *   - the leader is cut off (its link down): the two others elect another
 *     within the bound, the isolated one stops calling itself leader, its own
 *     clients get 503 on a fail-closed endpoint (a link holding no lease) within
 *     6 s, and after the link comes back it follows the new leader and grants
 *     again within 3 s;
 *   - a follower is cut off: its fail-closed endpoint answers 503, its open one
 *     admits at most its degraded limit, every admission flagged degraded; healed,
 *     it grants again within 3 s, and its degraded admissions are charged to the
 *     ledger exactly once (`tally usage` on every member: before the cut + the
 *     degraded ones + the fresh check after);
 *   - two of three are killed (kill -9): the survivor has no leader; one
 *     comes back and a leader is elected within 2 s of its return;
 *   - 5% of the packets between hosts are dropped (nft) for 10 s: a leader
 *     all name at the end, the term changes counted.
 * Needs root and `ip netns` (iproute2): without them every test is skipped,
 * with the reason on one line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_digest.h"
#include "netns_util.h"
#include "test_load.h"

#define HOSTS NETNS_HOSTS

static struct netns_net net;
/* Links of one tenant, each first used after a cut (no lease held: it must ask). */
#define FRESH 40
static char fresh[FRESH][96];
static int fresh_next;

static int
setup(void **state)
{
    struct test_out o;

    (void)state;
    assert_int_equal(netns_cluster_make(&net), 0);
    if (!net.up)
        return 0;
    /* The configuration, through the log: a fail-closed endpoint, an open one, the fresh
     * links. */
    fresh_next = 0;
    assert_int_equal(netns_tally(&net.h[0], &o, "plan", "set", "pro", "--limit", "100000/1h", NULL),
                     0);
    assert_int_equal(netns_tally(&net.h[0], &o, "endpoint", "set", "pay", "--limit", "100000/1h",
                                 "--on-unavailable", "closed", NULL),
                     0);
    assert_int_equal(netns_tally(&net.h[0], &o, "endpoint", "set", "browse", "--limit", "100000/1h",
                                 "--on-unavailable", "open", "--degraded-limit", "5/1h", NULL),
                     0);
    assert_int_equal(netns_tally(&net.h[0], &o, "tenant", "add", "acme", "--plan", "pro", NULL), 0);
    for (int i = 0; i < FRESH; i++) {
        assert_int_equal(netns_tally(&net.h[0], &o, "link", "create", "acme", NULL), 0);
        snprintf(fresh[i], sizeof(fresh[i]), "%.90s", o.out);
        fresh[i][strcspn(fresh[i], "\n")] = '\0';
    }
    return 0;
}

/* One check of a link never used before on h's socket: 200 admitted, 503 unavailable, -1. */
static int
fresh_check(struct netns_host *h)
{
    struct test_load_result r;
    const char *tok;

    assert_true(fresh_next < FRESH);
    tok = fresh[fresh_next++];
    test_load_run(h->d.socket, &tok, 1, "pay", 1, 1, 10000, &r);
    if (r.admitted == 1)
        return 200;
    if (r.unavailable == 1)
        return 503;
    return -1;
}

static int
teardown(void **state)
{
    (void)state;
    netns_cluster_destroy(&net);
    return 0;
}

#define SKIP_UNLESS_NET() NETNS_SKIP_UNLESS_UP(net)

/* `tally usage acme` on every member, host `first` first (its children give their leases back
 * before it reads), into u; true when every member reads the same. */
static bool
usage_everywhere(int first, char u[HOSTS][8192])
{
    bool same = true;

    cluster_usage(net.h[first].data, "acme", u[first], sizeof(u[first]));
    for (int i = 0; i < HOSTS; i++) {
        if (i != first)
            cluster_usage(net.h[i].data, "acme", u[i], sizeof(u[i]));
        same = same && u[i][0] != '\0' && strcmp(u[i], u[first]) == 0;
    }
    return same;
}

static void
test_netns_leader_cut_off_and_back(void **state)
{
    unsigned long long l, l2;
    int li;
    unsigned others;
    struct timespec t0;
    double ms;

    (void)state;
    SKIP_UNLESS_NET();
    l = netns_agreed(&net, 7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    li = (int)l - 1;
    others = 7u & ~(1u << li);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(netns_ip("-n", net.h[li].ns, "link", "set", "eth0", "down", NULL), 0);
    l2 = netns_agreed(&net, others, l, 5000);
    ms = netns_ms_since(&t0);
    print_message("leader %llu cut off: member %llu leads the other two after %.0f ms\n", l, l2,
                  ms);
    assert_true(l2 != 0);
    /* The isolated one stops leading (it cannot reach a majority). */
    for (int waited = 0; netns_leader_seen(&net.h[li]) == l; waited += 50) {
        if (waited > 5000)
            fail_msg("member %llu still calls itself leader 5 s after it was cut off", l);
        netns_sleep_ms(50);
    }
    /* Its own clients: a link that holds no lease gets no grant there, and the fail-closed
     * endpoint answers 503 (at the request's deadline) within 6 s of the cut. */
    {
        int st = fresh_check(&net.h[li]);
        ms = netns_ms_since(&t0);
        print_message("the isolated host answers %s %.0f ms after the cut\n",
                      st == 503 ? "503" : "something else", ms);
        assert_int_equal(st, 503);
        assert_true(ms < 6000);
    }
    /* Healed: it follows the new leader, and grants again within 3 s. */
    assert_int_equal(netns_ip("-n", net.h[li].ns, "link", "set", "eth0", "up", NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(netns_agreed(&net, 7u, 0, 5000), l2);
    while (fresh_check(&net.h[li]) != 200) {
        assert_true(netns_ms_since(&t0) < 3000);
        netns_sleep_ms(100);
    }
    print_message("the healed host grants again %.0f ms after its link came back\n",
                  netns_ms_since(&t0));
}

/* A follower cut off: its fail-closed endpoint answers 503, its open one admits no more than
 * its degraded limit (5 an hour per child), all flagged degraded; healed, it grants again, and
 * the degraded admissions are charged to the ledger as debt exactly once: `tally usage` on
 * every member counts them once, the plan's and the open endpoint's rows alike. */
static void
test_netns_follower_cut_off_follows_its_policies(void **state)
{
    static char u[HOSTS][8192];
    struct test_load_result r;
    struct timespec t0;
    unsigned long long l;
    long long plan0, browse0, plan = -1, browse = -1, want_plan, want_browse;
    const char *tok;
    int fi = -1, fresh_admitted = 0;
    bool same = false;

    (void)state;
    SKIP_UNLESS_NET();
    l = netns_agreed(&net, 7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    for (int i = 0; i < HOSTS && fi < 0; i++)
        if ((unsigned long long)i + 1 != l)
            fi = i;
    /* The ledger before the cut, as every member's copy counts it (no row: nothing yet). */
    for (int k = 0; k < 50 && !(same = usage_everywhere(fi, u)); k++)
        netns_sleep_ms(100);
    assert_true(same);
    plan0 = cluster_usage_sum(u[fi], "plan", NULL);
    browse0 = cluster_usage_sum(u[fi], "endpoint", "browse");
    plan0 = plan0 < 0 ? 0 : plan0;
    browse0 = browse0 < 0 ? 0 : browse0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(netns_ip("-n", net.h[fi].ns, "link", "set", "eth0", "down", NULL), 0);
    for (int waited = 0; netns_leader_seen(&net.h[fi]) != 0; waited += 50) {
        if (waited > 5000)
            fail_msg("member %d still sees a leader 5 s after it was cut off", fi + 1);
        netns_sleep_ms(50);
    }
    assert_int_equal(fresh_check(&net.h[fi]), 503);
    print_message("the cut-off follower answers 503 %.0f ms after the cut\n", netns_ms_since(&t0));
    assert_true(netns_ms_since(&t0) < 6000);
    assert_true(fresh_next < FRESH);
    tok = fresh[fresh_next++];
    test_load_run(net.h[fi].d.socket, &tok, 1, "browse", 20, 1, 20000, &r);
    print_message("open endpoint cut off: %d admitted (degraded %d), %d refused, %d unavailable "
                  "of 20\n",
                  r.admitted, r.degraded, r.refused, r.unavailable);
    assert_true(r.admitted >= 1 && r.admitted <= 5);
    assert_int_equal(r.degraded, r.admitted);
    assert_int_equal(r.admitted + r.refused + r.unavailable, 20); /* past it: 429 */
    assert_int_equal(netns_ip("-n", net.h[fi].ns, "link", "set", "eth0", "up", NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_true(netns_agreed(&net, 7u, 0, 5000) != 0);
    while (fresh_check(&net.h[fi]) != 200) {
        assert_true(netns_ms_since(&t0) < 3000);
        netns_sleep_ms(100);
    }
    fresh_admitted = 1;
    print_message("the healed follower grants again %.0f ms after its link came back\n",
                  netns_ms_since(&t0));
    /* The debt comes back with the open endpoint's next ACQUIRE or heartbeat (every second
     * while there is debt): once on the plan and once on the endpoint, never twice. */
    want_plan = plan0 + r.admitted + fresh_admitted;
    want_browse = browse0 + r.admitted;
    for (;;) {
        same = usage_everywhere(fi, u);
        plan = cluster_usage_sum(u[fi], "plan", NULL);
        browse = cluster_usage_sum(u[fi], "endpoint", "browse");
        if (same && plan == want_plan && browse == want_browse)
            break;
        if (netns_ms_since(&t0) > 10000)
            fail_msg("10 s after healing: usage %s on every member; plan %lld (want %lld: %lld "
                     "before the cut, %d degraded, %d fresh), browse %lld (want %lld); on host "
                     "%d:\n%s",
                     same ? "equal" : "not equal", plan, want_plan, plan0, r.admitted,
                     fresh_admitted, browse, want_browse, fi + 1, u[fi]);
        netns_sleep_ms(200);
    }
    print_message("healed: usage on every member counts the %d degraded admissions once %.0f ms "
                  "after the link came back (plan %lld -> %lld, browse %lld -> %lld)\n",
                  r.admitted, netns_ms_since(&t0), plan0, plan, browse0, browse);
    /* And only once: past two more heartbeats, still the same everywhere. */
    netns_sleep_ms(2500);
    assert_true(usage_everywhere(fi, u));
    assert_int_equal(cluster_usage_sum(u[fi], "plan", NULL), want_plan);
    assert_int_equal(cluster_usage_sum(u[fi], "endpoint", "browse"), want_browse);
}

/* 5% of the packets each host sends to the others dropped (nft numgen) for 10 s: TCP
 * retransmits under the channel, the cluster keeps a leader that every host names at the
 * end. How often the term moved meanwhile is printed (a lost heartbeat can outlast a
 * 300 ms election timeout: TCP's first retransmit waits 200 ms or more). */
static void
test_netns_loss_keeps_a_leader(void **state)
{
    char rule[96];
    unsigned long long l0, t0, l, t, changes = 0, last_term;
    struct timespec start;

    (void)state;
    SKIP_UNLESS_NET();
    assert_true(netns_agreed(&net, 7u, 0, 5000) != 0);
    netns_leader_term(&net.h[0], &l0, &t0);
    last_term = t0;
    snprintf(rule, sizeof(rule), "ip daddr 10.213.%d.0/24 numgen random mod 100 < 5 drop",
             net.subnet);
    for (int i = 0; i < HOSTS; i++) {
        if (netns_nft_rule(&net.h[i], rule) != 0) {
            print_message("skipped: nft rules cannot be made here: %s\n", netns_skip_reason);
            skip();
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (netns_ms_since(&start) < 10000) {
        netns_leader_term(&net.h[0], &l, &t);
        if (t > last_term) {
            changes += t - last_term;
            last_term = t;
        }
        netns_sleep_ms(200);
    }
    for (int i = 0; i < HOSTS; i++)
        netns_nft_clear(&net.h[i]);
    l = netns_agreed(&net, 7u, 0, 5000);
    print_message("5%% loss for 10 s: the term moved %llu times (leader %llu at term %llu, "
                  "then %llu)\n",
                  changes, l0, t0, l);
    assert_true(l != 0);
}

static void
test_netns_two_of_three_killed(void **state)
{
    unsigned long long l;
    int a, b, c;
    struct timespec t0;
    double ms;

    (void)state;
    SKIP_UNLESS_NET();
    l = netns_agreed(&net, 7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    a = (int)l - 1; /* the leader and one more die */
    b = (a + 1) % HOSTS;
    c = (a + 2) % HOSTS;
    test_daemon_kill9(&net.h[a].d);
    test_daemon_kill9(&net.h[b].d);
    /* The survivor has no leader: no majority to elect one. */
    for (int waited = 0; netns_leader_seen(&net.h[c]) != 0; waited += 50) {
        if (waited > 6000)
            fail_msg("the survivor still names a leader 6 s after two of three died");
        netns_sleep_ms(50);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    netns_start(&net.h[b]);
    l = netns_agreed(&net, (1u << b) | (1u << c), 0, 2000);
    ms = netns_ms_since(&t0);
    print_message("one host back: member %llu leads after %.0f ms\n", l, ms);
    assert_true(l != 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_netns_leader_cut_off_and_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_netns_follower_cut_off_follows_its_policies, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_netns_two_of_three_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_netns_loss_keeps_a_leader, setup, teardown),
    };

    return cmocka_run_group_tests_name("netns_cluster", tests, NULL, NULL);
}

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
 *     again within 3 s; `tally usage` then reads the same on every member, within
 *     the plan, and every member's ledger copies are equal;
 *   - a follower is cut off: its fail-closed endpoint answers 503, its open one
 *     admits at most its degraded limit, every admission flagged degraded; healed,
 *     it grants again within 3 s, and its degraded admissions are charged to the
 *     ledger exactly once (`tally usage` on every member: before the cut + the
 *     degraded ones + the fresh check after), and the ledger copies are equal;
 *   - two of three are killed, the leader among them (kill -9 of every process
 *     of theirs: tallyd, its fork server, its supervisors, spare ones too), a
 *     tenant alone on a plan of 300 an hour used from every host before: the
 *     survivor names no leader, a link that holds no lease gets 503 on a
 *     fail-closed endpoint within 6 s of the kill, and the tenant's own link
 *     admits only from the leases it held, then 503 only; one host back, a
 *     grant on it or on the survivor within 2 s of its tallyd answering; all
 *     three back and loaded until every host is refused: at most 300 admitted
 *     in all, at least 285 (leases that ended unused count as spent), every
 *     member's ledger copies equal within 5 s and `tally usage` the same on
 *     every member (at least what the clients counted, at most the cap);
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

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
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
    /* The counts below are against limits of an hour: all within one. */
    test_within_one_window(3600000, 60000);
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

/* Every member's ledger copies equal (the digests of cluster_digest.h), within timeout_ms. */
static void
assert_copies_equal(long timeout_ms)
{
    const char *datas[HOSTS];
    long ms;

    for (int i = 0; i < HOSTS; i++)
        datas[i] = net.h[i].data;
    ms = cluster_digests_agree(datas, HOSTS, timeout_ms);
    print_message("every member's ledger copies equal %ld ms later\n", ms);
    assert_true(ms >= 0);
}

/* `tally usage TENANT` on every member, host `first` first (its children give their leases back
 * before it reads), into u; true when every member reads the same. */
static bool
usage_everywhere(int first, const char *tenant, char u[HOSTS][8192])
{
    bool same = true;

    cluster_usage(net.h[first].data, tenant, u[first], sizeof(u[first]));
    for (int i = 0; i < HOSTS; i++) {
        if (i != first)
            cluster_usage(net.h[i].data, tenant, u[i], sizeof(u[i]));
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
    /* Within the plan, the same on every member, and the copies equal. */
    {
        static char u[HOSTS][8192];
        int waited = 0;
        while (!usage_everywhere(li, "acme", u)) {
            if (waited > 10000)
                fail_msg("usage differs between members 10 s after healing");
            netns_sleep_ms(200);
            waited += 200;
        }
        assert_true(cluster_usage_sum(u[li], "plan", NULL) <= 100000);
    }
    assert_copies_equal(10000);
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
    for (int k = 0; k < 50 && !(same = usage_everywhere(fi, "acme", u)); k++)
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
        same = usage_everywhere(fi, "acme", u);
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
    assert_true(usage_everywhere(fi, "acme", u));
    assert_int_equal(cluster_usage_sum(u[fi], "plan", NULL), want_plan);
    assert_int_equal(cluster_usage_sum(u[fi], "endpoint", "browse"), want_browse);
    assert_copies_equal(10000);
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

/* The capped plan of the two-of-three scenario: one tenant on it, alone, each host's client
 * using its own link on the fail-closed endpoint. */
#define SOLO_CAP   300
#define SOLO_SLACK 15 /* what the cap may end short by: leases that ended unused count as spent */
#define SOLO_RUNS  20 /* rounds of the last phase's load at most */

/* kill -9 of every process of hosts x and y at once (netns_kill9_hosts). Returns the number of
 * processes killed, the supervisors among them into *sups. */
static int
kill_two_hosts(int x, int y, int *sups)
{
    struct netns_host *hs[2] = {&net.h[x], &net.h[y]};
    pid_t s[16];

    *sups = 0;
    for (int k = 0; k < 2; k++)
        *sups += test_supervisor_pids(hs[k]->data, "solo", s, 16) +
                 test_supervisor_pids(hs[k]->data, "acme", s, 16);
    return netns_kill9_hosts(hs, 2);
}

/* One check of tok on `pay` (fail-closed) on h's socket: 200 admitted, 503 unavailable, 429
 * refused, -1 no answer. */
static int
pay_check(struct netns_host *h, const char *tok)
{
    struct test_load_result r;

    test_load_run(h->d.socket, &tok, 1, "pay", 1, 1, 10000, &r);
    if (r.admitted == 1)
        return 200;
    if (r.unavailable == 1)
        return 503;
    if (r.refused == 1)
        return 429;
    return -1;
}

/* `n` checks of tok on `pay` on h's socket, pipelined over 4 connections; every one answered. */
static void
pay_load(int host, const char *tok, int n, struct test_load_result *r)
{
    test_load_run(net.h[host].d.socket, &tok, 1, "pay", n, 4, 30000, r);
    if (r->lost + r->other + r->bad_request + r->unauthorized + r->degraded != 0)
        fail_msg("host %d: %d checks: %d lost, %d other, %d bad, %d unauthorized, %d degraded",
                 host + 1, n, r->lost, r->other, r->bad_request, r->unauthorized, r->degraded);
    assert_int_equal(r->admitted + r->refused + r->unavailable, n);
}

/* Two of three hosts killed, the leader among them (kill -9 of every process of theirs). A
 * tenant alone on a plan of 300 an hour, on the fail-closed endpoint: some checks from every
 * host before; on the survivor, a link that holds no lease answers 503 within 6 s of the kill,
 * and the tenant's own link admits only from the leases it already held, the rest 503 (its load
 * exceeds what the cap leaves); one host back: a grant on it or the survivor within 2 s of its
 * tallyd answering; the third back, load from every host until every one is refused: the total
 * admitted at most the cap and within SOLO_SLACK of it, every member's ledger copies equal
 * within 5 s, and `tally usage` reading the same on every member (at least the clients'
 * count, at most the cap). */
static void
test_netns_two_of_three_killed(void **state)
{
    static char u[HOSTS][8192];
    char solo[HOSTS][96], p_back[2][96];
    struct test_load_result r;
    struct test_out o;
    unsigned long long l;
    int a, b, c, st, procs, sups;
    int before[HOSTS] = {0}, before_503[HOSTS] = {0}, outage = 0, one_back[HOSTS] = {0}, last = 0,
        total = 0;
    int back_on = -1, runs = 0;
    struct timespec t0;
    double ms_503, ms_back;
    long long plan = -1;
    bool same = false;

    (void)state;
    SKIP_UNLESS_NET();
    /* The capped plan through the log: a tenant on its own, a link for each host's client. */
    assert_int_equal(netns_tally(&net.h[0], &o, "plan", "set", "solo", "--limit", "300/1h", NULL),
                     0);
    assert_int_equal(netns_tally(&net.h[0], &o, "tenant", "add", "solo", "--plan", "solo", NULL),
                     0);
    for (int i = 0; i < HOSTS; i++) {
        assert_int_equal(netns_tally(&net.h[0], &o, "link", "create", "solo", NULL), 0);
        snprintf(solo[i], sizeof(solo[i]), "%.90s", o.out);
        solo[i][strcspn(solo[i], "\n")] = '\0';
    }
    l = netns_agreed(&net, 7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    a = (int)l - 1; /* the leader and one more die; b comes back first, then a */
    b = (a + 1) % HOSTS;
    c = (a + 2) % HOSTS;
    /* Before: some checks from every host, each its own link, 30 at once until 30 are
     * admitted (a check waits 50 ms for a grant, --wait-ms: the first ones of a link may answer
     * 503 while its first lease is being committed). */
    for (int i = 0; i < HOSTS; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (before[i] < 30) {
            if (netns_ms_since(&t0) > 5000)
                fail_msg("host %d: %d admitted, %d unavailable in 5 s", i + 1, before[i],
                         before_503[i]);
            pay_load(i, solo[i], 30 - before[i], &r);
            assert_int_equal(r.refused, 0);
            before[i] += r.admitted;
            before_503[i] += r.unavailable;
            total += r.admitted;
        }
    }
    print_message("before the kill: %d + %d + %d = %d admitted of a plan of %d (%d, %d, %d "
                  "unavailable; leader: host %d)\n",
                  before[0], before[1], before[2], total, SOLO_CAP, before_503[0], before_503[1],
                  before_503[2], a + 1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    procs = kill_two_hosts(a, b, &sups);
    print_message("hosts %d and %d killed: %d processes (%d supervisors)\n", a + 1, b + 1, procs,
                  sups);
    /* The survivor has no leader: no majority to elect one. */
    for (int waited = 0; netns_leader_seen(&net.h[c]) != 0; waited += 50) {
        if (waited > 6000)
            fail_msg("the survivor still names a leader 6 s after two of three died");
        netns_sleep_ms(50);
    }
    /* A link that holds no lease (of a tenant not used yet) asks, and nobody grants: the
     * fail-closed endpoint answers 503. */
    st = fresh_check(&net.h[c]);
    ms_503 = netns_ms_since(&t0);
    print_message("the survivor answers %d on a fresh link %.0f ms after the kill\n", st, ms_503);
    assert_int_equal(st, 503);
    assert_true(ms_503 < 6000);
    /* The tenant's own link admits from the leases it held, no more: its load (the whole cap)
     * exceeds what the cap leaves, so some of it answers 503, none is refused (nobody decides). */
    pay_load(c, solo[c], SOLO_CAP, &r);
    outage = r.admitted;
    total += outage;
    print_message("the survivor's link meanwhile: %d admitted (leases it held), %d unavailable of "
                  "%d\n",
                  r.admitted, r.unavailable, SOLO_CAP);
    assert_int_equal(r.refused, 0);
    assert_true(r.unavailable > 0);
    assert_true(total <= SOLO_CAP);
    /* Those spent, nothing more: the same link again, every check 503. */
    pay_load(c, solo[c], 20, &r);
    print_message("then %d admitted, %d unavailable of 20\n", r.admitted, r.unavailable);
    assert_int_equal(r.unavailable, 20);
    /* Still no grant: two links that hold no lease, one asked on the survivor just before a
     * host comes back, the other on the host once back. */
    snprintf(p_back[0], sizeof(p_back[0]), "%s", fresh[fresh_next++]);
    snprintf(p_back[1], sizeof(p_back[1]), "%s", fresh[fresh_next++]);
    assert_int_equal(pay_check(&net.h[c], p_back[0]), 503);
    /* One host back: grants within 2 s of its tallyd answering, on it or on the survivor. */
    netns_start(&net.h[b]);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int k = 0;; k++) {
        int h = k % 2 == 0 ? c : b;
        st = pay_check(&net.h[h], p_back[k % 2]);
        if (st == 200) {
            back_on = h;
            break;
        }
        if (st != 503)
            fail_msg("host %d answers %d %.0f ms after host %d came back", h + 1, st,
                     netns_ms_since(&t0), b + 1);
        if (netns_ms_since(&t0) > 2000)
            fail_msg("no grant 2 s after host %d came back (leader seen: %llu)", b + 1,
                     netns_leader_seen(&net.h[c]));
        netns_sleep_ms(50);
    }
    ms_back = netns_ms_since(&t0);
    l = netns_agreed(&net, (1u << b) | (1u << c), 0, 2000);
    print_message("host %d back: a grant on host %d %.0f ms after its tallyd answered (member "
                  "%llu leads)\n",
                  b + 1, back_on + 1, ms_back, l);
    assert_true(ms_back < 2000);
    /* Two hosts: some more checks from each. */
    for (int i = 0; i < HOSTS; i++) {
        if (i == a)
            continue;
        pay_load(i, solo[i], 20, &r);
        one_back[i] = r.admitted;
        total += r.admitted;
    }
    print_message("with hosts %d and %d: %d + %d admitted\n", b + 1, c + 1, one_back[b],
                  one_back[c]);
    assert_true(total <= SOLO_CAP);
    /* The third back, then load from every host until every one is refused. */
    netns_start(&net.h[a]);
    assert_true(netns_agreed(&net, 7u, 0, 5000) != 0);
    for (;; runs++) {
        int admitted = 0, refused_everywhere = 1;

        if (runs == SOLO_RUNS)
            fail_msg("%d rounds of load: still not refused on every host (%d admitted in all)",
                     runs, total);
        for (int i = 0; i < HOSTS; i++) {
            pay_load(i, solo[i], 60, &r);
            admitted += r.admitted;
            refused_everywhere = refused_everywhere && r.refused > 0 && r.admitted == 0;
        }
        last += admitted;
        total += admitted;
        if (refused_everywhere)
            break;
        netns_sleep_ms(100);
    }
    print_message("all three back: %d admitted in %d rounds of 3 x 60, then refused on every "
                  "host\n",
                  last, runs + 1);
    print_message("in all: %d admitted of a plan of %d (before %d, outage %d, one back %d, all "
                  "back %d)\n",
                  total, SOLO_CAP, before[0] + before[1] + before[2], outage,
                  one_back[b] + one_back[c], last);
    assert_true(total <= SOLO_CAP);
    assert_true(total >= SOLO_CAP - SOLO_SLACK);
    /* Every member's copies of the ledgers equal, and the plan's row the same everywhere. */
    assert_copies_equal(5000);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!(same = usage_everywhere(c, "solo", u)) && netns_ms_since(&t0) < 10000)
        netns_sleep_ms(200);
    plan = cluster_usage_sum(u[c], "plan", NULL);
    print_message("tally usage solo on every member: %s, the plan counts %lld\n",
                  same ? "equal" : "not equal", plan);
    if (!same || plan < total || plan > SOLO_CAP)
        fail_msg("usage %s on every member; the clients counted %d admitted, the plan's row "
                 "%lld, the cap %d; on host %d:\n%s",
                 same ? "equal" : "not equal", total, plan, SOLO_CAP, c + 1, u[c]);
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

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
 *     it grants again within 3 s;
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_daemon.h"
#include "test_load.h"
#include "test_support.h"

#define HOSTS 3
#define IP    "/usr/sbin/ip"
#define NFT   "/usr/sbin/nft"

struct host {
    char ns[32];
    char addr[32]; /* its cluster port */
    char data[200];
    char wrapper[220];
    struct test_daemon d;
};

struct net {
    char dir[128];
    char sw[32]; /* the namespace of the bridge */
    int subnet;  /* 10.213.SUBNET.0/24 */
    struct host h[HOSTS];
    bool up;
};

static struct net net;
static char skip_reason[256];
/* Links of one tenant, each first used after a cut (no lease held: it must ask). */
#define FRESH 40
static char fresh[FRESH][96];
static int fresh_next;

static int
run(const char *what, char *const argv[])
{
    struct test_out o;
    int rc = test_run(argv, NULL, &o);

    if (rc != 0)
        snprintf(skip_reason, sizeof(skip_reason), "%s: exit %d: %.150s", what, rc, o.err);
    return rc;
}

/* ip ARGS... (NULL-terminated) */
static int
ip(const char *a0, ...)
{
    char *argv[16];
    int n = 0;
    va_list ap;
    const char *a;

    argv[n++] = IP;
    argv[n++] = (char *)a0;
    va_start(ap, a0);
    while ((a = va_arg(ap, const char *)) != NULL && n < 15)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    return run("ip", argv);
}

static void
now_sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/* `tally --data DATA ARGS...` run inside host h's namespace. */
static int
tally_in(struct host *h, struct test_out *o, ...)
{
    char tally[256];
    char *argv[24];
    int n = 0;
    va_list ap;
    const char *a;

    test_bin("tally", tally, sizeof(tally));
    argv[n++] = IP;
    argv[n++] = "netns";
    argv[n++] = "exec";
    argv[n++] = h->ns;
    argv[n++] = tally;
    argv[n++] = "--data";
    argv[n++] = h->data;
    va_start(ap, o);
    while ((a = va_arg(ap, const char *)) != NULL && n < 23)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    return test_run(argv, NULL, o);
}

static void
net_down(void)
{
    for (int i = 0; i < HOSTS; i++) {
        if (net.h[i].d.pid > 0)
            test_daemon_kill9(&net.h[i].d);
        if (net.h[i].ns[0] != '\0')
            (void)ip("netns", "delete", net.h[i].ns, NULL);
    }
    if (net.sw[0] != '\0')
        (void)ip("netns", "delete", net.sw, NULL);
    test_daemon_use_bin(NULL);
    net.up = false;
}

/* The switch namespace with its bridge, and each host's namespace wired to it. */
static int
net_up(void)
{
    char tallyd[256], veth[32], peer[32], cidr[40];
    int pid = (int)getpid();

    net.subnet = pid % 250;
    snprintf(net.sw, sizeof(net.sw), "tly-sw-%d", pid);
    if (ip("netns", "add", net.sw, NULL) != 0)
        return -1;
    if (ip("-n", net.sw, "link", "add", "br0", "type", "bridge", NULL) != 0 ||
        ip("-n", net.sw, "link", "set", "br0", "up", NULL) != 0)
        return -1;
    test_bin("tallyd", tallyd, sizeof(tallyd));
    for (int i = 0; i < HOSTS; i++) {
        struct host *h = &net.h[i];
        FILE *w;

        snprintf(h->ns, sizeof(h->ns), "tly-h%d-%d", i + 1, pid);
        snprintf(h->addr, sizeof(h->addr), "10.213.%d.%d:7400", net.subnet, i + 1);
        snprintf(cidr, sizeof(cidr), "10.213.%d.%d/24", net.subnet, i + 1);
        snprintf(veth, sizeof(veth), "v%d-%d", i + 1, pid % 100000);
        snprintf(peer, sizeof(peer), "p%d-%d", i + 1, pid % 100000);
        if (ip("netns", "add", h->ns, NULL) != 0 ||
            ip("-n", h->ns, "link", "set", "lo", "up", NULL) != 0 ||
            ip("link", "add", veth, "netns", h->ns, "type", "veth", "peer", "name", peer, "netns",
               net.sw, NULL) != 0 ||
            ip("-n", net.sw, "link", "set", peer, "master", "br0", NULL) != 0 ||
            ip("-n", net.sw, "link", "set", peer, "up", NULL) != 0 ||
            ip("-n", h->ns, "link", "set", veth, "name", "eth0", NULL) != 0 ||
            ip("-n", h->ns, "addr", "add", cidr, "dev", "eth0", NULL) != 0 ||
            ip("-n", h->ns, "link", "set", "eth0", "up", NULL) != 0)
            return -1;
        snprintf(h->data, sizeof(h->data), "%s/h%d", net.dir, i + 1);
        snprintf(h->wrapper, sizeof(h->wrapper), "%s/tallyd-h%d.sh", net.dir, i + 1);
        w = fopen(h->wrapper, "w");
        if (w == NULL)
            return -1;
        fprintf(w, "#!/bin/sh\nexec %s netns exec %s %s \"$@\"\n", IP, h->ns, tallyd);
        fclose(w);
        chmod(h->wrapper, 0700);
    }
    net.up = true;
    return 0;
}

static void
start(struct host *h)
{
    test_daemon_use_bin(h->wrapper);
    assert_int_equal(test_daemon_start(&h->d, h->data, "--election-timeout-ms", "300", NULL), 0);
    test_daemon_use_bin(NULL);
}

/* The leader host h names (0: none known, or tallyd did not answer). */
static unsigned long long
leader_seen(struct host *h)
{
    struct test_out o;
    unsigned long long self = 0, leader = 0;

    if (tally_in(h, &o, "cluster", "status", NULL) != 0 ||
        sscanf(o.out, "member %llu (this host)  leader %llu", &self, &leader) != 2)
        return 0;
    return leader;
}

/* Waits until every host in mask names the same leader, other than `not` (0: any);
 * returns it, or 0 after timeout_ms. */
static unsigned long long
agreed(unsigned mask, unsigned long long not, long timeout_ms)
{
    for (long waited = 0; waited <= timeout_ms; waited += 50) {
        unsigned long long l = 0;
        bool ok = true;

        for (int i = 0; i < HOSTS && ok; i++) {
            unsigned long long x;
            if (!(mask & (1u << i)))
                continue;
            x = leader_seen(&net.h[i]);
            ok = x != 0 && x != not &&(l == 0 || x == l);
            l = x;
        }
        if (ok && l != 0)
            return l;
        now_sleep_ms(50);
    }
    return 0;
}

static double
ms_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static void
join(struct host *inviter, struct host *h)
{
    struct test_out o;
    char code[256];

    assert_int_equal(tally_in(inviter, &o, "cluster", "invite", NULL), 0);
    snprintf(code, sizeof(code), "%.200s", o.out);
    code[strcspn(code, "\n")] = '\0';
    if (tally_in(h, &o, "cluster", "join", code, "--listen", h->addr, NULL) != 0)
        fail_msg("join of %s failed: %s", h->addr, o.err);
}

static int
setup(void **state)
{
    struct test_out o;

    (void)state;
    memset(&net, 0, sizeof(net));
    skip_reason[0] = '\0';
    if (geteuid() != 0) {
        snprintf(skip_reason, sizeof(skip_reason), "not root");
        return 0;
    }
    if (access(IP, X_OK) != 0) {
        snprintf(skip_reason, sizeof(skip_reason), "%s missing (iproute2)", IP);
        return 0;
    }
    test_tmpdir(net.dir, sizeof(net.dir));
    if (net_up() != 0) {
        net_down();
        return 0; /* skip_reason says why */
    }
    skip_reason[0] = '\0';
    /* The cluster: h1 made, h2 and h3 joined, each from its own namespace. */
    assert_int_equal(tally_in(&net.h[0], &o, "init", NULL), 0);
    assert_int_equal(tally_in(&net.h[0], &o, "cluster", "init", "--listen", net.h[0].addr, NULL),
                     0);
    start(&net.h[0]);
    assert_int_equal(agreed(1u, 0, 5000), 1);
    join(&net.h[0], &net.h[1]);
    start(&net.h[1]);
    join(&net.h[0], &net.h[2]);
    start(&net.h[2]);
    assert_int_equal(agreed(7u, 0, 5000), 1);
    /* The configuration, through the log: a fail-closed endpoint, an open one, the fresh
     * links. */
    fresh_next = 0;
    assert_int_equal(tally_in(&net.h[0], &o, "plan", "set", "pro", "--limit", "100000/1h", NULL),
                     0);
    assert_int_equal(tally_in(&net.h[0], &o, "endpoint", "set", "pay", "--limit", "100000/1h",
                              "--on-unavailable", "closed", NULL),
                     0);
    assert_int_equal(tally_in(&net.h[0], &o, "endpoint", "set", "browse", "--limit", "100000/1h",
                              "--on-unavailable", "open", "--degraded-limit", "5/1h", NULL),
                     0);
    assert_int_equal(tally_in(&net.h[0], &o, "tenant", "add", "acme", "--plan", "pro", NULL), 0);
    for (int i = 0; i < FRESH; i++) {
        assert_int_equal(tally_in(&net.h[0], &o, "link", "create", "acme", NULL), 0);
        snprintf(fresh[i], sizeof(fresh[i]), "%.90s", o.out);
        fresh[i][strcspn(fresh[i], "\n")] = '\0';
    }
    return 0;
}

/* One check of a link never used before on h's socket: 200 admitted, 503 unavailable, -1. */
static int
fresh_check(struct host *h)
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
    if (net.up)
        net_down();
    if (net.dir[0] != '\0')
        test_rmtree(net.dir);
    return 0;
}

#define SKIP_UNLESS_NET()                                                                          \
    do {                                                                                           \
        if (!net.up) {                                                                             \
            print_message("skipped: cannot build network namespaces here: %s\n", skip_reason);     \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

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
    l = agreed(7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    li = (int)l - 1;
    others = 7u & ~(1u << li);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ip("-n", net.h[li].ns, "link", "set", "eth0", "down", NULL), 0);
    l2 = agreed(others, l, 5000);
    ms = ms_since(&t0);
    print_message("leader %llu cut off: member %llu leads the other two after %.0f ms\n", l, l2,
                  ms);
    assert_true(l2 != 0);
    /* The isolated one stops leading (it cannot reach a majority). */
    for (int waited = 0; leader_seen(&net.h[li]) == l; waited += 50) {
        if (waited > 5000)
            fail_msg("member %llu still calls itself leader 5 s after it was cut off", l);
        now_sleep_ms(50);
    }
    /* Its own clients: a link that holds no lease gets no grant there, and the fail-closed
     * endpoint answers 503 (at the request's deadline) within 6 s of the cut. */
    {
        int st = fresh_check(&net.h[li]);
        ms = ms_since(&t0);
        print_message("the isolated host answers %s %.0f ms after the cut\n",
                      st == 503 ? "503" : "something else", ms);
        assert_int_equal(st, 503);
        assert_true(ms < 6000);
    }
    /* Healed: it follows the new leader, and grants again within 3 s. */
    assert_int_equal(ip("-n", net.h[li].ns, "link", "set", "eth0", "up", NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(agreed(7u, 0, 5000), l2);
    while (fresh_check(&net.h[li]) != 200) {
        assert_true(ms_since(&t0) < 3000);
        now_sleep_ms(100);
    }
    print_message("the healed host grants again %.0f ms after its link came back\n", ms_since(&t0));
}

/* A follower cut off: its fail-closed endpoint answers 503, its open one admits no more than
 * its degraded limit (5 an hour per child), all flagged degraded; healed, it grants again. */
static void
test_netns_follower_cut_off_follows_its_policies(void **state)
{
    struct test_load_result r;
    struct timespec t0;
    unsigned long long l;
    const char *tok;
    int fi = -1;

    (void)state;
    SKIP_UNLESS_NET();
    l = agreed(7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    for (int i = 0; i < HOSTS && fi < 0; i++)
        if ((unsigned long long)i + 1 != l)
            fi = i;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ip("-n", net.h[fi].ns, "link", "set", "eth0", "down", NULL), 0);
    for (int waited = 0; leader_seen(&net.h[fi]) != 0; waited += 50) {
        if (waited > 5000)
            fail_msg("member %d still sees a leader 5 s after it was cut off", fi + 1);
        now_sleep_ms(50);
    }
    assert_int_equal(fresh_check(&net.h[fi]), 503);
    print_message("the cut-off follower answers 503 %.0f ms after the cut\n", ms_since(&t0));
    assert_true(ms_since(&t0) < 6000);
    assert_true(fresh_next < FRESH);
    tok = fresh[fresh_next++];
    test_load_run(net.h[fi].d.socket, &tok, 1, "browse", 20, 1, 20000, &r);
    print_message("open endpoint cut off: %d admitted (degraded %d), %d refused, %d unavailable "
                  "of 20\n",
                  r.admitted, r.degraded, r.refused, r.unavailable);
    assert_true(r.admitted >= 1 && r.admitted <= 5);
    assert_int_equal(r.degraded, r.admitted);
    assert_int_equal(r.admitted + r.refused + r.unavailable, 20); /* past it: 429 */
    assert_int_equal(ip("-n", net.h[fi].ns, "link", "set", "eth0", "up", NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_true(agreed(7u, 0, 5000) != 0);
    while (fresh_check(&net.h[fi]) != 200) {
        assert_true(ms_since(&t0) < 3000);
        now_sleep_ms(100);
    }
    print_message("the healed follower grants again %.0f ms after its link came back\n",
                  ms_since(&t0));
}

/* The leader and term host h reports (0s when it does not answer). */
static void
leader_term(struct host *h, unsigned long long *leader, unsigned long long *term)
{
    struct test_out o;
    unsigned long long self = 0;

    *leader = *term = 0;
    if (tally_in(h, &o, "cluster", "status", NULL) == 0)
        (void)sscanf(o.out, "member %llu (this host)  leader %llu  term %llu", &self, leader, term);
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
    if (access(NFT, X_OK) != 0) {
        print_message("skipped: %s missing (nftables)\n", NFT);
        skip();
    }
    assert_true(agreed(7u, 0, 5000) != 0);
    leader_term(&net.h[0], &l0, &t0);
    last_term = t0;
    snprintf(rule, sizeof(rule), "ip daddr 10.213.%d.0/24 numgen random mod 100 < 5 drop",
             net.subnet);
    for (int i = 0; i < HOSTS; i++) {
        char *add_table[] = {IP,    "netns", "exec", net.h[i].ns, NFT,
                             "add", "table", "inet", "tlyloss",   NULL};
        char *add_chain[] = {IP,
                             "netns",
                             "exec",
                             net.h[i].ns,
                             NFT,
                             "add",
                             "chain",
                             "inet",
                             "tlyloss",
                             "out",
                             "{ type filter hook output priority 0; }",
                             NULL};
        char *add_rule[] = {IP,     "netns", "exec",    net.h[i].ns, NFT,  "add",
                            "rule", "inet",  "tlyloss", "out",       rule, NULL};
        if (run("nft", add_table) != 0 || run("nft", add_chain) != 0 || run("nft", add_rule) != 0) {
            print_message("skipped: nft rules cannot be made here: %s\n", skip_reason);
            skip();
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (ms_since(&start) < 10000) {
        leader_term(&net.h[0], &l, &t);
        if (t > last_term) {
            changes += t - last_term;
            last_term = t;
        }
        now_sleep_ms(200);
    }
    for (int i = 0; i < HOSTS; i++) {
        char *del[] = {IP,       "netns", "exec", net.h[i].ns, NFT,
                       "delete", "table", "inet", "tlyloss",   NULL};
        (void)run("nft", del);
    }
    l = agreed(7u, 0, 5000);
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
    l = agreed(7u, 0, 5000);
    assert_true(l >= 1 && l <= HOSTS);
    a = (int)l - 1; /* the leader and one more die */
    b = (a + 1) % HOSTS;
    c = (a + 2) % HOSTS;
    test_daemon_kill9(&net.h[a].d);
    test_daemon_kill9(&net.h[b].d);
    /* The survivor has no leader: no majority to elect one. */
    for (int waited = 0; leader_seen(&net.h[c]) != 0; waited += 50) {
        if (waited > 6000)
            fail_msg("the survivor still names a leader 6 s after two of three died");
        now_sleep_ms(50);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    start(&net.h[b]);
    l = agreed((1u << b) | (1u << c), 0, 2000);
    ms = ms_since(&t0);
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

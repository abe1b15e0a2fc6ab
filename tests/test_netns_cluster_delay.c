/*
 * Cluster mode with delay and loss between the hosts (scenario 6): three hosts, each in a
 * network namespace of its own (netns_util.h), and every TCP packet a host sends to another
 * goes through nfq_delay (tests/tools/nfq_delay.c) in the sender's namespace: an iptables
 * NFQUEUE rule on its OUTPUT to the other hosts hands the packet over, nfq_delay holds it
 * 20 ms and drops 5 % (seeded). A round trip between two hosts thus takes 40 ms, and a lost
 * segment costs TCP a retransmission. This kernel has no netem, hence the program.
 *
 * On a plan of 1,000 a minute, one link per host and one client per host sending about
 * 1,500 checks a minute in all, for three minutes:
 *   - every window admits at most 1,000 across the hosts. Each admission is put in the
 *     window the host decided it in, read off the answer (reset_ms: the decision's wall clock
 *     to its window's end), so an answer arriving just after a boundary is not misplaced;
 *     and the ledger's own figure for the window (`tally usage --window previous`, read just
 *     after it ended) is at most 1,000 and never below what the clients counted (a lease that
 *     ended unused counts in full there: the ledger is an upper bound of what was admitted);
 *   - a grant on a follower, at the 99th percentile, by two measures: tally_lease_rtt_seconds
 *     (each tallyd's /metrics, read inside its namespace; the upper bound of the bucket
 *     holding the percentile), and the wait from an ACQUIRE's first send to its answer, read
 *     from the debug log (lease_sent, lease_received): at most 200 ms, or the test fails.
 *     With about 100 grants per follower in a run the 99th percentile is the slowest one or
 *     two. A grant crosses four legs (the lease request, the log's append to the followers,
 *     their acks, the answer), each on two connections with every message on both, so a
 *     lost segment costs a retransmission timer only when both copies were lost: p99 130 to
 *     163 ms in the runs since (149 to 214 ms with the log's streams on one connection, when
 *     a loss on both commit legs at once, 1 % of grants, waited for a timer);
 *   - afterwards every member's copy of the ledger is the same (cluster_digest.h).
 * Printed: each window's totals, the percentiles per host (the metric, the log, and the
 * clients' own check latencies), TCP's retransmission counters per namespace, the term
 * changes, and nfq_delay's counts. The tallyds run with the product's election timeout
 * (1 s), `--wait-ms 1000` (the default 50 ms is less than a grant's two round trips here)
 * and `--log-level debug`; TALLY_KEEP_LOG=FILE appends their logs to FILE.
 *
 * Needs root, `ip netns`, iptables with the NFQUEUE target and nfq_delay (built when
 * libnetfilter_queue is there): without them the test is skipped with the reason on one line.
 * The impairment (rules, then delayers) is removed on every exit path, the failing ones
 * included (the teardown), and a delayer dies with this process (PR_SET_PDEATHSIG).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster_digest.h"
#include "grant_figures.h"
#include "netns_delay.h"
#include "netns_delay_client.h"
#include "netns_util.h"
#include "tally.h"
#include "test_support.h"

#define HOSTS        NETNS_HOSTS
#define CURL         "/usr/bin/curl"
#define DELAY_MS     "20"
#define LOSS_PCT     "5"
#define QUEUE_BASE   100 /* host i's queue: QUEUE_BASE + i (queues are per namespace anyway) */
#define RUN_MS       180000
#define CAP          1000
#define GRANT_P99_MS 200 /* past it the test fails */
#define HIST_BUCKETS GRANT_HIST_BUCKETS
#define LEDGER_AFTER 5000 /* ms after a boundary the window before it is read off the ledger */

static struct netns_net net;
static char token[HOSTS][96];
static char http_addr[HOSTS][32];

/* The impairment, global so that the teardown removes whatever a failed test left. */
static struct netns_delay imp;

/* ---- tallyd's figures ---------------------------------------------------------------------- */

/* How many start lines h's log holds, and the HTTP address of the last one
 * ("http":"127.0.0.1:PORT", the port bound) into out. */
static int
start_lines(const struct netns_host *h, char *out, size_t cap)
{
    size_t len = 0;
    char *log = test_read_file(h->d.log, &len);
    const char *start = NULL, *p = log, *at;
    int n = 0;

    out[0] = '\0';
    while (p != NULL && (p = strstr(p, "\"event\":\"start\"")) != NULL) {
        start = p++;
        n++;
    }
    if (start != NULL && (at = strstr(start, "\"http\":\"")) != NULL)
        snprintf(out, cap, "%.*s", (int)strcspn(at + 8, "\""), at + 8);
    free(log);
    return n;
}

/* Restarts host i's tallyd (the product's election timeout, a second's wait for a grant, the
 * lease messages logged) and reads its HTTP address from its new start line (the socket
 * answers a moment before that line is written). */
static void
restart(int i)
{
    struct netns_host *h = &net.h[i];
    int before = start_lines(h, http_addr[i], sizeof(http_addr[i]));

    assert_int_equal(test_daemon_stop(&h->d), 0);
    test_daemon_use_bin(h->wrapper); /* tallyd inside h's namespace */
    assert_int_equal(test_daemon_start(&h->d, h->data, "--election-timeout-ms", "1000", "--wait-ms",
                                       "1000", "--log-level", "debug", NULL),
                     0);
    test_daemon_use_bin(NULL);
    for (int waited = 0; start_lines(h, http_addr[i], sizeof(http_addr[i])) == before;
         waited += 20) {
        if (waited > 10000)
            fail_msg("no start line from %s's tallyd", h->ns);
        netns_sleep_ms(20);
    }
    assert_true(http_addr[i][0] != '\0');
}

static long
file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* The plan's figure for window w on the ledger as h's copy holds it (`tally usage`, which
 * first has h's children give their leases back): -1 when w is neither the current window
 * nor the previous one, -2 when `tally usage` failed (printed; this runs beside the clients'
 * threads, so it must not fail the test from here). */
static long long
ledger_window(struct netns_host *h, int64_t w)
{
    struct test_out *o = malloc(sizeof(*o));
    int64_t now_w = test_wall_ms() / PERIOD_MS;
    char want[48], *at;
    time_t start = (time_t)(w * (PERIOD_MS / 1000));
    struct tm tm;
    long long admitted = -1;

    assert_non_null(o);
    if (now_w != w && now_w != w + 1) {
        free(o);
        return -1;
    }
    gmtime_r(&start, &tm);
    strftime(want, sizeof(want), "\"start\":\"%Y-%m-%dT%H:%M:%SZ\"", &tm);
    if (netns_tally(h, o, "usage", "acme", "--window", now_w == w ? "current" : "previous",
                    "--json", NULL) != 0) {
        print_message("tally usage on %s: exit %d: %.200s\n", h->ns, o->code, o->err);
        free(o);
        return -2;
    }
    at = strstr(o->out, "\"scope\":\"plan\"");
    if (at != NULL && strstr(at, want) != NULL && (at = strstr(at, "\"admitted\":")) != NULL)
        admitted = atoll(at + strlen("\"admitted\":"));
    free(o);
    return admitted;
}

/* ---- the suite ------------------------------------------------------------------------------ */

static int
setup(void **state)
{
    struct test_out *o = malloc(sizeof(*o));

    (void)state;
    assert_non_null(o);
    memset(&imp, 0, sizeof(imp));
    assert_int_equal(netns_cluster_make(&net), 0);
    if (!net.up) {
        free(o);
        return 0;
    }
    /* The configuration through the log, from any host: a plan of 1,000 a minute, an endpoint
     * that answers 503 rather than admit uncounted, a tenant, one link per host. */
    assert_int_equal(netns_tally(&net.h[0], o, "plan", "set", "pro", "--limit", "1000/1m", NULL),
                     0);
    assert_int_equal(netns_tally(&net.h[1], o, "endpoint", "set", "api", "--limit", "100000/1m",
                                 "--on-unavailable", "closed", NULL),
                     0);
    assert_int_equal(netns_tally(&net.h[2], o, "tenant", "add", "acme", "--plan", "pro", NULL), 0);
    for (int i = 0; i < HOSTS; i++) {
        assert_int_equal(netns_tally(&net.h[i], o, "link", "create", "acme", NULL), 0);
        snprintf(token[i], sizeof(token[i]), "%.90s", o->out);
        token[i][strcspn(token[i], "\n")] = '\0';
    }
    free(o);
    /* Each tallyd again with the product's election timeout (a lost segment stalls TCP for
     * 200 ms or more, more than the fixture's 300 ms can absorb), a request waiting up to a
     * second for its grant (the default 50 ms is less than a round trip to the leader here),
     * and the lease messages in the log. */
    for (int i = 0; i < HOSTS; i++)
        restart(i);
    assert_true(netns_agreed(&net, (1u << HOSTS) - 1, 0, 10000) != 0);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    netns_delay_off(&imp, &net);
    netns_keep_logs(&net);
    netns_cluster_destroy(&net);
    return 0;
}

/* Every host's link admitted once: children made, lease links to the leader up. */
static void
warm_up(void)
{
    for (int i = 0; i < HOSTS; i++) {
        const char *tok = token[i];
        tally_client *c = NULL;
        struct tally_result r;

        assert_int_equal(tally_client_open(net.h[i].d.socket, 5000, &c), TALLY_OK);
        assert_int_equal(tally_check(c, tok, "api", 0, &r), TALLY_OK);
        tally_client_close(c);
        assert_int_equal(r.status, TALLY_ADMITTED);
    }
}

struct run {
    struct client c[HOSTS];
    int64_t w0, w_last;
    long long ledger[WINDOWS];
    unsigned long long leader0, term0, leader1, term1;
    int term_changes;
    int64_t ms;
};

/* While the clients run: the term every second, and each window's ledger figure once it
 * ended. */
static void
watch(struct run *run, int64_t end_mono)
{
    int64_t next_w = run->w0; /* the next window to read off the ledger */
    unsigned long long last = run->term0;

    while (test_now_ms() < end_mono) {
        unsigned long long l, t;

        netns_leader_term(&net.h[0], &l, &t);
        if (t > last) {
            run->term_changes += (int)(t - last);
            last = t;
        }
        if (test_wall_ms() >= (next_w + 1) * PERIOD_MS + LEDGER_AFTER &&
            next_w < run->w0 + WINDOWS) {
            unsigned long long at = l >= 1 && l <= HOSTS ? l : 1;
            run->ledger[next_w - run->w0] = ledger_window(&net.h[at - 1], next_w);
            next_w++;
        }
        netns_sleep_ms(1000);
    }
}

static void
run_clients(struct run *run)
{
    pthread_t th[HOSTS];
    int64_t start = test_now_ms(), end_mono = start + RUN_MS;

    run->w0 = test_wall_ms() / PERIOD_MS;
    for (int i = 0; i < HOSTS; i++) {
        run->c[i] =
            (struct client){.h = &net.h[i], .token = token[i], .w0 = run->w0, .end_mono = end_mono};
        assert_int_equal(pthread_create(&th[i], NULL, client_run, &run->c[i]), 0);
    }
    watch(run, end_mono);
    for (int i = 0; i < HOSTS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    run->ms = test_now_ms() - start;
    run->w_last = test_wall_ms() / PERIOD_MS;
}

/* Each window: what the clients were admitted (by the decision's window) and what the ledger
 * says; returns how many windows broke a rule (printed). */
static int
check_windows(struct run *run)
{
    int bad = 0;

    for (int64_t w = run->w0; w <= run->w_last && w < run->w0 + WINDOWS; w++) {
        int k = (int)(w - run->w0), sum = 0;
        time_t start = (time_t)(w * (PERIOD_MS / 1000));
        struct tm tm;
        char hm[16];

        if (run->ledger[k] < 0)
            run->ledger[k] = ledger_window(&net.h[run->leader1 - 1], w);
        for (int i = 0; i < HOSTS; i++)
            sum += run->c[i].admitted[k];
        gmtime_r(&start, &tm);
        strftime(hm, sizeof(hm), "%H:%M", &tm);
        print_message("window %s UTC: %d admitted (hosts %d + %d + %d), ledger %lld of %d\n", hm,
                      sum, run->c[0].admitted[k], run->c[1].admitted[k], run->c[2].admitted[k],
                      run->ledger[k], CAP);
        /* -1: the window could not be read any more (neither current nor previous). */
        if (sum > CAP || run->ledger[k] > CAP || run->ledger[k] == -2 ||
            (run->ledger[k] >= 0 && run->ledger[k] < sum)) {
            print_message("  window %s: over the cap, the ledger unread, or below what the "
                          "clients got\n",
                          hm);
            bad++;
        }
    }
    return bad;
}

/* What each host's tallyd and TCP counted over the run. */
struct figures {
    uint64_t rtt0[HOSTS][HIST_BUCKETS], rtt1[HOSTS][HIST_BUCKETS];
    long long tcp0[HOSTS][TCP_COUNTERS], tcp1[HOSTS][TCP_COUNTERS];
    long log_from[HOSTS];
};

static void
figures_before(struct figures *f)
{
    for (int i = 0; i < HOSTS; i++) {
        grant_rtt_hist(&net.h[i], http_addr[i], f->rtt0[i]);
        netns_tcp_counters(&net.h[i], f->tcp0[i]);
        f->log_from[i] = file_size(net.h[i].d.log);
    }
}

static void
figures_after(struct figures *f)
{
    for (int i = 0; i < HOSTS; i++) {
        grant_rtt_hist(&net.h[i], http_addr[i], f->rtt1[i]);
        netns_tcp_counters(&net.h[i], f->tcp1[i]);
    }
}

/* Host i's lines; returns what it broke: 1 its clients saw an error or an odd answer, 2 its
 * grants were slow (a follower only), 4 its delayer did not do its job. */
static int
report_host(const struct run *run, const struct figures *f, int i)
{
    const struct client *c = &run->c[i];
    const long long *t0 = f->tcp0[i], *t1 = f->tcp1[i];
    struct netns_delay_counts dc = {0};
    struct grants g;
    bool follower =
        (unsigned long long)i + 1 != run->leader0 && (unsigned long long)i + 1 != run->leader1;
    int64_t h50 = grant_hist_quantile_ms(f->rtt0[i], f->rtt1[i], 0.5);
    int64_t h99 = grant_hist_quantile_ms(f->rtt0[i], f->rtt1[i], 0.99);
    uint64_t trips = f->rtt1[i][HIST_BUCKETS - 1] - f->rtt0[i][HIST_BUCKETS - 1];
    int64_t g50, g99, gmax;
    int broke = 0;

    grants_from_log(net.h[i].d.log, f->log_from[i], &g);
    g50 = grant_quantile(g.ms, g.n, 0.5);
    g99 = grant_quantile(g.ms, g.n, 0.99);
    gmax = grant_quantile(g.ms, g.n, 1.0);
    free(g.ms);
    print_message("host %d (%s): %d admitted, %d refused, %d unavailable, %d other, %d errors, "
                  "%d degraded, %d misplaced; checks p50 %.1f ms p99 %.1f ms\n",
                  i + 1, follower ? "follower" : "leader", c->admitted_all, c->refused,
                  c->unavailable, c->other, c->errors, c->degraded, c->misplaced,
                  (double)grant_quantile(c->lat_us, c->n, 0.5) / 1000.0,
                  (double)grant_quantile(c->lat_us, c->n, 0.99) / 1000.0);
    print_message("  tally_lease_rtt_seconds: %" PRIu64 " round trips, p50 <= %" PRId64
                  " ms, p99 <= %" PRId64 " ms\n",
                  trips, h50, h99);
    print_message("  grants in the log (first send to answer): %zu, p50 %" PRId64
                  " ms, p99 %" PRId64 " ms, max %" PRId64
                  " ms; %d requests sent again before their answer\n",
                  g.n, g50, g99, gmax, g.retransmits);
    print_message("  tcp: %lld segments sent, %lld resent, %lld retransmission timeouts, %lld "
                  "loss probes, %lld SYNs resent, %lld connections opened\n",
                  t1[TCP_OUT] - t0[TCP_OUT], t1[TCP_RETRANS] - t0[TCP_RETRANS],
                  t1[TCP_RTO] - t0[TCP_RTO], t1[TCP_PROBES] - t0[TCP_PROBES],
                  t1[TCP_SYN_RETRANS] - t0[TCP_SYN_RETRANS], t1[TCP_OPENS] - t0[TCP_OPENS]);
    if (netns_delay_counts(&imp, i, &dc))
        print_message("  nfq_delay: %llu packets, %llu dropped (%.2f%%), overflow %llu, max queue "
                      "%llu, enobufs %llu\n",
                      dc.packets, dc.dropped,
                      dc.packets > 0 ? 100.0 * (double)dc.dropped / (double)dc.packets : 0.0,
                      dc.overflow, dc.max_queue, dc.enobufs);
    else
        print_message("  nfq_delay: no counts\n");
    if (c->errors + c->other + c->degraded + c->misplaced > 0)
        broke |= 1;
    /* Both measures, the metric's bucket and the log's grants. */
    if (follower)
        print_message(
            "  the target (follower grant p99 at most %d ms): %s\n", GRANT_P99_MS,
            trips > 0 && h99 <= GRANT_P99_MS && g.n > 0 && g99 <= GRANT_P99_MS ? "met" : "not met");
    if (follower && (trips == 0 || h99 > GRANT_P99_MS || g.n == 0 || g99 > GRANT_P99_MS))
        broke |= 2;
    /* The line did its job: thousands of packets, about 5 % of them lost, none for want of
     * room. */
    if (dc.packets < 1000 || dc.dropped * 100 < dc.packets * 3 ||
        dc.dropped * 100 > dc.packets * 7 || dc.overflow + dc.enobufs > 0)
        broke |= 4;
    return broke;
}

static void
test_netns_delay_and_loss_keep_the_cap(void **state)
{
    static struct run run;
    static struct figures f;
    int bad_windows, broke = 0;
    long agreed;
    const char *data[HOSTS];

    (void)state;
    NETNS_SKIP_UNLESS_UP(net);
#ifndef NFQ_DELAY_BIN
    print_message("skipped: nfq_delay not built (libnetfilter_queue missing at configure)\n");
    skip();
#else
    memset(&run, 0, sizeof(run));
    for (int k = 0; k < WINDOWS; k++)
        run.ledger[k] = -1;
    warm_up();
    figures_before(&f);
    netns_leader_term(&net.h[0], &run.leader0, &run.term0);
    netns_delay_on(&imp, &net, NFQ_DELAY_BIN, DELAY_MS, LOSS_PCT, QUEUE_BASE, test_seed());
    run_clients(&run);
    figures_after(&f);
    netns_delay_off(&imp, &net);
    run.leader1 = netns_agreed(&net, (1u << HOSTS) - 1, 0, 10000);
    assert_true(run.leader1 >= 1 && run.leader1 <= HOSTS);
    netns_leader_term(&net.h[0], &run.leader1, &run.term1);
    print_message("%" PRId64 " ms of %s ms delay and %s%% loss between hosts; leader %llu at "
                  "term %llu, then %llu at term %llu (%d term changes seen)\n",
                  run.ms, DELAY_MS, LOSS_PCT, run.leader0, run.term0, run.leader1, run.term1,
                  run.term_changes);
    bad_windows = check_windows(&run);
    for (int i = 0; i < HOSTS; i++) {
        broke |= report_host(&run, &f, i);
        free(run.c[i].lat_us);
    }
    for (int i = 0; i < HOSTS; i++)
        data[i] = net.h[i].data;
    agreed = cluster_digests_agree(data, HOSTS, 30000);
    print_message("every member's ledger copy equal %ld ms after the impairment ended\n", agreed);

    assert_int_equal(bad_windows, 0);
    assert_int_equal(broke & 1, 0); /* client errors or odd answers */
    assert_int_equal(broke & 4, 0); /* the delayer */
    assert_true(agreed >= 0);
    if (broke & 2)
        fail_msg("a follower's grant p99 is over %d ms (lines above)", GRANT_P99_MS);
#endif
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_netns_delay_and_loss_keep_the_cap, setup, teardown),
    };

    return cmocka_run_group_tests_name("netns_cluster_delay", tests, NULL, NULL);
}

/*
 * Hosts in network namespaces for the cluster suites (netns_util.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netns_util.h"

char netns_skip_reason[256];

int
netns_run(const char *what, char *const argv[])
{
    struct test_out o;
    int rc = test_run(argv, NULL, &o);

    if (rc != 0)
        snprintf(netns_skip_reason, sizeof(netns_skip_reason), "%s: exit %d: %.150s", what, rc,
                 o.err);
    return rc;
}

int
netns_ip(const char *a0, ...)
{
    char *argv[16];
    int n = 0;
    va_list ap;
    const char *a;

    argv[n++] = NETNS_IP;
    argv[n++] = (char *)a0;
    va_start(ap, a0);
    while ((a = va_arg(ap, const char *)) != NULL && n < 15)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    return netns_run("ip", argv);
}

void
netns_sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

double
netns_ms_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

int
netns_tally(struct netns_host *h, struct test_out *o, ...)
{
    char tally[256];
    char *argv[24];
    int n = 0;
    va_list ap;
    const char *a;

    test_bin("tally", tally, sizeof(tally));
    argv[n++] = NETNS_IP;
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

void
netns_wrap(struct netns_host *h, const char *env)
{
    char tallyd[256];
    FILE *w;

    test_bin("tallyd", tallyd, sizeof(tallyd));
    w = fopen(h->wrapper, "w");
    assert_non_null(w);
    fprintf(w, "#!/bin/sh\nexec %s netns exec %s %s%s%s%s \"$@\"\n", NETNS_IP, h->ns,
            env != NULL ? "env " : "", env != NULL ? env : "", env != NULL ? " " : "", tallyd);
    fclose(w);
    chmod(h->wrapper, 0700);
}

void
netns_cluster_destroy(struct netns_net *net)
{
    for (int i = 0; i < NETNS_HOSTS; i++) {
        if (net->h[i].d.pid > 0)
            test_daemon_kill9(&net->h[i].d);
        if (net->h[i].ns[0] != '\0')
            (void)netns_ip("netns", "delete", net->h[i].ns, NULL);
    }
    if (net->sw[0] != '\0')
        (void)netns_ip("netns", "delete", net->sw, NULL);
    test_daemon_use_bin(NULL);
    net->up = false;
    if (net->dir[0] != '\0')
        test_rmtree(net->dir);
    memset(net, 0, sizeof(*net));
}

/* The switch namespace with its bridge, and each host's namespace wired to it. */
static int
net_up(struct netns_net *net)
{
    char veth[32], peer[32], cidr[40];
    int pid = (int)getpid();

    net->subnet = pid % 250;
    snprintf(net->sw, sizeof(net->sw), "tly-sw-%d", pid);
    if (netns_ip("netns", "add", net->sw, NULL) != 0)
        return -1;
    if (netns_ip("-n", net->sw, "link", "add", "br0", "type", "bridge", NULL) != 0 ||
        netns_ip("-n", net->sw, "link", "set", "br0", "up", NULL) != 0)
        return -1;
    for (int i = 0; i < NETNS_HOSTS; i++) {
        struct netns_host *h = &net->h[i];

        snprintf(h->ns, sizeof(h->ns), "tly-h%d-%d", i + 1, pid);
        snprintf(h->addr, sizeof(h->addr), "10.213.%d.%d:7400", net->subnet, i + 1);
        snprintf(cidr, sizeof(cidr), "10.213.%d.%d/24", net->subnet, i + 1);
        snprintf(veth, sizeof(veth), "v%d-%d", i + 1, pid % 100000);
        snprintf(peer, sizeof(peer), "p%d-%d", i + 1, pid % 100000);
        if (netns_ip("netns", "add", h->ns, NULL) != 0 ||
            netns_ip("-n", h->ns, "link", "set", "lo", "up", NULL) != 0 ||
            netns_ip("link", "add", veth, "netns", h->ns, "type", "veth", "peer", "name", peer,
                     "netns", net->sw, NULL) != 0 ||
            netns_ip("-n", net->sw, "link", "set", peer, "master", "br0", NULL) != 0 ||
            netns_ip("-n", net->sw, "link", "set", peer, "up", NULL) != 0 ||
            netns_ip("-n", h->ns, "link", "set", veth, "name", "eth0", NULL) != 0 ||
            netns_ip("-n", h->ns, "addr", "add", cidr, "dev", "eth0", NULL) != 0 ||
            netns_ip("-n", h->ns, "link", "set", "eth0", "up", NULL) != 0)
            return -1;
        snprintf(h->data, sizeof(h->data), "%s/h%d", net->dir, i + 1);
        snprintf(h->wrapper, sizeof(h->wrapper), "%s/tallyd-h%d.sh", net->dir, i + 1);
        netns_wrap(h, NULL);
    }
    net->up = true;
    return 0;
}

void
netns_start(struct netns_host *h)
{
    test_daemon_use_bin(h->wrapper);
    assert_int_equal(test_daemon_start(&h->d, h->data, "--election-timeout-ms", "300", NULL), 0);
    test_daemon_use_bin(NULL);
}

void
netns_start_args(struct netns_host *h, ...)
{
    const char *a[8] = {NULL};
    va_list ap;
    int n = 0;

    va_start(ap, h);
    while (n < 8 && (a[n] = va_arg(ap, const char *)) != NULL)
        n++;
    va_end(ap);
    test_daemon_use_bin(h->wrapper);
    /* test_daemon_start stops at the first NULL: the unused ones end the list. */
    assert_int_equal(test_daemon_start(&h->d, h->data, "--election-timeout-ms", "300", a[0], a[1],
                                       a[2], a[3], a[4], a[5], a[6], a[7], NULL),
                     0);
    test_daemon_use_bin(NULL);
}

unsigned long long
netns_leader_seen(struct netns_host *h)
{
    unsigned long long leader, term;

    netns_leader_term(h, &leader, &term);
    return leader;
}

void
netns_leader_term(struct netns_host *h, unsigned long long *leader, unsigned long long *term)
{
    struct test_out o;
    unsigned long long self = 0;

    *leader = *term = 0;
    if (netns_tally(h, &o, "cluster", "status", NULL) == 0 &&
        sscanf(o.out, "member %llu (this host)  leader %llu  term %llu", &self, leader, term) < 2)
        *leader = *term = 0;
}

unsigned long long
netns_agreed(struct netns_net *net, unsigned mask, unsigned long long not, long timeout_ms)
{
    for (long waited = 0; waited <= timeout_ms; waited += 50) {
        unsigned long long l = 0;
        bool ok = true;

        for (int i = 0; i < NETNS_HOSTS && ok; i++) {
            unsigned long long x;
            if (!(mask & (1u << i)))
                continue;
            x = netns_leader_seen(&net->h[i]);
            ok = x != 0 && x != not &&(l == 0 || x == l);
            l = x;
        }
        if (ok && l != 0)
            return l;
        netns_sleep_ms(50);
    }
    return 0;
}

static void
join(struct netns_host *inviter, struct netns_host *h)
{
    struct test_out o;
    char code[256];

    assert_int_equal(netns_tally(inviter, &o, "cluster", "invite", NULL), 0);
    snprintf(code, sizeof(code), "%.200s", o.out);
    code[strcspn(code, "\n")] = '\0';
    if (netns_tally(h, &o, "cluster", "join", code, "--listen", h->addr, NULL) != 0)
        fail_msg("join of %s failed: %s", h->addr, o.err);
}

int
netns_cluster_make(struct netns_net *net)
{
    struct test_out o;

    /* A setup that failed half way left its namespaces and tallyds (cmocka runs no teardown
     * after a failed setup): they go first, or this one would fail on the same names. */
    if (net->sw[0] != '\0')
        netns_cluster_destroy(net);
    memset(net, 0, sizeof(*net));
    netns_skip_reason[0] = '\0';
    if (geteuid() != 0) {
        snprintf(netns_skip_reason, sizeof(netns_skip_reason), "not root");
        return 0;
    }
    if (access(NETNS_IP, X_OK) != 0) {
        snprintf(netns_skip_reason, sizeof(netns_skip_reason), "%s missing (iproute2)", NETNS_IP);
        return 0;
    }
    test_tmpdir(net->dir, sizeof(net->dir));
    if (net_up(net) != 0) {
        char why[256];

        memcpy(why, netns_skip_reason, sizeof(why));
        netns_cluster_destroy(net);
        memcpy(netns_skip_reason, why, sizeof(why));
        return 0;
    }
    netns_skip_reason[0] = '\0';
    assert_int_equal(netns_tally(&net->h[0], &o, "init", NULL), 0);
    assert_int_equal(
        netns_tally(&net->h[0], &o, "cluster", "init", "--listen", net->h[0].addr, NULL), 0);
    netns_start(&net->h[0]);
    assert_int_equal(netns_agreed(net, 1u, 0, 5000), 1);
    for (int i = 1; i < NETNS_HOSTS; i++) {
        join(&net->h[0], &net->h[i]);
        netns_start(&net->h[i]);
    }
    assert_int_equal(netns_agreed(net, (1u << NETNS_HOSTS) - 1, 0, 5000), 1);
    return 0;
}

int
netns_nft_rule(struct netns_host *h, const char *rule)
{
    char *add_table[] = {NETNS_IP, "netns", "exec", h->ns,    NETNS_NFT,
                         "add",    "table", "inet", "tlynet", NULL};
    char *add_chain[] = {NETNS_IP,
                         "netns",
                         "exec",
                         h->ns,
                         NETNS_NFT,
                         "add",
                         "chain",
                         "inet",
                         "tlynet",
                         "out",
                         "{ type filter hook output priority 0; }",
                         NULL};
    char *add_rule[] = {NETNS_IP, "netns", "exec",   h->ns, NETNS_NFT,    "add",
                        "rule",   "inet",  "tlynet", "out", (char *)rule, NULL};

    if (access(NETNS_NFT, X_OK) != 0) {
        snprintf(netns_skip_reason, sizeof(netns_skip_reason), "%s missing (nftables)", NETNS_NFT);
        return -1;
    }
    if (netns_run("nft", add_table) != 0 || netns_run("nft", add_chain) != 0 ||
        netns_run("nft", add_rule) != 0)
        return -1;
    return 0;
}

void
netns_nft_clear(struct netns_host *h)
{
    char *del[] = {NETNS_IP, "netns", "exec", h->ns,    NETNS_NFT,
                   "delete", "table", "inet", "tlynet", NULL};

    (void)netns_run("nft", del);
}

void
netns_keep_logs(const struct netns_net *net)
{
    const char *to = getenv("TALLY_KEEP_LOG");
    FILE *f;

    if (to == NULL || !net->up || (f = fopen(to, "a")) == NULL)
        return;
    for (int i = 0; i < NETNS_HOSTS; i++) {
        size_t len = 0;
        char *log = test_read_file(net->h[i].d.log, &len);

        fprintf(f, "==== host %d (%s) ====\n", i + 1, net->h[i].addr);
        if (log != NULL)
            fwrite(log, 1, len, f);
        free(log);
    }
    fclose(f);
}

/* Pids of the live processes of h's host: every command line that holds `--data DATA ` (its
 * tallyd, the fork server it started and the supervisors forked from it, spare ones too),
 * zombies left out. */
int
netns_host_pids(const struct netns_host *h, pid_t *pids, int max)
{
    char want[300], line[4096], path[64], stat[256];
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;

    snprintf(want, sizeof(want), "--data %s ", h->data);
    /* One stream, read by this thread only. */
    /* cppcheck-suppress readdirCalled */
    while (d != NULL && (e = readdir(d)) != NULL && n < max) {
        pid_t pid = (pid_t)atoi(e->d_name);
        size_t len;
        FILE *f;

        if (pid <= 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
        if ((f = fopen(path, "rb")) == NULL)
            continue;
        len = fread(line, 1, sizeof(line) - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            line[i] = line[i] == '\0' ? ' ' : line[i];
        line[len] = '\0';
        if (strstr(line, want) == NULL)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        if (fgets(stat, sizeof(stat), f) != NULL) {
            const char *rp = strrchr(stat, ')');
            if (rp == NULL || rp[1] == '\0' || rp[2] != 'Z')
                pids[n++] = pid;
        }
        fclose(f);
    }
    if (d != NULL)
        closedir(d);
    return n;
}

int
netns_kill9_hosts(struct netns_host *const *hs, int n)
{
    pid_t pids[NETNS_HOSTS][32];
    int counts[NETNS_HOSTS], killed = 0, left;

    assert_true(n <= NETNS_HOSTS);
    for (int k = 0; k < n; k++)
        counts[k] = netns_host_pids(hs[k], pids[k], 32);
    for (int k = 0; k < n; k++)
        (void)kill(hs[k]->d.pid, SIGKILL);
    for (int k = 0; k < n; k++)
        for (int i = 0; i < counts[k]; i++)
            (void)kill(pids[k][i], SIGKILL);
    for (int k = 0; k < n; k++) {
        test_daemon_kill9(&hs[k]->d); /* reaps it */
        killed += counts[k];
    }
    for (int waited = 0;; waited += 20) {
        left = 0;
        for (int k = 0; k < n; k++)
            left += netns_host_pids(hs[k], pids[k], 32);
        if (left == 0)
            break;
        if (waited > 2000)
            fail_msg("%d processes of %d hosts still live 2 s after kill -9", left, n);
        netns_sleep_ms(20);
    }
    return killed;
}

/*
 * Delay and loss between the hosts of a netns_util.h network, and TCP's counters per namespace
 * (netns_delay.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netns_delay.h"

/* `iptables OP OUTPUT ...` in host i's namespace: its TCP toward the other hosts into its
 * queue. No --queue-bypass: without a delayer bound, nothing passes (rather than passing
 * undelayed). */
static int
rule(const struct netns_delay *d, const struct netns_net *net, int i, const char *op)
{
    char dst[32], q[16], ns[32];
    char *argv[] = {NETNS_IP,  "netns",       "exec", ns,    NETNS_IPTABLES, (char *)op, "OUTPUT",
                    "-o",      "eth0",        "-p",   "tcp", "-d",           dst,        "-j",
                    "NFQUEUE", "--queue-num", q,      NULL};

    snprintf(ns, sizeof(ns), "%s", net->h[i].ns);
    snprintf(dst, sizeof(dst), "10.213.%d.0/24", net->subnet);
    snprintf(q, sizeof(q), "%d", d->queue_base + i);
    return netns_run("iptables", argv);
}

/* Waits until nfq_delay says its queue is bound (a line on stderr); -1 when it exited. */
static int
delayer_bound(struct netns_delay *imp, int i)
{
    for (int waited = 0; waited < 5000; waited += 20) {
        size_t len = 0;
        char *err = test_read_file(imp->err[i], &len);
        bool bound = err != NULL && strstr(err, "bound") != NULL;
        int status;

        free(err);
        if (bound)
            return 0;
        if (waitpid(imp->pid[i], &status, WNOHANG) == imp->pid[i]) {
            imp->pid[i] = 0;
            return -1;
        }
        netns_sleep_ms(20);
    }
    return -1;
}

static void
delayer_start(struct netns_delay *imp, const struct netns_net *net, int i, const char *bin,
              const char *delay_ms, const char *loss_pct, uint64_t seed)
{
    char q[16], s[32], ns[32];
    char *argv[] = {
        NETNS_IP, "netns",      "exec",           ns,           (char *)bin,      "--queue",
        q,        "--delay-ms", (char *)delay_ms, "--loss-pct", (char *)loss_pct, "--seed",
        s,        NULL};

    snprintf(ns, sizeof(ns), "%s", net->h[i].ns);
    snprintf(q, sizeof(q), "%d", imp->queue_base + i);
    snprintf(s, sizeof(s), "%" PRIu64, seed + (uint64_t)i);
    snprintf(imp->out[i], sizeof(imp->out[i]), "%s/nfq%d.out", net->dir, i + 1);
    snprintf(imp->err[i], sizeof(imp->err[i]), "%s/nfq%d.err", net->dir, i + 1);
    imp->pid[i] = fork();
    assert_true(imp->pid[i] >= 0);
    if (imp->pid[i] == 0) {
        int out = open(imp->out[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(imp->err[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);

        /* Dies with the suite, whatever kills it: held packets must not outlive the test. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(out, 1);
        dup2(err, 2);
        execv(argv[0], argv);
        _exit(127);
    }
}

void
netns_delay_off(struct netns_delay *imp, const struct netns_net *net)
{
    for (int i = 0; i < NETNS_HOSTS; i++) {
        if (imp->rule[i])
            (void)rule(imp, net, i, "-D");
        imp->rule[i] = false;
    }
    for (int i = 0; i < NETNS_HOSTS; i++) {
        int status;

        if (imp->pid[i] <= 0)
            continue;
        kill(imp->pid[i], SIGTERM);
        for (int waited = 0; waitpid(imp->pid[i], &status, WNOHANG) == 0; waited += 10) {
            if (waited == 3000)
                kill(imp->pid[i], SIGKILL);
            netns_sleep_ms(10);
        }
        imp->pid[i] = 0;
    }
}

void
netns_delay_on(struct netns_delay *imp, const struct netns_net *net, const char *bin,
               const char *delay_ms, const char *loss_pct, int queue_base, uint64_t seed)
{
    char why[300];

    imp->queue_base = queue_base;
    if (access(NETNS_IPTABLES, X_OK) != 0) {
        print_message("skipped: %s missing (iptables)\n", NETNS_IPTABLES);
        skip();
    }
    for (int i = 0; i < NETNS_HOSTS; i++) {
        delayer_start(imp, net, i, bin, delay_ms, loss_pct, seed);
        if (delayer_bound(imp, i) != 0) {
            size_t len = 0;
            char *err = test_read_file(imp->err[i], &len);

            snprintf(why, sizeof(why), "%.250s", err != NULL ? err : "no output");
            free(err);
            why[strcspn(why, "\n")] = '\0';
            netns_delay_off(imp, net);
            print_message("skipped: nfq_delay cannot run here: %s\n", why);
            skip();
        }
    }
    for (int i = 0; i < NETNS_HOSTS; i++) {
        if (rule(imp, net, i, "-A") != 0) {
            snprintf(why, sizeof(why), "%s", netns_skip_reason);
            netns_delay_off(imp, net);
            print_message("skipped: the NFQUEUE rule cannot be made here: %s\n", why);
            skip();
        }
        imp->rule[i] = true;
    }
}

bool
netns_delay_counts(const struct netns_delay *imp, int i, struct netns_delay_counts *c)
{
    size_t len = 0;
    char *out = test_read_file(imp->out[i], &len);
    bool ok = out != NULL &&
              sscanf(out,
                     "packets %llu dropped %llu overflow %llu max_queue %llu "
                     "enobufs %llu",
                     &c->packets, &c->dropped, &c->overflow, &c->max_queue, &c->enobufs) == 5;

    free(out);
    return ok;
}

static const char *const tcp_names[TCP_COUNTERS][2] = {
    {"Tcp", "OutSegs"},          {"Tcp", "RetransSegs"},      {"TcpExt", "TCPTimeouts"},
    {"TcpExt", "TCPLossProbes"}, {"TcpExt", "TCPSynRetrans"}, {"Tcp", "ActiveOpens"},
};

/* The value under `name` in the "PREFIX: names..." line followed by "PREFIX: values...". */
static long long
proc_net_value(const char *text, const char *prefix, const char *name)
{
    char head[24];
    size_t hl = (size_t)snprintf(head, sizeof(head), "\n%s: ", prefix);
    const char *names = strstr(text, head), *values;
    int col = 0;

    if (names == NULL)
        return -1;
    names += hl;
    values = strstr(names, head);
    if (values == NULL)
        return -1;
    values += hl;
    for (const char *p = names; *p != '\n' && *p != '\0'; col++) {
        size_t n = strcspn(p, " \n");

        if (n == strlen(name) && strncmp(p, name, n) == 0) {
            const char *v = values;
            for (int k = 0; k < col && v != NULL; k++) {
                v = strchr(v, ' ');
                v = v != NULL ? v + 1 : NULL;
            }
            return v != NULL ? atoll(v) : -1;
        }
        p += n;
        if (*p == ' ')
            p++;
    }
    return -1;
}

void
netns_tcp_counters(const struct netns_host *h, long long out[TCP_COUNTERS])
{
    static struct test_out o;
    char ns[32];
    char *argv[] = {
        NETNS_IP, "netns", "exec", ns, "/bin/cat", "/proc/net/snmp", "/proc/net/netstat", NULL};
    /* proc_net_value() looks for a prefix at a line's start: one before the first line. */
    static char text[TEST_OUT_MAX + 1];

    snprintf(ns, sizeof(ns), "%s", h->ns);
    for (int k = 0; k < TCP_COUNTERS; k++)
        out[k] = -1;
    if (test_run(argv, NULL, &o) != 0)
        return;
    snprintf(text, sizeof(text), "\n%s", o.out);
    for (int k = 0; k < TCP_COUNTERS; k++)
        out[k] = proc_net_value(text, tcp_names[k][0], tcp_names[k][1]);
}

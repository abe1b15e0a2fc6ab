/*
 * Hosts in network namespaces for the cluster suites: each host is a namespace of its own
 * (its data dir, its tallyd, one veth `eth0` into a bridge that lives in a fourth
 * namespace) and the hosts talk over their cluster ports only. netns_cluster_make() builds
 * the network and the cluster (the first host made with `tally cluster init`, the others
 * joined with codes from `tally cluster invite`, each from inside its namespace); a suite
 * skips, with the reason on one line, where namespaces cannot be made (not root, no
 * iproute2).
 */
#ifndef NETNS_UTIL_H
#define NETNS_UTIL_H

#include <stdbool.h>
#include <time.h>

#include "test_daemon.h"
#include "test_support.h"

#define NETNS_HOSTS 3
#define NETNS_IP    "/usr/sbin/ip"
#define NETNS_NFT   "/usr/sbin/nft"

struct netns_host {
    char ns[32];
    char addr[32]; /* its cluster port */
    char data[200];
    char wrapper[220]; /* runs tallyd inside ns */
    struct test_daemon d;
};

struct netns_net {
    char dir[128];
    char sw[32]; /* the namespace of the bridge */
    int subnet;  /* 10.213.SUBNET.0/24 */
    struct netns_host h[NETNS_HOSTS];
    bool up;
};

/* Why the network could not be made (when net.up is false after netns_cluster_make). */
extern char netns_skip_reason[256];

/** Runs argv; on failure netns_skip_reason says what (named `what`) printed. */
int netns_run(const char *what, char *const argv[]);
/** `ip ARGS...` (NULL-terminated). */
int netns_ip(const char *a0, ...);
void netns_sleep_ms(long ms);
double netns_ms_since(const struct timespec *t0);
/** `tally --data DATA ARGS...` (NULL-terminated) run inside h's namespace. */
int netns_tally(struct netns_host *h, struct test_out *o, ...);
/** The network and a cluster of NETNS_HOSTS tallyds (election timeout 300 ms) on it. Returns
 *  0 with net->up, 0 without it (netns_skip_reason says why), or fails the test. */
int netns_cluster_make(struct netns_net *net);
/** Kills every tallyd, deletes the namespaces and the data dirs. */
void netns_cluster_destroy(struct netns_net *net);
/** Starts h's tallyd (after a kill: restarts it). */
void netns_start(struct netns_host *h);
/** netns_start() with more arguments for tallyd (NULL-terminated; past 8 ignored), e.g.
 *  "--snapshot-every", "32". */
void netns_start_args(struct netns_host *h, ...);
/** h's tallyd from now on runs under `env ENV...` (NULL: plainly), e.g. libfaketime's. */
void netns_wrap(struct netns_host *h, const char *env);
/** The leader h names (0: none known, or tallyd did not answer). */
unsigned long long netns_leader_seen(struct netns_host *h);
/** The leader and term h reports (0s when it does not answer). */
void netns_leader_term(struct netns_host *h, unsigned long long *leader, unsigned long long *term);
/** Waits until every host in mask names the same leader, other than `not` (0: any); returns
 *  it, or 0 after timeout_ms. */
unsigned long long netns_agreed(struct netns_net *net, unsigned mask, unsigned long long not,
                                long timeout_ms);
/** `nft add rule inet tlynet out RULE` in h's namespace (the table and its output chain made
 *  on first use). Returns 0 or -1 (netns_skip_reason says why). */
int netns_nft_rule(struct netns_host *h, const char *rule);
/** Deletes h's table of rules. */
void netns_nft_clear(struct netns_host *h);
/** TALLY_KEEP_LOG=FILE (a test's own switch): every host's tallyd log appended to FILE. */
void netns_keep_logs(const struct netns_net *net);

/** Pids of the live processes of h's host: every command line that holds `--data DATA ` (its
 *  tallyd, the fork server it started and the supervisors forked from it, spare ones too),
 *  zombies left out; at most max. */
int netns_host_pids(const struct netns_host *h, pid_t *pids, int max);
/** kill -9 of every process of the n hosts hs at once: their tallyds, then what those ran (the
 *  fork servers, the supervisors, spare ones too); fails the test if any is left 2 s later.
 *  Returns the number of processes killed. */
int netns_kill9_hosts(struct netns_host *const *hs, int n);

#define NETNS_SKIP_UNLESS_UP(net)                                                                  \
    do {                                                                                           \
        if (!(net).up) {                                                                           \
            print_message("skipped: cannot build network namespaces here: %s\n",                   \
                          netns_skip_reason);                                                      \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#endif

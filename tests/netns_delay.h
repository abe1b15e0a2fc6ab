/*
 * Delay and loss between the hosts of a netns_util.h network, in user space (this kernel has
 * no netem, and nft no queue statement): in each host's namespace an iptables NFQUEUE rule on
 * its OUTPUT hands every TCP packet toward the other hosts to nfq_delay (tools/nfq_delay.c),
 * which holds it and drops some (seeded). And TCP's own counters per namespace, to see what a
 * loss cost below the cluster's channel.
 */
#ifndef NETNS_DELAY_H
#define NETNS_DELAY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "netns_util.h"

#define NETNS_IPTABLES "/usr/sbin/iptables"

/* The delayers and rules in place (keep it where a teardown reaches it: it removes what a
 * failed test left). */
struct netns_delay {
    pid_t pid[NETNS_HOSTS];
    bool rule[NETNS_HOSTS];
    char out[NETNS_HOSTS][200];
    char err[NETNS_HOSTS][200];
    int queue_base;
};

/* nfq_delay's closing line: "packets N dropped M overflow O max_queue Q enobufs E". */
struct netns_delay_counts {
    unsigned long long packets, dropped, overflow, max_queue, enobufs;
};

/** Host i's delayer (`bin`, on queue queue_base + i, seeded seed + i) bound, then its rule,
 *  for every host; skips the running test (with the reason) where NFQUEUE cannot work. */
void netns_delay_on(struct netns_delay *d, const struct netns_net *net, const char *bin,
                    const char *delay_ms, const char *loss_pct, int queue_base, uint64_t seed);
/** Rules out first (nothing new is queued), then each delayer, which accepts what it holds as
 *  it stops. Safe to call twice, and after a partial start. */
void netns_delay_off(struct netns_delay *d, const struct netns_net *net);
/** Host i's delayer's counts, once it stopped; false when it printed none. */
bool netns_delay_counts(const struct netns_delay *d, int i, struct netns_delay_counts *c);

enum { TCP_OUT, TCP_RETRANS, TCP_RTO, TCP_PROBES, TCP_SYN_RETRANS, TCP_OPENS, TCP_COUNTERS };
/** TCP's counters in h's namespace (/proc/net/snmp and /proc/net/netstat are per namespace);
 *  -1 for one that cannot be read. */
void netns_tcp_counters(const struct netns_host *h, long long out[TCP_COUNTERS]);

#endif

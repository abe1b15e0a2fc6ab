/*
 * nfq_delay: a delay and loss line for the cluster suites, in user space. This kernel has
 * no netem and nft has no queue statement, but iptables' NFQUEUE target hands packets to
 * a process and waits for its verdict. So an iptables rule sends a namespace's packets
 * toward the other hosts to queue N, and this program, run in that namespace:
 *
 *     nfq_delay --queue N --delay-ms D --loss-pct P [--seed S]
 *
 * drops P % of them (a seeded draw per packet, so a run replays) at once and holds every
 * other one D ms before accepting it. The delay is the same for every packet, so the
 * packets held are due in the order they came: a FIFO ring is the whole schedule, and the
 * verdicts leave in arrival order (order within a flow is kept, as on a wire).
 *
 * On SIGTERM or SIGINT it accepts what it still holds, unbinds, and prints on stdout
 * `packets N dropped M overflow O max_queue Q`. A line on stderr says when the queue is
 * bound: a rule added before that finds nobody listening and the kernel drops the packet
 * (the rules are made without --queue-bypass on purpose: without this program nothing
 * passes, rather than passing undelayed).
 *
 * Exit codes: 0 after a signal, 1 when the queue cannot be bound or the netlink socket
 * fails, 64 on bad arguments.
 */
#define _DEFAULT_SOURCE /* the u_int*_t types of libnfnetlink's headers */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

/* Packets held at once: 20 ms of the suites' traffic is a few hundred; the kernel's queue
 * is given the same length, so it drops (and counts) rather than queueing what we could not
 * hold. */
#define RING_CAP 65536u
/* The longest sleep between two looks at the stop flag (a signal landing between the look
 * and poll() waits no longer than this). */
#define IDLE_MS 100
/* The netlink socket's receive buffer: a burst must not overflow it (ENOBUFS loses the
 * packets' messages, and the kernel would hold those packets until the queue is unbound). */
#define RCVBUF_BYTES (8u << 20)

struct opts {
    unsigned queue;
    long delay_ms;
    double loss_pct;
    uint64_t seed;
};

struct held {
    uint32_t id;    /* the kernel's packet id, for the verdict */
    int64_t due_ns; /* monotonic */
};

struct line {
    struct nfq_handle *h;
    struct nfq_q_handle *qh;
    struct held *ring;
    size_t head, len;
    int64_t delay_ns;
    uint64_t drop_below; /* a 64-bit draw under this is a loss */
    uint64_t rng;
    uint64_t packets, dropped, overflow, enobufs;
    size_t max_len;
};

static volatile sig_atomic_t stop_asked;

static void
on_signal(int sig)
{
    (void)sig;
    stop_asked = 1;
}

static int64_t
mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* splitmix64: the suites' generator too (test_rand), so a seed means the same thing. */
static uint64_t
next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int
usage(const char *why)
{
    fprintf(stderr,
            "nfq_delay: %s\nusage: nfq_delay --queue N --delay-ms D --loss-pct P [--seed S]\n"
            "  N 0..65535, D 0..10000 ms, P 0..100 (%% of packets dropped)\n",
            why);
    return 64;
}

/* A whole decimal number in lo..hi, or false. */
static bool
parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int
parse_args(int argc, char **argv, struct opts *o)
{
    bool have_q = false, have_d = false, have_p = false;
    long v;

    o->seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;

        if (val == NULL)
            return usage("an option without its value");
        if (strcmp(k, "--queue") == 0 && parse_long(val, 0, 65535, &v)) {
            o->queue = (unsigned)v;
            have_q = true;
        } else if (strcmp(k, "--delay-ms") == 0 && parse_long(val, 0, 10000, &v)) {
            o->delay_ms = v;
            have_d = true;
        } else if (strcmp(k, "--loss-pct") == 0) {
            o->loss_pct = strtod(val, &end);
            if (end == val || *end != '\0' || !(o->loss_pct >= 0.0 && o->loss_pct <= 100.0))
                return usage("--loss-pct takes a number from 0 to 100");
            have_p = true;
        } else if (strcmp(k, "--seed") == 0) {
            errno = 0;
            o->seed = strtoull(val, &end, 10);
            if (errno != 0 || end == val || *end != '\0')
                return usage("--seed takes a whole number");
        } else {
            return usage("unknown option or value out of range");
        }
    }
    if (!have_q || !have_d || !have_p)
        return usage("--queue, --delay-ms and --loss-pct are required");
    return 0;
}

static void
verdict(struct line *l, uint32_t id, uint32_t v)
{
    /* A failed verdict leaves the packet in the kernel's queue until the unbind drops it:
     * a loss the counts do not show, so say so. */
    if (nfq_set_verdict(l->qh, id, v, 0, NULL) < 0)
        fprintf(stderr, "nfq_delay: verdict on packet %" PRIu32 ": %s\n", id, strerror(errno));
}

/* Each packet the kernel queues: lost now, or held until its time. */
static int
on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
    struct line *l = data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    uint32_t id;

    (void)qh;
    (void)msg;
    if (ph == NULL)
        return 0;
    id = ntohl(ph->packet_id);
    l->packets++;
    if (next_rand(&l->rng) < l->drop_below) {
        l->dropped++;
        verdict(l, id, NF_DROP);
        return 0;
    }
    if (l->len == RING_CAP) {
        /* Accepting it early would make it overtake the ones held: drop it, counted. */
        l->overflow++;
        verdict(l, id, NF_DROP);
        return 0;
    }
    l->ring[(l->head + l->len) % RING_CAP] = (struct held){id, mono_ns() + l->delay_ns};
    l->len++;
    if (l->len > l->max_len)
        l->max_len = l->len;
    return 0;
}

/* Accepts every packet due by `now` (all of them with now = INT64_MAX), oldest first. */
static void
release_due(struct line *l, int64_t now)
{
    while (l->len > 0 && l->ring[l->head].due_ns <= now) {
        verdict(l, l->ring[l->head].id, NF_ACCEPT);
        l->head = (l->head + 1) % RING_CAP;
        l->len--;
    }
}

/* How long poll() may sleep: until the oldest held packet is due (rounded up, so it is
 * never released early), at most IDLE_MS. */
static int
sleep_ms(const struct line *l, int64_t now)
{
    int64_t ns;

    if (l->len == 0)
        return IDLE_MS;
    ns = l->ring[l->head].due_ns - now;
    if (ns <= 0)
        return 0;
    return ns >= (int64_t)IDLE_MS * 1000000 ? IDLE_MS : (int)((ns + 999999) / 1000000);
}

/* Reads every message waiting on the socket and hands each to on_packet(). Returns -1 on a
 * socket error other than "nothing more" or a lost burst. */
static int
drain(struct line *l, int fd)
{
    _Alignas(8) char buf[65536]; /* netlink headers are read in place */

    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (n > 0) {
            nfq_handle_packet(l->h, buf, (int)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (n < 0 && errno == ENOBUFS) {
            /* Messages lost to a full buffer: their packets stay queued in the kernel. */
            l->enobufs++;
            continue;
        }
        fprintf(stderr, "nfq_delay: reading the queue: %s\n", n == 0 ? "closed" : strerror(errno));
        return -1;
    }
}

/* Opens the netlink socket and binds the queue; prints why not and returns -1. */
static int
bind_queue(struct line *l, const struct opts *o)
{
    l->h = nfq_open();
    if (l->h == NULL) {
        fprintf(stderr,
                "nfq_delay: cannot open a netfilter queue socket: %s (root, or "
                "CAP_NET_ADMIN, and nfnetlink_queue are needed)\n",
                strerror(errno));
        return -1;
    }
    /* Kernels before 3.8 need the family bound first; later ones ignore these calls. */
    (void)nfq_unbind_pf(l->h, AF_INET);
    (void)nfq_bind_pf(l->h, AF_INET);
    l->qh = nfq_create_queue(l->h, (uint16_t)o->queue, on_packet, l);
    if (l->qh == NULL) {
        fprintf(stderr,
                "nfq_delay: cannot bind queue %u: %s (another process holds it, or "
                "this network namespace has no nfnetlink_queue)\n",
                o->queue, strerror(errno));
        return -1;
    }
    /* The verdict needs only the packet id: no payload copied to us. */
    if (nfq_set_mode(l->qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(l->qh, RING_CAP) < 0) {
        fprintf(stderr, "nfq_delay: cannot configure queue %u: %s\n", o->queue, strerror(errno));
        return -1;
    }
    (void)nfnl_rcvbufsiz(nfq_nfnlh(l->h), RCVBUF_BYTES);
    return 0;
}

static void
unbind_queue(struct line *l)
{
    if (l->qh != NULL)
        nfq_destroy_queue(l->qh);
    if (l->h != NULL)
        nfq_close(l->h);
}

/* Until a signal: packets in, verdicts out when due. */
static int
run(struct line *l)
{
    int fd = nfq_fd(l->h);

    while (!stop_asked) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t now = mono_ns();
        int rc;

        release_due(l, now);
        rc = poll(&p, 1, sleep_ms(l, now));
        if (rc < 0 && errno != EINTR) {
            fprintf(stderr, "nfq_delay: poll: %s\n", strerror(errno));
            return -1;
        }
        if (rc > 0 && drain(l, fd) != 0)
            return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct opts o = {0};
    struct line l = {0};
    struct sigaction sa = {0};
    int rc = parse_args(argc, argv, &o);

    if (rc != 0)
        return rc;
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    l.rng = o.seed;
    l.delay_ns = (int64_t)o.delay_ms * 1000000;
    /* P % of 2^64, computed in long double so that 100 % drops every packet. */
    l.drop_below = o.loss_pct >= 100.0
                       ? UINT64_MAX
                       : (uint64_t)((long double)o.loss_pct / 100.0L * 18446744073709551616.0L);
    l.ring = calloc(RING_CAP, sizeof(*l.ring));
    if (l.ring == NULL) {
        fprintf(stderr, "nfq_delay: out of memory\n");
        return 1;
    }
    if (bind_queue(&l, &o) != 0) {
        unbind_queue(&l);
        free(l.ring);
        return 1;
    }
    fprintf(stderr, "nfq_delay: queue %u bound: delay %ld ms, loss %g %%, seed %" PRIu64 "\n",
            o.queue, o.delay_ms, o.loss_pct, o.seed);
    rc = run(&l);
    /* Whatever is still held goes now: stopping must not turn into a loss. */
    release_due(&l, INT64_MAX);
    unbind_queue(&l);
    free(l.ring);
    printf("packets %" PRIu64 " dropped %" PRIu64 " overflow %" PRIu64 " max_queue %zu"
           " enobufs %" PRIu64 "\n",
           l.packets, l.dropped, l.overflow, l.max_len, l.enobufs);
    fflush(stdout);
    return rc == 0 ? 0 : 1;
}

/*
 * tally-bench-cluster: what a batch costs to commit on the cluster's log, next
 * to what it costs on one host. Three members (cluster/log.c, libraft over
 * host channels on 127.0.0.1) in this process, on one loop, each with its own
 * files under DIR:
 *   - anchor: the same batch appended to a file and fdatasync'ed, one at a
 *     time (one host's "fsync, then reply");
 *   - sequential: one batch in flight, append to committed on a majority;
 *   - pipelined: K batches in flight (batches/s and latency);
 *   - failover: the leader closed, until the two others agree on another.
 * Prints one line per measure (p50/p99/max in us), for bench/run and
 * BENCHMARKS.md. Usage: tally-bench-cluster [--dir DIR] [--batches N]
 * [--size BYTES] [--inflight K] [--election-ms MS]
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_log.h"
#include "tally_log.h"

#define N 3

struct node {
    cluster_log *lg;
    uint64_t applied;
    uint64_t leader;
    bool closed;
    char dir[300];
};

static uv_loop_t loop;
static struct node nodes[N];
static struct cluster_member members[N];
static struct cluster_hostkey keys[N];
static uint64_t *lat;  /* per batch, ns */
static uint64_t *sent; /* per batch, append time */
static size_t done_n, done_err;

static void
on_apply(void *data, uint64_t n, const uint8_t *b, size_t len)
{
    (void)b;
    (void)len;
    ((struct node *)data)->applied = n;
}

static void
on_leader(void *data, uint64_t leader, bool self)
{
    (void)self;
    ((struct node *)data)->leader = leader;
}

static const struct cluster_log_cbs cbs = {on_apply, on_leader, NULL, NULL};

static void
on_done(void *req_data, int rc)
{
    size_t i = (size_t)(uintptr_t)req_data;

    if (rc == TALLY_OK)
        lat[i] = uv_hrtime() - sent[i];
    else
        done_err++;
    done_n++;
}

static void
on_closed(void *data)
{
    ((struct node *)data)->closed = true;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void
report(const char *what, uint64_t *v, size_t n, double secs)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        if (v[i] > 0)
            v[k++] = v[i];
    qsort(v, k, sizeof(*v), cmp_u64);
    if (k == 0) {
        printf("%s: nothing committed\n", what);
        return;
    }
    printf("%s: n=%zu p50_us=%.0f p99_us=%.0f max_us=%.0f", what, k, v[k / 2] / 1e3,
           v[(k * 99) / 100] / 1e3, v[k - 1] / 1e3);
    if (secs > 0)
        printf(" batches_per_s=%.0f", (double)k / secs);
    printf("\n");
}

static int
free_port(void)
{
    struct sockaddr_in a;
    uv_tcp_t t;
    int len = sizeof(a), port;

    uv_tcp_init(&loop, &t);
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_bind(&t, (const struct sockaddr *)&a, 0);
    uv_tcp_getsockname(&t, (struct sockaddr *)&a, &len);
    port = ntohs(a.sin_port);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    return port;
}

static int
open_node(int i, unsigned election_ms)
{
    struct cluster_log_opts o;

    memset(&o, 0, sizeof(o));
    o.loop = &loop;
    o.dir = nodes[i].dir;
    o.id = members[i].id;
    o.self = &keys[i];
    o.members = members;
    o.n_members = N;
    o.bootstrap = true;
    o.election_ms = election_ms;
    o.cbs = &cbs;
    o.data = &nodes[i];
    return cluster_log_open(&o, &nodes[i].lg);
}

static uint64_t
agreed(int skip)
{
    uint64_t l = 0;

    for (int i = 0; i < N; i++) {
        if (i == skip)
            continue;
        if (nodes[i].leader == 0 || (l != 0 && nodes[i].leader != l))
            return 0;
        l = nodes[i].leader;
    }
    return l;
}

static void
run_until_done(size_t want)
{
    uint64_t t0 = uv_hrtime();

    while (done_n < want && uv_hrtime() - t0 < 60000000000ull)
        uv_run(&loop, UV_RUN_ONCE);
}

int
main(int argc, char **argv)
{
    const char *dir = NULL;
    size_t batches = 2000, size = 200, inflight = 32;
    unsigned election_ms = 1000;
    char tmpl[] = "/tmp/tally-bench-cluster.XXXXXX", path[400];
    uint8_t *batch;
    uint64_t t0, leader;
    int li, fd;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--batches") == 0)
            batches = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--size") == 0)
            size = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--inflight") == 0)
            inflight = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--election-ms") == 0)
            election_ms = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: tally-bench-cluster [--dir DIR] [--batches N] [--size BYTES] "
                            "[--inflight K] [--election-ms MS]\n");
            return 64;
        }
    }
    if (batches == 0 || size == 0 || size > 65536 || inflight == 0)
        return 64;
    signal(SIGPIPE, SIG_IGN);
    if (sodium_init() < 0 || uv_loop_init(&loop) != 0)
        return 1;
    if (dir == NULL && (dir = mkdtemp(tmpl)) == NULL)
        return 1;
    tally_log_set_level(TALLY_LOG_WARN);
    lat = calloc(batches, sizeof(*lat));
    sent = calloc(batches, sizeof(*sent));
    batch = malloc(size);
    if (lat == NULL || sent == NULL || batch == NULL)
        return 1;
    randombytes_buf(batch, size);

    /* The anchor: one host's append and fdatasync of the same batch. */
    snprintf(path, sizeof(path), "%s/anchor", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    for (size_t i = 0; i < batches && fd >= 0; i++) {
        t0 = uv_hrtime();
        if (write(fd, batch, size) != (ssize_t)size || fdatasync(fd) != 0)
            break;
        lat[i] = uv_hrtime() - t0;
    }
    if (fd >= 0)
        close(fd);
    unlink(path);
    report("one host: append + fdatasync", lat, batches, 0);

    for (int i = 0; i < N; i++) {
        cluster_hostkey_generate(&keys[i]);
        members[i].id = (uint64_t)i + 1;
        snprintf(members[i].address, sizeof(members[i].address), "127.0.0.1:%d", free_port());
        memcpy(members[i].pk, keys[i].pk, CLUSTER_KEY_BYTES);
        snprintf(nodes[i].dir, sizeof(nodes[i].dir), "%s/n%d", dir, i + 1);
        mkdir(nodes[i].dir, 0700);
    }
    for (int i = 0; i < N; i++) {
        if (open_node(i, election_ms) != TALLY_OK) {
            fprintf(stderr, "tally-bench-cluster: cannot open member %d\n", i + 1);
            return 1;
        }
    }
    t0 = uv_hrtime();
    while ((leader = agreed(-1)) == 0 && uv_hrtime() - t0 < 20000000000ull)
        uv_run(&loop, UV_RUN_ONCE);
    if (leader == 0)
        return 1;
    li = (int)leader - 1;

    /* Sequential: one in flight. */
    memset(lat, 0, batches * sizeof(*lat));
    done_n = 0;
    for (size_t i = 0; i < batches; i++) {
        sent[i] = uv_hrtime();
        if (cluster_log_append(nodes[li].lg, batch, size, on_done, (void *)(uintptr_t)i) !=
            TALLY_OK)
            break;
        run_until_done(i + 1);
    }
    report("3 members: commit, 1 in flight", lat, batches, 0);

    /* Pipelined: K in flight. */
    memset(lat, 0, batches * sizeof(*lat));
    done_n = 0;
    t0 = uv_hrtime();
    for (size_t i = 0; i < batches; i++) {
        while (i - done_n >= inflight)
            uv_run(&loop, UV_RUN_ONCE);
        sent[i] = uv_hrtime();
        if (cluster_log_append(nodes[li].lg, batch, size, on_done, (void *)(uintptr_t)i) !=
            TALLY_OK)
            break;
    }
    run_until_done(batches);
    {
        char what[64];
        snprintf(what, sizeof(what), "3 members: commit, %zu in flight", inflight);
        report(what, lat, batches, (double)(uv_hrtime() - t0) / 1e9);
    }

    /* Failover: the leader goes. */
    cluster_log_close(nodes[li].lg, on_closed, &nodes[li]);
    t0 = uv_hrtime();
    while (!nodes[li].closed || (leader = agreed(li)) == 0 || leader == (uint64_t)li + 1) {
        uv_run(&loop, UV_RUN_ONCE);
        if (uv_hrtime() - t0 > 30000000000ull)
            break;
    }
    printf("failover: a new leader after %.0f ms (election timeout %u ms)\n",
           (double)(uv_hrtime() - t0) / 1e6, election_ms);
    printf("done_errors=%zu\n", done_err);
    for (int i = 0; i < N; i++) {
        if (i == li)
            continue;
        nodes[i].closed = false;
        cluster_log_close(nodes[i].lg, on_closed, &nodes[i]);
        while (!nodes[i].closed)
            uv_run(&loop, UV_RUN_ONCE);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (dir == tmpl) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
        if (system(cmd) != 0)
            return 1;
    }
    free(lat);
    free(sent);
    free(batch);
    return 0;
}

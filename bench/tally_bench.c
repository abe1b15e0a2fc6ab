/*
 * tally-bench: a load generator for tallyd's binary protocol. C connections,
 * each keeping D CHECK requests in flight, N requests in all, tokens taken
 * round-robin from a file; it records each request's latency and prints
 * throughput and percentiles. The last line is always
 *   decisions_per_s=N p50_us=N p99_us=N p999_us=N admitted=N refused=N
 * so scripts can read it. Single-threaded (poll), so pin it to one CPU.
 * --seconds S stops sending after S seconds (at most N requests either way) and
 * reports on the requests that finished. --timeline FILE (tally's protocol,
 * with --seconds) writes answers per 100 ms ("t_s admitted refused other") and
 * survives a server killed under it: a lost connection drops its requests in
 * flight (counted as lost) and is dialled again every 20 ms.
 *
 * With --redis ADDR:PORT|PATH --script FILE it drives redis-server instead: the
 * Lua limiter in FILE is loaded once (SCRIPT LOAD) and each request is
 * EVALSHA sha 1 rl:TOKEN LIMIT PERIOD_MS, same connections, pipeline, tokens
 * and last line; the script answers {1, 0} admitted or {0, wait} refused.
 *
 * Tokens are taken round-robin unless --zipf S is given: then the file holds
 * --links-per-tenant L tokens per tenant, tenant by tenant (as
 * tally-bench-links writes it), and each request draws a tenant from a Zipf(S)
 * law over ranks (rank 1 the most popular; --draw-tenants K ranks, default every
 * tenant of the file; the tenants behind the ranks are a shuffle seeded by
 * --rank-seed N, default 1, so rank is not file order and runs with other
 * --seed values draw the same tenants, equally popular), then one of its L
 * links uniformly. The draw is a seeded PRNG (--seed N) consumed in sending
 * order whatever the target, so tallyd and redis-server get the same token
 * stream for the same seed.
 * With --seconds S, --timeout-ms MS bounds the run: it stops waiting MS after
 * sending stopped, or after MS without any answer; the requests still in flight
 * then count as timed out (other=N includes them, timeouts=N alone).
 * --gap-ms MS (one connection, one in flight) waits MS after each answer before
 * the next request: with one fresh tenant per token, each request is a tenant's
 * first, timed on an otherwise idle machine (no process starting beside it, as
 * one tally-bench per request would be); decisions_per_s then counts the gaps.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_resp.h"
#include "proto_client.h"

struct bconn {
    int fd;
    int inflight;
    uint32_t next_id;
    struct proto_frame_reader r;
    uint8_t rbuf[PROTO_FRAME_MAX];
    uint8_t wbuf[64 * PROTO_CLIENT_MSG_MAX];
    size_t wlen;
    int64_t *sent_ns;    /* by request id modulo the ring */
    uint32_t next_reply; /* redis: replies come in order, ids are implicit */
    size_t rlen;         /* redis: bytes held in rbuf */
};

struct redis_cfg {
    const char *addr; /* NULL: tally's protocol */
    const char *script;
    const char *limit;
    const char *period_ms;
    char sha[RESP_SHA_LEN + 1];
};

#define RING 4096

/* The request draw: round-robin, or Zipf over tenants and uniform over links. */
struct draw {
    uint64_t rng; /* splitmix64 state */
    double *cdf;  /* NULL: round-robin; else cumulative Zipf weights of ranks */
    long ranks;   /* tenants drawn */
    long links;   /* links per tenant */
    long *tenant; /* rank -> tenant index in the file */
    long next;    /* round-robin position */
};

static uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static long
draw_below(uint64_t *x, long n)
{
    return (long)(splitmix64(x) % (uint64_t)n); /* bias < n / 2^64: negligible */
}

/* Zipf(s) over `ranks` of the file's tenants, each with `links` tokens. */
static int
draw_init_zipf(struct draw *d, double s, long links, long ranks, long ntokens, uint64_t seed,
               uint64_t rank_seed)
{
    long tenants = ntokens / links, r;
    double sum = 0;
    uint64_t shuffle = rank_seed ^ 0x5a17c0de5a17c0deULL;

    if (links < 1 || ntokens % links != 0 || ranks > tenants || s <= 0)
        return -1;
    if (ranks <= 0)
        ranks = tenants;
    d->cdf = malloc((size_t)ranks * sizeof(*d->cdf));
    d->tenant = malloc((size_t)tenants * sizeof(*d->tenant));
    if (d->cdf == NULL || d->tenant == NULL)
        return -1;
    for (r = 0; r < tenants; r++)
        d->tenant[r] = r;
    for (r = tenants - 1; r > 0; r--) { /* Fisher-Yates: which tenant has which rank */
        long j = draw_below(&shuffle, r + 1), t = d->tenant[r];
        d->tenant[r] = d->tenant[j];
        d->tenant[j] = t;
    }
    for (r = 0; r < ranks; r++) {
        sum += pow((double)(r + 1), -s);
        d->cdf[r] = sum;
    }
    for (r = 0; r < ranks; r++)
        d->cdf[r] /= sum;
    d->ranks = ranks;
    d->links = links;
    d->rng = seed;
    return 0;
}

/* The index of the next request's token. */
static long
draw_next(struct draw *d, long ntokens)
{
    double u;
    long lo = 0, hi;

    if (d->cdf == NULL)
        return d->next++ % ntokens;
    u = (double)(splitmix64(&d->rng) >> 11) * 0x1p-53;
    hi = d->ranks - 1;
    while (lo < hi) { /* the first rank whose cumulative weight exceeds u */
        long mid = lo + (hi - lo) / 2;
        if (d->cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return d->tenant[lo] * d->links + draw_below(&d->rng, d->links);
}

static int64_t
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A connection to tallyd (HELLO exchanged) or, with `raw`, to redis-server: libtally's
 * blocking client dials either. -1 when nobody answers. */
static int
dial(const char *sock, const char *tcp, bool raw)
{
    char where[300];
    uint32_t window;
    int fd = -1;

    if (sock != NULL)
        snprintf(where, sizeof(where), "%s", sock);
    else if (tcp != NULL && tcp[0] != '/')
        snprintf(where, sizeof(where), "tcp:%s", tcp);
    else /* a redis address that is a path */
        snprintf(where, sizeof(where), "%s", tcp != NULL ? tcp : "");
    if (raw ? proto_client_dial(where, &fd) != TALLY_OK
            : proto_client_connect(where, 1000, &fd, &window) != TALLY_OK)
        return -1;
    return fd;
}

static int
cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

static char **
load_tokens(const char *path, int *n)
{
    FILE *f = fopen(path, "r");
    char line[512];
    char **v = NULL;
    int cap = 0;

    *n = 0;
    if (f == NULL)
        return NULL;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0')
            continue;
        if (*n == cap) {
            char **grown = realloc(v, (size_t)(cap == 0 ? 1024 : cap * 2) * sizeof(*v));

            if (grown == NULL)
                break; /* out of memory: the tokens read so far */
            v = grown;
            cap = cap == 0 ? 1024 : cap * 2;
        }
        v[(*n)++] = strdup(line);
    }
    fclose(f);
    return v;
}

static bool
write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Timeline mode: forget a lost connection's requests in flight; redial later. */
static void
drop(struct bconn *c, long *lost)
{
    close(c->fd);
    c->fd = -1;
    *lost += c->inflight;
    c->inflight = 0;
}

/* Timeline mode: dials again and says HELLO; false while the server is away. */
static bool
redial(struct bconn *c, const char *sock, const char *tcp)
{
    c->fd = dial(sock, tcp, false);
    if (c->fd < 0)
        return false;
    proto_frame_reader_init(&c->r, c->rbuf, sizeof(c->rbuf));
    return true;
}

static int
write_timeline(const char *path, const long *tl, long buckets, long lost)
{
    FILE *f = fopen(path, "w");
    long b;

    if (f == NULL) {
        fprintf(stderr, "tally-bench: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "# t_s admitted refused other (per 100 ms); lost in flight: %ld\n", lost);
    for (b = 0; b < buckets; b++)
        fprintf(f, "%.1f %ld %ld %ld\n", (double)b / 10.0, tl[b * 3], tl[b * 3 + 1], tl[b * 3 + 2]);
    return fclose(f) == 0 ? 0 : -1;
}

/* Reads what redis sent on c and takes every whole reply, in request order. */
static int
redis_read(struct bconn *c, int64_t *lat, long *done, long *admitted, long *refused, long *other)
{
    ssize_t got = read(c->fd, c->rbuf + c->rlen, sizeof(c->rbuf) - c->rlen);
    size_t at = 0, used;
    int64_t v;
    int rc;

    if (got <= 0) {
        fprintf(stderr, "tally-bench: connection closed\n");
        return -1;
    }
    c->rlen += (size_t)got;
    while ((rc = resp_reply(c->rbuf + at, c->rlen - at, &v, &used)) == 1) {
        uint32_t id = ++c->next_reply;
        lat[(*done)++] = now_ns() - c->sent_ns[id % RING];
        c->inflight--;
        at += used;
        if (v == 1)
            (*admitted)++;
        else if (v == 0)
            (*refused)++;
        else
            (*other)++;
    }
    if (rc < 0) {
        fprintf(stderr, "tally-bench: redis answered: %.*s\n",
                (int)(c->rlen - at > 120 ? 120 : c->rlen - at), (const char *)c->rbuf + at);
        return -1;
    }
    memmove(c->rbuf, c->rbuf + at, c->rlen - at);
    c->rlen -= at;
    return 0;
}

int
main(int argc, char **argv)
{
    const char *sock = NULL, *tcp = NULL, *tokens_path = NULL, *endpoint = "search";
    long conns = 1, pipeline = 1, total = 100000;
    double seconds = 0; /* > 0: stop sending after this long, count what finished */
    char **tokens;
    int ntokens = 0;
    struct draw dr = {0};
    double zipf = 0;
    long links_per_tenant = 1, draw_tenants = 0, timeout_ms = 10000, timeouts = 0, gap_ms = 0;
    uint64_t seed = 1, rank_seed = 1;
    int64_t last_answer, stop_at = 0;
    struct bconn *c;
    int64_t *lat;
    long sent = 0, done = 0, admitted = 0, refused = 0, other = 0;
    long by_status[8] = {0}; /* answers other than admitted/refused, by status */
    const char *timeline = NULL;
    long lost = 0, *tl = NULL, tl_n = 0; /* timeline: 3 counters per 100 ms bucket */
    int64_t t0, t1;
    struct redis_cfg rd = {NULL, NULL, "1000000000", "3600000", ""};
    int i;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--socket") == 0)
            sock = argv[i + 1];
        else if (strcmp(argv[i], "--tcp") == 0)
            tcp = argv[i + 1];
        else if (strcmp(argv[i], "--tokens") == 0)
            tokens_path = argv[i + 1];
        else if (strcmp(argv[i], "--endpoint") == 0)
            endpoint = argv[i + 1];
        else if (strcmp(argv[i], "--connections") == 0)
            conns = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--pipeline") == 0)
            pipeline = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--requests") == 0)
            total = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--redis") == 0)
            rd.addr = argv[i + 1];
        else if (strcmp(argv[i], "--script") == 0)
            rd.script = argv[i + 1];
        else if (strcmp(argv[i], "--limit") == 0)
            rd.limit = argv[i + 1];
        else if (strcmp(argv[i], "--period-ms") == 0)
            rd.period_ms = argv[i + 1];
        else if (strcmp(argv[i], "--timeline") == 0)
            timeline = argv[i + 1];
        else if (strcmp(argv[i], "--zipf") == 0)
            zipf = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--links-per-tenant") == 0)
            links_per_tenant = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--draw-tenants") == 0)
            draw_tenants = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--rank-seed") == 0)
            rank_seed = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--timeout-ms") == 0)
            timeout_ms = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--gap-ms") == 0)
            gap_ms = strtol(argv[i + 1], NULL, 10);
        else
            break;
    }
    if (rd.addr != NULL && sock == NULL && tcp == NULL)
        tcp = rd.addr; /* dial() takes a path here too */
    if (i < argc || (sock == NULL) == (tcp == NULL) || tokens_path == NULL || conns < 1 ||
        conns > 1000 || pipeline < 1 || pipeline > 64 || total < 1 ||
        (rd.addr != NULL) != (rd.script != NULL) || (rd.addr != NULL && tcp != rd.addr) ||
        (timeline != NULL && (rd.addr != NULL || seconds <= 0)) || zipf < 0 ||
        links_per_tenant < 1 || draw_tenants < 0 || timeout_ms < 1 || gap_ms < 0 ||
        (gap_ms > 0 && (conns != 1 || pipeline != 1 || seconds > 0))) {
        fprintf(stderr, "usage: tally-bench (--socket PATH | --tcp ADDR:PORT | --redis "
                        "ADDR:PORT|PATH --script FILE.lua [--limit N] [--period-ms P]) "
                        "--tokens FILE [--endpoint NAME] [--connections C<=1000] "
                        "[--pipeline D<=64] [--requests N] [--seconds S [--timeline FILE] "
                        "[--timeout-ms MS]] [--zipf S [--links-per-tenant L] "
                        "[--draw-tenants K] [--seed N] [--rank-seed N]] [--gap-ms MS (with "
                        "one connection, one in flight)]\n");
        return 64;
    }
    tokens = load_tokens(tokens_path, &ntokens);
    if (ntokens == 0) {
        fprintf(stderr, "tally-bench: no tokens in %s\n", tokens_path);
        return 66;
    }
    if (zipf > 0 &&
        draw_init_zipf(&dr, zipf, links_per_tenant, draw_tenants, ntokens, seed, rank_seed) != 0) {
        fprintf(stderr,
                "tally-bench: %d tokens are not whole tenants of %ld links, or fewer "
                "than %ld tenants\n",
                ntokens, links_per_tenant, draw_tenants);
        return 66;
    }
    if (timeline != NULL) {
        tl_n = (long)(seconds * 10) + 600; /* a minute of grace for the last answers */
        tl = calloc((size_t)tl_n * 3, sizeof(*tl));
    }
    c = calloc((size_t)conns, sizeof(*c));
    lat = malloc((size_t)total * sizeof(*lat));
    for (i = 0; i < conns; i++) {
        c[i].sent_ns = calloc(RING, sizeof(int64_t));
        c[i].fd = dial(sock, tcp, rd.addr != NULL);
        if (c[i].fd < 0) {
            fprintf(stderr, "tally-bench: cannot connect\n");
            return 69;
        }
        proto_frame_reader_init(&c[i].r, c[i].rbuf, sizeof(c[i].rbuf));
        if (rd.addr != NULL && i == 0 && resp_script_load(c[i].fd, rd.script, rd.sha) != 0)
            return 69;
    }
    t0 = now_ns();
    last_answer = t0;
    while (done + lost < total) {
        struct pollfd pf[1000];
        int ready;
        /* top every connection up to its pipeline depth, one write each */
        for (i = 0; i < conns; i++) {
            c[i].wlen = 0;
            pf[i].fd = -1;
            pf[i].revents = 0;
            if (c[i].fd < 0 && !redial(&c[i], sock, tcp))
                continue;
            if (seconds > 0 && sent < total && now_ns() - t0 > (int64_t)(seconds * 1e9)) {
                total = sent; /* time is up: wait for what is in flight */
                stop_at = now_ns();
            }
            while (c[i].inflight < pipeline && sent < total) {
                uint32_t id = ++c[i].next_id;
                if (gap_ms > 0 && sent > 0) {
                    struct timespec gap = {gap_ms / 1000, (gap_ms % 1000) * 1000000L};
                    while (nanosleep(&gap, &gap) != 0 && errno == EINTR)
                        ;
                }
                if (rd.addr != NULL) {
                    char key[PROTO_TOKEN_WIRE_MAX + 8];
                    snprintf(key, sizeof(key), "rl:%s", tokens[draw_next(&dr, ntokens)]);
                    c[i].wlen += resp_evalsha(c[i].wbuf + c[i].wlen, sizeof(c[i].wbuf) - c[i].wlen,
                                              rd.sha, key, rd.limit, rd.period_ms);
                } else {
                    struct proto_check m;
                    memset(&m, 0, sizeof(m));
                    snprintf(m.token, sizeof(m.token), "%s", tokens[draw_next(&dr, ntokens)]);
                    snprintf(m.endpoint, sizeof(m.endpoint), "%s", endpoint);
                    c[i].wlen += proto_check_encode(c[i].wbuf + c[i].wlen, id, &m);
                }
                c[i].sent_ns[id % RING] = now_ns();
                c[i].inflight++;
                sent++;
            }
            if (c[i].wlen > 0 && !write_all(c[i].fd, c[i].wbuf, c[i].wlen)) {
                if (timeline == NULL) {
                    fprintf(stderr, "tally-bench: connection lost\n");
                    return 69;
                }
                drop(&c[i], &lost);
                continue;
            }
            pf[i].fd = c[i].fd;
            pf[i].events = POLLIN;
        }
        if (done + lost >= total)
            break;
        ready = poll(pf, (nfds_t)conns,
                     timeline != NULL ? 20
                     : seconds > 0    ? 100
                                      : (int)timeout_ms);
        if (ready > 0)
            last_answer = now_ns(); /* near enough: something to read */
        if (timeline == NULL && seconds > 0 &&
            now_ns() - (stop_at > 0 && stop_at > last_answer ? stop_at : last_answer) >
                timeout_ms * 1000000) {
            timeouts = sent - done - lost; /* given up on: no answer in time */
            other += timeouts;
            break;
        }
        if (ready < 0 || (ready == 0 && timeline == NULL && seconds <= 0)) {
            fprintf(stderr, "tally-bench: no answer for %ld ms\n", timeout_ms);
            return 69;
        }
        for (i = 0; i < conns; i++) {
            struct proto_frame f;
            uint8_t *space;
            ssize_t got;
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (rd.addr != NULL) {
                if (redis_read(&c[i], lat, &done, &admitted, &refused, &other) != 0)
                    return 69;
                continue;
            }
            {
                size_t room = proto_frame_reader_space(&c[i].r, &space);
                got = read(c[i].fd, space, room);
            }
            if (got <= 0) {
                if (timeline == NULL) {
                    fprintf(stderr, "tally-bench: connection closed\n");
                    return 69;
                }
                drop(&c[i], &lost);
                continue;
            }
            proto_frame_reader_commit(&c[i].r, (size_t)got);
            while (proto_frame_next(&c[i].r, &f) == TALLY_OK) {
                struct proto_check_reply r;
                if (f.type != PROTO_C_CHECK_REPLY)
                    continue;
                int64_t at = now_ns();
                long b = (long)((at - t0) / 100000000) * 3;
                int kind = 2;
                lat[done++] = at - c[i].sent_ns[f.request_id % RING];
                c[i].inflight--;
                if (proto_check_reply_decode(&f, &r) != TALLY_OK) {
                    other++;
                } else if (r.status == PROTO_ADMITTED) {
                    admitted++;
                    kind = 0;
                } else if (r.status == PROTO_REFUSED) {
                    refused++;
                    kind = 1;
                } else {
                    other++;
                    by_status[r.status & 7]++;
                }
                if (tl != NULL && b / 3 < tl_n)
                    tl[b + kind]++;
            }
        }
    }
    t1 = now_ns();
    if (tl != NULL) {
        long buckets = (long)((t1 - t0) / 100000000) + 1;
        if (write_timeline(timeline, tl, buckets < tl_n ? buckets : tl_n, lost) != 0)
            return 73;
        fprintf(stderr, "tally-bench: %ld requests lost in flight with their connections\n", lost);
    }
    total = done > 0 ? done : 1; /* percentiles over the answers received */
    if (done == 0)
        lat[0] = 0;
    qsort(lat, (size_t)done, sizeof(*lat), cmp64);
    if (other > 0)
        fprintf(stderr,
                "tally-bench: %ld answers neither admitted nor refused (unauthorized=%ld "
                "unavailable=%ld bad_request=%ld internal=%ld timeouts=%ld)\n",
                other, by_status[PROTO_UNAUTHORIZED], by_status[PROTO_UNAVAILABLE],
                by_status[PROTO_BAD_REQUEST], by_status[PROTO_INTERNAL], timeouts);
    printf("decisions_per_s=%.0f p50_us=%.1f p99_us=%.1f p999_us=%.1f admitted=%ld refused=%ld "
           "other=%ld timeouts=%ld\n",
           (double)(admitted + refused) * 1e9 / (double)(t1 - t0), (double)lat[total / 2] / 1000.0,
           (double)lat[total * 99 / 100] / 1000.0, (double)lat[total * 999 / 1000] / 1000.0,
           admitted, refused, other, timeouts);
    for (i = 0; i < conns; i++) {
        close(c[i].fd);
        free(c[i].sent_ns);
    }
    for (i = 0; i < ntokens; i++)
        free(tokens[i]);
    free(tokens);
    free(c);
    free(lat);
    free(tl);
    free(dr.cdf);
    free(dr.tenant);
    return 0;
}

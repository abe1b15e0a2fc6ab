/*
 * Grant latencies as tallyd reports them (grant_figures.h).
 */
#define _DEFAULT_SOURCE /* timegm */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grant_figures.h"

#define CURL "/usr/bin/curl"

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

int64_t
grant_quantile(int64_t *v, size_t n, double q)
{
    size_t rank;

    if (n == 0)
        return -1;
    qsort(v, n, sizeof(*v), cmp_i64);
    rank = (size_t)((double)n * q + 0.999999);
    return v[rank > 0 ? rank - 1 : 0];
}

void
grant_rtt_hist(const struct netns_host *h, const char *http_addr, uint64_t cum[GRANT_HIST_BUCKETS])
{
    static const char series[] = "tally_lease_rtt_seconds_bucket{le=\"";
    static struct test_out out;
    struct test_out *o = &out;
    char url[80], ns[32];
    char *argv[] = {NETNS_IP, "netns", "exec", ns, CURL, "-s", "--max-time", "5", url, NULL};
    const char *p;
    int k = 0;

    snprintf(ns, sizeof(ns), "%s", h->ns);
    memset(cum, 0, GRANT_HIST_BUCKETS * sizeof(*cum));
    snprintf(url, sizeof(url), "http://%s/metrics", http_addr);
    if (test_run(argv, NULL, o) != 0)
        fail_msg("GET /metrics in %s: exit %d: %.200s", h->ns, o->code, o->err);
    for (p = o->out; k < GRANT_HIST_BUCKETS && (p = strstr(p, series)) != NULL; k++) {
        const char *v = strchr(p, '}');

        assert_non_null(v);
        cum[k] = strtoull(v + 1, NULL, 10);
        p = v;
    }
    assert_int_equal(k, GRANT_HIST_BUCKETS);
}

int64_t
grant_hist_quantile_ms(const uint64_t a[GRANT_HIST_BUCKETS], const uint64_t b[GRANT_HIST_BUCKETS],
                       double q)
{
    static const int64_t bound_us[GRANT_HIST_BUCKETS - 1] = {
        10,    25,    50,    100,    250,    500,    1000,   2500,   5000,
        10000, 25000, 50000, 100000, 150000, 200000, 250000, 500000, 1000000,
    };
    uint64_t total = b[GRANT_HIST_BUCKETS - 1] - a[GRANT_HIST_BUCKETS - 1];
    uint64_t rank = (uint64_t)((double)total * q + 0.999999);

    if (total == 0)
        return -1;
    for (int k = 0; k < GRANT_HIST_BUCKETS - 1; k++) {
        if (b[k] - a[k] >= rank)
            return bound_us[k] / 1000 > 0 ? bound_us[k] / 1000 : 1;
    }
    return INT64_MAX;
}

#define PENDING_MAX 1024

/* An ACQUIRE sent and not answered yet. */
struct pending {
    long long seq;
    int64_t sent;
};

/* "2026-01-02T03:04:05.678Z" to ms since the epoch (UTC), -1 when it is not one. */
static int64_t
ts_ms(const char *s)
{
    struct tm tm;
    int ms;

    memset(&tm, 0, sizeof(tm));
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &ms) != 7)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

/* The value of "key":"..." or "key":N in one log line, into out. */
static bool
field(const char *line, const char *key, char *out, size_t cap)
{
    char want[40];
    const char *at;

    snprintf(want, sizeof(want), "\"%s\":", key);
    at = strstr(line, want);
    if (at == NULL)
        return false;
    at += strlen(want);
    if (*at == '"')
        at++;
    snprintf(out, cap, "%.*s", (int)strcspn(at, "\",}"), at);
    return true;
}

void
grants_from_log(const char *path, long from, struct grants *g)
{
    static struct pending pend[PENDING_MAX];
    size_t npend = 0, len = 0;
    char *log = test_read_file(path, &len);
    char *line, *save = NULL;

    memset(g, 0, sizeof(*g));
    g->ms = calloc(len / 64 + 1, sizeof(*g->ms));
    assert_non_null(g->ms);
    if (log == NULL || (size_t)from >= len) {
        free(log);
        return;
    }
    for (line = strtok_r(log + from, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char ts[40], type[24], seq_s[24];
        bool sent = strstr(line, "\"event\":\"lease_sent\"") != NULL;
        bool got = !sent && strstr(line, "\"event\":\"lease_received\"") != NULL;
        long long seq;
        size_t j;

        if ((!sent && !got) || !field(line, "ts", ts, sizeof(ts)) ||
            !field(line, "type", type, sizeof(type)) || !field(line, "seq", seq_s, sizeof(seq_s)))
            continue;
        seq = atoll(seq_s);
        for (j = 0; j < npend && pend[j].seq != seq; j++)
            ;
        if (sent && strcmp(type, "ACQUIRE") == 0) {
            if (j < npend)
                g->retransmits++;
            else if (npend < PENDING_MAX)
                pend[npend++] = (struct pending){seq, ts_ms(ts)};
        } else if (got && j < npend && (strcmp(type, "GRANT") == 0 || strcmp(type, "DENY") == 0)) {
            g->ms[g->n++] = ts_ms(ts) - pend[j].sent;
            pend[j] = pend[--npend];
        }
    }
    free(log);
}

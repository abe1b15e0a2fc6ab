/*
 * Micro benchmark of the counting core (tenant_count.h): nanoseconds per decision for each
 * algorithm, one line each, `name ns_per_decision=N.N admitted=PCT%`. Each loop makes a few
 * million decisions with a clock advancing step_ms a step, chosen to offer about twice the
 * tightest limit, so windows roll, GCRA refills and about half the decisions admit (an admission
 * costs a check and a charge, a refusal only the check). CLOCK_MONOTONIC around each loop; run a
 * release build, pinned
 * (`taskset -c 0`), and compare medians of several runs (BENCHMARKING.md). argv[1] overrides the
 * number of decisions per loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tenant_count.h"

#define T0_MS 1700000000000LL

static int64_t
mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
report(const char *name, int64_t start_ns, long iterations, long admitted)
{
    double ns = (double)(mono_ns() - start_ns) / (double)iterations;

    printf("%s ns_per_decision=%.1f admitted=%.0f%%\n", name, ns,
           100.0 * (double)admitted / (double)iterations);
}

static struct tenant_limits
limits_of(int64_t n0, int64_t p0, int64_t n1, int64_t p1)
{
    struct tenant_limits ls;

    memset(&ls, 0, sizeof(ls));
    ls.count = n1 > 0 ? 2 : 1;
    ls.v[0] = (struct tenant_limit){n0, p0};
    ls.v[1] = (struct tenant_limit){n1, p1};
    return ls;
}

static int
bench_window(const char *name, const struct tenant_limits *ls, int64_t step_ms, long iterations)
{
    struct tenant_window_state st;
    struct tenant_verdict v;
    long admitted = 0;
    int64_t start_ns;

    memset(&st, 0, sizeof(st));
    start_ns = mono_ns();
    for (long i = 0; i < iterations; i++) {
        if (tenant_window_decide(ls, &st, T0_MS + i * step_ms, 1, &v) != TALLY_OK)
            return 1;
        admitted += v.admitted;
    }
    report(name, start_ns, iterations, admitted);
    return 0;
}

static int
bench_gcra(const char *name, const struct tenant_limits *ls, int64_t step_ms, long iterations)
{
    struct tenant_gcra_state st;
    struct tenant_verdict v;
    long admitted = 0;
    int64_t start_ns;

    memset(&st, 0, sizeof(st));
    start_ns = mono_ns();
    for (long i = 0; i < iterations; i++) {
        if (tenant_gcra_decide(ls, NULL, &st, T0_MS + i * step_ms, 1, &v) != TALLY_OK)
            return 1;
        admitted += v.admitted;
    }
    report(name, start_ns, iterations, admitted);
    return 0;
}

/* Acquire, and release every other slot taken: one decision plus half a release per step. */
static int
bench_slots(int64_t step_ms, long iterations)
{
    struct tenant_slot v[16];
    struct tenant_slot_table t;
    struct tenant_verdict d;
    long admitted = 0;
    int64_t start_ns, id;

    if (tenant_slot_table_init(&t, v, 16) != TALLY_OK)
        return 1;
    start_ns = mono_ns();
    for (long i = 0; i < iterations; i++) {
        int64_t now_ms = T0_MS + i * step_ms;

        if (tenant_slot_acquire(&t, 8, now_ms, 1000, &id, &d) != TALLY_OK)
            return 1;
        admitted += d.admitted;
        if (d.admitted && (i & 1))
            (void)tenant_slot_release(&t, id, now_ms);
    }
    report("slots", start_ns, iterations, admitted);
    return 0;
}

/* The docs/DESIGN.md §2 path: plan 600/1m + 36000/1h, link 300/1m, endpoint (GCRA) for the tenant
 * and for the link, and optionally a concurrency slot. */
static int
bench_path(const char *name, bool slot, int64_t step_ms, long iterations)
{
    struct tenant_limits plan = limits_of(600, 60000, 36000, 3600000);
    struct tenant_limits link = limits_of(300, 60000, 0, 0);
    struct tenant_limits ep_tenant = limits_of(50, 1000, 2000, 60000);
    struct tenant_limits ep_link = limits_of(10, 1000, 0, 0);
    struct tenant_budget b[4];
    struct tenant_slot v[16];
    struct tenant_slot_table t;
    struct tenant_path p;
    struct tenant_decision d;
    long admitted = 0;
    int64_t start_ns;

    if (tenant_budget_init(&b[0], TENANT_SCOPE_PLAN, TENANT_ALG_WINDOW, &plan) != TALLY_OK ||
        tenant_budget_init(&b[1], TENANT_SCOPE_LINK, TENANT_ALG_WINDOW, &link) != TALLY_OK ||
        tenant_budget_init(&b[2], TENANT_SCOPE_ENDPOINT_TENANT, TENANT_ALG_GCRA, &ep_tenant) !=
            TALLY_OK ||
        tenant_budget_init(&b[3], TENANT_SCOPE_ENDPOINT_LINK, TENANT_ALG_GCRA, &ep_link) !=
            TALLY_OK ||
        tenant_slot_table_init(&t, v, 16) != TALLY_OK)
        return 1;
    p = (struct tenant_path){{&b[0], &b[1], &b[2], &b[3]}, 4, slot ? &t : NULL, 8, 1000};
    start_ns = mono_ns();
    for (long i = 0; i < iterations; i++) {
        int64_t now_ms = T0_MS + i * step_ms;

        if (tenant_path_decide(&p, now_ms, 1, &d) != TALLY_OK)
            return 1;
        admitted += d.admitted;
        if (d.slot_id != 0 && (i & 1))
            (void)tenant_slot_release(&t, d.slot_id, now_ms);
    }
    report(name, start_ns, iterations, admitted);
    return 0;
}

int
main(int argc, char **argv)
{
    long iterations = argc > 1 ? strtol(argv[1], NULL, 10) : 4000000;
    struct tenant_limits one = limits_of(600, 60000, 0, 0);
    struct tenant_limits two = limits_of(600, 60000, 36000, 3600000);
    struct tenant_limits rate = limits_of(10, 1000, 0, 0);
    struct tenant_limits huge = limits_of(TENANT_LIMIT_MAX_N, TENANT_LIMIT_MAX_PERIOD_MS, 0, 0);
    int rc = 0;

    if (iterations < 1) {
        fprintf(stderr, "usage: %s [decisions per loop]\n", argv[0]);
        return 2;
    }
    rc |= bench_window("window_1limit", &one, 50, iterations);
    rc |= bench_window("window_2limits", &two, 50, iterations);
    rc |= bench_gcra("gcra", &rate, 50, iterations);
    rc |= bench_gcra("gcra_2limits", &two, 50, iterations);
    rc |= bench_gcra("gcra_2e32_per_year", &huge, 50, iterations);
    rc |= bench_slots(60, iterations);
    rc |= bench_path("path_4budgets", false, 100, iterations);
    rc |= bench_path("path_4budgets_slot", true, 100, iterations);
    if (rc != 0)
        fprintf(stderr, "bench_count: a decision failed\n");
    return rc;
}

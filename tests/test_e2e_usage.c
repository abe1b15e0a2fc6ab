/*
 * `tally usage` against the real tallyd and supervisors: what clients counted as admitted is
 * what `tally usage --json` reports for every budget of the path (it has tallyd give the
 * leases back first, so live leases count what they admitted); a tenant without requests and
 * a previous window without traffic show zeros; a kill -9 of tallyd loses nothing: the
 * restarted children resume their leases from the exact use kept in DATA/lease-use.map, so the
 * figure is again exactly what was admitted, and a tenant at its limit admits exactly the rest
 * of it after the restart. Unknown tenants and bad options are one line.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_util.h"

struct env {
    struct serve_env s;
    char tok[64];
    char tight[64]; /* a link of tenant "tight", plan 300/1d */
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000/month", "--limit",
                   "100000/1d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "100000/1d",
                   "--tenant-limit", "100000/month", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "idle", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->tok, sizeof(e->tok), "link", "create", "acme", NULL);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "small", "--limit", "300/1d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "tight", "--plan", "small", NULL);
    serve_tally_ok(&e->s, e->tight, sizeof(e->tight), "link", "create", "tight", NULL);
    serve_start(&e->s, NULL, NULL);
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    serve_env_release(&e->s);
    free(e);
    return 0;
}

static int
spend_on(struct env *e, const char *tok, int n)
{
    struct serve_http r;
    int admitted = 0;

    for (int i = 0; i < n; i++) {
        serve_check(&e->s, tok, "search", &r);
        assert_true(r.status == 200 || r.status == 429);
        admitted += r.status == 200;
    }
    return admitted;
}

static int
spend(struct env *e, int n)
{
    return spend_on(e, e->tok, n);
}

/* Admitted figures of `tenant`'s JSON rows for `scope` (and link or not), all equal: that value;
 * -1 when they differ, -2 when there is none. */
static int64_t
usage_of(struct env *e, const char *tenant, const char *window, const char *scope, bool link)
{
    struct test_out o;
    char needle[96];
    int64_t v = -2;
    const char *p;

    assert_int_equal(test_tally(e->s.data, &o, "usage", tenant, "--window", window, "--json", NULL),
                     0);
    assert_non_null(strstr(o.out, "{\"window\":\""));
    snprintf(needle, sizeof(needle), "\"scope\":\"%s\"", scope);
    for (p = strstr(o.out, needle); p != NULL; p = strstr(p + 1, needle)) {
        const char *end = strchr(p, '}');
        const char *a = strstr(p, "\"admitted\":");
        bool has_link = strncmp(strstr(p, "\"link\":\"") + 8, "\"", 1) != 0;
        int64_t x;

        assert_non_null(end);
        assert_true(a != NULL && a < end);
        if (has_link != link)
            continue;
        x = strtoll(a + 11, NULL, 10);
        if (v != -2 && v != x)
            return -1;
        v = x;
    }
    return v;
}

/* Until the idle leases have come back (the plan's figure reaches want, or stops moving down
 * for a second), at most 10 s. */
static int64_t
settled_plan_of(struct env *e, const char *tenant, int64_t want)
{
    int64_t v = -1, before = INT64_MAX;
    int same = 0;

    for (int i = 0; i < 100 && same < 10; i++) {
        v = usage_of(e, tenant, "current", "plan", false);
        if (v == want)
            return v;
        same = v < before ? 0 : same + 1;
        before = v;
        serve_sleep_ms(100);
    }
    return v;
}

static int64_t
settled_plan(struct env *e, int64_t want)
{
    return settled_plan_of(e, "acme", want);
}

static void
test_usage_matches_what_was_admitted(void **state)
{
    struct env *e = *state;
    int admitted = spend(e, 120);

    assert_int_equal(admitted, 120);
    assert_int_equal(settled_plan(e, admitted), admitted);
    assert_int_equal(usage_of(e, "acme", "current", "endpoint", false), admitted);
    assert_int_equal(usage_of(e, "acme", "current", "endpoint", true), admitted);
    /* Nothing before: the previous windows are empty; a tenant without requests has zeros. */
    assert_int_equal(usage_of(e, "acme", "previous", "plan", false), 0);
    assert_int_equal(usage_of(e, "idle", "current", "plan", false), 0);
    assert_int_equal(usage_of(e, "idle", "current", "endpoint", false), 0);
}

/* Right after a few requests, with their lease still out: `tally usage` has the running tallyd
 * give the leases back first, so the figure is what they admitted, not what they reserved. */
static void
test_usage_counts_what_live_leases_admitted(void **state)
{
    struct env *e = *state;
    int admitted = 0;

    for (int i = 0; i < 3; i++) {
        admitted += spend(e, 1);
        serve_sleep_ms(300);
    }
    assert_int_equal(admitted, 3);
    assert_int_equal(usage_of(e, "acme", "current", "plan", false), 3);
    assert_int_equal(usage_of(e, "acme", "current", "endpoint", true), 3);
    /* The link goes on with new leases. */
    assert_int_equal(spend(e, 2), 2);
    assert_int_equal(usage_of(e, "acme", "current", "plan", false), 5);
}

static void
test_usage_survives_kill9_of_tallyd(void **state)
{
    struct env *e = *state;
    int admitted = spend(e, 80);
    int64_t at_kill, after;

    /* A moment for the last grant's first mark to be durable: a lease granted an instant
     * before the kill, with no row yet, cannot be resumed (it counts as spent). */
    serve_sleep_ms(200);
    test_daemon_kill9(&e->s.d);
    /* No tallyd: the ledger as the kill left it, the leases then out counted in full. */
    at_kill = usage_of(e, "acme", "current", "plan", false);
    assert_true(at_kill >= admitted);
    serve_start(&e->s, NULL, NULL);
    admitted += spend(e, 40);
    assert_int_equal(admitted, 120);
    /* The restarted children resume their leases at exactly what they had admitted (the
     * counters of DATA/lease-use.map, same boot), go on with them and give back the rest. */
    after = settled_plan(e, admitted);
    print_message("# admitted %d, usage at the kill %lld (of 80), after %lld\n", admitted,
                  (long long)at_kill, (long long)after);
    assert_int_equal(after, admitted);
    assert_int_equal(usage_of(e, "acme", "current", "endpoint", false), admitted);
    assert_int_equal(usage_of(e, "acme", "current", "endpoint", true), admitted);
}

/* Limit N = 300 a day, k = 100 admitted, kill -9 of tallyd: exactly N - k more are admitted
 * after the restart, in the same window. Nothing the killed tallyd leased is lost. */
static void
test_resumed_lease_admits_exactly_to_the_limit(void **state)
{
    struct env *e = *state;
    int before = spend_on(e, e->tight, 100), after;

    assert_int_equal(before, 100);
    serve_sleep_ms(200); /* as above: the last grant's row durable */
    test_daemon_kill9(&e->s.d);
    serve_start(&e->s, NULL, NULL);
    after = spend_on(e, e->tight, 260);
    print_message("# limit 300: %d admitted before the kill, %d after\n", before, after);
    assert_int_equal(after, 300 - before);
    assert_int_equal(settled_plan_of(e, "tight", 300), 300);
}

static void
test_usage_bad_input(void **state)
{
    struct env *e = *state;
    struct test_out o;

    assert_int_equal(test_tally(e->s.data, &o, "usage", "nobody", NULL), 1);
    assert_non_null(strstr(o.err, "nobody"));
    assert_int_equal(o.out[0], '\0');
    assert_int_equal(test_tally(e->s.data, &o, "usage", "--window", "last", NULL), 64);
    assert_int_equal(test_tally(e->s.data, &o, "usage", "acme", "--bogus", NULL), 64);
    assert_int_equal(test_tally(e->s.data, &o, "usage", NULL), 0);
    assert_non_null(strstr(o.out, "acme "));
    assert_non_null(strstr(o.out, "idle "));
    assert_non_null(strstr(o.out, "100000/month"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_usage_matches_what_was_admitted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_counts_what_live_leases_admitted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_usage_survives_kill9_of_tallyd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resumed_lease_admits_exactly_to_the_limit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_usage_bad_input, setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_usage", tests, NULL, NULL);
}

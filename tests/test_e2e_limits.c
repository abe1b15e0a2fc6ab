/*
 * A lowered limit is in force before the `tally` command that lowers it returns, through the
 * real tallyd, its child counters and the tenant's supervisor. Each case spends part of a
 * budget with a pipelined burst, so that the child holds large leases granted under the old
 * limit, lowers the limit (an endpoint's, the plan's, the plan's per-link limit, the tenant's
 * own limits overriding its plan's, or moves the tenant to a smaller plan), and sends the next
 * burst at once: what it admits never exceeds the new limit plus what was admitted before the
 * change, in the same window. Without the recall, the leases of the old limit go on admitting
 * until their deadline (thousands more).
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
#include "test_load.h"

/* The first burst: enough for the child's leases to grow well past the lowered limits. */
#define SPENT 20000
#define BURST 5000
#define CONNS 4
#define CHUNK 100

struct env {
    struct serve_env s;
    char token[64];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "1000000/1h", "--link-limit",
                   "1000000/1h", NULL);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "small", "--limit", "20050/1h", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "100000/1h", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
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

/* `total` checks, CONNS connections each with up to CHUNK pipelined (under the server's
 * in-flight window) at a time, answers added up. */
static struct test_load_result
burst(const struct env *e, int total)
{
    const char *tokens[1] = {e->token};
    struct test_load_result r;

    memset(&r, 0, sizeof(r));
    for (int done = 0; done < total;) {
        struct test_load_result p;
        int n = total - done < CONNS * CHUNK ? total - done : CONNS * CHUNK;
        test_load_run(e->s.d.socket, tokens, 1, "search", n, CONNS, 30000, &p);
        r.admitted += p.admitted;
        r.refused += p.refused;
        r.unauthorized += p.unauthorized;
        r.unavailable += p.unavailable;
        r.bad_request += p.bad_request;
        r.other += p.other;
        r.lost += p.lost;
        r.degraded += p.degraded;
        done += n;
    }
    print_message("# burst of %d: admitted %d refused %d unavailable %d bad request %d other %d "
                  "lost %d\n",
                  total, r.admitted, r.refused, r.unavailable, r.bad_request, r.other, r.lost);
    assert_int_equal(r.unauthorized + r.other + r.lost, 0);
    return r;
}

/* Spends SPENT, runs the change, then checks the next burst against new_limit. */
static void
lower_then_burst(struct env *e, int64_t new_limit, const char *const *change)
{
    struct test_load_result before = burst(e, SPENT);
    struct test_load_result after;
    int64_t bound;
    char out[64];

    assert_int_equal(before.admitted, SPENT);
    serve_tally_ok(&e->s, out, sizeof(out), change[0], change[1], change[2], change[3], change[4],
                   change[5], change[6], change[7], NULL);
    after = burst(e, BURST);
    /* Admitted in the window never exceeds the new limit plus what was admitted before; the
     * ledger knows what was admitted, so in fact only what the new limit leaves: */
    bound = new_limit > SPENT ? new_limit - SPENT : 0;
    assert_true(after.admitted <= bound);
    assert_true(after.refused > 0);
    assert_int_equal(after.admitted + after.refused + after.unavailable, BURST);
}

static void
test_lowered_endpoint_limit_in_force(void **state)
{
    const char *change[] = {"endpoint", "set", "search", "--limit", "10/1h", NULL, NULL, NULL};

    lower_then_burst(*state, 10, change);
}

static void
test_lowered_plan_limit_in_force(void **state)
{
    const char *change[] = {"plan", "set", "pro", "--limit", "20050/1h", NULL, NULL, NULL};

    /* 50 remain of the new plan-wide limit: at most 50 more. */
    lower_then_burst(*state, 20050, change);
}

static void
test_lowered_link_limit_in_force(void **state)
{
    const char *change[] = {"plan",       "set",          "pro",   "--limit",
                            "1000000/1h", "--link-limit", "20/1h", NULL};

    lower_then_burst(*state, 20, change);
}

static void
test_smaller_plan_in_force(void **state)
{
    const char *change[] = {"tenant", "set", "acme", "--plan", "small", NULL, NULL, NULL};

    lower_then_burst(*state, 20050, change);
}

/* A tenant's own limits (a custom contract) lowered below what it spent. */
static void
test_lowered_override_in_force(void **state)
{
    const char *change[] = {"tenant", "set", "acme", "--limit", "20050/1h", NULL, NULL, NULL};

    lower_then_burst(*state, 20050, change);
}

static void
test_lowered_link_override_in_force(void **state)
{
    const char *change[] = {"tenant", "set", "acme", "--link-limit", "20/1h", NULL, NULL, NULL};

    lower_then_burst(*state, 20, change);
}

static void
test_removed_endpoint_admits_nothing(void **state)
{
    struct env *e = *state;
    struct test_load_result r;

    assert_int_equal(burst(e, SPENT).admitted, SPENT);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "remove", "search", NULL);
    r = burst(e, BURST);
    assert_int_equal(r.admitted, 0);
    assert_int_equal(r.bad_request, BURST);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lowered_endpoint_limit_in_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lowered_plan_limit_in_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lowered_link_limit_in_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_smaller_plan_in_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lowered_override_in_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lowered_link_override_in_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_endpoint_admits_nothing, setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_limits", tests, NULL, NULL);
}

/*
 * Shadow mode through the real tallyd: an endpoint set with --shadow decides
 * and counts as usual but admits every request; a would-be refusal is a 200
 * with X-Tally-Shadow: refused over HTTP, the shadow-refused flag over the
 * binary protocol, and one more in tally_shadow_refusals_total. Its counts
 * are exactly those of an enforced endpoint: once `tally endpoint set` drops
 * --shadow, the very next request is refused. An expensive shadow endpoint
 * never hands out a slot it did not take.
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
#include "tally.h"

struct env {
    struct serve_env s;
    char token[64];
    char token2[64];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "1000/365d", "--concurrency",
                   "1", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "5/365d", "--shadow",
                   NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "export", "--limit", "100/365d",
                   "--expensive", "--shadow", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
    serve_tally_ok(&e->s, e->token2, sizeof(e->token2), "link", "create", "acme", NULL);
    serve_start(&e->s, NULL, NULL);
    *state = e;
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

static double
metric_now(const struct env *e, const char *series)
{
    struct serve_http m;

    serve_http_get(e->s.http_port, "/metrics", NULL, &m);
    assert_int_equal(m.status, 200);
    return serve_metric(m.body, series);
}

static void
test_shadow_admits_counts_and_flags(void **state)
{
    struct env *e = *state;
    struct serve_http r;
    struct tally_result res;
    tally_client *c = NULL;
    char v[64];
    int i, flagged = 0;

    for (i = 0; i < 8; i++) {
        serve_check(&e->s, e->token, "search", &r);
        assert_int_equal(r.status, 200);
        assert_false(serve_http_header(&r, "Retry-After", v, sizeof(v)));
        if (serve_http_header(&r, "X-Tally-Shadow", v, sizeof(v))) {
            assert_string_equal(v, "refused");
            assert_true(serve_http_header(&r, "X-Tally-Shadow-Scope", v, sizeof(v)));
            assert_string_equal(v, "endpoint");
            assert_true(i >= 5); /* the first five were within the limit */
            flagged++;
        }
    }
    assert_int_equal(flagged, 3);
    assert_true(metric_now(e, "tally_shadow_refusals_total") == 3);
    assert_true(metric_now(e, "tally_decisions_total{result=\"admitted\"}") == 8);
    assert_true(metric_now(e, "tally_decisions_total{result=\"refused\"}") == 0);

    /* the binary protocol carries the flag */
    assert_int_equal(tally_client_open(e->s.d.socket, 10000, &c), TALLY_OK);
    assert_int_equal(tally_check(c, e->token, "search", 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_ADMITTED);
    assert_true(res.shadow_refused);
    /* another link has its own budget: admitted, not flagged */
    assert_int_equal(tally_check(c, e->token2, "search", 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_ADMITTED);
    assert_false(res.shadow_refused);

    /* enforced from now on: the 5 admitted were counted, the 4 shadow refusals not */
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "5/365d", NULL);
    serve_check(&e->s, e->token, "search", &r);
    assert_int_equal(r.status, 429);
    assert_true(serve_http_header(&r, "Retry-After", v, sizeof(v)));
    assert_false(serve_http_header(&r, "X-Tally-Shadow", v, sizeof(v)));
    assert_int_equal(tally_check(c, e->token, "search", 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_REFUSED);
    assert_false(res.shadow_refused);
    /* link 2 used 1 of 5: four more, then refused */
    for (i = 0; i < 4; i++) {
        serve_check(&e->s, e->token2, "search", &r);
        assert_int_equal(r.status, 200);
    }
    serve_check(&e->s, e->token2, "search", &r);
    assert_int_equal(r.status, 429);
    assert_true(metric_now(e, "tally_shadow_refusals_total") == 4);
    tally_client_close(c);
}

static void
test_shadow_takes_no_slot(void **state)
{
    struct env *e = *state;
    struct serve_http r;
    char lease[32], v[64], headers[256];

    /* concurrency 1: the first takes the link's slot */
    serve_check(&e->s, e->token, "export", &r);
    assert_int_equal(r.status, 200);
    assert_true(serve_http_header(&r, "X-Tally-Lease", lease, sizeof(lease)));
    assert_false(serve_http_header(&r, "X-Tally-Shadow", v, sizeof(v)));
    /* the second would be refused by concurrency: admitted, flagged, no slot */
    serve_check(&e->s, e->token, "export", &r);
    assert_int_equal(r.status, 200);
    assert_true(serve_http_header(&r, "X-Tally-Shadow", v, sizeof(v)));
    assert_true(serve_http_header(&r, "X-Tally-Shadow-Scope", v, sizeof(v)));
    assert_string_equal(v, "concurrency");
    assert_false(serve_http_header(&r, "X-Tally-Lease", v, sizeof(v)));
    /* released, the slot is free again: a real slot, not flagged */
    snprintf(headers, sizeof(headers), "Authorization: Bearer %s\r\nX-Tally-Lease: %s\r\n",
             e->token, lease);
    serve_http_request(e->s.http_port, "POST", "/v1/release", headers, &r);
    assert_int_equal(r.status, 204);
    serve_check(&e->s, e->token, "export", &r);
    assert_int_equal(r.status, 200);
    assert_true(serve_http_header(&r, "X-Tally-Lease", lease, sizeof(lease)));
    assert_false(serve_http_header(&r, "X-Tally-Shadow", v, sizeof(v)));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shadow_admits_counts_and_flags),
        cmocka_unit_test(test_shadow_takes_no_slot),
    };

    return cmocka_run_group_tests_name("serve_shadow", tests, setup, teardown);
}

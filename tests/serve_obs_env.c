/*
 * The served tallyd of test_serve_metrics and test_serve_events (serve_obs_env.h).
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <stdlib.h>

#include "serve_obs_env.h"

int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "3/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "open", "--limit", "100000/365d",
                   "--on-unavailable", "open", "--degraded-limit", "1000/1h", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "closed", "--limit", "100000/365d",
                   "--on-unavailable", "closed", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
    serve_ledger_make(&e->s, "acme"); /* served before: these suites watch its supervisor */
    *state = e;
    return 0;
}

int
teardown(void **state)
{
    struct env *e = *state;

    serve_env_release(&e->s);
    free(e);
    return 0;
}

void
get_metrics(const struct env *e, struct serve_http *m)
{
    serve_http_get(e->s.http_port, "/metrics", NULL, m);
    assert_int_equal(m->status, 200);
}

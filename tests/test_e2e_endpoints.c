/*
 * A tenant may call every endpoint the configuration allows (TENANT_MAX_ENDPOINTS), through
 * the real tallyd: each endpoint's child counter is a holder of the tenant's supervisor, and
 * the supervisor takes every one of them (its table grows as they come). Then tallyd is
 * stopped and started again: the supervisor rebuilds the holders from its journal and every
 * endpoint admits again. (Before the table grew, the 65th endpoint of a tenant answered 503
 * for good: its child was refused as a holder.)
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
#include "tenant.h"

#define ENDPOINTS TENANT_MAX_ENDPOINTS

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
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000/1h", NULL);
    for (int i = 0; i < ENDPOINTS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "e%d", i);
        serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", name, "--limit", "1000/1h", NULL);
    }
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
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

/* One check on every endpoint: how many were admitted (each answer printed unless 200). */
static int
check_all(struct env *e)
{
    int admitted = 0;

    for (int i = 0; i < ENDPOINTS; i++) {
        char name[16];
        struct serve_http r;
        snprintf(name, sizeof(name), "e%d", i);
        serve_check(&e->s, e->token, name, &r);
        if (r.status == 200)
            admitted++;
        else
            print_message("endpoint %s: %d %.120s\n", name, r.status, r.body);
    }
    return admitted;
}

static void
test_every_endpoint_of_a_tenant_admits(void **state)
{
    struct env *e = *state;

    serve_start(&e->s, NULL, NULL);
    assert_int_equal(check_all(e), ENDPOINTS);
    serve_stop(&e->s);
    serve_start(&e->s, NULL, NULL);
    assert_int_equal(check_all(e), ENDPOINTS);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_endpoint_of_a_tenant_admits, setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_endpoints", tests, NULL, NULL);
}

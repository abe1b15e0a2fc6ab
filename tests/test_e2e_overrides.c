/*
 * Per-tenant overrides (custom contracts) through the real tally and tallyd: an override that
 * doubles one tenant's quota doubles that tenant's admissions and leaves the other tenants of
 * the plan alone; `tenant show` prints the limits in force and which are the tenant's own;
 * `export` prints them and `apply` sets them back; `--reset` returns to the plan's values; an
 * override for an unknown tenant or with a bad limit is one line and changes nothing.
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
    char tok_big[64], tok_std[64];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "10/month", "--limit", "600/1m",
                   "--concurrency", "2", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "1000/1m", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "big", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "std", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->tok_big, sizeof(e->tok_big), "link", "create", "big", NULL);
    serve_tally_ok(&e->s, e->tok_std, sizeof(e->tok_std), "link", "create", "std", NULL);
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

/* Checks one at a time until the first refusal (at most `max`): the number admitted. */
static int
admitted_until_refused(struct env *e, const char *token, int max)
{
    struct serve_http r;
    int n = 0;

    for (int i = 0; i < max; i++) {
        serve_check(&e->s, token, "search", &r);
        if (r.status != 200) {
            assert_int_equal(r.status, 429);
            assert_non_null(strstr(r.body, "\"scope\":\"plan\""));
            return n;
        }
        n++;
    }
    return n;
}

static void
test_override_doubles_one_tenant(void **state)
{
    struct env *e = *state;
    struct test_out o;

    serve_tally_ok(&e->s, NULL, 0, "tenant", "set", "big", "--limit", "20/month", "--limit",
                   "600/1m", NULL);
    assert_int_equal(admitted_until_refused(e, e->tok_big, 50), 20);
    assert_int_equal(admitted_until_refused(e, e->tok_std, 50), 10);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "big", NULL), 0);
    assert_non_null(strstr(o.out, "limits: 600/1m,20/month (override)"));
    assert_non_null(strstr(o.out, "concurrency: 2 (plan)"));
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "std", NULL), 0);
    assert_non_null(strstr(o.out, "limits: 600/1m,10/month (plan)"));
    /* Back to the plan's: 20 were admitted this month, more than the plan's 10. */
    serve_tally_ok(&e->s, NULL, 0, "tenant", "set", "big", "--reset", NULL);
    assert_int_equal(admitted_until_refused(e, e->tok_big, 5), 0);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "big", NULL), 0);
    assert_non_null(strstr(o.out, "limits: 600/1m,10/month (plan)"));
}

static void
test_override_export_apply_round_trip(void **state)
{
    struct env *e = *state;
    struct test_out o;
    char path[256];
    FILE *f;

    serve_tally_ok(&e->s, NULL, 0, "tenant", "set", "big", "--billing-day", "15", "--link-limit",
                   "5/1m", "--concurrency", "4", NULL);
    assert_int_equal(test_tally(e->s.data, &o, "export", NULL), 0);
    assert_non_null(strstr(
        o.out, "tenant big --plan pro --billing-day 15 --link-limit 5/1m --concurrency 4\n"));
    assert_non_null(strstr(o.out, "tenant std --plan pro --billing-day 1\n"));
    /* The export applied as it is changes nothing; with one override changed, that one. */
    snprintf(path, sizeof(path), "%s/conf", e->s.root);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(o.out, f);
    fclose(f);
    assert_int_equal(test_tally(e->s.data, &o, "apply", path, NULL), 0);
    assert_null(strstr(o.out, "tenant"));
    f = fopen(path, "a");
    assert_non_null(f);
    fputs("tenant std --plan pro --billing-day 3 --limit 30/month\n", f);
    fclose(f);
    assert_int_equal(test_tally(e->s.data, &o, "apply", path, NULL), 65); /* defined twice */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("plan pro --limit 10/month --limit 600/1m --concurrency 2\n"
          "endpoint search --limit 1000/1m\n"
          "tenant big --plan pro --billing-day 15 --link-limit 5/1m --concurrency 4\n"
          "tenant std --plan pro --billing-day 3 --limit 30/month\n",
          f);
    fclose(f);
    assert_int_equal(test_tally(e->s.data, &o, "apply", path, NULL), 0);
    assert_non_null(strstr(o.out, "update tenant std --plan pro --billing-day 3 --limit 30/month"));
    assert_null(strstr(o.out, "tenant big"));
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "std", NULL), 0);
    assert_non_null(strstr(o.out, "billing day: 3\n"));
    assert_non_null(strstr(o.out, "limits: 30/month (override)"));
    assert_non_null(strstr(o.out, "link limits: none (plan)"));
    assert_int_equal(admitted_until_refused(e, e->tok_std, 40), 30);
}

static void
test_override_bad_input_changes_nothing(void **state)
{
    struct env *e = *state;
    struct test_out o;

    assert_int_equal(test_tally(e->s.data, &o, "tenant", "set", "nobody", "--limit", "5/1m", NULL),
                     1);
    assert_non_null(strstr(o.err, "tenant nobody: not found"));
    assert_int_equal(
        test_tally(e->s.data, &o, "tenant", "set", "big", "--limit", "5/fortnight", NULL), 64);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "set", "big", "--concurrency", "0", NULL),
                     64);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "set", "big", NULL), 64);
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "big", NULL), 0);
    assert_non_null(strstr(o.out, "limits: 600/1m,10/month (plan)"));
    assert_null(strstr(o.out, "(override)"));
    assert_int_equal(test_tally(e->s.data, &o, "tenant", "show", "nobody", NULL), 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_override_doubles_one_tenant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_override_export_apply_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_override_bad_input_changes_nothing, setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_overrides", tests, NULL, NULL);
}

/*
 * `tally apply` and `tally export`: the file is validated as a whole before
 * anything changes, --dry-run changes nothing, export prints what apply
 * reads (a round trip is a no-op), and removals follow the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static struct test_out o;

struct env {
    char root[64];
    char data[128];
    char file[128];
};

static int
setup(void **state)
{
    static struct env e;

    test_tmpdir(e.root, sizeof(e.root));
    snprintf(e.data, sizeof(e.data), "%s/data", e.root);
    snprintf(e.file, sizeof(e.file), "%s/tally.conf", e.root);
    assert_int_equal(test_tally(e.data, &o, "init", NULL), 0);
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    test_rmtree(e->root);
    return 0;
}

static void
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const char *
exported(const char *data)
{
    static char buf[TEST_OUT_MAX];

    assert_int_equal(test_tally(data, &o, "export", NULL), 0);
    snprintf(buf, sizeof(buf), "%s", o.out);
    return buf;
}

static const char good[] =
    "# plans\n"
    "plan free --limit 60/1m --limit 1000/1h\n"
    "plan pro  --limit 600/1m --limit=36000/1h --link-limit 100/1m --concurrency 10\n"
    "\n"
    "endpoint search --limit 60/1m --tenant-limit 1000/1m   # default for every plan\n"
    "endpoint search --plan pro --limit 120/1m --algorithm gcra\n"
    "endpoint export --limit 10/1h --expensive --on-unavailable open --degraded-limit 2/1h\n";

static void
test_apply_creates_and_export_round_trips(void **state)
{
    struct env *e = *state;
    char first[TEST_OUT_MAX];

    write_file(e->file, good);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_non_null(strstr(o.out, "create plan free --limit 60/1m --limit 1000/1h\n"));
    assert_non_null(strstr(o.out, "create endpoint search --plan pro"));
    snprintf(first, sizeof(first), "%s", exported(e->data));
    assert_non_null(strstr(first, "plan pro --limit 600/1m --limit 36000/1h --link-limit 100/1m "
                                  "--concurrency 10\n"));
    /* export -> apply is a no-op */
    write_file(e->file, first);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_string_equal(o.out, "");
    assert_string_equal(exported(e->data), first);
}

static void
test_apply_dry_run_changes_nothing(void **state)
{
    struct env *e = *state;
    char before[TEST_OUT_MAX];

    snprintf(before, sizeof(before), "%s", exported(e->data));
    write_file(e->file, good);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, "--dry-run", NULL), 0);
    assert_non_null(strstr(o.out, "create plan pro"));
    assert_non_null(strstr(o.out, "dry run: nothing changed"));
    assert_string_equal(exported(e->data), before);
}

static void
test_apply_updates_and_deletes(void **state)
{
    struct env *e = *state;

    write_file(e->file, good);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    write_file(e->file, "plan pro --limit 700/1m\nendpoint search --limit 60/1m\n");
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_non_null(strstr(o.out, "update plan pro --limit 700/1m\n"));
    assert_non_null(strstr(o.out, "delete plan free\n"));
    assert_non_null(strstr(o.out, "delete endpoint export\n"));
    assert_non_null(strstr(o.out, "delete endpoint search --plan pro\n"));
    assert_string_equal(exported(e->data) + strcspn(exported(e->data), "\n") + 1,
                        "plan pro --limit 700/1m\n"
                        "endpoint search --limit 60/1m --algorithm window --cost 1 "
                        "--on-unavailable closed\n");
}

static void
test_invalid_files_change_nothing(void **state)
{
    static const char *const bad[] = {
        "plan free --limit 60/1m\nplan pro --limit 0/1m\n",   /* bad limit, line 2 */
        "plan free --limit 60/1m\nplan free --limit 61/1m\n", /* duplicate plan */
        "plan Free --limit 60/1m\n",                          /* bad name */
        "endpoint search --plan nope --limit 1/1m\n",         /* undefined plan */
        "plan free --limit 60/1m\nendpoint s --limit 1/1m\nendpoint s --limit 2/1m\n",
        "tenant acme --plan free\n",                       /* unknown item */
        "plan free\n",                                     /* no limit */
        "plan free --limit 60/1m --bogus\n",               /* unknown option */
        "endpoint e --limit 1/1m --on-unavailable open\n", /* no degraded limit */
    };
    struct env *e = *state;
    char before[TEST_OUT_MAX];
    size_t i;

    write_file(e->file, good);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    snprintf(before, sizeof(before), "%s", exported(e->data));
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(e->file, bad[i]);
        assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
        assert_non_null(strstr(o.err, "nothing changed"));
        assert_int_equal(strchr(o.err, '\n') - o.err + 1, (long)strlen(o.err)); /* one line */
        assert_string_equal(exported(e->data), before);
    }
    write_file(e->file, bad[0]);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
    assert_non_null(strstr(o.err, "line 2"));
}

static void
test_apply_refuses_to_drop_a_plan_in_use(void **state)
{
    struct env *e = *state;
    char before[TEST_OUT_MAX];

    write_file(e->file, good);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "acme", "--plan", "free", NULL), 0);
    snprintf(before, sizeof(before), "%s", exported(e->data));
    write_file(e->file, "plan pro --limit 1/1m\n");
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
    assert_non_null(strstr(o.err, "plan free is still used"));
    assert_string_equal(exported(e->data), before);
}

static int
lines_of(const char *s)
{
    int n = 0;

    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

/* Moving a tenant to another plan checks what `tally tenant set --plan` checks: its live links
 * within the plan's --max-links, their endpoint restrictions defined under it. */
static void
test_apply_move_checks_links(void **state)
{
    static const char base[] = "plan pro --limit 600/1m\n"
                               "plan small --limit 60/1m --max-links 1\n"
                               "endpoint search --limit 60/1m\n"
                               "endpoint vip --plan pro --limit 10/1m\n"
                               "tenant acme --plan pro\n"
                               "tenant beta --plan pro\n";
    struct env *e = *state;
    char before[TEST_OUT_MAX];

    write_file(e->file, base);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", "--endpoint", "vip", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "beta", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "beta", NULL), 0);
    snprintf(before, sizeof(before), "%s", exported(e->data));

    /* acme's link is restricted to vip, which small does not have. */
    write_file(e->file, "plan pro --limit 600/1m\nplan small --limit 60/1m --max-links 1\n"
                        "endpoint search --limit 60/1m\nendpoint vip --plan pro --limit 10/1m\n"
                        "tenant acme --plan small\ntenant beta --plan pro\n");
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
    assert_non_null(strstr(o.err, "tally: endpoint vip is not defined for plan small (a link of "
                                  "tenant acme is restricted to it)"));
    assert_non_null(strstr(o.err, "nothing changed"));
    assert_int_equal(lines_of(o.err), 1);
    assert_string_equal(exported(e->data), before);
    /* beta has 2 live links, small allows 1. */
    write_file(e->file, "plan pro --limit 600/1m\nplan small --limit 60/1m --max-links 1\n"
                        "endpoint search --limit 60/1m\nendpoint vip --plan pro --limit 10/1m\n"
                        "tenant acme --plan pro\ntenant beta --plan small\n");
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
    assert_non_null(strstr(o.err, "tenant beta has 2 live links, more than plan small allows "
                                  "(--max-links 1)"));
    assert_non_null(strstr(o.err, "nothing changed"));
    assert_string_equal(exported(e->data), before);
    /* The same refusal as `tenant set --plan`, which shares the check. */
    assert_int_equal(test_tally(e->data, &o, "tenant", "set", "beta", "--plan", "small", NULL), 1);
    assert_non_null(strstr(o.err, "more than plan small allows"));
    /* Moved to a plan that has vip, acme passes. */
    write_file(e->file, "plan pro --limit 600/1m\nplan small --limit 60/1m --max-links 1\n"
                        "endpoint search --limit 60/1m\nendpoint vip --plan pro --limit 10/1m\n"
                        "endpoint vip --plan small --limit 5/1m\n"
                        "tenant acme --plan small\ntenant beta --plan pro\n");
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "show", "acme", NULL), 0);
    assert_non_null(strstr(o.out, "plan: small"));
}

static void
test_apply_file_errors(void **state)
{
    struct env *e = *state;
    char *big;
    FILE *f;

    assert_int_equal(test_tally(e->data, &o, "apply", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, "--frob", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "apply", "/nonexistent/file", NULL), 1);
    /* a NUL byte, an overlong line, a file over 1 MiB */
    f = fopen(e->file, "wb");
    assert_non_null(f);
    fwrite("plan a --limit 1/1m\n\0", 1, 21, f);
    fclose(f);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
    big = malloc(2 * 1024 * 1024 + 1);
    assert_non_null(big);
    memset(big, '#', 2 * 1024 * 1024);
    big[2 * 1024 * 1024] = '\0';
    write_file(e->file, big);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
    big[5000] = '\n';
    big[5001] = '\0';
    memcpy(big, "plan a --limit 1/1m ", 20);
    write_file(e->file, big);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 65);
    free(big);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_apply_creates_and_export_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_dry_run_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_updates_and_deletes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_files_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_refuses_to_drop_a_plan_in_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_move_checks_links, setup, teardown),
        cmocka_unit_test_setup_teardown(test_apply_file_errors, setup, teardown),
    };
    return cmocka_run_group_tests_name("cli_apply", tests, NULL, NULL);
}

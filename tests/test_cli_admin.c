/*
 * The `tally` command end to end: every verb and every error path,
 * through the real binary on a real data dir. Properties pinned here: a bad
 * name or a malformed limit is refused with one line and changes nothing; no
 * file under the data dir ever holds a token; nothing there is readable by
 * others.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

static struct test_out o;

struct env {
    char data[128];
};

static int
setup(void **state)
{
    static struct env e;
    char root[64];

    test_tmpdir(root, sizeof(root));
    snprintf(e.data, sizeof(e.data), "%s/data", root);
    assert_int_equal(test_tally(e.data, &o, "init", NULL), 0);
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;
    char *slash = strrchr(e->data, '/');

    *slash = '\0';
    test_rmtree(e->data);
    return 0;
}

/* Exactly one line on stderr, nothing on stdout. */
static void
assert_one_error_line(void)
{
    char *nl = strchr(o.err, '\n');

    assert_non_null(nl);
    assert_string_equal(nl + 1, "");
    assert_string_equal(o.out, "");
    assert_memory_equal(o.err, "tally: ", 7);
}

static char *
export_text(const char *data)
{
    static char buf[TEST_OUT_MAX];

    assert_int_equal(test_tally(data, &o, "export", NULL), 0);
    snprintf(buf, sizeof(buf), "%s", o.out);
    return buf;
}

static void
test_init_creates_private_dir(void **state)
{
    struct env *e = *state;
    char path[256];
    struct stat sb;

    assert_true(test_dir_private(e->data));
    snprintf(path, sizeof(path), "%s/secret.key", e->data);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 32);
    assert_int_equal(sb.st_mode & 0777, 0600);
    /* A second init refuses and leaves the key alone. */
    assert_int_equal(test_tally(e->data, &o, "init", NULL), 1);
    assert_one_error_line();
    assert_non_null(strstr(o.err, "already initialised"));
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 32);
}

static void
test_usage_errors(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, NULL), 64);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "frobnicate", NULL), 64);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "plan", NULL), 64);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "--help", NULL), 0);
    assert_non_null(strstr(o.out, "exit codes"));
    assert_int_equal(test_tally(e->data, &o, "init", "extra", NULL), 64);
    assert_one_error_line();
}

static void
test_uninitialised_dir_is_78(void **state)
{
    char dir[128];

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/tally-test-none-%d", (int)getpid());
    assert_int_equal(test_tally(dir, &o, "plan", "list", NULL), 78);
    assert_one_error_line();
    assert_non_null(strstr(o.err, "tally init"));
    assert_int_equal(test_tally(dir, &o, "check", "tly_x", "search", NULL), 78);
    /* TALLY_DATA selects the dir when --data is absent. */
    setenv("TALLY_DATA", dir, 1);
    {
        char bin[512];
        char *argv[] = {bin, "export", NULL};
        test_bin("tally", bin, sizeof(bin));
        assert_int_equal(test_run(argv, NULL, &o), 78);
        assert_non_null(strstr(o.err, dir));
    }
    unsetenv("TALLY_DATA");
}

static void
test_plan_set_show_list_remove(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "pro", "--limit", "36000/1h",
                                "--limit=600/1m", "--link-limit", "100/10s", "--concurrency", "10",
                                NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "plan", "show", "pro", NULL), 0);
    assert_string_equal(o.out, "plan pro --limit 600/1m --limit 36000/1h --link-limit 100/10s "
                               "--concurrency 10\n");
    /* set replaces the whole plan */
    assert_int_equal(test_tally(e->data, &o, "plan", "set", "pro", "--limit", "60/1m", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "plan", "list", NULL), 0);
    assert_string_equal(o.out, "plan pro --limit 60/1m\n");
    assert_int_equal(test_tally(e->data, &o, "plan", "show", "nope", NULL), 1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "plan", "remove", "nope", NULL), 1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "plan", "remove", "pro", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "plan", "list", NULL), 0);
    assert_string_equal(o.out, "");
}

static void
test_bad_names_refused_nothing_changed(void **state)
{
    static const char *const bad[] = {
        "..",
        "/",
        "a/b",
        "../etc",
        "A",
        "Pro",
        "-x",
        "_x",
        "",
        "a b",
        "a.b",
        "é",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", /* 64 */
    };
    struct env *e = *state;
    char before[TEST_OUT_MAX];
    size_t i;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "base", "--limit", "1/1m", NULL), 0);
    snprintf(before, sizeof(before), "%s", export_text(e->data));
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(test_tally(e->data, &o, "plan", "set", bad[i], "--limit", "1/1m", NULL),
                         64);
        assert_one_error_line();
        assert_int_equal(
            test_tally(e->data, &o, "endpoint", "set", bad[i], "--limit", "1/1m", NULL), 64);
        assert_int_equal(test_tally(e->data, &o, "tenant", "add", bad[i], "--plan", "base", NULL),
                         64);
        assert_int_equal(test_tally(e->data, &o, "tenant", "add", "ok", "--plan", bad[i], NULL),
                         64);
        assert_int_equal(test_tally(e->data, &o, "check", "tly_x", bad[i], NULL), 64);
        assert_string_equal(export_text(e->data), before);
    }
    /* 63 characters is the longest valid name. */
    assert_int_equal(test_tally(e->data, &o, "plan", "set",
                                "a23456789012345678901234567890123456789012345678901234567890123",
                                "--limit", "1/1m", NULL),
                     0);
}

static void
test_malformed_limits_refused_nothing_changed(void **state)
{
    static const char *const bad[] = {
        "0/1m",   "-1/1m",         "1/0m",   "1/-1m",       "1/1x",
        "1.5/1m", "1/1.5m",        "1/",     "/1m",         "1",
        "1/m/",   "4294967297/1m", "1/366d", "1/31536001s", "99999999999999999999/1m",
        " 1/1m",  "1/1m ",         "1/1mm",  "+1/1m",       "0x10/1m",
        "1//1m",  "1/1M",          "",
    };
    struct env *e = *state;
    char before[TEST_OUT_MAX];
    size_t i;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "p", "--limit", "5/1m", NULL), 0);
    snprintf(before, sizeof(before), "%s", export_text(e->data));
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(test_tally(e->data, &o, "plan", "set", "p", "--limit", bad[i], NULL), 64);
        assert_one_error_line();
        assert_non_null(strstr(o.err, "N/PERIOD"));
        assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "x", "--limit", "1/1m",
                                    "--tenant-limit", bad[i], NULL),
                         64);
        assert_string_equal(export_text(e->data), before);
    }
    /* Same period twice, five limits, missing --limit, missing value. */
    assert_int_equal(
        test_tally(e->data, &o, "plan", "set", "p", "--limit", "1/1m", "--limit", "2/60s", NULL),
        64);
    assert_int_equal(test_tally(e->data, &o, "plan", "set", "p", "--limit", "1/1s", "--limit",
                                "2/1m", "--limit", "3/1h", "--limit", "4/1d", "--limit", "5/2d",
                                NULL),
                     64);
    assert_int_equal(test_tally(e->data, &o, "plan", "set", "p", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "plan", "set", "p", "--limit", NULL), 64);
    assert_one_error_line();
    assert_string_equal(export_text(e->data), before);
    /* The extremes are valid. */
    assert_int_equal(test_tally(e->data, &o, "plan", "set", "p", "--limit", "4294967296/365d",
                                "--limit", "1/1s", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "plan", "show", "p", NULL), 0);
    assert_string_equal(o.out, "plan p --limit 1/1s --limit 4294967296/365d\n");
}

static void
test_endpoint_set_and_errors(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "pro", "--limit", "600/1m", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "search", "--limit", "60/1m",
                                "--tenant-limit", "1000/1m", "--algorithm", "gcra", "--cost", "2",
                                "--on-unavailable", "open", "--degraded-limit", "10/1m", "--shadow",
                                NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "search", "--plan", "pro",
                                "--limit", "120/1m", "--expensive", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "list", NULL), 0);
    assert_string_equal(o.out,
                        "endpoint search --limit 60/1m --tenant-limit 1000/1m --algorithm gcra "
                        "--cost 2 --on-unavailable open --degraded-limit 10/1m --shadow\n"
                        "endpoint search --plan pro --limit 120/1m --algorithm window --cost 1 "
                        "--on-unavailable closed --expensive\n");
    assert_int_equal(test_tally(e->data, &o, "endpoint", "show", "search", "--plan", "pro", NULL),
                     0);
    assert_non_null(strstr(o.out, "--expensive"));
    /* errors: unknown plan, open without degraded limit, bad algorithm, bad cost */
    assert_int_equal(
        test_tally(e->data, &o, "endpoint", "set", "x", "--plan", "nope", "--limit", "1/1m", NULL),
        1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "x", "--limit", "1/1m",
                                "--on-unavailable", "open", NULL),
                     64);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "x", "--limit", "1/1m",
                                "--algorithm", "leaky", NULL),
                     64);
    assert_int_equal(
        test_tally(e->data, &o, "endpoint", "set", "x", "--limit", "1/1m", "--cost", "0", NULL),
        64);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "x", "--limit", "1/1m", "--cost",
                                "4294967297", NULL),
                     64);
    assert_int_equal(
        test_tally(e->data, &o, "endpoint", "set", "x", "--limit", "1/1m", "--bogus", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "x", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "show", "x", NULL), 1);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "remove", "search", "--plan", "pro", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "remove", "search", "--plan", "pro", NULL),
                     1);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "list", NULL), 0);
    assert_null(strstr(o.out, "--plan pro"));
}

static void
test_tenant_add_list_show_remove(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "free", "--limit", "10/1m", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "acme", "--plan", "free", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "acme", "--plan", "free", NULL), 1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "beta", "--plan", "nope", NULL), 1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "beta", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "tenant", "list", NULL), 0);
    assert_non_null(strstr(o.out, "acme"));
    assert_null(strstr(o.out, "beta"));
    assert_int_equal(test_tally(e->data, &o, "tenant", "show", "acme", NULL), 0);
    assert_non_null(strstr(o.out, "plan: free"));
    assert_int_equal(test_tally(e->data, &o, "tenant", "show", "beta", NULL), 1);
    /* a plan in use cannot be removed */
    assert_int_equal(test_tally(e->data, &o, "plan", "remove", "free", NULL), 1);
    assert_one_error_line();
    assert_non_null(strstr(o.err, "in use"));
    assert_int_equal(test_tally(e->data, &o, "tenant", "remove", "acme", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "remove", "acme", NULL), 1);
    assert_int_equal(test_tally(e->data, &o, "plan", "remove", "free", NULL), 0);
}

static void
test_link_create_list_revoke(void **state)
{
    struct env *e = *state;
    char token[128];
    char id[64];
    char *p;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "free", "--limit", "10/1m", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "search", "--limit", "5/1m", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "acme", "--plan", "free", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", NULL), 0);
    /* the token alone on stdout: prefix, 32 url-safe characters, newline */
    assert_int_equal(strlen(o.out), 37);
    assert_memory_equal(o.out, "tly_", 4);
    snprintf(token, sizeof(token), "%.36s", o.out);
    assert_false(test_dir_contains(e->data, token));
    assert_false(test_dir_contains(e->data, token + 4));
    assert_true(test_dir_private(e->data));
    /* --json carries id, tenant and expiry */
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", "--json", "--expires", "30d",
                                "--endpoint", "search", NULL),
                     0);
    assert_non_null(strstr(o.out, "\"tenant\":\"acme\""));
    assert_null(strstr(o.out, "\"expires\":null"));
    p = strstr(o.out, "\"id\":\"");
    assert_non_null(p);
    snprintf(id, sizeof(id), "%.20s", p + 6);
    /* list never prints tokens */
    assert_int_equal(test_tally(e->data, &o, "link", "list", "acme", NULL), 0);
    assert_non_null(strstr(o.out, id));
    assert_null(strstr(o.out, "tly_"));
    /* revoke by id and by token; twice is fine; unknown is 1 */
    assert_int_equal(test_tally(e->data, &o, "link", "revoke", id, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "revoke", id, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "revoke", token, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "list", "acme", NULL), 0);
    assert_null(strstr(o.out, "live"));
    assert_int_equal(test_tally(e->data, &o, "link", "revoke", "tly_unknown", NULL), 1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "link", "revoke", "lnk_0000000000000000", NULL), 1);
    /* errors */
    assert_int_equal(test_tally(e->data, &o, "link", "create", "nope", NULL), 1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", "--endpoint", "nope", NULL),
                     1);
    assert_one_error_line();
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", "--expires", "0s", NULL),
                     64);
    assert_int_equal(
        test_tally(e->data, &o, "link", "create", "acme", "--expires", "forever", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "link", "list", "nope", NULL), 1);
    assert_int_equal(test_tally(e->data, &o, "link", "frob", NULL), 64);
    assert_false(test_dir_contains(e->data, token));
}

static void
test_key_unreadable_or_missing_is_78(void **state)
{
    struct env *e = *state;
    char path[256];

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "free", "--limit", "10/1m", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "tenant", "add", "acme", "--plan", "free", NULL), 0);
    snprintf(path, sizeof(path), "%s/secret.key", e->data);
    assert_int_equal(chmod(path, 0644), 0); /* a key others can read is refused */
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", NULL), 78);
    assert_one_error_line();
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", NULL), 0);
}

static void
test_schema_newer_than_binary_is_refused(void **state)
{
    struct env *e = *state;
    char path[256];
    sqlite3 *db = NULL;

    snprintf(path, sizeof(path), "%s/tally.db", e->data);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version=999", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(test_tally(e->data, &o, "plan", "list", NULL), 78);
    assert_one_error_line();
    assert_non_null(strstr(o.err, "newer"));
}

static void
test_corrupt_database_is_reported(void **state)
{
    struct env *e = *state;
    char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/tally.db", e->data);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("this is not a database, it is a cabbage. ", f);
    for (int i = 0; i < 200; i++)
        fputs("cabbage ", f);
    fclose(f);
    assert_int_equal(test_tally(e->data, &o, "plan", "list", NULL), 74);
    assert_one_error_line();
    assert_non_null(strstr(o.err, "corrupt"));
    assert_non_null(strstr(o.err, "tally.db"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_init_creates_private_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uninitialised_dir_is_78, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_set_show_list_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_names_refused_nothing_changed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_limits_refused_nothing_changed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_endpoint_set_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_add_list_show_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_link_create_list_revoke, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_unreadable_or_missing_is_78, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_newer_than_binary_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_database_is_reported, setup, teardown),
    };
    return cmocka_run_group_tests_name("cli_admin", tests, NULL, NULL);
}

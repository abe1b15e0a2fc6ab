/*
 * Endpoints keyed by caller through the real `tally` binary: `endpoint set
 * --key caller` with plan overrides, GCRA and costs, what a caller endpoint
 * refuses (tenant limits, slots, --max-callers on a token endpoint, one name
 * with two keys), `apply` and `export` round trips, and a configuration
 * database of the previous format upgraded in place with its policies intact.
 */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
/* clang-format on */

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* `tally --data DATA argv...` with argv NULL-terminated. */
static int
tally_argv(const char *data, char **args)
{
    char bin[4096];
    char *argv[24] = {bin, "--data", (char *)data};
    size_t n = 3;

    test_bin("tally", bin, sizeof(bin));
    while (*args != NULL && n < 23)
        argv[n++] = *args++;
    argv[n] = NULL;
    return test_run(argv, NULL, &o);
}

static void
test_callers_endpoint_set_show_export(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "pro", "--limit", "600/1m", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--key", "caller",
                                "--limit", "5/5m", "--limit", "20/1h", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "show", "login", NULL), 0);
    /* closed is the default when the authority is out of reach */
    assert_string_equal(o.out, "endpoint login --limit 5/5m --limit 20/1h --algorithm window "
                               "--cost 1 --on-unavailable closed --key caller\n");
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--plan", "pro",
                                "--key=caller", "--limit", "10/5m", "--algorithm", "gcra", "--cost",
                                "2", "--max-callers", "5000", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "export", NULL), 0);
    assert_non_null(strstr(o.out, "endpoint login --plan pro --limit 10/5m --algorithm gcra "
                                  "--cost 2 --on-unavailable closed --key caller "
                                  "--max-callers 5000\n"));
    /* the default ceiling is not written out */
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "signup", "--key", "caller",
                                "--limit", "3/1h", "--max-callers", "1000000", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "show", "signup", NULL), 0);
    assert_null(strstr(o.out, "--max-callers"));
}

static void
test_callers_bad_options_change_nothing(void **state)
{
    struct env *e = *state;
    static const char *const bad[][8] = {
        {"login", "--key", "ip", "--limit", "5/5m", NULL},
        {"login", "--key", "caller", "--limit", "5/5m", "--tenant-limit", "9/5m", NULL},
        {"login", "--key", "caller", "--limit", "5/5m", "--expensive", NULL},
        {"login", "--limit", "5/5m", "--max-callers", "10", NULL},
        {"login", "--key", "caller", "--limit", "5/5m", "--max-callers", "0", NULL},
        {"login", "--key", "caller", "--limit", "5/5m", "--max-callers", "16777217", NULL},
        {"login", "--key", "caller", NULL},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[12] = {"endpoint", "set"};
        for (size_t j = 0; bad[i][j] != NULL; j++)
            argv[2 + j] = (char *)bad[i][j];
        assert_int_equal(tally_argv(e->data, argv), 64);
        assert_true(o.err[0] != '\0');
        assert_int_equal(test_tally(e->data, &o, "endpoint", "list", NULL), 0);
        assert_string_equal(o.out, "");
    }
}

static void
test_callers_one_key_per_endpoint(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, "plan", "set", "pro", "--limit", "600/1m", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--limit", "5/5m", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--plan", "pro", "--key",
                                "caller", "--limit", "5/5m", NULL),
                     64);
    assert_non_null(strstr(o.err, "same --key"));
    /* replacing the only policy changes the key */
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--key", "caller",
                                "--limit", "5/5m", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "list", NULL), 0);
    assert_non_null(strstr(o.out, "--key caller"));

    write_file(e->file, "plan pro --limit 600/1m\n"
                        "endpoint login --limit 5/5m --key caller\n"
                        "endpoint login --plan pro --limit 9/5m\n");
    assert_int_not_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_non_null(strstr(o.err, "keyed by caller in one policy"));
}

static void
test_callers_apply_round_trip(void **state)
{
    struct env *e = *state;
    char first[TEST_OUT_MAX];

    write_file(e->file, "plan pro --limit 600/1m\n"
                        "endpoint login --limit 5/5m --limit 20/1h --key caller\n"
                        "endpoint login --plan pro --limit 10/5m --algorithm gcra --key caller "
                        "--max-callers 2000\n"
                        "endpoint reset --limit 3/1h --cost 1 --key caller "
                        "--on-unavailable open --degraded-limit 1/1h\n"
                        "endpoint search --limit 60/1m\n");
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "export", NULL), 0);
    snprintf(first, sizeof(first), "%s", o.out);
    assert_non_null(strstr(first, "endpoint reset --limit 3/1h --algorithm window --cost 1 "
                                  "--on-unavailable open --degraded-limit 1/1h --key caller\n"));
    assert_non_null(strstr(first, "endpoint search --limit 60/1m --algorithm window --cost 1 "
                                  "--on-unavailable closed\n"));
    /* export reads back as the same configuration: applying it changes nothing */
    write_file(e->file, first);
    assert_int_equal(test_tally(e->data, &o, "apply", e->file, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "export", NULL), 0);
    assert_string_equal(o.out, first);
}

static int64_t
user_version(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* The configuration of the previous format (tests/fixtures/v1, user_version 2) is
 * migrated when tally first opens it: its policies read back as token endpoints and a
 * caller endpoint can be added beside them. */
static void
test_callers_upgrade_keeps_policies(void **state)
{
    struct env *e = *state;
    char path[256];
    char cmd[512];

    snprintf(path, sizeof(path), "%s/tally.db", e->data);
    snprintf(cmd, sizeof(cmd), "cp %s/tests/fixtures/v1/tally.db %s", TALLY_SOURCE_DIR, path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(user_version(path), 2);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "list", NULL), 0);
    assert_string_equal(o.out, "endpoint search --plan pro --limit 1000/1h --algorithm window "
                               "--cost 1 --on-unavailable closed\n"
                               "endpoint upload --plan pro --limit 200/1m --algorithm window "
                               "--cost 1 --on-unavailable closed\n");
    assert_int_equal(user_version(path), 5); /* 3: caller endpoints; 4: billing days; 5: the
                                                cluster's applied index */
    assert_int_equal(test_tally(e->data, &o, "endpoint", "set", "login", "--key", "caller",
                                "--limit", "5/5m", NULL),
                     0);
    assert_int_equal(test_tally(e->data, &o, "endpoint", "show", "login", NULL), 0);
    assert_non_null(strstr(o.out, "--key caller"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_callers_endpoint_set_show_export, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_bad_options_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_one_key_per_endpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_apply_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_upgrade_keeps_policies, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

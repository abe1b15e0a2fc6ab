/*
 * `tally check` end to end: auth first (unknown, revoked, expired and
 * not-allowed tokens alike get exit 2, before anything else is looked at),
 * exact limits across many concurrent processes, refusals not charged, cost,
 * concurrency slots, and the documented exit codes.
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
#include <sys/wait.h>
#include <unistd.h>

#include "tally.h"
#include "test_daemon.h"
#include "test_support.h"

static struct test_out o;

struct env {
    char root[64];
    char data[128];
    char token[64];
    char token2[64];
    struct test_daemon d;
};

/* Windows of a year keep these tests away from window boundaries. */
static int
setup(void **state)
{
    static struct env e;

    test_tmpdir(e.root, sizeof(e.root));
    snprintf(e.data, sizeof(e.data), "%s/data", e.root);
    assert_int_equal(test_tally(e.data, &o, "init", NULL), 0);
    assert_int_equal(test_tally(e.data, &o, "plan", "set", "pro", "--limit", "8/365d",
                                "--concurrency", "2", NULL),
                     0);
    assert_int_equal(test_tally(e.data, &o, "endpoint", "set", "search", "--limit", "3/365d", NULL),
                     0);
    assert_int_equal(test_tally(e.data, &o, "endpoint", "set", "export", "--limit", "100/365d",
                                "--expensive", NULL),
                     0);
    assert_int_equal(test_tally(e.data, &o, "tenant", "add", "acme", "--plan", "pro", NULL), 0);
    assert_int_equal(test_tally(e.data, &o, "link", "create", "acme", NULL), 0);
    snprintf(e.token, sizeof(e.token), "%.36s", o.out);
    assert_int_equal(test_tally(e.data, &o, "link", "create", "acme", NULL), 0);
    snprintf(e.token2, sizeof(e.token2), "%.36s", o.out);
    /* counts, not latency: a sanitizer build on a busy machine may need a while */
    assert_int_equal(test_daemon_start(&e.d, e.data, "--wait-ms=3000", NULL), 0);
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_daemon_stop(&e->d), 0);
    test_rmtree(e->root);
    return 0;
}

/* Asks the daemon to re-read the configuration now (what `tally` does after a change). */
static void
reload(struct env *e)
{
    tally_client *c = NULL;

    assert_int_equal(tally_client_open(e->d.socket, 5000, &c), TALLY_OK);
    assert_int_equal(tally_reload(c), TALLY_OK);
    tally_client_close(c);
}

static int64_t
field(const char *text, const char *name)
{
    const char *p = strstr(text, name);

    assert_non_null(p);
    return strtoll(p + strlen(name), NULL, 10);
}

static void
test_check_admits_exactly_the_limit(void **state)
{
    struct env *e = *state;
    int i;

    for (i = 0; i < 3; i++) {
        test_tally(e->data, &o, "check", e->token, "search", NULL);
        if (o.code != 0)
            fail_msg("check: %d %s %s", o.code, o.out, o.err);
        assert_memory_equal(o.out, "admitted scope=endpoint limit=3 ", 32);
    }
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", NULL), 1);
    assert_memory_equal(o.out, "refused scope=endpoint retry_after=", 35);
    assert_true(field(o.out, "retry_after=") > 0);
}

static void
test_refusals_are_not_charged(void **state)
{
    struct env *e = *state;
    int i;

    /* link 1 spends its endpoint budget (3), then is refused 20 times */
    for (i = 0; i < 3; i++) {
        test_tally(e->data, &o, "check", e->token, "search", NULL);
        if (o.code != 0)
            fail_msg("check: %d %s %s", o.code, o.out, o.err);
    }
    for (i = 0; i < 20; i++)
        assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", NULL), 1);
    /* the plan (8) lost only the 3 admitted: link 2 gets 3 on search, then 2 on export */
    for (i = 0; i < 3; i++)
        assert_int_equal(test_tally(e->data, &o, "check", e->token2, "search", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "check", e->token2, "export", "--cost", "2", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "check", e->token2, "export", NULL), 1);
    assert_memory_equal(o.out, "refused scope=plan", 18);
}

static void
test_cost_is_charged_and_bounded(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", "--cost", "4", NULL), 1);
    assert_non_null(strstr(o.out, "never"));
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", "--cost", "3", NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", NULL), 1);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", "--cost", "0", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", "--cost", "-1", NULL),
                     64);
    assert_int_equal(
        test_tally(e->data, &o, "check", e->token, "search", "--cost", "4294967297", NULL), 64);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", "--cost", "x", NULL), 64);
}

static void
test_auth_comes_first(void **state)
{
    struct env *e = *state;
    char path[256];
    sqlite3 *db = NULL;
    char sql[256];

    /* unknown token with an unknown endpoint: unauthorized, not "unknown endpoint" */
    assert_int_equal(
        test_tally(e->data, &o, "check", "tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "nosuch", NULL),
        2);
    assert_string_equal(o.err, "tally: unauthorized\n");
    assert_int_equal(test_tally(e->data, &o, "check", "garbage", "search", NULL), 2);
    assert_string_equal(o.err, "tally: unauthorized\n");
    {
        char longtok[600];
        memset(longtok, 'a', sizeof(longtok) - 1);
        longtok[sizeof(longtok) - 1] = '\0';
        assert_int_equal(test_tally(e->data, &o, "check", longtok, "search", NULL), 2);
    }
    /* a valid token on an unknown endpoint: bad request, exit 64 */
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "nosuch", NULL), 64);
    /* expired: move the expiry into the past, as time passing would */
    assert_int_equal(test_tally(e->data, &o, "link", "create", "acme", "--expires", "1h", NULL), 0);
    {
        char tok[64];
        snprintf(tok, sizeof(tok), "%.36s", o.out);
        assert_int_equal(test_tally(e->data, &o, "check", tok, "search", NULL), 0);
        snprintf(path, sizeof(path), "%s/tally.db", e->data);
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        snprintf(sql, sizeof(sql), "UPDATE link SET expires_ms = 1000 WHERE expires_ms != 0");
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        reload(e);
        assert_int_equal(test_tally(e->data, &o, "check", tok, "search", NULL), 2);
        assert_string_equal(o.err, "tally: unauthorized\n");
    }
    /* revoked */
    assert_int_equal(test_tally(e->data, &o, "link", "revoke", e->token2, NULL), 0);
    assert_int_equal(test_tally(e->data, &o, "check", e->token2, "search", NULL), 2);
    assert_string_equal(o.err, "tally: unauthorized\n");
    /* restricted to another endpoint */
    assert_int_equal(
        test_tally(e->data, &o, "link", "create", "acme", "--endpoint", "export", NULL), 0);
    {
        char tok[64];
        snprintf(tok, sizeof(tok), "%.36s", o.out);
        assert_int_equal(test_tally(e->data, &o, "check", tok, "search", NULL), 2);
        assert_int_equal(test_tally(e->data, &o, "check", tok, "export", NULL), 0);
    }
}

static void
test_token_from_stdin(void **state)
{
    struct env *e = *state;
    char bin[512];
    char input[80];
    char *argv[] = {bin, "--data", e->data, "check", "-", "search", NULL};

    test_bin("tally", bin, sizeof(bin));
    snprintf(input, sizeof(input), "%s\n", e->token);
    assert_int_equal(test_run(argv, input, &o), 0);
    assert_int_equal(test_run(argv, "tly_nope\n", &o), 2);
    assert_int_equal(test_run(argv, "", &o), 64);
}

static void
test_concurrency_slots(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_tally(e->data, &o, "check", e->token, "export", NULL), 0);
    assert_int_equal(field(o.out, "lease="), 1);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "export", NULL), 0);
    assert_int_equal(field(o.out, "lease="), 2);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "export", NULL), 1);
    assert_memory_equal(o.out, "refused scope=concurrency retry_after=", 38);
    assert_true(field(o.out, "retry_after=") <= 30);
    /* slots are per link */
    assert_int_equal(test_tally(e->data, &o, "check", e->token2, "export", NULL), 0);
}

/* Many processes at once against a limit of 3 (endpoint) and 8 (plan): exactly
 * the limit is admitted, whatever the interleaving. */
static void
test_concurrent_processes_admit_exactly_the_limit(void **state)
{
    struct env *e = *state;
    enum { PROCS = 40 };
    pid_t pids[PROCS];
    int admitted = 0, refused = 0;
    int i;

    for (i = 0; i < PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            static struct test_out mine;
            _exit(
                test_tally(e->data, &mine, "check", i % 2 ? e->token : e->token2, "search", NULL));
        }
    }
    for (i = 0; i < PROCS; i++) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == 0)
            admitted++;
        else if (WEXITSTATUS(status) == 1)
            refused++;
        else
            fprintf(stderr, "check exited %d\n", WEXITSTATUS(status));
    }
    assert_int_equal(admitted, 6); /* 3 per link, within the plan's 8 */
    assert_int_equal(refused, PROCS - 6);
}

static void
test_no_daemon_is_unavailable(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_daemon_stop(&e->d), 0);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", NULL), 3);
    assert_non_null(strstr(o.err, "tallyd is not running"));
    assert_string_equal(o.out, "");
    /* a change with no daemon running is fine: it reads the database at start */
    assert_int_equal(test_tally(e->data, &o, "link", "revoke", e->token2, NULL), 0);
    if (test_daemon_start(&e->d, e->data, "--wait-ms=3000", NULL) != 0) {
        size_t len = 0;
        char *log = test_read_file(e->d.log, &len);
        fail_msg("tallyd did not restart: %s", log != NULL ? log : "(no log)");
    }
    assert_int_equal(test_tally(e->data, &o, "check", e->token2, "search", NULL), 2);
    assert_int_equal(test_tally(e->data, &o, "check", e->token, "search", NULL), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_check_admits_exactly_the_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_are_not_charged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cost_is_charged_and_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_comes_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_from_stdin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrency_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_processes_admit_exactly_the_limit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_no_daemon_is_unavailable, setup, teardown),
    };
    return cmocka_run_group_tests_name("cli_check", tests, NULL, NULL);
}

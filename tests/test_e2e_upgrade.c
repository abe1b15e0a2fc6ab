/*
 * Upgrade and downgrade through the real binaries. A data dir holding format-1 files (the
 * fixtures of tests/fixtures/v1, under a configuration made the same way) is served by today's
 * tallyd: the journal and the child file are upgraded in place on first use, every record is
 * replayed, and checks are admitted. A journal or child file stamped with a newer format makes
 * its tenant's requests 503 (never a silent reset), one JSON log line names the file and both
 * formats, and the file is left byte for byte as it was.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve_util.h"

#define FIXTURES TALLY_SOURCE_DIR "/tests/fixtures/v1"

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
    /* The fixtures' configuration (tests/fixtures/v1/README.md), plus a fail-closed endpoint. */
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000/1d", "--link-limit",
                   "50000/1d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--plan", "pro", "--limit",
                   "1000/1h", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "upload", "--plan", "pro", "--limit",
                   "200/1m", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "closed", "--plan", "pro", "--limit",
                   "1000/1h", "--on-unavailable", "closed", NULL);
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

static void
copy_file(const char *from, const char *to)
{
    size_t len = 0;
    char *bytes = test_read_file(from, &len);
    FILE *f;

    assert_non_null(bytes);
    f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(bytes);
}

static void
data_path(const struct env *e, const char *rel, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", e->s.data, rel);
}

static int64_t
file_version(const char *path)
{
    sqlite3 *sql = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;

    assert_int_equal(sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(sql, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(sql);
    return v;
}

static void
stamp(const char *path, int v)
{
    char text[64];
    sqlite3 *sql = NULL;

    assert_int_equal(sqlite3_open(path, &sql), SQLITE_OK);
    snprintf(text, sizeof(text), "PRAGMA user_version=%d", v);
    assert_int_equal(sqlite3_exec(sql, text, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(sql), SQLITE_OK);
}

/* A check that must be admitted; the log says why when it is not. */
static void
check_admitted(struct env *e, const char *endpoint)
{
    struct serve_http r;
    char *log;

    serve_check(&e->s, e->token, endpoint, &r);
    if (r.status == 200)
        return;
    log = serve_log(&e->s);
    fail_msg("%s: %d %s\n%s", endpoint, r.status, r.body, log != NULL ? log : "");
}

static void
test_v1_files_upgrade_under_tallyd(void **state)
{
    struct env *e = *state;
    char path[512];

    data_path(e, "tenants", path, sizeof(path));
    (void)mkdir(path, 0700);
    data_path(e, "tenants/acme", path, sizeof(path));
    (void)mkdir(path, 0700);
    data_path(e, "tenants/acme/endpoints", path, sizeof(path));
    (void)mkdir(path, 0700);
    data_path(e, "tenants/acme/ledger.db", path, sizeof(path));
    copy_file(FIXTURES "/ledger.db", path);
    data_path(e, "tenants/acme/endpoints/search.db", path, sizeof(path));
    copy_file(FIXTURES "/endpoints/search.db", path);
    data_path(e, "tenants/acme/endpoints/upload.db", path, sizeof(path));
    copy_file(FIXTURES "/endpoints/upload.db", path);

    serve_start(&e->s, NULL, NULL);
    check_admitted(e, "search");
    check_admitted(e, "upload");
    /* the 55 records of the fixture replayed (this start's EPOCH is committed with its
     * first answer, after the ready line) */
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"supervisor_ready\",\"tenant\":\"acme\""),
                     1);
    assert_int_equal(serve_log_count(&e->s, "\"records\":55,"), 1);
    assert_int_equal(serve_log_count(&e->s, "_open_failed"), 0);
    serve_stop(&e->s);
    data_path(e, "tenants/acme/ledger.db", path, sizeof(path));
    assert_int_equal(file_version(path), 2);
    data_path(e, "tenants/acme/endpoints/search.db", path, sizeof(path));
    assert_int_equal(file_version(path), 2);
    data_path(e, "tenants/acme/endpoints/upload.db", path, sizeof(path));
    assert_int_equal(file_version(path), 2);
}

struct newer_case {
    const char *rel;   /* the file stamped newer */
    const char *event; /* the line that names it */
};

static const struct newer_case newer_cases[] = {
    {"tenants/acme/ledger.db", "\"event\":\"supervisor_open_failed\",\"tenant\":\"acme\""},
    {"tenants/acme/endpoints/closed.db",
     "\"event\":\"child_open_failed\",\"tenant\":\"acme\",\"endpoint\":\"closed\""},
};

static void
run_newer(struct env *e, const struct newer_case *c)
{
    struct serve_http r;
    char path[512];
    char *before, *after, *log, *p;
    size_t len = 0, len_after = 0;
    int i;

    /* the files exist, written by today's tallyd; served before (a ledger), so its supervisor
     * answers and takes the leases back at the stop: the child holds none afterwards */
    serve_ledger_make(&e->s, "acme");
    serve_start(&e->s, NULL, NULL);
    serve_check(&e->s, e->token, "closed", &r);
    assert_int_equal(r.status, 200);
    serve_stop(&e->s);
    data_path(e, c->rel, path, sizeof(path));
    stamp(path, 3);
    before = test_read_file(path, &len);
    assert_non_null(before);

    serve_start(&e->s, "--wait-ms=200", NULL);
    for (i = 0; i < 3; i++) {
        serve_check(&e->s, e->token, "closed", &r);
        assert_int_equal(r.status, 503);
    }
    log = serve_log(&e->s);
    p = strstr(log, c->event);
    if (p == NULL)
        fail_msg("no %s line in:\n%s", c->event, log);
    printf("# %.*s\n", (int)(strchr(p, '\n') - p), p);
    assert_non_null(strstr(p, "database schema is newer than this binary"));
    assert_non_null(strstr(p, "file format 3 is newer than this binary's 2"));
    assert_non_null(strstr(p, c->rel));
    free(log);
    serve_stop(&e->s);
    after = test_read_file(path, &len_after);
    assert_non_null(after);
    assert_int_equal(len_after, len);
    assert_memory_equal(after, before, len);
    free(before);
    free(after);
}

static void
test_newer_journal_refused_and_untouched(void **state)
{
    run_newer(*state, &newer_cases[0]);
}

static void
test_newer_child_file_refused_and_untouched(void **state)
{
    run_newer(*state, &newer_cases[1]);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_v1_files_upgrade_under_tallyd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_journal_refused_and_untouched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_child_file_refused_and_untouched, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("e2e_upgrade", tests, NULL, NULL);
}

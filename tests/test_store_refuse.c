/*
 * Files that must not be opened as they are: a format-1 journal whose upgrade fails (a record
 * of the wrong size) stays format 1 with every record, and a journal or child file stamped with
 * a newer format (as a newer tally leaves it, its last commit maybe still in the WAL) is refused
 * with one clear line naming the file and both formats, and left byte for byte as it was.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
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

#include "store_child.h"
#include "store_journal.h"
#include "test_support.h"
#include "upgrade_util.h"

/* A journal whose records failed to upgrade (a format-1 record of the wrong size): the open
 * fails with TALLY_ECORRUPT and the file keeps format 1 and every record. */
static void
test_v1_journal_failed_upgrade_changes_nothing(void **state)
{
    char path[512];
    sqlite3 *sql = NULL;
    store_db *db = NULL;
    char *before;
    size_t len = 0;

    (void)state;
    place("ledger.db", "tenants/acme/ledger.db");
    path_of(path, sizeof(path), "tenants/acme/ledger.db");
    assert_int_equal(sqlite3_open(path, &sql), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(sql, "INSERT INTO journal(rec) VALUES(x'01000000')", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(sql); /* the last connection: checkpointed, the WAL removed */
    before = bytes_of(path, &len);
    assert_int_equal(store_journal_open(path, STORE_OPEN_PRIVATE, &journal_up, &db),
                     TALLY_ECORRUPT);
    assert_null(db);
    assert_same_bytes(path, before, len);
    assert_int_equal(file_version(path), 1);
    free(before);
}

enum which { JOURNAL, CHILD };

static int
open_as(enum which w, const char *path, store_db **db)
{
    return w == JOURNAL ? store_journal_open(path, STORE_OPEN_PRIVATE, &journal_up, db)
                        : store_child_open(path, STORE_OPEN_PRIVATE, &child_up, db);
}

struct newer_case {
    const char *name;
    enum which which;
    const char *fixture, *rel;
    bool upgrade_first; /* stamp a file of today's format rather than format 1 */
    bool keep_wal;      /* the newer binary's last commit still in the WAL */
};

static const struct newer_case newer_cases[] = {
    {"journal", JOURNAL, "ledger.db", "tenants/acme/ledger.db", true, false},
    {"journal, WAL pending", JOURNAL, "ledger.db", "tenants/acme/ledger.db", true, true},
    {"journal from format 1", JOURNAL, "ledger.db", "tenants/acme/ledger.db", false, false},
    {"child", CHILD, "endpoints/search.db", "tenants/acme/endpoints/search.db", true, false},
    {"child, WAL pending", CHILD, "endpoints/search.db", "tenants/acme/endpoints/search.db", true,
     true},
};

/* Stamps the file at `path` with format `v`, as a newer binary would have left it. */
static void
stamp(const char *path, int v, bool keep_wal)
{
    char text[64];
    sqlite3 *sql = NULL;

    assert_int_equal(sqlite3_open(path, &sql), SQLITE_OK);
    if (keep_wal)
        assert_int_equal(sqlite3_db_config(sql, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL),
                         SQLITE_OK);
    snprintf(text, sizeof(text), "PRAGMA user_version=%d", v);
    assert_int_equal(sqlite3_exec(sql, text, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(sql), SQLITE_OK);
}

static void
test_newer_file_refused_and_left_untouched(void **state)
{
    char path[512], wal[520], want[64];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(newer_cases) / sizeof(newer_cases[0]); i++) {
        const struct newer_case *c = &newer_cases[i];
        int format = c->which == JOURNAL ? STORE_JOURNAL_FORMAT : STORE_CHILD_FORMAT;
        char *before, *wal_before = NULL;
        size_t len = 0, wal_len = 0;
        store_db *db = NULL;

        place(c->fixture, c->rel);
        path_of(path, sizeof(path), c->rel);
        snprintf(wal, sizeof(wal), "%s-wal", path);
        if (c->upgrade_first) {
            assert_int_equal(open_as(c->which, path, &db), TALLY_OK);
            store_db_close(db);
            db = NULL;
        }
        stamp(path, format + 1, c->keep_wal);
        before = bytes_of(path, &len);
        if (c->keep_wal) {
            wal_before = bytes_of(wal, &wal_len);
            assert_true(wal_len > 0);
        }
        assert_int_equal(open_as(c->which, path, &db), TALLY_ESCHEMA);
        assert_null(db);
        /* One clear line: which file, its format, ours, and that it was left alone. */
        snprintf(want, sizeof(want), "file format %d is newer than this binary's %d", format + 1,
                 format);
        if (strstr(store_open_errmsg(), want) == NULL || strstr(store_open_errmsg(), path) == NULL)
            fail_msg("%s: unclear refusal: %s", c->name, store_open_errmsg());
        assert_non_null(strstr(store_open_errmsg(), "left as it is"));
        assert_same_bytes(path, before, len);
        if (c->keep_wal)
            assert_same_bytes(wal, wal_before, wal_len);
        assert_int_equal(file_version(path), format + 1);
        free(before);
        free(wal_before);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_journal_failed_upgrade_changes_nothing),
        cmocka_unit_test(test_newer_file_refused_and_left_untouched),
    };

    return cmocka_run_group_tests_name("store_refuse", tests, upgrade_setup, upgrade_teardown);
}

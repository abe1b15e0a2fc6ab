/*
 * What the data-at-rest suites share: a fresh data dir per test holding the format-1
 * fixtures (tests/fixtures/v1) under the configuration they were made with, their paths,
 * their bytes and their format versions.
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
#include <sys/stat.h>

#include "sup_child_codec.h"
#include "sup_journal_codec.h"
#include "test_support.h"
#include "upgrade_util.h"

#define FIXTURES TALLY_SOURCE_DIR "/tests/fixtures/v1"

static char dir[64];
char data[128];
const struct store_upgrade journal_up = {sup_record_upgrade, NULL};
const struct store_upgrade child_up = {sup_child_rec_upgrade, NULL};

static void
copy_file(const char *from, const char *to)
{
    size_t len = 0;
    char *bytes = test_read_file(from, &len);
    FILE *f;

    if (bytes == NULL)
        fail_msg("missing fixture %s", from);
    f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(bytes);
}

void
path_of(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", data, rel);
}

/* A fresh data dir with the fixture's config, and fixture `name` at `rel`. */
void
place(const char *name, const char *rel)
{
    char from[512], to[512];

    test_rmtree(data);
    assert_int_equal(mkdir(data, 0700), 0);
    path_of(to, sizeof(to), "tenants");
    assert_int_equal(mkdir(to, 0700), 0);
    path_of(to, sizeof(to), "tenants/acme");
    assert_int_equal(mkdir(to, 0700), 0);
    path_of(to, sizeof(to), "tenants/acme/endpoints");
    assert_int_equal(mkdir(to, 0700), 0);
    path_of(to, sizeof(to), "tally.db");
    copy_file(FIXTURES "/tally.db", to);
    snprintf(from, sizeof(from), "%s/%s", FIXTURES, name);
    path_of(to, sizeof(to), rel);
    copy_file(from, to);
}

int64_t
user_version(sqlite3 *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;

    assert_int_equal(sqlite3_prepare_v2(sql, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int64_t
file_version(const char *path)
{
    sqlite3 *sql = NULL;
    int64_t v;

    assert_int_equal(sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    v = user_version(sql);
    sqlite3_close(sql);
    return v;
}

char *
bytes_of(const char *path, size_t *len)
{
    char *b = test_read_file(path, len);

    assert_non_null(b);
    return b;
}

void
assert_same_bytes(const char *path, const char *before, size_t len)
{
    size_t now_len = 0;
    char *now = bytes_of(path, &now_len);

    assert_int_equal(now_len, len);
    assert_memory_equal(now, before, len);
    free(now);
}

int
upgrade_setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    snprintf(data, sizeof(data), "%s/data", dir);
    return 0;
}

int
upgrade_teardown(void **state)
{
    (void)state;
    test_rmtree(dir);
    return 0;
}

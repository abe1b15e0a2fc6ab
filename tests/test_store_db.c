/*
 * store_db on real SQLite files: forward migrations by user_version, a file
 * newer than the binary refused, statements prepared once and reused, WAL
 * mode, 0600 files whatever the umask, corrupt and read-only files turned
 * into clear errors, and every allocation of open failed in turn.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_config.h"
#include "test_alloc.h"
#include "test_support.h"

static char dir[64];

static const char *const mig_v2[] = {
    "CREATE TABLE t(k TEXT PRIMARY KEY, v INTEGER NOT NULL) STRICT",
    "ALTER TABLE t ADD COLUMN note TEXT NOT NULL DEFAULT ''",
};
enum { S_PUT, S_GET, S__N };
static const char *const stmts[S__N] = {
    [S_PUT] = "INSERT OR REPLACE INTO t(k, v) VALUES(?1, ?2)",
    [S_GET] = "SELECT v FROM t WHERE k = ?1",
};
static const struct store_schema schema_v1 = {"test", mig_v2, 1, stmts, S__N};
static const struct store_schema schema_v2 = {"test", mig_v2, 2, stmts, S__N};

static int
setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    test_rmtree(dir);
    return 0;
}

static int64_t
get(store_db *db, const char *k)
{
    sqlite3_stmt *st = store_db_stmt(db, S_GET);
    int64_t v = -1;

    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return v;
}

static void
put(store_db *db, const char *k, int64_t v)
{
    sqlite3_stmt *st = store_db_stmt(db, S_PUT);

    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
}

static void
test_migrations_run_forward_once(void **state)
{
    char path[128];
    store_db *db = NULL;
    int i;

    (void)state;
    snprintf(path, sizeof(path), "%s/m.db", dir);
    assert_int_equal(store_db_open(path, &schema_v1, 0, &db), TALLY_ENOTFOUND);
    assert_null(db);
    assert_int_equal(store_db_open(path, &schema_v1, STORE_OPEN_CREATE, &db), TALLY_OK);
    for (i = 0; i < 1000; i++) /* the same prepared statement, reused */
        put(db, "a", i);
    assert_int_equal(get(db, "a"), 999);
    store_db_close(db);
    assert_int_equal(store_db_open(path, &schema_v2, 0, &db), TALLY_OK);
    assert_int_equal(get(db, "a"), 999);
    assert_int_equal(store_db_exec(db, "UPDATE t SET note = 'x'"), TALLY_OK);
    store_db_close(db);
    /* reopening at the same version runs nothing again */
    assert_int_equal(store_db_open(path, &schema_v2, 0, &db), TALLY_OK);
    store_db_close(db);
    /* an older binary refuses a newer file, with the detail */
    assert_int_equal(store_db_open(path, &schema_v1, 0, &db), TALLY_ESCHEMA);
    assert_non_null(strstr(store_open_errmsg(), "newer"));
}

static void
test_files_are_private_and_wal(void **state)
{
    char path[128];
    store_db *db = NULL;
    sqlite3_stmt *st = NULL;
    struct stat sb;
    mode_t old = umask(0);

    (void)state;
    snprintf(path, sizeof(path), "%s/p.db", dir);
    assert_int_equal(store_db_open(path, &schema_v2, STORE_OPEN_CREATE, &db), TALLY_OK);
    umask(old);
    put(db, "x", 1);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_true(test_dir_private(dir));
    assert_int_equal(sqlite3_prepare_v2(store_db_handle(db), "PRAGMA journal_mode", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    store_db_close(db);
}

static void
test_transactions_roll_back(void **state)
{
    char path[128];
    store_db *db = NULL;

    (void)state;
    snprintf(path, sizeof(path), "%s/t.db", dir);
    assert_int_equal(store_db_open(path, &schema_v2, STORE_OPEN_CREATE, &db), TALLY_OK);
    assert_int_equal(store_db_begin(db), TALLY_OK);
    put(db, "x", 1);
    store_db_rollback(db);
    assert_int_equal(get(db, "x"), -1);
    assert_int_equal(store_db_begin(db), TALLY_OK);
    put(db, "x", 2);
    assert_int_equal(store_db_commit(db), TALLY_OK);
    assert_int_equal(get(db, "x"), 2);
    /* a bad statement is an error with detail, not a crash */
    assert_int_equal(store_db_exec(db, "SELECT nope FROM nowhere"), TALLY_ESTORE);
    assert_non_null(strstr(store_db_errmsg(db), "nowhere"));
    store_db_close(db);
    store_db_close(NULL);
}

static void
test_corrupt_and_unwritable_files(void **state)
{
    char path[128];
    store_db *db = NULL;
    FILE *f;

    (void)state;
    snprintf(path, sizeof(path), "%s/c.db", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 512; i++)
        fputs("garbage!", f);
    fclose(f);
    assert_int_equal(store_db_open(path, &schema_v2, 0, &db), TALLY_ECORRUPT);
    assert_non_null(strstr(store_open_errmsg(), "c.db"));
    /* a directory that does not exist */
    assert_int_equal(store_db_open("/nonexistent/dir/x.db", &schema_v2, STORE_OPEN_CREATE, &db),
                     TALLY_EIO);
}

static void
test_open_survives_each_allocation_failing(void **state)
{
    char path[128];
    store_db *db = NULL;
    uint64_t n;
    int rc = TALLY_ENOMEM;

    (void)state;
    snprintf(path, sizeof(path), "%s/a.db", dir);
    for (n = 1; n < 50 && rc != TALLY_OK; n++) {
        tally_alloc_fail_at(n);
        rc = store_db_open(path, &schema_v2, STORE_OPEN_CREATE, &db);
        tally_alloc_fail_at(0);
        if (rc != TALLY_OK) {
            assert_int_equal(rc, TALLY_ENOMEM);
            assert_null(db);
        }
    }
    assert_int_equal(rc, TALLY_OK);
    store_db_close(db);
}

static void
test_datadir_init_and_key(void **state)
{
    char data[128];
    unsigned char *key = NULL;

    (void)state;
    snprintf(data, sizeof(data), "%s/data", dir);
    assert_int_equal(store_datadir_check(data), TALLY_ENODATA);
    assert_int_equal(store_key_load(data, &key), TALLY_ENOKEY);
    assert_int_equal(store_datadir_init(data), TALLY_OK);
    assert_int_equal(store_datadir_init(data), TALLY_EEXIST);
    assert_int_equal(store_datadir_check(data), TALLY_OK);
    assert_int_equal(store_key_load(data, &key), TALLY_OK);
    assert_non_null(key);
    store_key_free(key);
    store_key_free(NULL);
    assert_true(test_dir_private(data));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrations_run_forward_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files_are_private_and_wal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transactions_roll_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_and_unwritable_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_survives_each_allocation_failing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_datadir_init_and_key, setup, teardown),
    };
    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests_name("store_db", tests, NULL, NULL);
}

/*
 * The power-loss hook (tests/support/powerloss_vfs.c) and store_db_sync(), on
 * real SQLite files: a child process opens a file with STORE_OPEN_PRIVATE, commits
 * ten rows, reads them back (held writes are visible), tells the parent how
 * many it sees and kills itself with SIGKILL. What the parent then finds on
 * disk is what an OS crash would have left: nothing under synchronous=NORMAL,
 * the rows up to a store_db_sync() call, every row under FULL. A file opened
 * without STORE_OPEN_PRIVATE keeps SQLite's default VFS (store_private_vfs_set).
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"
#include "test_powerloss.h"
#include "test_support.h"

#define ROWS 10

static const char *const migrations[] = {"CREATE TABLE t(x INTEGER NOT NULL) STRICT"};
static const char *const statements[] = {"INSERT INTO t(x) VALUES(?1)", "SELECT count(*) FROM t"};
static const struct store_schema schema = {"powerloss", migrations, 1, statements, 2};

struct fx {
    char dir[64];
    char path[128];
};

static int
setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));

    assert_non_null(fx);
    test_tmpdir(fx->dir, sizeof(fx->dir));
    snprintf(fx->path, sizeof(fx->path), "%s/p.db", fx->dir);
    *state = fx;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *fx = *state;

    test_rmtree(fx->dir);
    free(fx);
    return 0;
}

/* The child: ROWS commits, a sync after `sync_after` of them (0: none), the
 * count it reads back into the pipe, then SIGKILL. Never returns. */
static void
child(const char *path, unsigned flags, int sync_after, int fd)
{
    store_db *db = NULL;
    int64_t seen = -1;

    if (store_db_open(path, &schema, STORE_OPEN_CREATE | flags, &db) == TALLY_OK) {
        for (int i = 1; i <= ROWS; i++) {
            sqlite3_stmt *st = store_db_stmt(db, 0);
            sqlite3_bind_int64(st, 1, i);
            if (store_db_begin(db) != TALLY_OK || sqlite3_step(st) != SQLITE_DONE ||
                store_db_commit(db) != TALLY_OK)
                break;
            if (i == sync_after && store_db_sync(db) != TALLY_OK)
                break;
        }
        sqlite3_stmt *q = store_db_stmt(db, 1);
        if (sqlite3_step(q) == SQLITE_ROW)
            seen = sqlite3_column_int64(q, 0);
    }
    if (write(fd, &seen, sizeof(seen)) != sizeof(seen))
        _exit(2);
    raise(SIGKILL);
    _exit(3);
}

/* Rows on disk after the child's crash (0 when the table never got there). */
static int64_t
crash_and_count(const char *path, unsigned flags, int sync_after, int64_t *seen)
{
    int p[2], status = 0;
    pid_t pid;
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int64_t rows = 0;

    assert_int_equal(pipe(p), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        child(path, flags, sync_after, p[1]);
    }
    close(p[1]);
    assert_int_equal(read(p[0], seen, sizeof(*seen)), sizeof(*seen));
    close(p[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* the default VFS, as the next process after a crash would open it */
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        rows = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    return rows;
}

static void
test_powerloss_hook_is_on(void **state)
{
    (void)state;
    assert_true(test_powerloss_register());
}

/* A file other processes open (no STORE_OPEN_PRIVATE) bypasses the shim: its
 * NORMAL commits reach the OS and survive the process. */
static void
test_shared_files_keep_the_default_vfs(void **state)
{
    struct fx *fx = *state;
    int64_t seen = 0;

    assert_int_equal(crash_and_count(fx->path, 0, 0, &seen), ROWS);
    assert_int_equal(seen, ROWS);
}

static void
test_normal_commits_vanish_with_the_process(void **state)
{
    struct fx *fx = *state;
    int64_t seen = 0;

    assert_int_equal(crash_and_count(fx->path, STORE_OPEN_PRIVATE, 0, &seen), 0);
    assert_int_equal(seen, ROWS); /* the process itself saw every row */
}

static void
test_sync_makes_earlier_commits_durable(void **state)
{
    struct fx *fx = *state;
    int64_t seen = 0;

    assert_int_equal(crash_and_count(fx->path, STORE_OPEN_PRIVATE, 4, &seen), 4);
    assert_int_equal(seen, ROWS);
}

static void
test_full_commits_survive(void **state)
{
    struct fx *fx = *state;
    int64_t seen = 0;

    assert_int_equal(crash_and_count(fx->path, STORE_OPEN_PRIVATE | STORE_OPEN_SYNC_FULL, 0, &seen),
                     ROWS);
    assert_int_equal(seen, ROWS);
}

static void
test_crashes_accumulate_only_synced_rows(void **state)
{
    struct fx *fx = *state;
    int64_t seen = 0;

    /* three crashes in a row on the same file: 7 synced each time, 3 lost each time */
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(crash_and_count(fx->path, STORE_OPEN_PRIVATE, 7, &seen), 7 * i);
        assert_int_equal(seen, 7 * (i - 1) + ROWS);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_powerloss_hook_is_on),
        cmocka_unit_test_setup_teardown(test_normal_commits_vanish_with_the_process, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sync_makes_earlier_commits_durable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_commits_survive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crashes_accumulate_only_synced_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_files_keep_the_default_vfs, setup, teardown),
    };

    if (!test_powerloss_register())
        return 1;
    return cmocka_run_group_tests_name("store_powerloss", tests, NULL, NULL);
}

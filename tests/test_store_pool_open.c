/*
 * Files kept open ahead in DATA/pool (store_child_pool_open, store_journal_pool_open): a
 * create with the same flags links one into place, the connection writes the file and WAL at
 * their new names (read back after a close and after a kill -9 of the writer), its close
 * checkpoints as any, a file already there is opened as it is, and a drop closes and removes
 * them.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store_child.h"
#include "store_journal.h"
#include "store_pool_util.h"
#include "upgrade_util.h"

/* Names in the pool that start with ".open-": files kept open. */
static int
held_count(void)
{
    DIR *d = opendir(pool);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    /* One thread reads the directory. */
    /* cppcheck-suppress readdirCalled */
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, ".open-", 6) == 0 && strstr(e->d_name, "-wal") == NULL;
    closedir(d);
    return n;
}

static const unsigned child_flags =
    STORE_OPEN_PRIVATE | STORE_OPEN_EXCLUSIVE | STORE_OPEN_PERSIST_WAL | STORE_OPEN_SYNC_FULL;

/* Two child files kept open: a create with their flags links one into place (its inode, one
 * link, its WAL beside it), the connection's commits land in the WAL at the new name, its close
 * checkpoints (the WAL emptied, the file holding the rows) and the file reads back. A create
 * with other flags renames a plain pool file instead; a file already at the path is opened as
 * it is and the open one stays held. */
static void
test_open_files_are_linked_into_place(void **state)
{
    char path[256], wal[264];
    store_db *db = NULL;
    unsigned made = 0;
    uint64_t inc = 0;
    struct stat sb, wb;

    (void)state;
    assert_int_equal(store_child_pool_fill(4, &made), TALLY_OK);
    assert_int_equal(store_child_pool_open(child_flags | STORE_OPEN_CREATE, 2, &made), TALLY_OK);
    assert_int_equal(made, 2);
    assert_int_equal(held_count(), 2);
    assert_int_equal(pool_count("child", 8), 4); /* made apart from the pool's files */
    assert_int_equal(store_child_pool_open(child_flags, 2, &made), TALLY_OK);
    assert_int_equal(made, 0); /* held already */

    snprintf(path, sizeof(path), "%s/search.db", dir);
    snprintf(wal, sizeof(wal), "%s-wal", path);
    assert_int_equal(store_child_open(path, child_flags, &child_up, &db), TALLY_OK);
    assert_int_equal(held_count(), 1);
    assert_int_equal(pool_count("child", 8), 4); /* no plain pool file used */
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_nlink, 1);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(stat(wal, &wb), 0);
    assert_false(wal_second_frame(wal));
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 1);
    {
        struct stat after;

        assert_int_equal(stat(wal, &after), 0);
        assert_int_equal(after.st_ino, wb.st_ino);
        assert_int_equal(after.st_size, wb.st_size); /* within the padding */
        assert_true(wal_second_frame(wal));          /* the commit went to the moved WAL */
    }
    store_db_close(db);
    assert_int_equal(stat(wal, &wb), 0);
    assert_int_equal(wb.st_size, 0); /* checkpointed at the close, kept empty */
    assert_int_equal(store_child_open(path, child_flags, &child_up, &db), TALLY_OK);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 2);
    assert_int_equal(store_db_exec(db, "PRAGMA integrity_check"), TALLY_OK);
    store_db_close(db);
    assert_int_equal(held_count(), 1); /* an existing file: nothing taken */

    /* Other flags: a plain pool file renamed into place, the open one left. */
    snprintf(path, sizeof(path), "%s/other.db", dir);
    assert_int_equal(store_child_open(path, STORE_OPEN_PRIVATE, &child_up, &db), TALLY_OK);
    store_db_close(db);
    assert_int_equal(held_count(), 1);
    assert_int_equal(pool_count("child", 8), 3);

    store_pool_open_drop();
    assert_int_equal(held_count(), 0);
    assert_int_equal(pool_count("child", 8), 3);
}

/* A ledger kept open, as a first turn opens one: records appended at its new name, the WAL
 * kept at the close (store_db_close_keep_wal), and another connection opening the file by
 * its name reads them. */
static void
test_open_ledgers_are_linked_into_place(void **state)
{
    const unsigned flags =
        STORE_OPEN_PRIVATE | STORE_OPEN_EXCLUSIVE | STORE_OPEN_PERSIST_WAL | STORE_OPEN_SYNC_FULL;
    char path[256];
    store_db *db = NULL;
    unsigned made = 0;

    (void)state;
    assert_int_equal(store_journal_pool_open(flags, 1, &made), TALLY_OK);
    assert_int_equal(made, 1);
    assert_int_equal(pool_count("ledger", 8), 0); /* made apart from the pool's files */
    snprintf(path, sizeof(path), "%s/ledger.db", dir);
    assert_int_equal(store_journal_open(path, flags, &journal_up, &db), TALLY_OK);
    assert_int_equal(held_count(), 0);
    assert_int_equal(store_journal_append(db, 3, enc_bytes, (void *)(intptr_t)40), TALLY_OK);
    store_db_close_keep_wal(db);
    ledger_reads_back(path, 3);
}

/* A writer killed (-9) right after its first commit on a file kept open and linked into
 * place: the commit is in the file's WAL at its new name, and the next open reads it. */
static void
test_open_file_commit_survives_kill9(void **state)
{
    char path[256];
    store_db *db = NULL;
    unsigned made = 0;
    uint64_t inc = 0;
    int status = 0;
    pid_t pid;

    (void)state;
    snprintf(path, sizeof(path), "%s/search.db", dir);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child: no cmocka here; its exit status tells what failed. */
        if (store_child_pool_open(child_flags, 1, &made) != TALLY_OK || made != 1)
            _exit(2);
        if (store_child_open(path, child_flags, &child_up, &db) != TALLY_OK || held_count() != 0)
            _exit(3);
        if (store_child_incarnation_next(db, &inc, NULL, NULL) != TALLY_OK || inc != 1)
            _exit(4);
        kill(getpid(), SIGKILL);
        _exit(5);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_int_equal(store_child_open(path, child_flags, &child_up, &db), TALLY_OK);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 2);
    assert_int_equal(store_db_exec(db, "PRAGMA integrity_check"), TALLY_OK);
    store_db_close(db);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_files_are_linked_into_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_ledgers_are_linked_into_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_file_commit_survives_kill9, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

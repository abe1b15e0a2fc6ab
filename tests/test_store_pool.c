/*
 * New files made ahead (DATA/pool): a fill writes synced files under their pool names; a new
 * ledger or child file is one of them renamed into place (same inode, one link, the pool one
 * file shorter) and works as a file written on the spot; an empty pool, or a pool on another
 * filesystem, leaves creation as it was; two threads creating files at once never get the
 * same pool file; a start removes what an interrupted fill left; ledgers and child files alike
 * come with their WAL started (files kept open ahead: test_store_pool_open.c).
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
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store_child.h"
#include "store_journal.h"
#include "store_pool_util.h"
#include "test_support.h"
#include "upgrade_util.h"

/* Opens a new child file at dir/NAME, bumps its incarnation, writes a row and reads it back:
 * the file works. Returns its inode. */
static ino_t
child_new(const char *name)
{
    char path[256];
    store_db *db = NULL;
    uint64_t inc = 0;
    struct stat sb;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_int_equal(
        store_child_open(path, STORE_OPEN_PRIVATE | STORE_OPEN_SYNC_FULL, &child_up, &db),
        TALLY_OK);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 1);
    store_db_close(db);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_nlink, 1);
    assert_int_equal(sb.st_mode & 0777, 0600);
    /* Opened again: the incarnation written above is there. */
    assert_int_equal(store_child_open(path, STORE_OPEN_PRIVATE, &child_up, &db), TALLY_OK);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 2);
    store_db_close(db);
    return sb.st_ino;
}

static void
test_new_files_come_from_the_pool(void **state)
{
    unsigned made = 0;
    ino_t inos[4];
    char name[64];

    (void)state;
    assert_int_equal(store_child_pool_fill(4, &made), TALLY_OK);
    assert_int_equal(made, 4);
    assert_int_equal(store_child_pool_fill(4, &made), TALLY_OK);
    assert_int_equal(made, 0); /* full already */
    for (unsigned k = 0; k < 4; k++) {
        snprintf(name, sizeof(name), "child-%u.db", k);
        inos[k] = pool_ino(name);
        assert_true(inos[k] != 0);
    }
    for (unsigned i = 0; i < 4; i++) {
        ino_t got;
        bool found = false;

        snprintf(name, sizeof(name), "e%u.db", i);
        got = child_new(name);
        for (unsigned k = 0; k < 4; k++)
            found = found || got == inos[k];
        assert_true(found);
        assert_int_equal(pool_count("child", 8), 3 - (int)i);
    }
    /* The pool is empty: the image is written on the spot, as without a pool. */
    {
        ino_t got = child_new("e4.db");

        for (unsigned k = 0; k < 4; k++)
            assert_true(got != inos[k]);
    }
    assert_int_equal(store_child_pool_fill(4, &made), TALLY_OK);
    assert_int_equal(made, 4);
}

static void
test_ledgers_come_from_the_pool(void **state)
{
    unsigned made = 0;
    char path[256];
    store_db *db = NULL;
    struct stat sb;
    ino_t ino;

    (void)state;
    assert_int_equal(store_journal_pool_fill(2, &made), TALLY_OK);
    assert_int_equal(made, 2);
    ino = pool_ino("ledger-0.db");
    assert_true(ino != 0);
    assert_int_equal(pool_count("child", 8), 0); /* each schema its own names */
    snprintf(path, sizeof(path), "%s/ledger.db", dir);
    assert_int_equal(store_journal_open(path, STORE_OPEN_PRIVATE, &journal_up, &db), TALLY_OK);
    store_db_close(db);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_ino, ino);
    assert_int_equal(sb.st_nlink, 1);
    assert_int_equal(pool_count("ledger", 8), 1);
    /* An existing file is opened as it is: the pool is not touched. */
    assert_int_equal(store_journal_open(path, STORE_OPEN_PRIVATE, &journal_up, &db), TALLY_OK);
    store_db_close(db);
    assert_int_equal(pool_count("ledger", 8), 1);
}

/* The first 32 bytes (the header: magic, page size, checkpoint sequence, salts) of `path`. */
static void
wal_header(const char *path, unsigned char out[32])
{
    int fd = open(path, O_RDONLY);

    assert_true(fd >= 0);
    assert_int_equal(read(fd, out, 32), 32);
    close(fd);
}

/* A pooled WAL, before and after its file's first commit. */
struct pooled_wal {
    char pooled[256], wal[264];
    struct stat at_fill;
    unsigned char header[32];
};

/* After the fill: the pool's WAL of `name` (ledger-0.db, child-0.db), a header and a frame,
 * inside zeros written to four frames (of 4 KiB pages). */
static void
wal_filled(struct pooled_wal *w, const char *name, const char *path)
{
    snprintf(w->pooled, sizeof(w->pooled), "%s/%s-wal", pool, name);
    snprintf(w->wal, sizeof(w->wal), "%s-wal", path);
    assert_int_equal(stat(w->pooled, &w->at_fill), 0);
    assert_int_equal(w->at_fill.st_size, 32 + 4 * (24 + 4096));
    assert_true(w->at_fill.st_blocks * 512 >= w->at_fill.st_size); /* written, not sparse */
}

/* After the open: the WAL moved into place with the file (the same inode). */
static void
wal_moved(struct pooled_wal *w)
{
    struct stat b;

    assert_int_equal(access(w->pooled, F_OK), -1);
    assert_int_equal(stat(w->wal, &b), 0);
    assert_int_equal(b.st_ino, w->at_fill.st_ino);
    wal_header(w->wal, w->header);
}

/* After the first commit: appended to (the header as the fill wrote it: no new WAL, no
 * restart), within the padding: the WAL's size did not change, and the bytes after the fill's
 * frame are no longer zeros. */
static void
wal_appended(const struct pooled_wal *w)
{
    unsigned char after[32];
    struct stat b;

    wal_header(w->wal, after);
    assert_memory_equal(w->header, after, 32);
    assert_int_equal(stat(w->wal, &b), 0);
    assert_int_equal(b.st_size, w->at_fill.st_size);
    assert_true(wal_second_frame(w->wal));
}

/* A pooled ledger comes with its WAL started: the WAL is moved into place with the file, and
 * the first commit appends to it. The file then works as any: records written, read back
 * after a reopen, integrity ok. */
static void
test_ledgers_come_with_their_wal_started(void **state)
{
    struct pooled_wal w;
    char path[256];
    store_db *db = NULL;
    unsigned made = 0;

    (void)state;
    assert_int_equal(store_journal_pool_fill(1, &made), TALLY_OK);
    assert_int_equal(made, 1);
    snprintf(path, sizeof(path), "%s/ledger.db", dir);
    wal_filled(&w, "ledger-0.db", path);
    assert_int_equal(
        store_journal_open(path, STORE_OPEN_PRIVATE | STORE_OPEN_SYNC_FULL, &journal_up, &db),
        TALLY_OK);
    wal_moved(&w);
    assert_int_equal(store_journal_append(db, 3, enc_bytes, (void *)(intptr_t)40), TALLY_OK);
    wal_appended(&w);
    store_db_close(db);
    ledger_reads_back(path, 3);
}

/* A pooled child file comes with its WAL started too, opened as tallyd opens one (exclusive
 * locking, the WAL kept): the first commit, the incarnation, appends to the pooled WAL, and
 * the file reads back after a reopen. */
static void
test_child_files_come_with_their_wal_started(void **state)
{
    const unsigned flags =
        STORE_OPEN_PRIVATE | STORE_OPEN_EXCLUSIVE | STORE_OPEN_PERSIST_WAL | STORE_OPEN_SYNC_FULL;
    struct pooled_wal w;
    char path[256];
    store_db *db = NULL;
    unsigned made = 0;
    uint64_t inc = 0;

    (void)state;
    assert_int_equal(store_child_pool_fill(1, &made), TALLY_OK);
    assert_int_equal(made, 1);
    snprintf(path, sizeof(path), "%s/search.db", dir);
    wal_filled(&w, "child-0.db", path);
    assert_int_equal(store_child_open(path, flags, &child_up, &db), TALLY_OK);
    wal_moved(&w);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 1);
    wal_appended(&w);
    store_db_close(db);
    assert_int_equal(store_child_open(path, flags, &child_up, &db), TALLY_OK);
    assert_int_equal(store_child_incarnation_next(db, &inc, NULL, NULL), TALLY_OK);
    assert_int_equal(inc, 2);
    assert_int_equal(store_db_exec(db, "PRAGMA integrity_check"), TALLY_OK);
    store_db_close(db);
}

static void
test_clean_removes_what_a_fill_left(void **state)
{
    char path[256];
    unsigned made = 0;
    int fd;

    (void)state;
    assert_int_equal(store_child_pool_fill(1, &made), TALLY_OK);
    snprintf(path, sizeof(path), "%s/.child-1.db.12345", pool);
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "half", 4), 4);
    close(fd);
    assert_int_equal(store_pool_clean(pool), TALLY_OK);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(pool_count("child", 8), 1); /* a whole file stays */
}

/* A pool on another filesystem than the file: the rename fails, the image is written in
 * place and the pool keeps its file. */
static void
test_pool_elsewhere_is_not_used(void **state)
{
    char other[64], opool[128];
    struct stat a, b;
    unsigned made = 0;

    (void)state;
    snprintf(other, sizeof(other), "/dev/shm/tally-pool-%ld", (long)getpid());
    if (mkdir(other, 0700) != 0 || stat(other, &a) != 0 || stat(dir, &b) != 0 ||
        a.st_dev == b.st_dev) {
        rmdir(other);
        skip(); /* no second filesystem here */
    }
    snprintf(opool, sizeof(opool), "%s/pool", other);
    assert_int_equal(store_pool_clean(opool), TALLY_OK);
    store_pool_use(opool);
    assert_int_equal(store_child_pool_fill(1, &made), TALLY_OK);
    assert_int_equal(made, 1);
    (void)child_new("x.db");
    snprintf(opool, sizeof(opool), "%s/pool/child-0.db", other);
    assert_int_equal(access(opool, F_OK), 0);
    test_rmtree(other);
}

#define RACERS 2
#define EACH   4

static void *
racer(void *arg)
{
    char path[256];
    store_db *db = NULL;

    for (int i = 0; i < EACH; i++) {
        snprintf(path, sizeof(path), "%s/r%ld-%d.db", dir, (long)(intptr_t)arg, i);
        if (store_child_open(path, STORE_OPEN_PRIVATE, &child_up, &db) != TALLY_OK)
            return (void *)1;
        store_db_close(db);
    }
    return NULL;
}

/* Two threads create files at once from a full pool: each pool file goes to one of them. */
static void
test_takers_never_share_a_file(void **state)
{
    pthread_t t[RACERS];
    unsigned made = 0;
    ino_t seen[RACERS * EACH] = {0};
    char path[256];
    struct stat sb;

    (void)state;
    assert_int_equal(store_child_pool_fill(8, &made), TALLY_OK);
    assert_int_equal(made, 8);
    for (long r = 0; r < RACERS; r++)
        assert_int_equal(pthread_create(&t[r], NULL, racer, (void *)(intptr_t)r), 0);
    for (int r = 0; r < RACERS; r++) {
        void *rv = NULL;

        assert_int_equal(pthread_join(t[r], &rv), 0);
        assert_null(rv);
    }
    for (int r = 0; r < RACERS; r++) {
        for (int i = 0; i < EACH; i++) {
            snprintf(path, sizeof(path), "%s/r%d-%d.db", dir, r, i);
            assert_int_equal(stat(path, &sb), 0);
            assert_int_equal(sb.st_nlink, 1);
            for (int j = 0; j < r * EACH + i; j++)
                assert_true(seen[j] != sb.st_ino);
            seen[r * EACH + i] = sb.st_ino;
        }
    }
    assert_int_equal(pool_count("child", 8), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_new_files_come_from_the_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ledgers_come_from_the_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ledgers_come_with_their_wal_started, setup, teardown),
        cmocka_unit_test_setup_teardown(test_child_files_come_with_their_wal_started, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_clean_removes_what_a_fill_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_elsewhere_is_not_used, setup, teardown),
        cmocka_unit_test_setup_teardown(test_takers_never_share_a_file, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

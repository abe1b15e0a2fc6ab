/*
 * New files made ahead (DATA/pool): a fill writes synced files under their pool names; a new
 * ledger or child file is one of them renamed into place (same inode, one link, the pool one
 * file shorter) and works as a file written on the spot; an empty pool, or a pool on another
 * filesystem, leaves creation as it was; two threads creating files at once never get the
 * same pool file; a start removes what an interrupted fill left; ledgers and child files alike
 * come with their WAL started. Files kept open ahead (store_child_pool_open,
 * store_journal_pool_open) are linked into place by a create with the same flags: the
 * connection writes the file and WAL at their new names (read back after a close and after a
 * kill -9 of the writer), its close checkpoints as any, a file already there is opened as it
 * is, and a drop closes and removes them.
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
#include "test_support.h"
#include "upgrade_util.h"

static char dir[64];
static char pool[128];

static int
setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    snprintf(pool, sizeof(pool), "%s/pool", dir);
    assert_int_equal(store_pool_clean(pool), TALLY_OK);
    store_pool_use(pool);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    store_pool_open_drop();
    store_pool_use(NULL);
    test_rmtree(dir);
    return 0;
}

/* The inode of `name` in the pool, 0 when it is not there. */
static ino_t
pool_ino(const char *name)
{
    char path[256];
    struct stat sb;

    snprintf(path, sizeof(path), "%s/%s", pool, name);
    return stat(path, &sb) == 0 ? sb.st_ino : 0;
}

static int
pool_count(const char *prefix, unsigned upto)
{
    char name[64];
    int n = 0;

    for (unsigned k = 0; k < upto; k++) {
        snprintf(name, sizeof(name), "%s-%u.db", prefix, k);
        n += pool_ino(name) != 0;
    }
    return n;
}

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

/* A record of `ctx` bytes "r" (the journal stores what it is given). */
static int
enc_bytes(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len)
{
    size_t n = (size_t)(intptr_t)ctx;

    (void)i;
    assert_true(n <= cap);
    memset(buf, 'r', n);
    *len = n;
    return TALLY_OK;
}

static int
count_rec(void *ctx, const uint8_t *rec, size_t len)
{
    (void)rec;
    (void)len;
    (*(int *)ctx)++;
    return TALLY_OK;
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

/* True when the WAL at `path` holds a second frame: after the header (32 bytes) and the
 * fill's frame (24 + a page), bytes that are not the padding's zeros. */
static bool
wal_second_frame(const char *path)
{
    static const unsigned char zeros[64];
    unsigned char frame[64];
    int fd = open(path, O_RDONLY);

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, frame, sizeof(frame), 32 + 24 + 4096), (ssize_t)sizeof(frame));
    close(fd);
    return memcmp(frame, zeros, sizeof(frame)) != 0;
}

/* The ledger at `path` opened again holds `want` records, and SQLite finds it whole. */
static void
ledger_reads_back(const char *path, int want)
{
    store_db *db = NULL;
    int n = 0;

    assert_int_equal(store_journal_open(path, STORE_OPEN_PRIVATE, &journal_up, &db), TALLY_OK);
    assert_int_equal(store_journal_each(db, count_rec, &n), TALLY_OK);
    assert_int_equal(n, want);
    assert_int_equal(store_db_exec(db, "PRAGMA integrity_check"), TALLY_OK);
    store_db_close(db);
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
        cmocka_unit_test_setup_teardown(test_new_files_come_from_the_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ledgers_come_from_the_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ledgers_come_with_their_wal_started, setup, teardown),
        cmocka_unit_test_setup_teardown(test_child_files_come_with_their_wal_started, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_clean_removes_what_a_fill_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_elsewhere_is_not_used, setup, teardown),
        cmocka_unit_test_setup_teardown(test_takers_never_share_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_files_are_linked_into_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_ledgers_are_linked_into_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_file_commit_survives_kill9, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

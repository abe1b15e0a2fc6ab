/*
 * What the pool suites share (test_store_pool.c, test_store_pool_open.c): a fresh data dir with
 * its pool per test, and reads of the pool's files. Functions fail the running cmocka test on
 * anything unexpected.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_journal.h"
#include "store_pool_util.h"
#include "test_support.h"
#include "upgrade_util.h"

char dir[64];
char pool[128];

int
setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    snprintf(pool, sizeof(pool), "%s/pool", dir);
    assert_int_equal(store_pool_clean(pool), TALLY_OK);
    store_pool_use(pool);
    return 0;
}

int
teardown(void **state)
{
    (void)state;
    store_pool_open_drop();
    store_pool_use(NULL);
    test_rmtree(dir);
    return 0;
}

/* The inode of `name` in the pool, 0 when it is not there. */
ino_t
pool_ino(const char *name)
{
    char path[256];
    struct stat sb;

    snprintf(path, sizeof(path), "%s/%s", pool, name);
    return stat(path, &sb) == 0 ? sb.st_ino : 0;
}

int
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

/* A record of `ctx` bytes "r" (the journal stores what it is given). */
int
enc_bytes(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len)
{
    size_t n = (size_t)(intptr_t)ctx;

    (void)i;
    assert_true(n <= cap);
    memset(buf, 'r', n);
    *len = n;
    return TALLY_OK;
}

int
count_rec(void *ctx, const uint8_t *rec, size_t len)
{
    (void)rec;
    (void)len;
    (*(int *)ctx)++;
    return TALLY_OK;
}

/* True when the WAL at `path` holds a second frame: after the header (32 bytes) and the
 * fill's frame (24 + a page), bytes that are not the padding's zeros. */
bool
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
void
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

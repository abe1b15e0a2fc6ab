/*
 * A power-loss simulation for SQLite (test_powerloss.h), for the suites only:
 * a VFS shim over the default VFS that holds every write to a main database
 * or WAL file in memory until that file's next xSync. Reads see the held
 * writes, so the process works as usual; xSync (and xTruncate, xClose, which
 * an orderly process reaches and a crash does not) writes them through in
 * order. When the process is killed with SIGKILL the held writes vanish,
 * exactly the writes an OS crash or a power loss could lose, so kill -9 of
 * every process measures what `--durability batched` loses and what `strict`
 * keeps. It is a strict model: a real disk may keep some unsynced writes, it
 * keeps none. The shared-memory wal-index passes through untouched: SQLite
 * rebuilds it from the WAL when the first connection opens after a crash.
 */
#include "test_powerloss.h"

#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "store.h"

struct held {
    sqlite3_int64 off;
    int len;
    unsigned char *data;
};

struct pl_file {
    sqlite3_file base; /* pMethods: pl_io, or NULL when the real open failed */
    sqlite3_file *real;
    bool hold;          /* a main database or WAL file */
    bool slow;          /* a child counter's file: its syncs take slow_sync_ms */
    sqlite3_int64 size; /* the size the process sees: the real one plus held writes */
    struct held *w;     /* held writes, oldest first */
    size_t n, cap;
};

/* The real file lives right after the shim's struct, aligned for anything. */
#define REAL_OFFSET ((sizeof(struct pl_file) + 15) & ~(size_t)15)

static sqlite3_vfs *real_vfs;
static int slow_sync_ms;

static void
drop_held(struct pl_file *p)
{
    for (size_t i = 0; i < p->n; i++)
        sqlite3_free(p->w[i].data);
    sqlite3_free(p->w);
    p->w = NULL;
    p->n = p->cap = 0;
}

/* Writes the held writes through, oldest first (a later write wins). */
static int
write_through(struct pl_file *p)
{
    int rc = SQLITE_OK;

    for (size_t i = 0; i < p->n && rc == SQLITE_OK; i++)
        rc = p->real->pMethods->xWrite(p->real, p->w[i].data, p->w[i].len, p->w[i].off);
    if (rc == SQLITE_OK)
        drop_held(p);
    return rc;
}

static int
pl_close(sqlite3_file *f)
{
    struct pl_file *p = (struct pl_file *)f;
    int rc = write_through(p);
    int rc2 = p->real->pMethods->xClose(p->real);

    drop_held(p);
    return rc != SQLITE_OK ? rc : rc2;
}

static int
pl_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
    struct pl_file *p = (struct pl_file *)f;
    int rc = p->real->pMethods->xRead(p->real, buf, amt, off);

    if (!p->hold || (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ))
        return rc;
    /* Overlay the held writes that meet [off, off + amt), oldest first. */
    for (size_t i = 0; i < p->n; i++) {
        const struct held *h = &p->w[i];
        sqlite3_int64 lo = h->off > off ? h->off : off;
        sqlite3_int64 hi = h->off + h->len < off + amt ? h->off + h->len : off + amt;
        if (lo < hi)
            memcpy((unsigned char *)buf + (lo - off), h->data + (lo - h->off), (size_t)(hi - lo));
    }
    if (rc == SQLITE_IOERR_SHORT_READ && off + amt <= p->size)
        rc = SQLITE_OK; /* the held writes cover the rest */
    return rc;
}

static int
pl_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    struct pl_file *p = (struct pl_file *)f;
    unsigned char *copy;

    if (!p->hold)
        return p->real->pMethods->xWrite(p->real, buf, amt, off);
    if (p->n == p->cap) {
        size_t cap = p->cap == 0 ? 64 : p->cap * 2;
        struct held *w = sqlite3_realloc64(p->w, cap * sizeof(*w));
        if (w == NULL)
            return SQLITE_IOERR_NOMEM;
        p->w = w;
        p->cap = cap;
    }
    copy = sqlite3_malloc(amt);
    if (copy == NULL)
        return SQLITE_IOERR_NOMEM;
    memcpy(copy, buf, (size_t)amt);
    p->w[p->n++] = (struct held){off, amt, copy};
    if (off + amt > p->size)
        p->size = off + amt;
    return SQLITE_OK;
}

static int
pl_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    struct pl_file *p = (struct pl_file *)f;
    int rc = write_through(p);

    if (rc == SQLITE_OK)
        rc = p->real->pMethods->xTruncate(p->real, size);
    if (rc == SQLITE_OK)
        p->size = size;
    return rc;
}

static int
pl_sync(sqlite3_file *f, int flags)
{
    struct pl_file *p = (struct pl_file *)f;
    int rc;

    if (p->slow) { /* a slow disk: nothing is durable before the sync returns */
        struct timespec ts = {slow_sync_ms / 1000, (long)(slow_sync_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    rc = write_through(p);
    return rc != SQLITE_OK ? rc : p->real->pMethods->xSync(p->real, flags);
}

static int
pl_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    struct pl_file *p = (struct pl_file *)f;
    int rc = p->real->pMethods->xFileSize(p->real, size);

    if (rc == SQLITE_OK && p->hold) {
        if (*size > p->size)
            p->size = *size;
        *size = p->size;
    }
    return rc;
}

static int
pl_lock(sqlite3_file *f, int level)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xLock(p->real, level);
}

static int
pl_unlock(sqlite3_file *f, int level)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xUnlock(p->real, level);
}

static int
pl_check_reserved(sqlite3_file *f, int *out)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xCheckReservedLock(p->real, out);
}

static int
pl_file_control(sqlite3_file *f, int op, void *arg)
{
    struct pl_file *p = (struct pl_file *)f;

    /* A size hint or chunk size would grow the real file behind the held writes. */
    if (p->hold && (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_CHUNK_SIZE))
        return SQLITE_OK;
    return p->real->pMethods->xFileControl(p->real, op, arg);
}

static int
pl_sector_size(sqlite3_file *f)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xSectorSize(p->real);
}

static int
pl_device_characteristics(sqlite3_file *f)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xDeviceCharacteristics(p->real);
}

static int
pl_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **out)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xShmMap(p->real, page, size, extend, out);
}

static int
pl_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xShmLock(p->real, offset, n, flags);
}

static void
pl_shm_barrier(sqlite3_file *f)
{
    struct pl_file *p = (struct pl_file *)f;

    p->real->pMethods->xShmBarrier(p->real);
}

static int
pl_shm_unmap(sqlite3_file *f, int delete_flag)
{
    struct pl_file *p = (struct pl_file *)f;

    return p->real->pMethods->xShmUnmap(p->real, delete_flag);
}

/* Version 2: no xFetch, so SQLite never memory-maps around the held writes. */
static const sqlite3_io_methods pl_io = {
    2,
    pl_close,
    pl_read,
    pl_write,
    pl_truncate,
    pl_sync,
    pl_file_size,
    pl_lock,
    pl_unlock,
    pl_check_reserved,
    pl_file_control,
    pl_sector_size,
    pl_device_characteristics,
    pl_shm_map,
    pl_shm_lock,
    pl_shm_barrier,
    pl_shm_unmap,
    NULL,
    NULL,
};

static int
pl_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    struct pl_file *p = (struct pl_file *)f;
    int rc;

    (void)vfs;
    memset(p, 0, sizeof(*p));
    p->real = (sqlite3_file *)((char *)p + REAL_OFFSET);
    rc = real_vfs->xOpen(real_vfs, name, p->real, flags, out_flags);
    if (rc != SQLITE_OK || p->real->pMethods == NULL)
        return rc; /* base.pMethods stays NULL: SQLite will not call xClose */
    p->hold = (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL)) != 0;
    /* A child file, or one kept open in the pool to become one (store/pool.c). */
    p->slow = p->hold && slow_sync_ms > 0 && name != NULL &&
              (strstr(name, "/endpoints/") != NULL || strstr(name, "/pool/.open-child-") != NULL);
    if (p->real->pMethods->xFileSize(p->real, &p->size) != SQLITE_OK)
        p->size = 0;
    p->base.pMethods = &pl_io;
    return SQLITE_OK;
}

static int
pl_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    return real_vfs->xDelete(real_vfs, name, sync_dir);
}

static int
pl_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return real_vfs->xAccess(real_vfs, name, flags, out);
}

static int
pl_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return real_vfs->xFullPathname(real_vfs, name, n, out);
}

static int
pl_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return real_vfs->xRandomness(real_vfs, n, out);
}

static int
pl_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return real_vfs->xSleep(real_vfs, us);
}

static int
pl_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return real_vfs->xCurrentTime(real_vfs, out);
}

static int
pl_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return real_vfs->xGetLastError(real_vfs, n, out);
}

static int
pl_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

static sqlite3_vfs pl_vfs = {
    .iVersion = 2,
    .zName = TEST_POWERLOSS_VFS,
    .xOpen = pl_open,
    .xDelete = pl_delete,
    .xAccess = pl_access,
    .xFullPathname = pl_full_pathname,
    .xRandomness = pl_randomness,
    .xSleep = pl_sleep,
    .xCurrentTime = pl_current_time,
    .xGetLastError = pl_last_error,
    .xCurrentTimeInt64 = pl_current_time64,
};

bool
test_powerloss_register(void)
{
    static bool registered;

    if (registered)
        return true;
    real_vfs = sqlite3_vfs_find(NULL);
    if (real_vfs == NULL)
        return false;
    pl_vfs.szOsFile = (int)(REAL_OFFSET + (size_t)real_vfs->szOsFile);
    pl_vfs.mxPathname = real_vfs->mxPathname;
    registered = sqlite3_vfs_register(&pl_vfs, 0) == SQLITE_OK;
    if (registered)
        store_private_vfs_set(TEST_POWERLOSS_VFS);
    return registered;
}

void
test_powerloss_slow_child_syncs(int ms)
{
    slow_sync_ms = ms > 0 ? ms : 0;
}

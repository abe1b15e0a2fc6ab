/*
 * Tenant paths and process locks (store_paths.h). flock() locks belong to the
 * open file description and vanish when the process dies, which is exactly
 * the "one authority per tenant, survives kill -9" property we want; the
 * descriptors are close-on-exec so a spawned child never inherits a lock.
 */
#include "store_config.h"
#include "store_paths.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tenant.h"

int
store_path_tenant(const char *data, const char *tenant, const char *suffix, char *buf, size_t len)
{
    int n;

    if (!tenant_name_valid(tenant))
        return TALLY_ENAME;
    if (suffix != NULL)
        n = snprintf(buf, len, "%s/tenants/%s/%s", data, tenant, suffix);
    else
        n = snprintf(buf, len, "%s/tenants/%s", data, tenant);
    return n < 0 || (size_t)n >= len ? TALLY_ETOOBIG : TALLY_OK;
}

int
store_path_endpoint_db(const char *data, const char *tenant, const char *endpoint, char *buf,
                       size_t len)
{
    int n;

    if (!tenant_name_valid(tenant) || !tenant_name_valid(endpoint))
        return TALLY_ENAME;
    n = snprintf(buf, len, "%s/tenants/%s/endpoints/%s.db", data, tenant, endpoint);
    return n < 0 || (size_t)n >= len ? TALLY_ETOOBIG : TALLY_OK;
}

static int
mkdir_private(const char *path)
{
    if (mkdir(path, 0700) == 0 || errno == EEXIST)
        return TALLY_OK;
    return errno == ENOSPC ? TALLY_EFULL : errno == EROFS ? TALLY_EREADONLY : TALLY_EIO;
}

int
store_tenant_dirs(const char *data, const char *tenant)
{
    char path[STORE_PATH_MAX];
    int rc;

    if ((size_t)snprintf(path, sizeof(path), "%s/tenants", data) >= sizeof(path))
        return TALLY_ETOOBIG;
    rc = mkdir_private(path);
    if (rc == TALLY_OK)
        rc = store_path_tenant(data, tenant, NULL, path, sizeof(path));
    if (rc == TALLY_OK)
        rc = mkdir_private(path);
    if (rc == TALLY_OK)
        rc = store_path_tenant(data, tenant, "endpoints", path, sizeof(path));
    if (rc == TALLY_OK)
        rc = mkdir_private(path);
    return rc;
}

int
store_callers_dir(const char *data, char *buf, size_t len)
{
    if ((size_t)snprintf(buf, len, "%s/callers", data) >= len)
        return TALLY_ETOOBIG;
    return mkdir_private(buf);
}

int
store_path_pool(const char *data, char *buf, size_t len)
{
    return (size_t)snprintf(buf, len, "%s/pool", data) >= len ? TALLY_ETOOBIG : TALLY_OK;
}

int
store_lock_take(const char *path, int *fd_out)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

    *fd_out = -1;
    if (fd < 0)
        return errno == EROFS ? TALLY_EREADONLY : TALLY_EIO;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK ? TALLY_ELOCKED : TALLY_EIO;
    }
    *fd_out = fd;
    return TALLY_OK;
}

/* The stamp of tally.db: the file's inode, size and time, its WAL's inode, size and
 * header (checkpoint sequence and salts, bytes 12 to 23), and its WAL index's change
 * counter. Within one WAL generation every
 * commit appends frames (the size grows); a new generation has new salts; commits whose WAL
 * came and went between two looks (the last connection checkpoints and removes it) wrote
 * the file itself. */
bool
store_config_stamp_changed(const char *dir, struct store_config_stamp *stamp)
{
    struct store_config_stamp now;
    unsigned char h[12];
    char path[STORE_PATH_MAX];
    struct stat st;
    int n = snprintf(path, sizeof(path), "%s/" STORE_CONFIG_FILE "-wal", dir), fd;

    if (n < 0 || (size_t)n >= sizeof(path))
        return true;
    memset(&now, 0, sizeof(now));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) == 0) {
        now.v[1] = (int64_t)st.st_ino;
        now.v[2] = (int64_t)st.st_size;
        if (pread(fd, h, sizeof(h), 12) == (ssize_t)sizeof(h)) {
            now.v[3] = (int64_t)h[0] << 24 | h[1] << 16 | h[2] << 8 | h[3];
            now.v[4] = (int64_t)h[4] << 24 | h[5] << 16 | h[6] << 8 | h[7];
            now.v[5] = (int64_t)h[8] << 24 | h[9] << 16 | h[10] << 8 | h[11];
        }
    }
    if (fd >= 0)
        close(fd);
    /* The WAL index's header (its first copy), which every commit rewrites: iChange and
     * mxFrame, bytes 8 to 11 and 16 to 19 (read without a lock: a hint, torn at worst,
     * which only makes a look read the configuration once more). */
    memcpy(path + n - 4, "-shm", 5);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        unsigned char w[12];
        if (pread(fd, w, sizeof(w), 8) == (ssize_t)sizeof(w)) {
            uint32_t change, frames;
            memcpy(&change, w, 4);
            memcpy(&frames, w + 8, 4);
            now.v[8] = (int64_t)change << 32 | frames;
        }
        close(fd);
    }
    path[n - 4] = '\0'; /* without "-shm" */
    if (stat(path, &st) == 0) {
        now.v[0] = (int64_t)st.st_ino;
        now.v[6] = (int64_t)st.st_size;
        now.v[7] = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    if (memcmp(&now, stamp, sizeof(now)) == 0)
        return false;
    *stamp = now;
    return true;
}

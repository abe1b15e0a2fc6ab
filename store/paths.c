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

/* The stamp of one file: zeros when it does not exist (a WAL may not). */
static void
stamp_of(const char *path, int64_t v[4])
{
    struct stat st;

    memset(v, 0, 4 * sizeof(v[0]));
    if (stat(path, &st) != 0)
        return;
    v[0] = (int64_t)st.st_ino;
    v[1] = (int64_t)st.st_size;
    v[2] = (int64_t)st.st_mtim.tv_sec;
    v[3] = (int64_t)st.st_mtim.tv_nsec;
}

bool
store_config_stamp_changed(const char *dir, struct store_config_stamp *stamp)
{
    struct store_config_stamp now;
    char path[STORE_PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/" STORE_CONFIG_FILE "-wal", dir);

    if (n < 0 || (size_t)n >= sizeof(path))
        return true;
    stamp_of(path, now.v + 4);
    path[n - 4] = '\0'; /* without "-wal" */
    stamp_of(path, now.v);
    if (memcmp(&now, stamp, sizeof(now)) == 0)
        return false;
    *stamp = now;
    return true;
}

/*
 * Tenant paths and process locks (store_paths.h). flock() locks belong to the
 * open file description and vanish when the process dies, which is exactly
 * the "one authority per tenant, survives kill -9" property we want; the
 * descriptors are close-on-exec so a spawned child never inherits a lock.
 */
#include "store_paths.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

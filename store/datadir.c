/*
 * The data directory: created 0700, holding the deployment key (secret.key,
 * 32 random bytes, 0600, written once by `tally init`) and the configuration
 * database. The key is loaded into sodium_malloc'd memory, made read-only and
 * wiped on release; it is never logged. sodium_malloc maps the key on pages of
 * its own, guarded, locked (mlock, where RLIMIT_MEMLOCK allows) and marked
 * MADV_DONTDUMP, so even a core file of a dumpable process leaves it out
 * (tests/test_secret_hygiene.c checks the VmFlags of that mapping).
 */
#include "store_config.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

const char *
store_datadir_pick(const char *arg, const char *fallback)
{
    const char *env;

    if (arg != NULL && *arg != '\0')
        return arg;
    env = getenv("TALLY_DATA");
    if (env != NULL && *env != '\0')
        return env;
    return fallback;
}

static int
errno_rc(int e)
{
    switch (e) {
    case EACCES:
    case EPERM:
        return TALLY_EPERM;
    case EROFS:
        return TALLY_EREADONLY;
    case ENOSPC:
    case EDQUOT:
        return TALLY_EFULL;
    case ENOENT:
    case ENOTDIR:
        return TALLY_ENODATA;
    case EEXIST:
        return TALLY_EEXIST;
    default:
        return TALLY_EIO;
    }
}

static int
key_path(const char *dir, char *path, size_t len)
{
    if ((size_t)snprintf(path, len, "%s/%s", dir, STORE_KEY_FILE) >= len)
        return TALLY_ETOOBIG;
    return TALLY_OK;
}

/* Writes a fresh key (or `given`) with O_EXCL so two concurrent inits cannot both succeed,
 * and fsyncs it: a key lost after init would orphan every stored hash. */
static int
key_create(const char *path, const unsigned char *given)
{
    unsigned char key[TENANT_KEY_BYTES];
    int fd = -1;
    int rc = TALLY_OK;

    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno_rc(errno);
    if (given != NULL)
        memcpy(key, given, sizeof(key));
    else
        randombytes_buf(key, sizeof(key));
    if (write(fd, key, sizeof(key)) != (ssize_t)sizeof(key) || fsync(fd) != 0)
        rc = errno_rc(errno);
    sodium_memzero(key, sizeof(key));
    close(fd);
    if (rc != TALLY_OK)
        unlink(path);
    return rc;
}

int
store_datadir_init(const char *dir)
{
    return store_datadir_init_key(dir, NULL);
}

int
store_datadir_init_key(const char *dir, const unsigned char *key)
{
    char path[STORE_PATH_MAX];
    store_db *db = NULL;
    struct stat sb;
    int rc;

    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return errno_rc(errno);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return TALLY_ENODATA;
    rc = key_path(dir, path, sizeof(path));
    if (rc != TALLY_OK)
        return rc;
    if (access(path, F_OK) == 0)
        return TALLY_EEXIST;
    rc = key_create(path, key);
    if (rc != TALLY_OK)
        return rc;
    rc = store_config_open(dir, true, &db);
    store_db_close(db);
    return rc;
}

int
store_datadir_check(const char *dir)
{
    char path[STORE_PATH_MAX];

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, STORE_CONFIG_FILE) >= sizeof(path))
        return TALLY_ETOOBIG;
    if (access(path, F_OK) != 0)
        return TALLY_ENODATA;
    if (key_path(dir, path, sizeof(path)) != TALLY_OK || access(path, F_OK) != 0)
        return TALLY_ENODATA;
    return TALLY_OK;
}

int
store_key_load(const char *dir, unsigned char **out)
{
    char path[STORE_PATH_MAX];
    unsigned char *key = NULL;
    struct stat sb;
    ssize_t n = -1;
    int fd = -1;
    int rc;

    *out = NULL;
    rc = key_path(dir, path, sizeof(path));
    if (rc != TALLY_OK)
        goto out;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? TALLY_ENOKEY : errno_rc(errno);
        goto out;
    }
    if (fstat(fd, &sb) != 0 || sb.st_size != TENANT_KEY_BYTES) {
        rc = TALLY_ENOKEY;
        goto out;
    }
    if ((sb.st_mode & 077) != 0) {
        rc = TALLY_EKEYMODE; /* a key others can read is no secret: refuse to use it */
        goto out;
    }
    key = sodium_malloc(TENANT_KEY_BYTES);
    if (key == NULL) {
        rc = TALLY_ENOMEM;
        goto out;
    }
    n = read(fd, key, TENANT_KEY_BYTES);
    if (n != TENANT_KEY_BYTES) {
        rc = TALLY_ENOKEY;
        goto out;
    }
    sodium_mprotect_readonly(key);
    *out = key;
    key = NULL; /* ownership moved to the caller */
out:
    if (fd >= 0)
        close(fd);
    if (key != NULL)
        sodium_free(key); /* sodium_free wipes before freeing */
    return rc;
}

void
store_key_free(unsigned char *key)
{
    if (key != NULL)
        sodium_free(key);
}

int
store_process_private(bool *kept_dumpable)
{
    const char *keep = getenv("TALLY_DUMPABLE");

    *kept_dumpable = keep != NULL && strcmp(keep, "1") == 0;
    if (*kept_dumpable)
        return TALLY_OK;
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? TALLY_OK : errno_rc(errno);
}

int
store_socket_dir_check(const char *path)
{
    char dir[STORE_PATH_MAX];
    const char *slash = strrchr(path, '/');
    struct stat sb;

    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else if ((size_t)snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path) >= sizeof(dir))
        return TALLY_ETOOBIG;
    if (stat(dir, &sb) != 0)
        return errno_rc(errno);
    return (sb.st_mode & S_IWOTH) != 0 ? TALLY_EPERM : TALLY_OK;
}

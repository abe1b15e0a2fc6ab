/*
 * Files made ahead (store_pool_use). A pool directory holds a few new files per schema, each
 * its image already written and synced (`NAME-K.db`, K < STORE_POOL_FILES). A file created
 * while the pool has one is that file renamed into place (store/db.c, create_fresh): no write
 * and no fdatasync on the way to the first commit. Taking is a rename to the caller's
 * temporary name, so two takers never get the same file; the pool must be on the data dir's
 * filesystem (a rename across filesystems fails and the image is written as without a pool).
 * Set once per process, before any file is created.
 */
#include "store.h"
#include "store_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_paths.h"

#define STORE_POOL_FILES 8
static char pool_dir[STORE_PATH_MAX];

void
store_pool_use(const char *dir)
{
    if (dir == NULL || (size_t)snprintf(pool_dir, sizeof(pool_dir), "%s", dir) >= sizeof(pool_dir))
        pool_dir[0] = '\0';
}

/* True when a file of `schema` was moved from the pool to `tmp`. */
bool
store__pool_take(const struct store_schema *schema, const char *tmp)
{
    char src[STORE_PATH_MAX + 64];

    if (pool_dir[0] == '\0')
        return false;
    for (unsigned k = 0; k < STORE_POOL_FILES; k++) {
        if ((size_t)snprintf(src, sizeof(src), "%s/%s-%u.db", pool_dir, schema->name, k) >=
            sizeof(src))
            return false;
        if (rename(src, tmp) == 0)
            return true;
        if (errno != ENOENT)
            return false; /* EXDEV and the like: no pool for this file */
    }
    return false;
}

int
store_pool_clean(const char *dir)
{
    DIR *d;
    struct dirent *e;
    char path[STORE_PATH_MAX + 300];

    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return errno == EROFS ? TALLY_EREADONLY : TALLY_EIO;
    d = opendir(dir);
    if (d == NULL)
        return TALLY_EIO;
    while ((e = readdir(d)) != NULL) {
        /* Temporary names start with a dot; "." and ".." are not files. */
        if (e->d_name[0] != '.' || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < sizeof(path))
            (void)unlink(path);
    }
    closedir(d);
    return TALLY_OK;
}

int
store__pool_fill(const struct store_schema *schema, store_migrate_fn step, unsigned want,
                 unsigned *made)
{
    char dst[STORE_PATH_MAX + 64], tmp[STORE_PATH_MAX + 96];
    struct stat sb;
    int rc = TALLY_OK;

    *made = 0;
    if (pool_dir[0] == '\0')
        return TALLY_OK;
    if (want > STORE_POOL_FILES)
        want = STORE_POOL_FILES;
    if (mkdir(pool_dir, 0700) != 0 && errno != EEXIST)
        rc = TALLY_EIO;
    for (unsigned k = 0; k < want && rc == TALLY_OK; k++) {
        if ((size_t)snprintf(dst, sizeof(dst), "%s/%s-%u.db", pool_dir, schema->name, k) >=
                sizeof(dst) ||
            (size_t)snprintf(tmp, sizeof(tmp), "%s/.%s-%u.db.%ld", pool_dir, schema->name, k,
                             (long)getpid()) >= sizeof(tmp))
            return TALLY_ETOOBIG;
        if (stat(dst, &sb) == 0)
            continue;
        rc = store__image_write(schema, step, NULL, NULL, tmp);
        /* Replaces a file another process put there meanwhile: the same bytes. */
        if (rc == TALLY_OK && rename(tmp, dst) != 0) {
            (void)unlink(tmp);
            rc = TALLY_EIO;
        }
        if (rc == TALLY_OK)
            (*made)++;
    }
    return rc;
}

/*
 * A new file's image (store_int.h): the bytes every new file of a schema starts as, made once
 * per process, and writing them to a new file. store/db.c links such a file into place;
 * store/pool.c makes a few ahead.
 */
#include "store.h"
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A new file's bytes, one image per schema and process: the migrations run once on an
 * in-memory database (the same statements and steps an upgrade runs, so the image is what a
 * migrated file holds), serialized, and switched to WAL by its header (bytes 18 and 19, the
 * file format's read and write versions, 2 = WAL). Every later file of that schema is these
 * bytes written at once, with no SQLite connection, no SQL parsed and no journal. Made under
 * a lock (child files are created on several threads) and kept for the process's life; a
 * fork server makes its supervisors' before it forks (store_journal_warm). */
struct fresh_image {
    const struct store_schema *schema;
    unsigned char *bytes;
    size_t len;
};
#define FRESH_IMAGES 8
static struct fresh_image images[FRESH_IMAGES];
static pthread_mutex_t images_mu = PTHREAD_MUTEX_INITIALIZER;

/* Runs the migrations on an in-memory database and keeps its bytes, marked WAL. On failure
 * the reason goes to err's errmsg (err may be NULL). */
static int
image_build(const struct store_schema *schema, store_migrate_fn step, void *ctx, store_db *err,
            struct fresh_image *out)
{
    store_db mem;
    sqlite3_int64 len = 0;
    int rc;

    store__sqlite_setup();
    memset(&mem, 0, sizeof(mem));
    mem.schema = schema;
    mem.path = err != NULL ? err->path : schema->name;
    rc = store_db_rc(&mem, sqlite3_open_v2(":memory:", &mem.sql,
                                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL));
    if (rc == TALLY_OK)
        rc = store__migrate(&mem, 0, step, ctx);
    if (rc == TALLY_OK) {
        /* A copy owned by this process from now on (sqlite3_malloc'd, never freed). */
        out->bytes = sqlite3_serialize(mem.sql, "main", &len, 0);
        if (out->bytes == NULL || len < 100) {
            sqlite3_free(out->bytes);
            out->bytes = NULL;
            rc = TALLY_ENOMEM;
        }
    }
    if (rc == TALLY_OK) {
        out->bytes[18] = 2; /* WAL */
        out->bytes[19] = 2;
        out->len = (size_t)len;
        out->schema = schema;
    }
    if (rc != TALLY_OK && err != NULL && mem.errmsg != NULL)
        store__db_errf(err, "%s", mem.errmsg);
    tally_free(mem.errmsg);
    if (mem.sql != NULL)
        (void)sqlite3_close(mem.sql);
    return rc;
}

/* The image of `schema`, made on first use. */
static int
image_get(const struct store_schema *schema, store_migrate_fn step, void *ctx, store_db *err,
          const struct fresh_image **out)
{
    int rc = TALLY_OK, i;

    pthread_mutex_lock(&images_mu);
    for (i = 0; i < FRESH_IMAGES && images[i].schema != NULL; i++) {
        if (images[i].schema == schema)
            break;
    }
    if (i == FRESH_IMAGES)
        rc = TALLY_ENOMEM; /* more schemas than this file knows: a bug */
    else if (images[i].schema == NULL)
        rc = image_build(schema, step, ctx, err, &images[i]);
    *out = rc == TALLY_OK ? &images[i] : NULL;
    pthread_mutex_unlock(&images_mu);
    return rc;
}

int
store__image_warm(const struct store_schema *schema, store_migrate_fn step)
{
    const struct fresh_image *im;

    return image_get(schema, step, NULL, NULL, &im);
}

static int
write_all(int fd, const unsigned char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int
store__image_write(const struct store_schema *schema, store_migrate_fn step, void *ctx,
                   store_db *err, const char *tmp)
{
    const struct fresh_image *im = NULL;
    int fd, rc = image_get(schema, step, ctx, err, &im);

    if (rc != TALLY_OK)
        return rc;
    (void)unlink(tmp);
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == EACCES ? TALLY_EPERM : errno == EROFS ? TALLY_EREADONLY : TALLY_EIO;
    if (fchmod(fd, 0600) != 0 || write_all(fd, im->bytes, im->len) != 0 || fdatasync(fd) != 0)
        rc = TALLY_EIO;
    close(fd);
    if (rc != TALLY_OK)
        (void)unlink(tmp);
    return rc;
}

/*
 * tally-bench-links: fills a data directory with many tenants and links fast,
 * for the growth benchmarks (up to 1,000,000 live links). It goes through the
 * store API exactly as `tally tenant add` and `tally link create` do (fresh
 * random token, keyed BLAKE2b hash, one row per link), but in one transaction
 * for the whole batch instead of one process and one fsync per link. Tokens go
 * to a file, one per line, tenant by tenant: this is a benchmark fixture, the
 * one place where tokens are written down (the file is created 0600).
 *
 * Usage: tally-bench-links --data DIR --plan PLAN --tenants K --links N
 *        --out FILE [--prefix t]
 * creates tenants PREFIX1..PREFIXK (if missing) on PLAN, then N links each.
 * The data dir must be initialised and the plan must exist (`tally`).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"
#include "store_config.h"

static int64_t
wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
add_links(store_db *db, const unsigned char *key, const char *tenant, long n, int64_t now_ms,
          FILE *out)
{
    char token[TENANT_TOKEN_LEN + 1];
    struct store_link l;
    long i;
    int rc = TALLY_OK;

    for (i = 0; i < n && rc == TALLY_OK; i++) {
        memset(&l, 0, sizeof(l));
        tenant_link_id_new(l.id);
        tenant_token_new(token);
        rc = tenant_token_hash(key, token, l.hash);
        snprintf(l.tenant, sizeof(l.tenant), "%s", tenant);
        l.created_ms = now_ms;
        if (rc == TALLY_OK)
            rc = store_link_insert(db, &l);
        if (rc == TALLY_OK && fprintf(out, "%s\n", token) < 0)
            rc = TALLY_EIO;
    }
    sodium_memzero(token, sizeof(token));
    return rc;
}

static int
fill(const char *data, const char *plan, const char *prefix, long tenants, long links, FILE *out)
{
    unsigned char *key = NULL;
    store_db *db = NULL;
    int64_t now_ms = wall_ms();
    struct store_tenant t;
    char name[TENANT_NAME_MAX + 1];
    long k;
    int rc;

    rc = store_config_open(data, false, &db);
    if (rc == TALLY_OK)
        rc = store_key_load(data, &key);
    if (rc == TALLY_OK)
        rc = store_db_begin(db);
    if (rc != TALLY_OK)
        goto out;
    for (k = 1; k <= tenants && rc == TALLY_OK; k++) {
        snprintf(name, sizeof(name), "%s%ld", prefix, k);
        if (store_tenant_get(db, name, &t) == TALLY_ENOTFOUND)
            rc = store_tenant_add(db, name, plan, now_ms);
        if (rc == TALLY_OK)
            rc = add_links(db, key, name, links, now_ms, out);
    }
    if (rc == TALLY_OK)
        rc = store_db_commit(db);
    else
        store_db_rollback(db);
out:
    if (rc != TALLY_OK)
        fprintf(stderr, "tally-bench-links: %s: %s\n", tally_strerror(rc),
                db != NULL ? store_db_errmsg(db) : store_open_errmsg());
    store_key_free(key);
    store_db_close(db);
    return rc;
}

int
main(int argc, char **argv)
{
    const char *data = NULL, *plan = NULL, *out_path = NULL, *prefix = "t";
    long tenants = 1, links = 0;
    FILE *out;
    int fd, i, rc;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--data") == 0)
            data = argv[i + 1];
        else if (strcmp(argv[i], "--plan") == 0)
            plan = argv[i + 1];
        else if (strcmp(argv[i], "--tenants") == 0)
            tenants = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--links") == 0)
            links = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--out") == 0)
            out_path = argv[i + 1];
        else if (strcmp(argv[i], "--prefix") == 0)
            prefix = argv[i + 1];
        else
            break;
    }
    if (i < argc || data == NULL || plan == NULL || out_path == NULL || tenants < 1 ||
        tenants > 1000000 || links < 0 || links > 10000000) {
        fprintf(stderr, "usage: tally-bench-links --data DIR --plan PLAN --tenants K --links N "
                        "--out FILE [--prefix t]\n");
        return 64;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "tally-bench-links: sodium_init failed\n");
        return 70;
    }
    fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    out = fd < 0 ? NULL : fdopen(fd, "w");
    if (out == NULL) {
        fprintf(stderr, "tally-bench-links: cannot write %s\n", out_path);
        return 73;
    }
    rc = fill(data, plan, prefix, tenants, links, out);
    if (fclose(out) != 0 && rc == TALLY_OK)
        rc = TALLY_EIO;
    return rc == TALLY_OK ? 0 : 1;
}

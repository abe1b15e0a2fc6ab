/*
 * What the pool suites share (store_pool_util.c).
 */
#ifndef STORE_POOL_UTIL_H
#define STORE_POOL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The running test's data dir and its pool (fresh per test: setup). */
extern char dir[64];
extern char pool[128];

/* A fresh data dir whose pool this process uses; teardown closes what it keeps open and
 * removes the dir. */
int setup(void **state);
int teardown(void **state);
/* The inode of `name` in the pool, 0 when it is not there. */
ino_t pool_ino(const char *name);
/* How many of PREFIX-0.db .. PREFIX-(upto-1).db the pool holds. */
int pool_count(const char *prefix, unsigned upto);
/* A store_record_encode_fn: a record of `ctx` bytes "r". */
int enc_bytes(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len);
/* A store_record_visit_fn counting records in *(int *)ctx. */
int count_rec(void *ctx, const uint8_t *rec, size_t len);
/* True when the WAL at `path` holds a second frame (not the pool's zeros). */
bool wal_second_frame(const char *path);
/* The ledger at `path` opened again holds `want` records, and SQLite finds it whole. */
void ledger_reads_back(const char *path, int want);

#endif /* STORE_POOL_UTIL_H */

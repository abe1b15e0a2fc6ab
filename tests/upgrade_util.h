/*
 * What the data-at-rest suites share (upgrade_util.c). Functions fail the running cmocka test
 * on anything unexpected.
 */
#ifndef UPGRADE_UTIL_H
#define UPGRADE_UTIL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "store_record.h"

/* The data dir of the running test (fresh per test: upgrade_setup). */
extern char data[128];
extern const struct store_upgrade journal_up, child_up;

/** DATA/rel into buf. */
void path_of(char *buf, size_t len, const char *rel);
/** A fresh data dir with the fixtures' config, and fixture `name` at `rel`. */
void place(const char *name, const char *rel);
int64_t user_version(sqlite3 *sql);
/** PRAGMA user_version of the file at path (opened read-only). */
int64_t file_version(const char *path);
/** The file's bytes; free() them. */
char *bytes_of(const char *path, size_t *len);
/** Fails the test unless the file holds exactly `before`. */
void assert_same_bytes(const char *path, const char *before, size_t len);
int upgrade_setup(void **state);
int upgrade_teardown(void **state);

#endif /* UPGRADE_UTIL_H */

/*
 * A test hook that makes kill -9 behave like a power loss for SQLite files
 * (docs/FAILURE-MODES.md §3). Registered only when the environment
 * has TALLY_TEST_POWERLOSS=1; never in production.
 */
#ifndef STORE_POWERLOSS_H
#define STORE_POWERLOSS_H

#include <stdbool.h>

/** The name of the shim VFS, for sqlite3_open_v2(). */
#define STORE_POWERLOSS_VFS "tally-powerloss"

/** Registers the shim once (thread-safe) when TALLY_TEST_POWERLOSS=1 is set.
 *  True when the shim is registered and files opened with STORE_OPEN_PRIVATE
 *  should use it. Main database and WAL files opened through it keep every
 *  write since their last xSync in this process's memory (reads see them),
 *  write them through on xSync, xTruncate and xClose, and lose them when the
 *  process dies: what an OS crash does to writes that were never synced. */
bool store_powerloss_enabled(void);

#endif /* STORE_POWERLOSS_H */

/*
 * A shim VFS that makes kill -9 behave like a power loss for SQLite files
 * (README "Failure modes", durability), for the suites and the test build of
 * the daemon (tallyd_powerloss) only: production binaries never contain it.
 */
#ifndef TEST_POWERLOSS_H
#define TEST_POWERLOSS_H

#include <stdbool.h>

/** The name of the shim VFS, for sqlite3_open_v2(). */
#define TEST_POWERLOSS_VFS "tally-powerloss"

/** Registers the shim (once; from the main thread, before any file is opened) and makes it the
 *  VFS of files opened with STORE_OPEN_PRIVATE (store_private_vfs_set). True when registered.
 *  Main database and WAL files opened through it keep every write since their last xSync in
 *  this process's memory (reads see them), write them through on xSync, xTruncate and xClose,
 *  and lose them when the process dies: what an OS crash does to writes that were never
 *  synced. */
bool test_powerloss_register(void);
/** From then on every xSync of a child counter's file (a path with "/endpoints/") takes `ms`
 *  more before its writes are durable: a slow disk under the files whose writes gate a child's
 *  use of its leases. */
void test_powerloss_slow_child_syncs(int ms);

#endif /* TEST_POWERLOSS_H */

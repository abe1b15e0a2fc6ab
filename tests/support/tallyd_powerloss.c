/*
 * tallyd_powerloss: the daemon built for the suites with the power-loss shim
 * (test_powerloss.h) as the VFS of its private files (supervisor journals,
 * child files). Its supervisors are this executable too (tallyd spawns its
 * own path), so every process of the daemon loses its unsynced writes to
 * kill -9. Production tallyd has no such shim and no switch for one.
 * TALLY_TEST_CHILD_SYNC_MS (this test build only) makes every sync of a child counter's file
 * take that many ms more (test_powerloss_slow_child_syncs).
 */
#include <stdio.h>
#include <stdlib.h>

#include "tallyd_args.h"
#include "test_powerloss.h"

int
main(int argc, char **argv)
{
    if (!test_powerloss_register()) {
        fputs("tallyd_powerloss: cannot register the power-loss VFS\n", stderr);
        return 1;
    }
    if (getenv("TALLY_TEST_CHILD_SYNC_MS") != NULL)
        test_powerloss_slow_child_syncs(atoi(getenv("TALLY_TEST_CHILD_SYNC_MS")));
    return tallyd_main(argc, argv);
}

/*
 * tallyd's main: everything is in tallyd_main() (tallyd.c), which the suites
 * also link into a test build of the daemon with their own main.
 */
#include "tallyd_args.h"

int
main(int argc, char **argv)
{
    return tallyd_main(argc, argv);
}

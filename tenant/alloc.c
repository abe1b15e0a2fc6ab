/*
 * The allocator of tally_common.h: plain malloc, calloc, realloc and free. It
 * is an object file of its own, defining nothing else, so that a suite can link
 * its own definitions of these four functions (tests/support/alloc_hook.c, which
 * counts allocations and fails the n-th one) and the linker, finding them
 * defined, never pulls this object out of the archive: production binaries
 * carry no hook and the suites need no switch in production code.
 */
#include "tally_common.h"

#include <stdlib.h>

void *
tally_malloc(size_t n)
{
    return malloc(n);
}

void *
tally_calloc(size_t count, size_t n)
{
    return calloc(count, n);
}

void *
tally_realloc(void *p, size_t n)
{
    return realloc(p, n);
}

void
tally_free(void *p)
{
    free(p);
}

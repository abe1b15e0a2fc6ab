/*
 * The suites' allocator (test_alloc.h): the four functions of tenant/alloc.c,
 * counting every allocation and failing the one numbered by
 * tally_alloc_fail_at() (curl's torture mode, SQLite's OOM tests). Linked as
 * an object into every suite, ahead of the static libraries, so that
 * tenant/alloc.o is never pulled in. The counter is atomic: a suite may run
 * tallyd's server on a thread of its own and read the count from another
 * (test_serve_noalloc).
 */
#include "test_alloc.h"

#include "tally_common.h"

#include <stdatomic.h>
#include <stdlib.h>

static _Atomic uint64_t alloc_count;
static _Atomic uint64_t alloc_fail_at;

static int
alloc_should_fail(void)
{
    uint64_t n = atomic_fetch_add(&alloc_count, 1) + 1;
    uint64_t at = atomic_load(&alloc_fail_at);

    return at != 0 && n == at;
}

void
tally_alloc_fail_at(uint64_t fail_at)
{
    atomic_store(&alloc_fail_at, fail_at == 0 ? 0 : atomic_load(&alloc_count) + fail_at);
}

uint64_t
tally_alloc_count(void)
{
    return atomic_load(&alloc_count);
}

void *
tally_malloc(size_t n)
{
    if (alloc_should_fail())
        return NULL;
    return malloc(n);
}

void *
tally_calloc(size_t count, size_t n)
{
    if (alloc_should_fail())
        return NULL;
    return calloc(count, n);
}

void *
tally_realloc(void *p, size_t n)
{
    if (alloc_should_fail())
        return NULL;
    return realloc(p, n);
}

void
tally_free(void *p)
{
    free(p);
}

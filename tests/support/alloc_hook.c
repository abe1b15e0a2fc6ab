/*
 * The suites' allocator (test_alloc.h): the four functions of tenant/alloc.c,
 * counting every allocation and failing the one numbered by
 * tally_alloc_fail_at() (curl's torture mode, SQLite's OOM tests). Linked as
 * an object into every suite, ahead of the static libraries, so that
 * tenant/alloc.o is never pulled in; the counter is a plain integer because
 * each suite allocates through tally from one thread.
 */
#include "test_alloc.h"

#include "tally_common.h"

#include <stdlib.h>

static uint64_t alloc_count;
static uint64_t alloc_fail_at;

static int
alloc_should_fail(void)
{
    alloc_count++;
    return alloc_fail_at != 0 && alloc_count == alloc_fail_at;
}

void
tally_alloc_fail_at(uint64_t fail_at)
{
    alloc_fail_at = fail_at == 0 ? 0 : alloc_count + fail_at;
}

uint64_t
tally_alloc_count(void)
{
    return alloc_count;
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

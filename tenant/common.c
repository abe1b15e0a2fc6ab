/*
 * The result table and the counted allocator. The counter is a plain integer
 * because every process uses one thread per loop and tests run one thread.
 */
#include "tally_common.h"

#include <stdlib.h>
#include <string.h>

const char *
tally_strerror(int rc)
{
    switch (rc) {
#define TALLY_RC_STR(name, value, msg)                                                             \
    case value:                                                                                    \
        return msg;
        TALLY_RC_MAP(TALLY_RC_STR)
#undef TALLY_RC_STR
    }
    return "unknown error";
}

const char *
tally_err_name(int rc)
{
    switch (rc) {
#define TALLY_RC_NAME(name, value, msg)                                                            \
    case value:                                                                                    \
        return "TALLY_" #name;
        TALLY_RC_MAP(TALLY_RC_NAME)
#undef TALLY_RC_NAME
    }
    return "TALLY_UNKNOWN";
}

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

char *
tally_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = tally_malloc(n);

    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

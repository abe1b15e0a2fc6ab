/*
 * The suites' allocation hook (alloc_hook.c), which replaces tenant/alloc.c in
 * every suite: tally_malloc, tally_calloc and tally_realloc count and can fail.
 */
#ifndef TEST_ALLOC_H
#define TEST_ALLOC_H

#include <stdint.h>

/** Fails the allocation numbered `fail_at` from now (1 = the next one; 0 disables). */
void tally_alloc_fail_at(uint64_t fail_at);
/** Allocations made through tally_malloc/calloc/realloc since the process started. */
uint64_t tally_alloc_count(void);

#endif /* TEST_ALLOC_H */

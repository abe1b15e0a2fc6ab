/*
 * The result table and tally_strdup. The allocator itself is in alloc.c, an
 * object of its own so that the suites can replace it (tests/support/alloc_hook.c).
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

char *
tally_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = tally_malloc(n);

    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

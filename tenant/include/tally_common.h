/*
 * What every part of tally shares: the one result enum (written once as an
 * X-macro, like libuv's UV_ERRNO_MAP), the allocator with its test hook, and
 * the small attribute macros. Installed with libtally.
 *
 * Rule for the whole header: functions are thread-safe unless said otherwise.
 */
#ifndef TALLY_COMMON_H
#define TALLY_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TALLY_MUST_CHECK __attribute__((warn_unused_result))
#define TALLY_EXPORT     __attribute__((visibility("default")))
#else
#define TALLY_MUST_CHECK
#define TALLY_EXPORT
#endif

/* "Cannot happen" checks: abort in debug builds, evaluate to the condition otherwise. */
#include <assert.h>
#define ALWAYS(x) (assert(x), (x))
#define NEVER(x)  (assert(!(x)), (x))

/* X(name, value, message). Values are never reused; append new codes at the end. */
#define TALLY_RC_MAP(X)                                                                            \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(ENAME, -3, "invalid name: use [a-z0-9][a-z0-9_-]{0,62}")                                     \
    X(ELIMIT, -4, "invalid limit: use N/PERIOD, e.g. 600/1m")                                      \
    X(ENOTFOUND, -5, "not found")                                                                  \
    X(EEXIST, -6, "already exists")                                                                \
    X(EIO, -7, "input/output error")                                                               \
    X(ESTORE, -8, "storage error")                                                                 \
    X(EBUSY, -9, "storage busy")                                                                   \
    X(EFULL, -10, "disk full")                                                                     \
    X(EREADONLY, -11, "storage is read-only")                                                      \
    X(ECORRUPT, -12, "database file is corrupt")                                                   \
    X(ESCHEMA, -13, "database schema is newer than this binary")                                   \
    X(EOVERFLOW, -14, "value out of range")                                                        \
    X(EUNAUTH, -15, "unauthorized")                                                                \
    X(ECONFIG, -16, "invalid configuration")                                                       \
    X(EPROTO, -17, "protocol error")                                                               \
    X(EUNAVAIL, -18, "unavailable")                                                                \
    X(ENOKEY, -19, "no deployment key: run `tally init` first")                                    \
    X(ECOST, -20, "invalid cost")                                                                  \
    X(ETOOBIG, -21, "too large")                                                                   \
    X(ENODATA, -22, "data directory not initialised: run `tally init` first")                      \
    X(EPERM, -23, "permission denied")                                                             \
    X(EINUSE, -24, "still in use")                                                                 \
    X(ETIMEDOUT, -25, "timed out")                                                                 \
    X(ELOCKED, -26, "locked by another process")                                                   \
    X(EKEYMODE, -27, "deployment key is readable by others: chmod 600 it")                         \
    X(ECANCELED, -28, "cancelled: the client handle was closed")

enum tally_rc {
#define TALLY_RC_ENUM(name, value, msg) TALLY_##name = (value),
    TALLY_RC_MAP(TALLY_RC_ENUM)
#undef TALLY_RC_ENUM
};

/** Human message for rc; never NULL, static storage. */
TALLY_EXPORT const char *tally_strerror(int rc);
/** Symbolic name for rc ("TALLY_ENAME"); never NULL, static storage. */
TALLY_EXPORT const char *tally_err_name(int rc);

/*
 * Allocator. Everything in tally allocates through these (tenant/alloc.c: plain
 * malloc) so that the suites can link their own definitions, which count
 * allocations and fail the n-th one (curl's torture mode; tests/support/alloc_hook.c).
 */
TALLY_EXPORT void *tally_malloc(size_t n);
TALLY_EXPORT void *tally_calloc(size_t count, size_t n);
TALLY_EXPORT void *tally_realloc(void *p, size_t n);
TALLY_EXPORT void tally_free(void *p);
TALLY_EXPORT char *tally_strdup(const char *s);

#endif /* TALLY_COMMON_H */

/*
 * A small load generator for the binary protocol, for the end-to-end suites:
 * C connections to tallyd's Unix socket, each sending its share of CHECK
 * requests pipelined at once, then reading every answer. Counts answers by
 * status; a connection that breaks (tallyd killed) counts its unanswered
 * requests as lost.
 */
#ifndef TEST_LOAD_H
#define TEST_LOAD_H

#include <stdint.h>

struct test_load_result {
    int admitted;
    int refused;
    int unauthorized;
    int unavailable;
    int bad_request;
    int other;
    int lost; /* no answer: connection refused or broken */
    int degraded;
};

/** Sends `total` CHECKs of `endpoint` over `conns` connections to `socket`, tokens
 *  taken round-robin from tokens[0..ntokens-1]; waits at most timeout_ms. */
void test_load_run(const char *socket, const char *const *tokens, int ntokens, const char *endpoint,
                   int total, int conns, int timeout_ms, struct test_load_result *out);

#endif

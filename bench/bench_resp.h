/*
 * bench_resp: just enough of Redis's RESP2 protocol for tally-bench to call a
 * Lua limiter with EVALSHA, pipelined, over TCP or a Unix socket. Pure
 * encoding and parsing over caller buffers, plus one blocking SCRIPT LOAD.
 */
#ifndef BENCH_RESP_H
#define BENCH_RESP_H

#include <stddef.h>
#include <stdint.h>

#define RESP_SHA_LEN 40

/** Encodes EVALSHA sha 1 key arg1 arg2 into out (cap bytes); length, or 0 when
 *  it does not fit. */
size_t resp_evalsha(uint8_t *out, size_t cap, const char *sha, const char *key, const char *arg1,
                    const char *arg2);
/** Parses one whole reply at p[0..n): 1 with *value (an integer reply, or the
 *  first integer of an array reply) and *used set, 0 when more bytes are needed,
 *  -1 for an error reply or a shape this parser does not take. */
int resp_reply(const uint8_t *p, size_t n, int64_t *value /* OUT */, size_t *used /* OUT */);
/** Sends SCRIPT LOAD with the text of file `path` on blocking socket fd and
 *  reads the SHA1 into sha (RESP_SHA_LEN + 1 bytes). 0 or -1 (message on stderr). */
int resp_script_load(int fd, const char *path, char sha[RESP_SHA_LEN + 1] /* OUT */);

#endif /* BENCH_RESP_H */

/*
 * RESP2 for tally-bench (see bench_resp.h): commands are arrays of bulk
 * strings; replies are parsed only as far as a limiter script answers
 * (integers, arrays of integers or bulk strings, errors).
 */
#include "bench_resp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t
put_bulk(uint8_t *out, size_t cap, size_t at, const char *s, size_t len)
{
    int n;

    if (at >= cap)
        return 0;
    n = snprintf((char *)out + at, cap - at, "$%zu\r\n", len);
    if (n < 0 || (size_t)n + len + 2 > cap - at)
        return 0;
    at += (size_t)n;
    memcpy(out + at, s, len);
    memcpy(out + at + len, "\r\n", 2);
    return at + len + 2;
}

size_t
resp_evalsha(uint8_t *out, size_t cap, const char *sha, const char *key, const char *arg1,
             const char *arg2)
{
    const char *v[] = {"EVALSHA", sha, "1", key, arg1, arg2};
    size_t at = 0, i;

    if (cap < 4)
        return 0;
    memcpy(out, "*6\r\n", 4);
    at = 4;
    for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        at = put_bulk(out, cap, at, v[i], strlen(v[i]));
        if (at == 0)
            return 0;
    }
    return at;
}

/* One line (without CRLF) starting at p: its length, or -1 when incomplete. */
static long
line_len(const uint8_t *p, size_t n)
{
    size_t i;

    for (i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return (long)i;
    return -1;
}

static int64_t
line_int(const uint8_t *p, long len)
{
    char tmp[32];

    snprintf(tmp, sizeof(tmp), "%.*s", (int)len, (const char *)p);
    return strtoll(tmp, NULL, 10);
}

/* Parses one value; `depth` bounds nesting. 1, 0 or -1 as resp_reply. */
static int
value(const uint8_t *p, size_t n, int depth, int64_t *v, int *have, size_t *used)
{
    long len = line_len(p, n);
    int64_t k, i;
    size_t at;

    if (len < 0)
        return 0;
    at = (size_t)len + 2;
    switch (p[0]) {
    case ':':
        if (!*have)
            *v = line_int(p + 1, len - 1);
        *have = 1;
        *used = at;
        return 1;
    case '+':
        *used = at;
        return 1;
    case '$':
        k = line_int(p + 1, len - 1);
        if (k >= 0) {
            if (n < at + (size_t)k + 2)
                return 0;
            at += (size_t)k + 2;
        }
        *used = at;
        return 1;
    case '*':
        k = line_int(p + 1, len - 1);
        if (depth > 2)
            return -1;
        for (i = 0; i < k; i++) {
            size_t u = 0;
            int rc = value(p + at, n - at, depth + 1, v, have, &u);
            if (rc != 1)
                return rc;
            at += u;
        }
        *used = at;
        return 1;
    default: /* '-' error, or anything else */
        return -1;
    }
}

int
resp_reply(const uint8_t *p, size_t n, int64_t *v, size_t *used)
{
    int have = 0;

    *v = 0;
    *used = 0;
    if (n == 0)
        return 0;
    return value(p, n, 0, v, &have, used);
}

static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (s = malloc((size_t)n + 1)) != NULL) {
        *len = fread(s, 1, (size_t)n, f);
        s[*len] = '\0';
    }
    fclose(f);
    return s;
}

int
resp_script_load(int fd, const char *path, char sha[RESP_SHA_LEN + 1])
{
    size_t slen = 0, cap, at, got = 0;
    char *script = slurp(path, &slen);
    uint8_t *cmd = NULL, in[256];
    int rc = -1;

    if (script == NULL) {
        fprintf(stderr, "tally-bench: cannot read script %s\n", path);
        return -1;
    }
    cap = slen + 128;
    cmd = malloc(cap);
    if (cmd == NULL)
        goto out;
    memcpy(cmd, "*3\r\n", 4);
    at = put_bulk(cmd, cap, 4, "SCRIPT", 6);
    at = at ? put_bulk(cmd, cap, at, "LOAD", 4) : 0;
    at = at ? put_bulk(cmd, cap, at, script, slen) : 0;
    if (at == 0 || write(fd, cmd, at) != (ssize_t)at)
        goto out;
    /* $40\r\n<sha>\r\n is 47 bytes; an error line is shorter and ends in CRLF. */
    while (got < sizeof(in)) {
        ssize_t r = read(fd, in + got, sizeof(in) - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (in[0] == '-' && line_len(in, got) >= 0)
            break;
        if (got >= 5 + RESP_SHA_LEN + 2)
            break;
    }
    if (got >= 5 + RESP_SHA_LEN + 2 && memcmp(in, "$40\r\n", 5) == 0) {
        memcpy(sha, in + 5, RESP_SHA_LEN);
        sha[RESP_SHA_LEN] = '\0';
        rc = 0;
    } else {
        fprintf(stderr, "tally-bench: SCRIPT LOAD failed: %.*s\n", (int)got, (const char *)in);
    }
out:
    free(cmd);
    free(script);
    return rc;
}

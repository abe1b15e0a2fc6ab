/*
 * libFuzzer target: what parses callers and their records. The first byte picks
 * the parser: 0 a caller "KIND:VALUE" (tenant_caller_parse; what it accepts has
 * the documented shape and hashes), 1 a stream of caller channel frames
 * (proto_caller.h: whatever decodes encodes back to the same bytes), 2 a stored
 * entry or sketch cell (callers_rec_decode: what decodes encodes back).
 */
#include <string.h>

#include "callers_int.h"
#include "fuzz_util.h"
#include "proto_caller.h"
#include "tenant_callers.h"

static const unsigned char key[TENANT_KEY_BYTES] = {7};

static void
caller(const uint8_t *p, size_t n)
{
    const char *why = NULL;
    unsigned char h[TENANT_CALLER_KEY_BYTES];
    size_t colon;

    if (tenant_caller_parse((const char *)p, n, &why) != TALLY_OK) {
        FUZZ_CHECK(why != NULL);
        return;
    }
    FUZZ_CHECK(why == NULL && n >= 3 && n <= TENANT_CALLER_TEXT_MAX);
    colon = (size_t)((const uint8_t *)memchr(p, ':', n) - p);
    FUZZ_CHECK(colon >= 1 && colon <= TENANT_CALLER_KIND_MAX && n - colon - 1 >= 1);
    for (size_t i = colon + 1; i < n; i++)
        FUZZ_CHECK(p[i] >= 0x20 && p[i] <= 0x7e);
    FUZZ_CHECK(tenant_caller_hash(key, (const char *)p, n, h) == TALLY_OK);
}

static void
frames(const uint8_t *p, size_t n)
{
    static uint8_t buf[PROTO_CALLER_MSG_MAX];
    static uint8_t out[PROTO_CALLER_MSG_MAX];
    struct proto_frame_reader r;
    struct proto_frame f;

    proto_frame_reader_init(&r, buf, sizeof(buf));
    while (n > 0) {
        uint8_t *space = NULL;
        size_t room = proto_frame_reader_space(&r, &space);
        size_t take = n < room ? n : room;
        if (take == 0)
            return;
        memcpy(space, p, take);
        proto_frame_reader_commit(&r, take);
        p += take;
        n -= take;
        while (proto_frame_next(&r, &f) == TALLY_OK) {
            struct proto_caller_decide d;
            struct proto_caller_verdict v;
            uint32_t hold = 0;
            size_t len = 0;
            if (proto_caller_decide_decode(&f, &d) == TALLY_OK)
                len = proto_caller_decide_encode(out, f.request_id, &d);
            else if (proto_caller_verdict_decode(&f, &v) == TALLY_OK)
                len = proto_caller_verdict_encode(out, f.request_id, &v);
            else if (proto_caller_cancel_decode(&f, &hold) == TALLY_OK)
                len = proto_caller_cancel_encode(out, f.request_id, hold);
            else
                continue;
            FUZZ_CHECK(len == PROTO_FRAME_HEADER + f.payload_len);
            FUZZ_CHECK(memcmp(out, f.payload - PROTO_FRAME_HEADER, len) == 0);
        }
    }
}

static void
rec(const uint8_t *p, size_t n)
{
    union tenant_callers_state st;
    enum tenant_algorithm alg;
    uint8_t out[CALLERS_REC_MAX];

    if (callers_rec_decode(p, n, &alg, &st) != TALLY_OK)
        return;
    FUZZ_CHECK(callers_rec_encode(alg, &st, out) == n);
    FUZZ_CHECK(memcmp(out, p, n) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0:
        caller(data + 1, size - 1);
        break;
    case 1:
        frames(data + 1, size - 1);
        break;
    default:
        rec(data + 1, size - 1);
        break;
    }
    return 0;
}

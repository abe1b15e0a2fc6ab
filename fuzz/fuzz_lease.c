/*
 * libFuzzer target: the lease channel codec (proto/lease_codec.c). The input
 * is a stream of frames read as the lease channel reads them; a frame that
 * decodes must validate, encode back to exactly its own bytes, and decode
 * again to the same message.
 */
#include <string.h>

#include "fuzz_util.h"
#include "proto_lease.h"

static uint8_t rbuf[PROTO_FRAME_MAX];
static uint8_t out[PROTO_LEASE_FRAME_MAX];

static void
one_frame(const struct proto_frame *f)
{
    struct proto_lease_msg m, again;
    struct proto_frame g;
    size_t len = 0;

    if (proto_lease_decode(f, &m) != TALLY_OK)
        return;
    FUZZ_CHECK(proto_lease_validate(&m) == TALLY_OK);
    FUZZ_CHECK(proto_lease_type_name(m.type)[0] != 'U'); /* a known type */
    FUZZ_CHECK(proto_lease_encode(&m, f->request_id, out, sizeof(out), &len) == TALLY_OK);
    FUZZ_CHECK(len == PROTO_FRAME_HEADER + f->payload_len);
    FUZZ_CHECK(memcmp(out, f->payload - PROTO_FRAME_HEADER, len) == 0);
    g = *f;
    g.payload = out + PROTO_FRAME_HEADER;
    FUZZ_CHECK(proto_lease_decode(&g, &again) == TALLY_OK);
    FUZZ_CHECK(proto_lease_encode(&again, f->request_id, out, sizeof(out), &len) == TALLY_OK);
    FUZZ_CHECK(memcmp(out, f->payload - PROTO_FRAME_HEADER, len) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_frame_reader r;
    struct proto_frame f;
    size_t at = 0;

    proto_frame_reader_init(&r, rbuf, sizeof(rbuf));
    while (at < size) {
        uint8_t *space;
        size_t room = proto_frame_reader_space(&r, &space);
        size_t take = size - at < room ? size - at : room;
        int rc;

        if (take == 0)
            return 0;
        memcpy(space, data + at, take);
        proto_frame_reader_commit(&r, take);
        at += take;
        while ((rc = proto_frame_next(&r, &f)) == TALLY_OK)
            one_frame(&f);
        if (rc != TALLY_ENOTFOUND)
            return 0;
    }
    return 0;
}

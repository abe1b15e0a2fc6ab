/*
 * libFuzzer target: the client protocol codecs (proto/client_codec.c). The
 * input is a stream of frames read as tallyd's socket reads them (frames of at
 * most PROTO_CLIENT_MSG_MAX bytes); each frame goes to the decoder of its type,
 * and whatever decodes must encode back to the very bytes it came from
 * (header, flags, request id and payload), and decode again to the same value.
 */
#include <string.h>

#include "fuzz_util.h"
#include "proto_client.h"

static uint8_t rbuf[PROTO_CLIENT_MSG_MAX];
static uint8_t out[PROTO_CLIENT_MSG_MAX];

/* The raw bytes of f, header included (they sit right before the payload). */
static void
check_same(const struct proto_frame *f, size_t len)
{
    FUZZ_CHECK(len == PROTO_FRAME_HEADER + f->payload_len);
    FUZZ_CHECK(memcmp(out, f->payload - PROTO_FRAME_HEADER, len) == 0);
}

static void
one_frame(const struct proto_frame *f)
{
    union {
        struct proto_hello hello;
        struct proto_hello_reply hello_reply;
        struct proto_check check;
        struct proto_check_reply check_reply;
        struct proto_release release;
        struct proto_check_callers callers;
    } m;
    uint8_t status = 0;
    int32_t code = 0;
    char msg[128];

    memset(&m, 0, sizeof(m));
    switch (f->type) {
    case PROTO_C_HELLO:
        if (proto_hello_decode(f, &m.hello) == TALLY_OK)
            check_same(f, proto_hello_encode(out, f->request_id, &m.hello));
        break;
    case PROTO_C_HELLO_REPLY:
        if (proto_hello_reply_decode(f, &m.hello_reply) == TALLY_OK)
            check_same(f, proto_hello_reply_encode(out, f->request_id, &m.hello_reply));
        break;
    case PROTO_C_CHECK:
        if (proto_check_decode(f, &m.check) == TALLY_OK)
            check_same(f, proto_check_encode(out, f->request_id, &m.check));
        break;
    case PROTO_C_CHECK_CALLERS:
        if (proto_check_callers_decode(f, &m.callers) == TALLY_OK)
            check_same(f, proto_check_callers_encode(out, f->request_id, &m.callers));
        break;
    case PROTO_C_CHECK_REPLY:
        if (proto_check_reply_decode(f, &m.check_reply) == TALLY_OK)
            check_same(f, proto_check_reply_encode(out, f->request_id, &m.check_reply));
        break;
    case PROTO_C_RELEASE:
        if (proto_release_decode(f, &m.release) == TALLY_OK)
            check_same(f, proto_release_encode(out, f->request_id, &m.release));
        break;
    case PROTO_C_RELEASE_REPLY:
    case PROTO_C_RELOAD_REPLY:
        if (proto_status_decode(f, &status) == TALLY_OK)
            check_same(f, proto_status_encode(out, f->type, f->request_id, status));
        break;
    case PROTO_C_RELOAD:
        if (f->payload_len == 0 && f->flags == 0)
            check_same(f, proto_empty_encode(out, f->type, f->request_id));
        break;
    case PROTO_C_ERROR:
        if (proto_error_decode(f, &code, msg, sizeof(msg)) == TALLY_OK)
            check_same(f, proto_error_encode(out, f->request_id, code, msg));
        break;
    default:
        /* Not a client type: every client decoder refuses it. */
        FUZZ_CHECK(proto_hello_decode(f, &m.hello) == TALLY_EPROTO);
        FUZZ_CHECK(proto_check_decode(f, &m.check) == TALLY_EPROTO);
        FUZZ_CHECK(proto_release_decode(f, &m.release) == TALLY_EPROTO);
        FUZZ_CHECK(proto_check_callers_decode(f, &m.callers) == TALLY_EPROTO);
        FUZZ_CHECK(proto_check_reply_decode(f, &m.check_reply) == TALLY_EPROTO);
        break;
    }
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
            return 0; /* protocol error: the connection would be dropped */
    }
    return 0;
}

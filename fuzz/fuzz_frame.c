/*
 * libFuzzer target: the frame reader (proto/frame.c). The input is a stream
 * of bytes after one byte that seeds how it is cut. The stream is read twice:
 * fed whole (as far as the buffer takes it) and delivered in small pieces
 * through the reader's space/commit calls, as a socket does. Both readings
 * must yield the same frames and end the same way, and every frame must be
 * what its header says: a known version, a length in bounds, and a header
 * that proto_frame_header() writes back byte for byte.
 */
#include <string.h>

#include "fuzz_util.h"
#include "proto_frame.h"

#define MAX_FRAMES 4096

struct seen {
    uint8_t type;
    uint16_t flags;
    uint32_t id;
    size_t len;
    uint32_t sum; /* of the payload */
};

static uint8_t buf_a[PROTO_FRAME_MAX];
static uint8_t buf_b[PROTO_FRAME_MAX];
static struct seen frames[MAX_FRAMES];

static uint32_t
payload_sum(const struct proto_frame *f)
{
    uint32_t h = 2166136261u;
    size_t i;

    for (i = 0; i < f->payload_len; i++)
        h = (h ^ f->payload[i]) * 16777619u;
    return h;
}

static void
check_frame(const struct proto_frame *f)
{
    uint8_t head[PROTO_FRAME_HEADER];

    FUZZ_CHECK(f->version == PROTO_VERSION);
    FUZZ_CHECK(f->payload_len <= PROTO_PAYLOAD_MAX);
    proto_frame_header(head, f->type, f->flags, f->request_id, f->payload_len);
    FUZZ_CHECK(memcmp(head, f->payload - PROTO_FRAME_HEADER, PROTO_FRAME_HEADER) == 0);
}

/* Takes every whole frame out of r; records them (a) or compares them (b). */
static int
drain(struct proto_frame_reader *r, size_t *n, bool record)
{
    struct proto_frame f;
    int rc;

    while ((rc = proto_frame_next(r, &f)) == TALLY_OK) {
        struct seen s;

        memset(&s, 0, sizeof(s)); /* padding too: records are compared with memcmp */
        s.type = f.type;
        s.flags = f.flags;
        s.id = f.request_id;
        s.len = f.payload_len;
        s.sum = payload_sum(&f);
        check_frame(&f);
        if (*n >= MAX_FRAMES)
            return TALLY_ETOOBIG;
        if (record)
            frames[*n] = s;
        else
            FUZZ_CHECK(memcmp(&frames[*n], &s, sizeof(s)) == 0);
        (*n)++;
    }
    return rc;
}

/* Reading a: feed() as much as fits, take frames out, repeat. */
static int
read_whole(const uint8_t *p, size_t len, size_t *n)
{
    struct proto_frame_reader r;
    size_t at = 0;
    int rc = TALLY_ENOTFOUND;

    proto_frame_reader_init(&r, buf_a, sizeof(buf_a));
    *n = 0;
    while (at < len) {
        uint8_t *space;
        size_t room = proto_frame_reader_space(&r, &space);
        size_t take = len - at < room ? len - at : room;

        if (take == 0)
            return TALLY_ETOOBIG; /* cannot happen: a full reader holds a whole frame */
        FUZZ_CHECK(proto_frame_reader_feed(&r, p + at, take) == TALLY_OK);
        at += take;
        rc = drain(&r, n, true);
        if (rc != TALLY_ENOTFOUND)
            return rc;
    }
    return rc;
}

/* Reading b: pieces of 1..16 bytes through space/commit, as from a socket. */
static int
read_pieces(const uint8_t *p, size_t len, uint8_t seed, size_t *n)
{
    struct proto_frame_reader r;
    uint32_t x = seed | 0x100u;
    size_t at = 0;
    int rc = TALLY_ENOTFOUND;

    proto_frame_reader_init(&r, buf_b, sizeof(buf_b));
    *n = 0;
    while (at < len) {
        uint8_t *space;
        size_t room = proto_frame_reader_space(&r, &space);
        size_t take;

        x = x * 1103515245u + 12345u;
        take = 1 + (x >> 16) % 16;
        if (take > len - at)
            take = len - at;
        if (take > room)
            take = room;
        if (take == 0)
            return TALLY_ETOOBIG;
        memcpy(space, p + at, take);
        proto_frame_reader_commit(&r, take);
        at += take;
        rc = drain(&r, n, false);
        if (rc != TALLY_ENOTFOUND)
            return rc;
    }
    return rc;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n_a = 0;
    size_t n_b = 0;
    int rc_a, rc_b;

    if (size < 1)
        return 0;
    rc_a = read_whole(data + 1, size - 1, &n_a);
    rc_b = read_pieces(data + 1, size - 1, data[0], &n_b);
    FUZZ_CHECK(rc_a == TALLY_ENOTFOUND || rc_a == TALLY_EPROTO || rc_a == TALLY_ETOOBIG);
    /* A cut stream may stop at a bad version the whole one saw too: same verdict. */
    FUZZ_CHECK(rc_a == rc_b);
    FUZZ_CHECK(n_a == n_b);
    return 0;
}

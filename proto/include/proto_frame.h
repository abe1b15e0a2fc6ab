/*
 * proto_frame: the binary framing shared by the client protocol (tally, libtally
 * -> tallyd) and the lease channel (child counters <-> supervisor). Every
 * message is one frame:
 *
 *   offset  size  field
 *   0       4     length: bytes after this field (8 + payload), big-endian,
 *                 8..PROTO_FRAME_MAX - 4
 *   4       1     version: PROTO_VERSION (1)
 *   5       1     type: a message type (proto_lease.h, proto_client.h)
 *   6       2     flags: per type, big-endian
 *   8       4     request id: echoed by the answer, big-endian (pipelining)
 *   12      n     payload
 *
 * A reader accumulates bytes from a stream and yields whole frames; a frame
 * whose length is out of bounds or whose version is unknown is a protocol
 * error (the connection, never the process, is dropped).
 *
 * Header-wide rules: pure code, no allocation after proto_frame_reader_init;
 * borrowed pointers are valid until the next call on the same reader.
 */
#ifndef PROTO_FRAME_H
#define PROTO_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally_common.h"

#define PROTO_VERSION      1
#define PROTO_FRAME_HEADER 12
#define PROTO_FRAME_MAX    65536 /* whole frame, header included */
#define PROTO_PAYLOAD_MAX  (PROTO_FRAME_MAX - PROTO_FRAME_HEADER)

struct proto_frame {
    uint8_t version;
    uint8_t type;
    uint16_t flags;
    uint32_t request_id;
    const uint8_t *payload; /* borrowed: valid until the next reader call */
    size_t payload_len;
};

/* Accumulates stream bytes into whole frames. Caller-owned; so is the buffer. */
struct proto_frame_reader {
    uint8_t *buf;
    size_t cap;      /* the buffer's size */
    size_t max;      /* the largest frame taken: cap, or more for a buffer that grows */
    size_t len;      /* bytes held */
    size_t consumed; /* bytes of frames already handed out, dropped at the next feed */
};

/** Sets up a reader over `buf` (borrowed, `cap` bytes): frames longer than cap are
 *  protocol errors, so cap is also the largest frame this stream accepts. */
void proto_frame_reader_init(struct proto_frame_reader *r, uint8_t *buf, size_t cap);
/** Sets the largest frame taken to `max` (at least cap): a frame longer than the buffer
 *  but within max waits, incomplete, until proto_frame_reader_move gives it room. */
void proto_frame_reader_grow_to(struct proto_frame_reader *r, size_t max);
/** The bytes the frame now arriving needs whole (header included), once its length is in;
 *  0 when nothing of it is held or its length is not read yet. */
size_t proto_frame_reader_need(const struct proto_frame_reader *r);
/** Moves what is held to `buf` (borrowed, `cap` bytes, at least what is held) and wipes
 *  it from the old buffer, which the caller then frees. */
void proto_frame_reader_move(struct proto_frame_reader *r, uint8_t *buf, size_t cap);
/** Space to read into: *out points into the buffer, returns its size (0 when full,
 *  which cannot happen while frames are taken out as they complete). */
size_t proto_frame_reader_space(struct proto_frame_reader *r, uint8_t **out /* OUT */);
/** Records that `n` bytes were read into the space given by proto_frame_reader_space. */
void proto_frame_reader_commit(struct proto_frame_reader *r, size_t n);
/** Copies `n` bytes in (for callers whose reads land elsewhere). TALLY_ETOOBIG if
 *  they do not fit. */
TALLY_MUST_CHECK int proto_frame_reader_feed(struct proto_frame_reader *r, const void *data,
                                             size_t n);
/** Takes the next whole frame: TALLY_OK with *f filled, TALLY_ENOTFOUND when more
 *  bytes are needed, TALLY_EPROTO for a bad length or version (the stream is then
 *  unusable). */
TALLY_MUST_CHECK int proto_frame_next(struct proto_frame_reader *r,
                                      struct proto_frame *f /* OUT */);

/** Writes a frame header for a payload of `payload_len` bytes into out[12]. */
void proto_frame_header(uint8_t out[PROTO_FRAME_HEADER], uint8_t type, uint16_t flags,
                        uint32_t request_id, size_t payload_len);

/* Big-endian field access with bounds, for payload codecs. A cursor that runs
 * past its end sets `bad` and reads zeros, so a decoder checks once at the end. */
struct proto_cursor {
    const uint8_t *p;
    size_t len;
    size_t at;
    bool bad;
};
struct proto_writer {
    uint8_t *p;
    size_t cap;
    size_t at;
    bool bad; /* set when a write did not fit */
};

void proto_cursor_init(struct proto_cursor *c, const uint8_t *p, size_t len);
uint8_t proto_get_u8(struct proto_cursor *c);
uint16_t proto_get_u16(struct proto_cursor *c);
uint32_t proto_get_u32(struct proto_cursor *c);
uint64_t proto_get_u64(struct proto_cursor *c);
int64_t proto_get_i64(struct proto_cursor *c);
/** Reads a u8 length then that many bytes into out (cap bytes incl. NUL); sets bad
 *  when longer than cap - 1 or when a NUL byte is inside. */
void proto_get_str(struct proto_cursor *c, char *out, size_t cap);
/** Copies exactly n bytes. */
void proto_get_bytes(struct proto_cursor *c, void *out, size_t n);
/** True iff every byte was consumed and nothing ran past the end. */
bool proto_cursor_done(const struct proto_cursor *c);

void proto_writer_init(struct proto_writer *w, uint8_t *p, size_t cap);
void proto_put_u8(struct proto_writer *w, uint8_t v);
void proto_put_u16(struct proto_writer *w, uint16_t v);
void proto_put_u32(struct proto_writer *w, uint32_t v);
void proto_put_u64(struct proto_writer *w, uint64_t v);
void proto_put_i64(struct proto_writer *w, int64_t v);
/** Writes a u8 length and the bytes of s (at most 255). */
void proto_put_str(struct proto_writer *w, const char *s);
void proto_put_bytes(struct proto_writer *w, const void *p, size_t n);

#endif /* PROTO_FRAME_H */

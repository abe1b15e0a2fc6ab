/*
 * Inputs the fuzz targets found (fuzz/corpus/<target>/regress-*), replayed as
 * plain unit tests so they run in every build, sanitizers or not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_client.h"
#include "test_support.h"

static uint8_t buf[PROTO_CLIENT_MSG_MAX];

static void
frame_of(const uint8_t *bytes, size_t n, struct proto_frame *f)
{
    struct proto_frame_reader r;

    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, bytes, n), TALLY_OK);
    assert_int_equal(proto_frame_next(&r, f), TALLY_OK);
}

/* fuzz_client: a RELOAD_REPLY with flags 0x000d decoded, and re-encoded
 * without them. Flags are 0 unless the type defines some (PROTOCOL.md). */
static void
test_codec_status_with_flags_refused(void **state)
{
    char path[512];
    size_t n = 0;
    uint8_t *bytes;
    struct proto_frame f;
    uint8_t status = 9;

    (void)state;
    snprintf(path, sizeof(path), "%s/fuzz/corpus/client/regress-status-flags", TALLY_SOURCE_DIR);
    bytes = (uint8_t *)test_read_file(path, &n);
    assert_non_null(bytes);
    assert_int_equal(n, 13);
    frame_of(bytes, n, &f);
    assert_int_equal(f.type, PROTO_C_RELOAD_REPLY);
    assert_int_equal(f.flags, 0x000d);
    assert_int_equal(proto_status_decode(&f, &status), TALLY_EPROTO);
    free(bytes);
}

/* Every client message but CHECK_REPLY refuses a frame with a flag set. */
static void
test_codec_flags_refused_on_every_type(void **state)
{
    struct proto_hello h = {1, 1};
    struct proto_hello_reply hr = {1, 65536, 128};
    struct proto_check c = {"tly_x", "search", 1};
    struct proto_release rl = {"tly_x", 3};
    struct proto_check_reply cr = {0};
    uint8_t out[PROTO_CLIENT_MSG_MAX];
    struct proto_frame f;
    int32_t code;
    char msg[64];
    uint8_t st;

    (void)state;
#define FLAGGED(encoded)                                                                           \
    do {                                                                                           \
        size_t len_ = (encoded);                                                                   \
        out[7] = 0x01; /* the low byte of the flags */                                             \
        frame_of(out, len_, &f);                                                                   \
    } while (0)
    FLAGGED(proto_hello_encode(out, 1, &h));
    assert_int_equal(proto_hello_decode(&f, &h), TALLY_EPROTO);
    FLAGGED(proto_hello_reply_encode(out, 1, &hr));
    assert_int_equal(proto_hello_reply_decode(&f, &hr), TALLY_EPROTO);
    FLAGGED(proto_check_encode(out, 1, &c));
    assert_int_equal(proto_check_decode(&f, &c), TALLY_EPROTO);
    FLAGGED(proto_release_encode(out, 1, &rl));
    assert_int_equal(proto_release_decode(&f, &rl), TALLY_EPROTO);
    FLAGGED(proto_status_encode(out, PROTO_C_RELEASE_REPLY, 1, 0));
    assert_int_equal(proto_status_decode(&f, &st), TALLY_EPROTO);
    FLAGGED(proto_error_encode(out, 1, TALLY_EPROTO, "x"));
    assert_int_equal(proto_error_decode(&f, &code, msg, sizeof(msg)), TALLY_EPROTO);
    /* CHECK_REPLY defines flags: they decode. */
    cr.flags = PROTO_F_DEGRADED;
    frame_of(out, proto_check_reply_encode(out, 1, &cr), &f);
    assert_int_equal(proto_check_reply_decode(&f, &cr), TALLY_OK);
    assert_int_equal(cr.flags, PROTO_F_DEGRADED);
#undef FLAGGED
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_status_with_flags_refused),
        cmocka_unit_test(test_codec_flags_refused_on_every_type),
    };

    return cmocka_run_group_tests_name("badinput_codec", tests, NULL, NULL);
}

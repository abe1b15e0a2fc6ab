/*
 * The binary framing and the client protocol codecs: frames delivered whole,
 * split at every byte and glued together come out identical; bad lengths and
 * versions are protocol errors; every truncation of every client message is
 * rejected (CLUSTER_REPLY's too); random bytes never crash a decoder.
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
#include "proto_cluster.h"
#include "test_support.h"

static uint8_t buf[PROTO_FRAME_MAX];
static uint8_t frame[PROTO_FRAME_MAX];

static void
test_frame_split_at_every_byte(void **state)
{
    struct proto_check m = {"tly_token", "search", 3};
    struct proto_frame_reader r;
    struct proto_frame f;
    size_t len = proto_check_encode(frame, 77, &m);
    size_t cut;

    (void)state;
    assert_true(len > PROTO_FRAME_HEADER);
    for (cut = 0; cut <= len; cut++) {
        struct proto_check back;
        proto_frame_reader_init(&r, buf, sizeof(buf));
        assert_int_equal(proto_frame_reader_feed(&r, frame, cut), TALLY_OK);
        if (cut < len) {
            assert_int_equal(proto_frame_next(&r, &f), TALLY_ENOTFOUND);
            assert_int_equal(proto_frame_reader_feed(&r, frame + cut, len - cut), TALLY_OK);
        }
        assert_int_equal(proto_frame_next(&r, &f), TALLY_OK);
        assert_int_equal(f.request_id, 77);
        assert_int_equal(f.type, PROTO_C_CHECK);
        assert_int_equal(proto_check_decode(&f, &back), TALLY_OK);
        assert_string_equal(back.token, "tly_token");
        assert_string_equal(back.endpoint, "search");
        assert_int_equal(back.cost, 3);
        assert_int_equal(proto_frame_next(&r, &f), TALLY_ENOTFOUND);
    }
}

static void
test_frames_glued_together(void **state)
{
    struct proto_frame_reader r;
    struct proto_frame f;
    uint32_t i;

    (void)state;
    proto_frame_reader_init(&r, buf, sizeof(buf));
    for (i = 0; i < 100; i++) {
        size_t len = proto_status_encode(frame, PROTO_C_RELOAD_REPLY, i, (uint8_t)i);
        assert_int_equal(proto_frame_reader_feed(&r, frame, len), TALLY_OK);
    }
    for (i = 0; i < 100; i++) {
        uint8_t st = 0;
        assert_int_equal(proto_frame_next(&r, &f), TALLY_OK);
        assert_int_equal(f.request_id, i);
        assert_int_equal(proto_status_decode(&f, &st), TALLY_OK);
        assert_int_equal(st, i);
    }
    assert_int_equal(proto_frame_next(&r, &f), TALLY_ENOTFOUND);
}

static void
test_bad_length_and_version(void **state)
{
    static const uint8_t too_short[] = {0, 0, 0, 7, 1, 34, 0, 0, 0, 0, 0};
    static const uint8_t too_long[] = {0, 1, 0, 0, 1, 34, 0, 0, 0, 0, 0, 0};
    static const uint8_t bad_version[] = {0, 0, 0, 8, 2, 34, 0, 0, 0, 0, 0, 0};
    struct proto_frame_reader r;
    struct proto_frame f;

    (void)state;
    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, too_short, sizeof(too_short)), TALLY_OK);
    assert_int_equal(proto_frame_next(&r, &f), TALLY_EPROTO);
    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, too_long, sizeof(too_long)), TALLY_OK);
    assert_int_equal(proto_frame_next(&r, &f), TALLY_EPROTO);
    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, bad_version, 5), TALLY_OK);
    assert_int_equal(proto_frame_next(&r, &f), TALLY_EPROTO);
}

/* Every prefix and every one-byte-longer payload of a message is refused. */
static void
check_truncations(size_t len, int (*decode)(const struct proto_frame *f))
{
    struct proto_frame f;
    size_t cut;

    memset(&f, 0, sizeof(f));
    f.version = PROTO_VERSION;
    f.type = frame[5];
    f.payload = frame + PROTO_FRAME_HEADER;
    for (cut = 0; cut < len - PROTO_FRAME_HEADER; cut++) {
        f.payload_len = cut;
        assert_int_equal(decode(&f), TALLY_EPROTO);
    }
    f.payload_len = len - PROTO_FRAME_HEADER + 1;
    frame[len] = 0;
    assert_int_equal(decode(&f), TALLY_EPROTO);
    f.payload_len = len - PROTO_FRAME_HEADER;
    assert_int_equal(decode(&f), TALLY_OK);
}

static int
dec_check(const struct proto_frame *f)
{
    struct proto_check m;
    return proto_check_decode(f, &m);
}

static int
dec_check_reply(const struct proto_frame *f)
{
    struct proto_check_reply m;
    return proto_check_reply_decode(f, &m);
}

static int
dec_release(const struct proto_frame *f)
{
    struct proto_release m;
    return proto_release_decode(f, &m);
}

static int
dec_hello(const struct proto_frame *f)
{
    struct proto_hello m;
    return proto_hello_decode(f, &m);
}

static void
test_client_messages_round_trip_and_truncations_fail(void **state)
{
    struct proto_check c = {"tly_abc", "export", 4294967296LL};
    struct proto_check_reply cr = {PROTO_REFUSED, 1, PROTO_F_NEVER, 1500, 600,
                                   60000,         0, 42000,         0,    "cost above limit"};
    struct proto_release rl = {"tly_abc", 9};
    struct proto_hello h = {1, 1};
    struct proto_frame_reader r;
    struct proto_frame f;
    struct proto_check_reply crb;

    (void)state;
    check_truncations(proto_check_encode(frame, 1, &c), dec_check);
    check_truncations(proto_check_reply_encode(frame, 2, &cr), dec_check_reply);
    check_truncations(proto_release_encode(frame, 3, &rl), dec_release);
    check_truncations(proto_hello_encode(frame, 4, &h), dec_hello);
    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, frame, proto_check_reply_encode(frame, 2, &cr)),
                     TALLY_OK);
    assert_int_equal(proto_frame_next(&r, &f), TALLY_OK);
    assert_int_equal(proto_check_reply_decode(&f, &crb), TALLY_OK);
    assert_int_equal(crb.flags, PROTO_F_NEVER);
    assert_int_equal(crb.retry_after_ms, 1500);
    assert_string_equal(crb.detail, "cost above limit");
    /* out of range values */
    c.cost = -1;
    assert_int_equal(proto_check_encode(frame, 1, &c), 0);
    cr.status = 99;
    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, frame, proto_check_reply_encode(frame, 2, &cr)),
                     TALLY_OK);
    assert_int_equal(proto_frame_next(&r, &f), TALLY_OK);
    assert_int_equal(proto_check_reply_decode(&f, &crb), TALLY_EPROTO);
}

static int
dec_cluster_reply(const struct proto_frame *f)
{
    struct proto_cluster_status m;
    return proto_cluster_reply_decode(f, &m);
}

/* CLUSTER_REPLY: members with their clocks' skew (negative, unknown) come back as sent; every
 * truncation fails; a clock flag other than 0 or 1 is a protocol error. */
static void
test_cluster_reply_round_trip(void **state)
{
    static struct proto_cluster_status s, back;
    struct proto_frame_reader r;
    struct proto_frame f;
    size_t len;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.in_cluster = 1;
    s.self = 2, s.leader = 1, s.term = 7;
    s.commit_index = s.applied_index = s.last_index = 99;
    s.n = 3;
    for (uint8_t i = 0; i < 3; i++) {
        s.m[i].id = i + 1u;
        snprintf(s.m[i].address, sizeof(s.m[i].address), "10.0.0.%u:7400", i + 1u);
        memset(s.m[i].pk, 0xa0 + i, sizeof(s.m[i].pk));
    }
    s.m[0].clock_known = 1; /* the leader: 0 */
    s.m[1].clock_known = 1;
    s.m[1].clock_skew_ms = -2003;
    len = proto_cluster_reply_encode(frame, sizeof(frame), 5, &s);
    assert_true(len > PROTO_FRAME_HEADER);
    check_truncations(len, dec_cluster_reply);
    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, frame, len), TALLY_OK);
    assert_int_equal(proto_frame_next(&r, &f), TALLY_OK);
    assert_int_equal(proto_cluster_reply_decode(&f, &back), TALLY_OK);
    assert_int_equal(back.n, 3);
    assert_int_equal(back.m[1].clock_known, 1);
    assert_int_equal(back.m[1].clock_skew_ms, -2003);
    assert_int_equal(back.m[2].clock_known, 0);
    assert_string_equal(back.m[2].address, "10.0.0.3:7400");
    assert_memory_equal(back.m[2].pk, s.m[2].pk, sizeof(s.m[2].pk));
    s.m[2].clock_known = 2;
    len = proto_cluster_reply_encode(frame, sizeof(frame), 5, &s);
    proto_frame_reader_init(&r, buf, sizeof(buf));
    assert_int_equal(proto_frame_reader_feed(&r, frame, len), TALLY_OK);
    assert_int_equal(proto_frame_next(&r, &f), TALLY_OK);
    assert_int_equal(proto_cluster_reply_decode(&f, &back), TALLY_EPROTO);
}

static void
test_random_bytes_never_crash(void **state)
{
    uint64_t seed = test_seed();
    struct proto_frame_reader r;
    struct proto_frame f;
    int i;

    (void)state;
    for (i = 0; i < 20000; i++) {
        size_t len = (size_t)(test_rand(&seed) % 64);
        size_t j;
        for (j = 0; j < len; j++)
            frame[j] = (uint8_t)test_rand(&seed);
        if (len >= 5 && (i & 1)) { /* mostly well-formed headers, random payloads */
            uint32_t l = (uint32_t)(len - 4);
            frame[0] = 0, frame[1] = 0, frame[2] = (uint8_t)(l >> 8), frame[3] = (uint8_t)l;
            frame[4] = PROTO_VERSION;
            frame[5] = (uint8_t)(32 + test_rand(&seed) % 10);
        }
        proto_frame_reader_init(&r, buf, sizeof(buf));
        assert_int_equal(proto_frame_reader_feed(&r, frame, len), TALLY_OK);
        while (proto_frame_next(&r, &f) == TALLY_OK) {
            (void)dec_check(&f);
            (void)dec_check_reply(&f);
            (void)dec_release(&f);
            (void)dec_hello(&f);
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_split_at_every_byte),
        cmocka_unit_test(test_frames_glued_together),
        cmocka_unit_test(test_bad_length_and_version),
        cmocka_unit_test(test_client_messages_round_trip_and_truncations_fail),
        cmocka_unit_test(test_cluster_reply_round_trip),
        cmocka_unit_test(test_random_bytes_never_crash),
    };
    return cmocka_run_group_tests_name("proto_frame", tests, NULL, NULL);
}

/*
 * The lease channel codec (proto_lease.h): a round trip of every message type, every truncation
 * and every extension of every message rejected, table-driven malformed fields (bad names, out of
 * range numbers, unknown flags and codes, reserved frame flags), the encoder refusing what the
 * decoder would, and seeded random payloads and mutations that never crash (run under ASan).
 * Payloads are decoded from the end of a page followed by a PROT_NONE guard page, so any read
 * past the payload faults (picohttpparser's trick). TALLY_SEED replays a run.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proto_lease.h"
#include "proto_lease_sample.h"
#include "tenant_count.h"
#include "test_support.h"

#define RANDOM_ROUNDS 20000

static uint64_t seed;
static uint8_t *guard_base;
static size_t page;

static int
group_setup(void **state)
{
    (void)state;
    seed = test_seed();
    page = (size_t)sysconf(_SC_PAGESIZE);
    guard_base = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (guard_base == MAP_FAILED)
        return -1;
    return mprotect(guard_base + page, page, PROT_NONE);
}

static int
group_teardown(void **state)
{
    (void)state;
    munmap(guard_base, 2 * page);
    return 0;
}

/* Decodes `len` payload bytes placed right before the guard page. */
static int
decode_guarded(uint8_t type, uint16_t flags, const uint8_t *payload, size_t len,
               struct proto_lease_msg *out)
{
    struct proto_frame f;
    uint8_t *p = guard_base + page - len;

    assert_true(len <= page);
    memcpy(p, payload, len);
    f.version = PROTO_VERSION;
    f.type = type;
    f.flags = flags;
    f.request_id = 7;
    f.payload = p;
    f.payload_len = len;
    return proto_lease_decode(&f, out);
}

static void
encode_ok(const struct proto_lease_msg *m, uint8_t *buf, size_t *len)
{
    assert_int_equal(proto_lease_encode(m, 42, buf, PROTO_LEASE_FRAME_MAX, len), TALLY_OK);
    assert_true(*len >= PROTO_FRAME_HEADER && *len <= PROTO_LEASE_FRAME_MAX);
}

static void
test_lease_round_trip_every_type(void **state)
{
    (void)state;
    for (uint8_t type = PROTO_LEASE_TYPE_MIN; type <= PROTO_LEASE_TYPE_MAX; type++) {
        struct proto_lease_msg m, back;
        struct proto_frame_reader r;
        struct proto_frame f;
        uint8_t buf[PROTO_LEASE_FRAME_MAX], rbuf[PROTO_FRAME_MAX];
        size_t len;

        assert_int_equal(lease_sample(type, &m), 0);
        assert_string_not_equal(proto_lease_type_name(type), "UNKNOWN");
        encode_ok(&m, buf, &len);
        /* Through the real frame reader, as a stream would deliver it. */
        proto_frame_reader_init(&r, rbuf, sizeof(rbuf));
        assert_int_equal(proto_frame_reader_feed(&r, buf, len), TALLY_OK);
        assert_int_equal(proto_frame_next(&r, &f), TALLY_OK);
        assert_int_equal(f.type, type);
        assert_int_equal(f.request_id, 42);
        assert_int_equal(f.flags, 0);
        assert_int_equal(decode_guarded(f.type, f.flags, f.payload, f.payload_len, &back),
                         TALLY_OK);
        /* Both sides zero-filled: the whole struct must come back, padding aside. */
        assert_int_equal(back.type, m.type);
        assert_memory_equal(&back.origin, &m.origin, sizeof(m.origin));
        {
            uint8_t again[PROTO_LEASE_FRAME_MAX];
            size_t len2;

            encode_ok(&back, again, &len2);
            assert_int_equal(len2, len);
            assert_memory_equal(again, buf, len);
        }
    }
    {
        /* A kept grant (the other flag) comes back kept. */
        struct proto_lease_msg m, back;
        uint8_t buf[PROTO_LEASE_FRAME_MAX];
        size_t len;

        assert_int_equal(lease_sample(PROTO_LEASE_GRANT, &m), 0);
        m.grant.flags = PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST;
        encode_ok(&m, buf, &len);
        assert_int_equal(decode_guarded(PROTO_LEASE_GRANT, 0, buf + PROTO_FRAME_HEADER,
                                        len - PROTO_FRAME_HEADER, &back),
                         TALLY_OK);
        assert_int_equal(back.grant.flags,
                         PROTO_LEASE_GRANT_KEEP | PROTO_LEASE_GRANT_EDGE | PROTO_LEASE_GRANT_LAST);
    }
    {
        /* A RECALL names its lease in the body and in the origin's seq, and comes back whole. */
        struct proto_lease_msg m, back;
        uint8_t buf[PROTO_LEASE_FRAME_MAX];
        size_t len;

        assert_int_equal(lease_sample(PROTO_LEASE_RECALL, &m), 0);
        encode_ok(&m, buf, &len);
        assert_int_equal(decode_guarded(PROTO_LEASE_RECALL, 0, buf + PROTO_FRAME_HEADER,
                                        len - PROTO_FRAME_HEADER, &back),
                         TALLY_OK);
        assert_string_equal(back.recall.endpoint, "search");
        assert_string_equal(back.recall.link, "lnk_fedcba9876543210");
        assert_int_equal(back.recall.lease_id, 77);
        assert_int_equal(back.origin.seq, 77);
        assert_int_equal(back.origin.incarnation, 3);
    }
}

static void
test_lease_truncations_and_extensions_rejected(void **state)
{
    (void)state;
    for (uint8_t type = PROTO_LEASE_TYPE_MIN; type <= PROTO_LEASE_TYPE_MAX; type++) {
        struct proto_lease_msg m, back;
        uint8_t buf[PROTO_LEASE_FRAME_MAX + 1];
        size_t len, plen;

        assert_int_equal(lease_sample(type, &m), 0);
        encode_ok(&m, buf, &len);
        plen = len - PROTO_FRAME_HEADER;
        for (size_t cut = 0; cut < plen; cut++)
            assert_int_equal(decode_guarded(type, 0, buf + PROTO_FRAME_HEADER, cut, &back),
                             TALLY_EPROTO);
        buf[len] = 0; /* one trailing byte */
        assert_int_equal(decode_guarded(type, 0, buf + PROTO_FRAME_HEADER, plen + 1, &back),
                         TALLY_EPROTO);
        /* Reserved frame flags, and the payload under another type. */
        assert_int_equal(decode_guarded(type, 1, buf + PROTO_FRAME_HEADER, plen, &back),
                         TALLY_EPROTO);
        assert_int_equal(decode_guarded(0, 0, buf + PROTO_FRAME_HEADER, plen, &back), TALLY_EPROTO);
        assert_int_equal(
            decode_guarded(PROTO_LEASE_TYPE_MAX + 1, 0, buf + PROTO_FRAME_HEADER, plen, &back),
            TALLY_EPROTO);
    }
}

/* A malformed variant of a sample message: the encoder refuses it, and the same bytes with the
 * validation bypassed are refused by the decoder. */
struct bad_case {
    const char *name;
    uint8_t type;
    void (*spoil)(struct proto_lease_msg *m);
};

static void
spoil_child_name(struct proto_lease_msg *m)
{
    strcpy(m->origin.child, "Search");
}
static void
spoil_child_path(struct proto_lease_msg *m)
{
    strcpy(m->origin.child, "../etc");
}
static void
spoil_incarnation(struct proto_lease_msg *m)
{
    m->origin.incarnation = 0;
}
static void
spoil_seq(struct proto_lease_msg *m)
{
    m->origin.seq = (uint64_t)INT64_MAX + 1;
}
static void
spoil_tenant(struct proto_lease_msg *m)
{
    m->hello.tenant[0] = '\0';
}
static void
spoil_link(struct proto_lease_msg *m)
{
    strcpy(m->acquire.link, "lnk_0123456789abcdeZ");
}
static void
spoil_want(struct proto_lease_msg *m)
{
    m->acquire.want = 2; /* below need 3 */
}
static void
spoil_need(struct proto_lease_msg *m)
{
    m->acquire.need = -1;
}
static void
spoil_report(struct proto_lease_msg *m)
{
    m->acquire.report_lease = 0; /* used 5 without a lease */
}
static void
spoil_debt(struct proto_lease_msg *m)
{
    m->acquire.debt = TENANT_LIMIT_MAX_N + 1;
}
static void
spoil_grant_n(struct proto_lease_msg *m)
{
    m->grant.n = 0;
}
static void
spoil_grant_ttl(struct proto_lease_msg *m)
{
    m->grant.ttl_ms = 0;
}
static void
spoil_grant_flags(struct proto_lease_msg *m)
{
    m->grant.flags = 16;
}
static void
spoil_grant_last_alone(struct proto_lease_msg *m)
{
    m->grant.flags = PROTO_LEASE_GRANT_LAST; /* LAST means nothing without EDGE */
}
static void
spoil_grant_pass_keep(struct proto_lease_msg *m)
{
    m->grant.flags = PROTO_LEASE_GRANT_PASS | PROTO_LEASE_GRANT_KEEP;
}
static void
spoil_deny_scope(struct proto_lease_msg *m)
{
    m->deny.scope = TENANT_SCOPE_CONCURRENCY + 1;
}
static void
spoil_deny_never(struct proto_lease_msg *m)
{
    m->deny.retry_after_ms = TENANT_RETRY_NEVER; /* without the flag */
}
static void
spoil_return_used(struct proto_lease_msg *m)
{
    m->ret.used = -5;
}
static void
spoil_hb_count(struct proto_lease_msg *m)
{
    m->heartbeat.count = PROTO_LEASE_HB_MAX + 1;
}
static void
spoil_hb_link(struct proto_lease_msg *m)
{
    strcpy(m->heartbeat.e[1].link, "lnk_short");
}
static void
spoil_slot_id(struct proto_lease_msg *m)
{
    m->slot_release.slot_id = 0;
}
static void
spoil_error_code(struct proto_lease_msg *m)
{
    m->error.code = PROTO_LEASE_E_MAX + 1;
}
static void
spoil_recall_lease(struct proto_lease_msg *m)
{
    m->recall.lease_id = 0;
}
static void
spoil_recall_seq(struct proto_lease_msg *m)
{
    m->origin.seq = m->recall.lease_id + 1;
}
static void
spoil_recall_link(struct proto_lease_msg *m)
{
    strcpy(m->recall.link, "lnk_0123");
}
static void
spoil_welcome_concurrency(struct proto_lease_msg *m)
{
    m->welcome.concurrency = TENANT_CONCURRENCY_MAX + 1;
}

static const struct bad_case bad_cases[] = {
    {"child name case", PROTO_LEASE_HELLO, spoil_child_name},
    {"child name path", PROTO_LEASE_ACQUIRE, spoil_child_path},
    {"incarnation 0", PROTO_LEASE_RETURN, spoil_incarnation},
    {"seq above int64", PROTO_LEASE_HEARTBEAT, spoil_seq},
    {"empty tenant", PROTO_LEASE_HELLO, spoil_tenant},
    {"link alphabet", PROTO_LEASE_ACQUIRE, spoil_link},
    {"want below need", PROTO_LEASE_ACQUIRE, spoil_want},
    {"negative need", PROTO_LEASE_ACQUIRE, spoil_need},
    {"report used without lease", PROTO_LEASE_ACQUIRE, spoil_report},
    {"debt above 2^32", PROTO_LEASE_ACQUIRE, spoil_debt},
    {"grant of 0", PROTO_LEASE_GRANT, spoil_grant_n},
    {"grant ttl 0", PROTO_LEASE_GRANT, spoil_grant_ttl},
    {"grant unknown flag", PROTO_LEASE_GRANT, spoil_grant_flags},
    {"grant both pass and keep", PROTO_LEASE_GRANT, spoil_grant_pass_keep},
    {"grant last without edge", PROTO_LEASE_GRANT, spoil_grant_last_alone},
    {"deny unknown scope", PROTO_LEASE_DENY, spoil_deny_scope},
    {"deny never without flag", PROTO_LEASE_DENY, spoil_deny_never},
    {"return negative used", PROTO_LEASE_RETURN, spoil_return_used},
    {"heartbeat count", PROTO_LEASE_HEARTBEAT, spoil_hb_count},
    {"heartbeat link", PROTO_LEASE_HEARTBEAT, spoil_hb_link},
    {"slot id 0", PROTO_LEASE_SLOT_RELEASE, spoil_slot_id},
    {"error code", PROTO_LEASE_ERROR, spoil_error_code},
    {"welcome concurrency", PROTO_LEASE_WELCOME, spoil_welcome_concurrency},
    {"recall of lease 0", PROTO_LEASE_RECALL, spoil_recall_lease},
    {"recall seq not its lease", PROTO_LEASE_RECALL, spoil_recall_seq},
    {"recall link", PROTO_LEASE_RECALL, spoil_recall_link},
};

/* Writes the payload of `m` without validating, as a hostile peer would, following the layout
 * documented in proto_lease.h (checked against the encoder on the valid message first). */
static size_t
raw_payload(const struct proto_lease_msg *m, uint8_t *buf, size_t cap)
{
    struct proto_writer w;

    proto_writer_init(&w, buf, cap);
    proto_put_str(&w, m->origin.child);
    proto_put_u64(&w, m->origin.incarnation);
    proto_put_u64(&w, m->origin.seq);
    switch (m->type) {
    case PROTO_LEASE_HELLO:
        proto_put_str(&w, m->hello.tenant);
        break;
    case PROTO_LEASE_WELCOME:
        proto_put_u64(&w, m->welcome.epoch);
        proto_put_u32(&w, m->welcome.children);
        proto_put_u32(&w, m->welcome.concurrency);
        proto_put_i64(&w, m->welcome.lease_ttl_ms);
        proto_put_i64(&w, m->welcome.heartbeat_ms);
        break;
    case PROTO_LEASE_ACQUIRE:
        proto_put_str(&w, m->acquire.endpoint);
        proto_put_str(&w, m->acquire.link);
        proto_put_i64(&w, m->acquire.want);
        proto_put_i64(&w, m->acquire.need);
        proto_put_i64(&w, m->acquire.rate_milli);
        proto_put_u64(&w, m->acquire.report_lease);
        proto_put_i64(&w, m->acquire.report_used);
        proto_put_i64(&w, m->acquire.debt);
        proto_put_u8(&w, m->acquire.flags);
        break;
    case PROTO_LEASE_GRANT:
        proto_put_str(&w, m->grant.endpoint);
        proto_put_str(&w, m->grant.link);
        proto_put_u64(&w, m->grant.lease_id);
        proto_put_i64(&w, m->grant.n);
        proto_put_i64(&w, m->grant.ttl_ms);
        proto_put_u32(&w, m->grant.flags);
        proto_put_u32(&w, m->grant.holders);
        proto_put_u64(&w, m->grant.epoch);
        proto_put_i64(&w, m->grant.start_ms);
        break;
    case PROTO_LEASE_DENY:
        proto_put_str(&w, m->deny.endpoint);
        proto_put_str(&w, m->deny.link);
        proto_put_u8(&w, m->deny.scope);
        proto_put_u8(&w, m->deny.flags);
        proto_put_i64(&w, m->deny.retry_after_ms);
        proto_put_i64(&w, m->deny.limit);
        break;
    case PROTO_LEASE_RETURN:
        proto_put_u64(&w, m->ret.lease_id);
        proto_put_i64(&w, m->ret.used);
        break;
    case PROTO_LEASE_HEARTBEAT:
        proto_put_str(&w, m->heartbeat.endpoint);
        proto_put_u8(&w, (uint8_t)m->heartbeat.count);
        for (uint32_t i = 0; i < m->heartbeat.count && i < PROTO_LEASE_HB_MAX; i++) {
            proto_put_str(&w, m->heartbeat.e[i].link);
            proto_put_i64(&w, m->heartbeat.e[i].rate_milli);
            proto_put_i64(&w, m->heartbeat.e[i].debt);
        }
        break;
    case PROTO_LEASE_SLOT_RELEASE:
        proto_put_str(&w, m->slot_release.link);
        proto_put_i64(&w, m->slot_release.slot_id);
        break;
    case PROTO_LEASE_ERROR:
        proto_put_u16(&w, m->error.code);
        proto_put_i64(&w, m->error.retry_after_ms);
        break;
    case PROTO_LEASE_RECALL:
        proto_put_str(&w, m->recall.endpoint);
        proto_put_str(&w, m->recall.link);
        proto_put_u64(&w, m->recall.lease_id);
        break;
    default:
        fail_msg("no raw writer for type %u", m->type);
    }
    assert_false(w.bad);
    return w.at;
}

static void
test_lease_malformed_fields_rejected(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *bc = &bad_cases[i];
        struct proto_lease_msg m, back;
        uint8_t buf[PROTO_LEASE_FRAME_MAX];
        size_t len;

        assert_int_equal(lease_sample(bc->type, &m), 0);
        /* The raw writer agrees with the encoder on the valid message... */
        len = raw_payload(&m, buf, sizeof(buf));
        assert_int_equal(decode_guarded(bc->type, 0, buf, len, &back), TALLY_OK);
        /* ...and the spoiled one is refused both ways. */
        bc->spoil(&m);
        if (proto_lease_validate(&m) != TALLY_EPROTO)
            fail_msg("case '%s' validates", bc->name);
        assert_int_equal(proto_lease_encode(&m, 1, buf, sizeof(buf), &len), TALLY_EPROTO);
        len = raw_payload(&m, buf, sizeof(buf));
        if (decode_guarded(bc->type, 0, buf, len, &back) != TALLY_EPROTO)
            fail_msg("case '%s' decodes", bc->name);
    }
}

static void
test_lease_encode_short_buffer(void **state)
{
    struct proto_lease_msg m;
    uint8_t buf[PROTO_LEASE_FRAME_MAX];
    size_t len, need;

    (void)state;
    assert_int_equal(lease_sample(PROTO_LEASE_HEARTBEAT, &m), 0);
    encode_ok(&m, buf, &need);
    for (size_t cap = 0; cap < need; cap++)
        assert_int_equal(proto_lease_encode(&m, 1, buf, cap, &len), TALLY_ETOOBIG);
    assert_int_equal(proto_lease_encode(&m, 1, buf, need, &len), TALLY_OK);
    assert_int_equal(len, need);
}

static void
test_lease_reply_types(void **state)
{
    (void)state;
    assert_false(proto_lease_is_reply(PROTO_LEASE_HELLO));
    assert_false(proto_lease_is_reply(PROTO_LEASE_ACQUIRE));
    assert_false(proto_lease_is_reply(PROTO_LEASE_SLOT_RELEASE));
    assert_true(proto_lease_is_reply(PROTO_LEASE_GRANT));
    assert_true(proto_lease_is_reply(PROTO_LEASE_ERROR));
    /* Pushed by the supervisor: the ledger refuses it as a request, the child takes it. */
    assert_true(proto_lease_is_reply(PROTO_LEASE_RECALL));
    assert_string_equal(proto_lease_type_name(PROTO_LEASE_RECALL), "RECALL");
    assert_string_equal(proto_lease_type_name(0), "UNKNOWN");
    assert_string_equal(proto_lease_type_name(99), "UNKNOWN");
}

/* Random payloads and random mutations of valid ones: never a crash, and whatever decodes
 * re-encodes to the same bytes (the decoder accepts only canonical, valid input). */
static void
test_lease_random_bytes_never_crash(void **state)
{
    uint64_t s = seed ^ 0x1ea5e;
    uint32_t decoded = 0;

    (void)state;
    for (int round = 0; round < RANDOM_ROUNDS; round++) {
        uint8_t payload[600], again[PROTO_LEASE_FRAME_MAX];
        struct proto_lease_msg m, back;
        uint8_t type = (uint8_t)(test_rand(&s) % (PROTO_LEASE_TYPE_MAX + 2));
        size_t len;

        if (round % 2 == 0 && type >= PROTO_LEASE_TYPE_MIN && type <= PROTO_LEASE_TYPE_MAX) {
            uint8_t buf[PROTO_LEASE_FRAME_MAX];
            int flips = 1 + (int)(test_rand(&s) % 4);

            assert_int_equal(lease_sample(type, &m), 0);
            encode_ok(&m, buf, &len);
            len -= PROTO_FRAME_HEADER;
            memcpy(payload, buf + PROTO_FRAME_HEADER, len);
            for (int i = 0; i < flips; i++)
                payload[test_rand(&s) % len] ^= (uint8_t)(1u << (test_rand(&s) % 8));
            if (test_rand(&s) % 4 == 0)
                len = (size_t)(test_rand(&s) % (len + 1));
        } else {
            len = (size_t)(test_rand(&s) % sizeof(payload));
            for (size_t i = 0; i < len; i++)
                payload[i] = (uint8_t)test_rand(&s);
        }
        if (decode_guarded(type, 0, payload, len, &back) != TALLY_OK)
            continue;
        decoded++;
        assert_int_equal(proto_lease_encode(&back, 0, again, sizeof(again), &len), TALLY_OK);
        assert_int_equal(back.type, type);
    }
    /* Mutations of valid messages decode often enough to exercise the accept path. */
    assert_true(decoded > 0);
}

/* Every frame of every seed in fuzz/corpus/lease decodes and validates: seeds written before a
 * field was added would only reach the fuzz target's rejection paths (fuzz/seeds.py writes
 * them again). */
static void
test_lease_seed_corpus_decodes(void **state)
{
    char dir[512], path[1024];
    struct dirent *e;
    int seeds = 0, frames = 0;
    DIR *d;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/fuzz/corpus/lease", TALLY_SOURCE_DIR);
    d = opendir(dir);
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        static uint8_t buf[4096];
        struct proto_lease_msg m;
        size_t len, at = 0;
        FILE *fp;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        fp = fopen(path, "rb");
        assert_non_null(fp);
        len = fread(buf, 1, sizeof(buf), fp);
        fclose(fp);
        seeds++;
        while (at < len) {
            uint32_t flen;

            assert_true(len - at >= PROTO_FRAME_HEADER);
            flen = (uint32_t)buf[at] << 24 | (uint32_t)buf[at + 1] << 16 |
                   (uint32_t)buf[at + 2] << 8 | buf[at + 3];
            assert_true(flen >= 8 && at + 4 + flen <= len);
            if (decode_guarded(buf[at + 5], (uint16_t)(buf[at + 6] << 8 | buf[at + 7]),
                               buf + at + PROTO_FRAME_HEADER, flen + 4 - PROTO_FRAME_HEADER,
                               &m) != TALLY_OK)
                fail_msg("fuzz/corpus/lease/%s: the frame at byte %zu does not decode", e->d_name,
                         at);
            assert_int_equal(proto_lease_validate(&m), TALLY_OK);
            at += 4 + flen;
            frames++;
        }
    }
    closedir(d);
    assert_true(seeds >= 20);
    assert_true(frames > seeds);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_round_trip_every_type),
        cmocka_unit_test(test_lease_truncations_and_extensions_rejected),
        cmocka_unit_test(test_lease_malformed_fields_rejected),
        cmocka_unit_test(test_lease_encode_short_buffer),
        cmocka_unit_test(test_lease_reply_types),
        cmocka_unit_test(test_lease_random_bytes_never_crash),
        cmocka_unit_test(test_lease_seed_corpus_decodes),
    };

    return cmocka_run_group_tests_name("proto_lease", tests, group_setup, group_teardown);
}

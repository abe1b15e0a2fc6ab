/*
 * `tally stats [TENANT]` and its STATS message. The codec round-trips every
 * field and refuses malformed payloads (bad names, counts past the maximum,
 * trailing bytes). Through the real binaries: no daemon is exit 3 with one
 * line; with traffic the counters match what was sent, a tenant's endpoints
 * appear with their mode and counts, and an unknown tenant is exit 1. FLUSH, the other
 * admin request of a tenant, answers 0 for a tenant and 1 for an unknown one.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_client.h"
#include "proto_stats.h"
#include "serve_util.h"
#include "tally.h"

static struct test_out out;

static void
frame_of(const uint8_t *buf, size_t len, struct proto_frame *f)
{
    struct proto_frame_reader r;
    static uint8_t rb[PROTO_STATS_REPLY_MAX];

    proto_frame_reader_init(&r, rb, sizeof(rb));
    assert_int_equal(proto_frame_reader_feed(&r, buf, len), TALLY_OK);
    assert_int_equal(proto_frame_next(&r, f), TALLY_OK);
}

static void
test_codec_round_trip(void **state)
{
    static struct proto_stats_reply m, back;
    static uint8_t buf[PROTO_STATS_REPLY_MAX];
    char tenant[TENANT_NAME_MAX + 1];
    struct proto_frame f;
    size_t len;
    int i;

    (void)state;
    len = proto_stats_encode(buf, 7, "acme");
    assert_true(len > 0);
    frame_of(buf, len, &f);
    assert_int_equal(f.request_id, 7);
    assert_int_equal(proto_stats_decode(&f, tenant), TALLY_OK);
    assert_string_equal(tenant, "acme");
    assert_int_equal(proto_stats_encode(buf, 1, "Bad Name"), 0);
    /* FLUSH (tally usage): a tenant name, never empty; a STATS frame is not a FLUSH. */
    assert_int_equal(proto_stats_decode(&f, tenant), TALLY_OK);
    assert_int_equal(proto_flush_decode(&f, tenant), TALLY_EPROTO);
    len = proto_flush_encode(buf, 9, "acme");
    assert_true(len > 0);
    frame_of(buf, len, &f);
    assert_int_equal(f.type, PROTO_C_FLUSH);
    assert_int_equal(proto_flush_decode(&f, tenant), TALLY_OK);
    assert_string_equal(tenant, "acme");
    assert_int_equal(proto_flush_encode(buf, 1, ""), 0);
    assert_int_equal(proto_flush_encode(buf, 1, "Bad Name"), 0);

    memset(&m, 0, sizeof(m));
    m.checks = 1ull << 40;
    m.admitted = 5;
    m.shadow_refused = 3;
    m.sup_crashes = 2;
    m.sup_live = 4;
    m.links_live = 9;
    m.tenant_status = PROTO_STATS_TENANT;
    m.sup_up = 1;
    m.sup_pid = 4242;
    m.n_endpoints = PROTO_STATS_ENDPOINTS_MAX;
    for (i = 0; i < PROTO_STATS_ENDPOINTS_MAX; i++) {
        snprintf(m.ep[i].name, sizeof(m.ep[i].name), "ep-%d-%.50s", i,
                 "padding-padding-padding-padding-padding-padding-pad");
        m.ep[i].mode = (uint8_t)(i % 3);
        m.ep[i].reachable = (uint8_t)(i % 2);
        m.ep[i].links = (uint32_t)i;
        m.ep[i].admitted = (uint64_t)i * 1000;
        m.ep[i].unavailable = 1;
    }
    len = proto_stats_reply_encode(buf, sizeof(buf), 9, &m);
    assert_true(len > 0 && len <= PROTO_STATS_REPLY_MAX);
    frame_of(buf, len, &f);
    assert_int_equal(proto_stats_reply_decode(&f, &back), TALLY_OK);
    assert_memory_equal(&m, &back, sizeof(m));

    /* a name that is not a name, and a count past the maximum */
    m.n_endpoints = 1;
    snprintf(m.ep[0].name, sizeof(m.ep[0].name), "../etc");
    len = proto_stats_reply_encode(buf, sizeof(buf), 9, &m);
    frame_of(buf, len, &f);
    assert_int_equal(proto_stats_reply_decode(&f, &back), TALLY_EPROTO);
    m.n_endpoints = PROTO_STATS_ENDPOINTS_MAX + 1;
    assert_int_equal(proto_stats_reply_encode(buf, sizeof(buf), 9, &m), 0);
    /* a trailing byte */
    m.n_endpoints = 0;
    len = proto_stats_reply_encode(buf, sizeof(buf), 9, &m);
    buf[3] = (uint8_t)(buf[3] + 1);
    buf[len] = 0;
    frame_of(buf, len + 1, &f);
    assert_int_equal(proto_stats_reply_decode(&f, &back), TALLY_EPROTO);
}

static int
run_tally(const struct serve_env *e, const char *a1, const char *a2)
{
    char bin[512];
    char *argv[8] = {bin, "--data", (char *)e->data, "stats", (char *)a1, (char *)a2, NULL};

    test_bin("tally", bin, sizeof(bin));
    return test_run(argv, NULL, &out);
}

/* FLUSH (what `tally usage` sends first): 0 for a tenant of the configuration, 1 for another. */
static void
flush_through_the_daemon(const struct serve_env *e)
{
    static const struct {
        const char *tenant;
        uint8_t status;
    } cases[] = {{"acme", 0}, {"nosuch", 1}};
    uint8_t msg[PROTO_CLIENT_MSG_MAX];
    tally_client *c = NULL;

    assert_int_equal(tally_client_open(e->d.socket, 2000, &c), TALLY_OK);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint32_t id = proto_client_next_id(c);
        struct proto_frame f;
        uint8_t st = 9;

        assert_int_equal(
            proto_client_request(c, msg, proto_flush_encode(msg, id, cases[i].tenant), id, &f),
            TALLY_OK);
        assert_int_equal(f.type, PROTO_C_FLUSH_REPLY);
        assert_int_equal(proto_status_decode(&f, &st), TALLY_OK);
        assert_int_equal(st, cases[i].status);
    }
    tally_client_close(c);
}

static void
test_stats_through_the_daemon(void **state)
{
    struct serve_env e;
    struct serve_http r;
    char token[64];
    int i;

    (void)state;
    serve_env_init(&e);
    serve_tally_ok(&e, NULL, 0, "plan", "set", "pro", "--limit", "1000/365d", NULL);
    serve_tally_ok(&e, NULL, 0, "endpoint", "set", "search", "--limit", "2/365d", NULL);
    serve_tally_ok(&e, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e, token, sizeof(token), "link", "create", "acme", NULL);

    assert_int_equal(run_tally(&e, NULL, NULL), 3);
    assert_string_equal(out.out, "");
    assert_non_null(strstr(out.err, "tally: tallyd is not running"));
    assert_non_null(strchr(out.err, '\n'));
    assert_null(strchr(strchr(out.err, '\n') + 1, '\n')); /* one line */

    serve_start(&e, NULL, NULL);
    for (i = 0; i < 3; i++) {
        serve_check(&e, token, "search", &r);
        assert_int_equal(r.status, i < 2 ? 200 : 429);
    }
    serve_check(&e, "tly_nope", "search", &r);
    assert_int_equal(r.status, 401);

    assert_int_equal(run_tally(&e, NULL, NULL), 0);
    assert_non_null(strstr(out.out, "checks 4  admitted 2  refused 1  unauthorized 1"));
    assert_non_null(strstr(out.out, "supervisors  live 1  starts 1"));
    assert_null(strstr(out.out, "tenant acme"));
    assert_null(strstr(out.out, token));

    assert_int_equal(run_tally(&e, "acme", NULL), 0);
    assert_non_null(strstr(out.out, "tenant acme  supervisor up (pid "));
    assert_non_null(strstr(out.out, "search               normal       yes"));

    assert_int_equal(run_tally(&e, "nosuch", NULL), 1);
    assert_non_null(strstr(out.err, "tally: tenant nosuch: not found"));
    assert_int_equal(run_tally(&e, "Bad/Name", NULL), 64);
    assert_int_equal(run_tally(&e, "acme", "extra"), 64);
    flush_through_the_daemon(&e);
    serve_stop(&e);
    serve_env_release(&e);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_stats_through_the_daemon),
    };

    return cmocka_run_group_tests_name("serve_stats", tests, NULL, NULL);
}

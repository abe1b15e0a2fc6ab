/*
 * A flood of distinct callers through the real tallyd and its caller
 * authorities, pipelined over the binary protocol (CHECK_CALLERS, 100 in
 * flight per connection): 100,000 distinct callers under the default
 * --max-callers are all admitted and held exactly, with the memory of the
 * caller tables (tally_caller_table_bytes) under the documented bound; then, with
 * --max-callers 1000, 20,000 distinct callers leave the tables at the ceiling,
 * the sketch counts the rest, and a caller keeps being refused past its limit.
 */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto_client.h"
#include "serve_util.h"

#define CONNS  8
#define WINDOW 100

static int
setup(void **state)
{
    static struct serve_env e;

    serve_env_init(&e);
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    serve_env_release(*state);
    return 0;
}

static void
send_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

/* Sends CHECK_CALLERS on `endpoint` for callers "ip:10.X.Y.Z" numbered first..first+total-1,
 * WINDOW at a time on each of CONNS connections; counts the answers by status. */
static void
flood(const struct serve_env *e, const char *endpoint, unsigned first, unsigned total,
      unsigned counts[6])
{
    static uint8_t bufs[CONNS][PROTO_FRAME_MAX];
    struct proto_frame_reader rd[CONNS];
    int fd[CONNS];
    unsigned next = 0;

    for (int i = 0; i < CONNS; i++) {
        uint32_t window = 0;
        assert_int_equal(proto_client_connect(e->d.socket, 10000, &fd[i], &window), TALLY_OK);
        assert_true(window >= WINDOW);
        proto_frame_reader_init(&rd[i], bufs[i], sizeof(bufs[i]));
    }
    while (next < total) {
        unsigned want[CONNS];
        for (int i = 0; i < CONNS; i++) {
            uint8_t out[WINDOW * PROTO_CLIENT_MSG_MAX];
            size_t at = 0;
            want[i] = 0;
            for (; want[i] < WINDOW && next < total; want[i]++, next++) {
                struct proto_check_callers m;
                unsigned n = first + next;
                memset(&m, 0, sizeof(m));
                snprintf(m.endpoint, sizeof(m.endpoint), "%s", endpoint);
                m.n = 1;
                m.len[0] = (uint16_t)snprintf(m.caller[0], sizeof(m.caller[0]), "ip:10.%u.%u.%u",
                                              (n >> 16) & 255, (n >> 8) & 255, n & 255);
                at += proto_check_callers_encode(out + at, want[i] + 1, &m);
            }
            send_all(fd[i], out, at);
        }
        for (int i = 0; i < CONNS; i++) {
            unsigned got = 0;
            while (got < want[i]) {
                struct proto_frame f;
                uint8_t *space;
                size_t room = proto_frame_reader_space(&rd[i], &space);
                ssize_t r = recv(fd[i], space, room, 0);
                assert_true(r > 0);
                proto_frame_reader_commit(&rd[i], (size_t)r);
                while (proto_frame_next(&rd[i], &f) == TALLY_OK) {
                    struct proto_check_reply rep;
                    assert_int_equal(f.type, PROTO_C_CHECK_REPLY);
                    assert_int_equal(proto_check_reply_decode(&f, &rep), TALLY_OK);
                    counts[rep.status <= 5 ? rep.status : 5]++;
                    got++;
                }
            }
        }
    }
    for (int i = 0; i < CONNS; i++)
        close(fd[i]);
}

static void
test_flood_100000_callers_within_bound(void **state)
{
    struct serve_env *e = *state;
    unsigned counts[6] = {0};
    double entries, bytes;

    serve_tally_ok(e, NULL, 0, "endpoint", "set", "signup", "--key", "caller", "--limit", "3/1h",
                   NULL);
    serve_start(e, "--durability=batched", NULL);
    flood(e, "signup", 0, 100000, counts);
    assert_int_equal(counts[PROTO_ADMITTED], 100000);
    entries = serve_metric_now(e, "tally_caller_entries");
    bytes = serve_metric_now(e, "tally_caller_table_bytes");
    print_message("100000 distinct callers: %.0f entries, %.0f bytes of tables (%.0f per caller)\n",
                  entries, bytes, bytes / 100000);
    assert_true(entries == 100000);
    /* docs/DESIGN.md §12: at most 2 x 168 bytes per caller while the tables grow */
    assert_true(bytes <= 100000.0 * 336 + 4 * 4096);
    assert_true(serve_metric_now(e, "tally_caller_events_total{event=\"sketch\"}") == 0);
    serve_stop(e);
}

static void
test_flood_past_the_ceiling(void **state)
{
    struct serve_env *e = *state;
    unsigned counts[6] = {0};
    unsigned again[6] = {0};

    serve_tally_ok(e, NULL, 0, "endpoint", "set", "signup", "--key", "caller", "--limit", "2/1h",
                   "--max-callers", "1000", NULL);
    serve_start(e, "--durability=batched", NULL);
    flood(e, "signup", 0, 20000, counts);
    assert_int_equal(counts[PROTO_ADMITTED] + counts[PROTO_REFUSED], 20000);
    assert_true(serve_metric_now(e, "tally_caller_entries") <= 1000);
    assert_true(serve_metric_now(e, "tally_caller_events_total{event=\"sketch\"}") > 0);
    print_message("20000 callers past a ceiling of 1000: %u admitted at their first attempt\n",
                  counts[PROTO_ADMITTED]);
    /* the first 200 callers three times more: never more than 2 each in all */
    for (int k = 0; k < 3; k++)
        flood(e, "signup", 0, 200, again);
    assert_true(again[PROTO_ADMITTED] <= 200 * 2);
    serve_stop(e);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_flood_100000_callers_within_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flood_past_the_ceiling, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * How tallyd is reached and how changes reach it, through the real binaries.
 * The Unix socket is mode 0660; `--tcp` serves the same protocol to libtally
 * over TCP (and is off by default). A revoked link is refused by the very next
 * request once `tally link revoke` returns. When the RELOAD notification
 * cannot be delivered (the socket renamed away, as if `tally` ran with another
 * view of the data dir), the daemon still picks up the change by itself within
 * one second: a revocation, and a raised limit, even for a link whose refusal
 * its child counter remembers.
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
#include <sys/stat.h>

#include "serve_util.h"
#include "tally.h"

#define PICKUP_MS 1000 /* the promise: a change is in force within a second */

struct env {
    struct serve_env s;
    char token[64];
    char socket_off[320];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100000/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "3/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
    *state = e;
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    serve_env_release(&e->s);
    free(e);
    return 0;
}

/* The notification of `tally` goes nowhere while the socket has another name;
 * the daemon keeps listening on the same socket. */
static void
hide_socket(struct env *e, bool hide)
{
    snprintf(e->socket_off, sizeof(e->socket_off), "%s.off", e->s.d.socket);
    if (hide)
        assert_int_equal(rename(e->s.d.socket, e->socket_off), 0);
    else
        assert_int_equal(rename(e->socket_off, e->s.d.socket), 0);
}

static void
test_socket_mode_and_tcp(void **state)
{
    struct env *e = *state;
    struct tally_result res;
    tally_client *c = NULL;
    struct stat st;
    char where[64];

    serve_start(&e->s, "--tcp", "127.0.0.1:0");
    assert_int_equal(stat(e->s.d.socket, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0660);
    assert_true(e->s.tcp_port > 0);
    snprintf(where, sizeof(where), "tcp:127.0.0.1:%d", e->s.tcp_port);
    assert_int_equal(tally_client_open(where, 10000, &c), TALLY_OK);
    assert_int_equal(tally_check(c, e->token, "search", 0, &res), TALLY_OK);
    assert_int_equal(res.status, TALLY_ADMITTED);
    assert_int_equal(res.limit, 3);
    assert_int_equal(tally_check(c, "tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "search", 0, &res),
                     TALLY_OK);
    assert_int_equal(res.status, TALLY_UNAUTHORIZED);
    tally_client_close(c);
    serve_stop(&e->s);
    /* off by default: no "tcp" in the start line */
    serve_start(&e->s, NULL, NULL);
    assert_int_equal(e->s.tcp_port, 0);
    assert_int_equal(serve_log_count(&e->s, "\"tcp\":"), 1); /* the first start only */
    serve_stop(&e->s);
}

static void
test_revocation_is_immediate(void **state)
{
    struct env *e = *state;
    struct serve_http r;
    char token2[64];

    serve_tally_ok(&e->s, token2, sizeof(token2), "link", "create", "acme", NULL);
    serve_start(&e->s, NULL, NULL);
    serve_check(&e->s, token2, "search", &r);
    assert_int_equal(r.status, 200);
    serve_tally_ok(&e->s, NULL, 0, "link", "revoke", token2, NULL);
    serve_check(&e->s, token2, "search", &r); /* the very next request */
    assert_int_equal(r.status, 401);
    serve_check(&e->s, e->token, "search", &r); /* the other link is untouched */
    assert_int_equal(r.status, 200);
    serve_stop(&e->s);
}

static void
test_changes_without_notification_within_a_second(void **state)
{
    struct env *e = *state;
    struct serve_http r;
    char token2[64];
    int64_t t0, waited;
    int i;

    serve_tally_ok(&e->s, token2, sizeof(token2), "link", "create", "acme", NULL);
    serve_start(&e->s, NULL, NULL);
    for (i = 0; i < 2; i++) {
        serve_check(&e->s, e->token, "search", &r);
        assert_int_equal(r.status, 200);
    }
    serve_check(&e->s, token2, "search", &r);
    assert_int_equal(r.status, 200);

    hide_socket(e, true);
    /* a revocation that cannot notify: in force within a second */
    serve_tally_ok(&e->s, NULL, 0, "link", "revoke", token2, NULL);
    t0 = serve_now_ms();
    do {
        serve_check(&e->s, token2, "search", &r);
        waited = serve_now_ms() - t0;
    } while (r.status == 200 && waited < 3 * PICKUP_MS);
    assert_int_equal(r.status, 401);
    assert_true(waited <= PICKUP_MS);

    /* a raised limit (3 -> 6), 2 used: after a second, 4 more, then refused */
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "6/365d", NULL);
    serve_sleep_ms(PICKUP_MS);
    for (i = 0; i < 4; i++) {
        char policy[64];
        serve_check(&e->s, e->token, "search", &r);
        if (r.status != 200)
            fail_msg("request %d after the raise: %d %s", i + 3, r.status, r.body);
        /* the daemon's own copy has the new limit too */
        assert_true(serve_http_header(&r, "RateLimit-Policy", policy, sizeof(policy)));
        assert_non_null(strstr(policy, ";q=6;"));
    }
    serve_check(&e->s, e->token, "search", &r);
    assert_int_equal(r.status, 429);
    hide_socket(e, false);
    /* both reloads were noticed by polling (no RELOAD could arrive) */
    /* noticed by polling (no RELOAD could arrive); both changes may come in one */
    assert_true(serve_log_count(&e->s, "\"event\":\"reload\",\"trigger\":\"poll\"") >= 1);
    assert_int_equal(serve_log_count(&e->s, "\"trigger\":\"notify\""), 0);
    serve_stop(&e->s);
}

/* A link refused at its limit remembers the refusal until the window ends; a raised
 * limit must still be in force at once (notified) or within a second (not). */
static void
test_raise_after_refusal(void **state)
{
    struct env *e = *state;
    struct serve_http r;
    int i;

    serve_start(&e->s, NULL, NULL);
    for (i = 0; i < 4; i++) {
        serve_check(&e->s, e->token, "search", &r);
        assert_int_equal(r.status, i < 3 ? 200 : 429);
    }
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "5/365d", NULL);
    for (i = 0; i < 3; i++) {
        serve_check(&e->s, e->token, "search", &r);
        assert_int_equal(r.status, i < 2 ? 200 : 429);
    }
    hide_socket(e, true);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "7/365d", NULL);
    serve_sleep_ms(PICKUP_MS);
    for (i = 0; i < 3; i++) {
        serve_check(&e->s, e->token, "search", &r);
        assert_int_equal(r.status, i < 2 ? 200 : 429);
    }
    hide_socket(e, false);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_socket_mode_and_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revocation_is_immediate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changes_without_notification_within_a_second, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_raise_after_refusal, setup, teardown),
    };

    return cmocka_run_group_tests_name("serve_admin", tests, NULL, NULL);
}

/*
 * How tallyd is reached and how changes reach it, through the real binaries.
 * The Unix socket is mode 0660; `--tcp` serves the same protocol to libtally
 * over TCP (and is off by default). A revoked link is refused by the very next
 * request once `tally link revoke` returns. When the RELOAD notification
 * cannot be delivered (the socket renamed away, as if `tally` ran with another
 * view of the data dir), the daemon still picks up the change by itself within
 * one second: a revocation, and a raised limit, even for a link whose refusal
 * its child counter remembers. Every check answer, 200 and 429, carries the
 * IETF RateLimit fields, read here with a strict structured-field parser.
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

/* A link checked four times (its token memoised) is refused once it expires, with no
 * reload in between, and another endpoint of the same token is a separate check. */
static void
test_expiry_of_a_hot_link(void **state)
{
    struct env *e = *state;
    struct serve_http r;
    char token2[64];
    int64_t t0 = serve_now_ms();

    serve_tally_ok(&e->s, token2, sizeof(token2), "link", "create", "acme", "--expires", "3s",
                   NULL);
    serve_start(&e->s, NULL, NULL);
    for (int i = 0; i < 4; i++) { /* the endpoint allows 3 */
        serve_check(&e->s, token2, "search", &r);
        assert_int_equal(r.status, i < 3 ? 200 : 429);
    }
    serve_check(&e->s, token2, "nosuch", &r);
    assert_int_equal(r.status, 400);
    assert_true(serve_now_ms() < t0 + 3000); /* all of them before the expiry */
    serve_sleep_ms((int)(t0 + 3300 - serve_now_ms()));
    serve_check(&e->s, token2, "search", &r);
    assert_int_equal(r.status, 401);
    serve_check(&e->s, e->token, "search", &r);
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

/* ---- the RateLimit fields, read strictly ---- */

/* One item of an RFC 9651 list field as tallyd sends it, parsed strictly: an
 * sf-string, then parameters ";key=value" whose keys are in `keys` (once each)
 * and whose values are non-negative sf-integers; nothing else, nothing after.
 * vals[i] gets the value of keys[i], -1 when absent. */
static bool
sf_item_parse(const char *s, char *name, size_t cap, const char *keys, int64_t *vals)
{
    size_t n = 0, i;

    for (i = 0; keys[i] != '\0'; i++)
        vals[i] = -1;
    if (*s++ != '"')
        return false;
    for (; *s != '"'; s++) {
        if (*s < 0x20 || *s > 0x7e || n + 1 >= cap)
            return false;
        if (*s == '\\') {
            s++;
            if (*s != '"' && *s != '\\')
                return false;
        }
        name[n++] = *s;
    }
    name[n] = '\0';
    s++;
    while (*s == ';') {
        const char *k = strchr(keys, s[1]);
        int digits = 0;
        int64_t v = 0;

        if (s[1] == '\0' || k == NULL || s[2] != '=' || vals[k - keys] != -1)
            return false;
        for (s += 3; *s >= '0' && *s <= '9'; s++, digits++)
            v = v * 10 + (*s - '0');
        if (digits == 0 || digits > 15)
            return false;
        vals[k - keys] = v;
    }
    return *s == '\0';
}

struct rl_seen {
    int status;
    char policy_name[64], name[64];
    int64_t q, w, r, t;
};

static void
rl_read(const struct serve_http *h, struct rl_seen *out)
{
    char v[256];
    int64_t qw[2], rt[2];

    out->status = h->status;
    assert_true(serve_http_header(h, "RateLimit-Policy", v, sizeof(v)));
    if (!sf_item_parse(v, out->policy_name, sizeof(out->policy_name), "qw", qw))
        fail_msg("RateLimit-Policy: %s", v);
    assert_true(serve_http_header(h, "RateLimit", v, sizeof(v)));
    if (!sf_item_parse(v, out->name, sizeof(out->name), "rt", rt))
        fail_msg("RateLimit: %s", v);
    out->q = qw[0];
    out->w = qw[1];
    out->r = rt[0];
    out->t = rt[1];
    assert_true(out->q >= 0 && out->w >= 0); /* both required as tallyd sends them */
    assert_true(out->r >= 0);                /* r is required by the draft */
    assert_string_equal(out->name, out->policy_name);
}

static void
test_parser_is_strict(void **state)
{
    static const char *const bad[] = {
        "endpoint;r=1",
        "\"e\";r=-1",
        "\"e\";r=1.5",
        "\"e\";r=1;r=2",
        "\"e\";x=1",
        "\"e\";r=1 ",
        "\"e\";r=",
        "\"e\";r=1;t=2,",
        "\"e",
        "\"e\";R=1",
        "\"e\";r=1234567890123456",
    };
    char name[16];
    int64_t rt[2];
    size_t i;

    (void)state;
    assert_true(sf_item_parse("\"e\";r=1;t=2", name, sizeof(name), "rt", rt));
    assert_true(rt[0] == 1 && rt[1] == 2);
    assert_true(sf_item_parse("\"a\\\"b\";r=0", name, sizeof(name), "rt", rt));
    assert_true(strcmp(name, "a\"b") == 0 && rt[0] == 0 && rt[1] == -1);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (sf_item_parse(bad[i], name, sizeof(name), "rt", rt))
            fail_msg("accepted %s", bad[i]);
    }
}

/* Every answer of a check against limit L, 200 and 429 alike, carries both fields
 * under one name: q = L, w = the period, r never more than L - admitted so far
 * (leases report what they hold, not a guess), r = 0 and t >= 1 on a refusal. */
static void
check_ratelimit_run(struct env *e, const char *endpoint, int64_t limit, int requests)
{
    struct serve_http h;
    struct rl_seen rl;
    int64_t admitted = 0, refused = 0, positive = 0;
    int i;

    for (i = 0; i < requests; i++) {
        char retry[32];

        serve_check(&e->s, e->token, endpoint, &h);
        if (h.status != 200 && h.status != 429)
            fail_msg("request %d: %d %s", i, h.status, h.body);
        rl_read(&h, &rl);
        assert_string_equal(rl.name, "endpoint");
        assert_int_equal(rl.q, limit);
        assert_int_equal(rl.w, 365LL * 86400);
        if (h.status == 200) {
            admitted++;
            if (rl.r > limit - admitted)
                fail_msg("request %d: r=%lld but only %lld left", i, (long long)rl.r,
                         (long long)(limit - admitted));
            positive += rl.r > 0;
            assert_true(rl.t >= 0);
        } else {
            refused++;
            assert_int_equal(rl.r, 0);
            assert_true(rl.t >= 1);
            assert_true(serve_http_header(&h, "Retry-After", retry, sizeof(retry)));
            assert_int_equal(rl.t, strtoll(retry, NULL, 10));
        }
    }
    print_message("%s: %lld admitted, %lld refused, r > 0 on %lld\n", endpoint, (long long)admitted,
                  (long long)refused, (long long)positive);
    assert_true(admitted <= limit);
    assert_true(refused > 0);
}

static void
test_ratelimit_fields_through_tallyd(void **state)
{
    struct env *e = *state;

    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "bulk", "--limit", "40/365d", NULL);
    serve_start(&e->s, NULL, NULL);
    check_ratelimit_run(e, "search", 3, 5);
    check_ratelimit_run(e, "bulk", 40, 46);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_socket_mode_and_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revocation_is_immediate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expiry_of_a_hot_link, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changes_without_notification_within_a_second, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_raise_after_refusal, setup, teardown),
        cmocka_unit_test(test_parser_is_strict),
        cmocka_unit_test_setup_teardown(test_ratelimit_fields_through_tallyd, setup, teardown),
    };

    return cmocka_run_group_tests_name("serve_admin", tests, NULL, NULL);
}

/*
 * Noise creates nothing (docs/FAILURE-MODES.md §1): 100,000 checks with unknown
 * tokens and 10,000 with unknown endpoint names for a valid token, over the
 * binary socket (800 of them over HTTP, one connection each), leave no file
 * under tenants/, start no supervisor, and tallyd's resident memory grows by
 * less than 2 MiB between the 10,000th and the last request.
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

#include "fail_util.h"
#include "serve_util.h"
#include "tally.h"

#define UNKNOWN_TOKENS    100000
#define UNKNOWN_ENDPOINTS 10000
#define RSS_GROWTH_KIB    2048

struct env {
    struct serve_env s;
    char token[64];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "100/1m", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "search", "--limit", "10/1m", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "acme", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token, sizeof(e->token), "link", "create", "acme", NULL);
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    fail_keep_log(e->s.d.log);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

/* A token of the right shape that no link has: tly_ and 32 URL-safe characters. */
static void
random_token(uint64_t *seed, char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    memcpy(out, "tly_", 4);
    for (int i = 0; i < 32; i++)
        out[4 + i] = abc[test_rand(seed) % 64];
    out[36] = '\0';
}

static void
check(tally_client *c, const char *token, const char *endpoint, enum tally_status want)
{
    struct tally_result r;

    assert_int_equal(tally_check(c, token, endpoint, 0, &r), TALLY_OK);
    assert_int_equal(r.status, want);
}

static void
nothing_created(struct env *e)
{
    char tenants[256];
    pid_t pids[4];

    snprintf(tenants, sizeof(tenants), "%s/tenants", e->s.data);
    assert_int_equal(fail_count_files(tenants), 0);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pids, 4), 0);
}

/* 200 unknown tokens and 200 unknown endpoints over HTTP, one connection each. */
static void
http_sample(struct env *e, uint64_t *seed)
{
    struct serve_http h;
    char token[40], hdr[128];

    for (int i = 0; i < 200; i++) {
        random_token(seed, token);
        snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\nX-Tally-Endpoint: search\r\n",
                 token);
        serve_http_get(e->s.http_port, "/v1/check", hdr, &h);
        assert_int_equal(h.status, 401);
        snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\nX-Tally-Endpoint: x%d\r\n",
                 e->token, i);
        serve_http_get(e->s.http_port, "/v1/check", hdr, &h);
        assert_int_equal(h.status, 400);
    }
}

static void
test_noise_creates_nothing(void **state)
{
    struct env *e = *state;
    uint64_t seed = test_seed();
    tally_client *c = NULL;
    char token[40], endpoint[32];
    int64_t rss_start, rss_10k, rss_end, t0;
    char asan[512];
    int i;

    /* ASan keeps freed blocks in a quarantine (256 MiB) before reusing them:
     * that is not memory tallyd keeps, so it is switched off for this count. */
    snprintf(asan, sizeof(asan), "%s%squarantine_size_mb=0",
             getenv("ASAN_OPTIONS") != NULL ? getenv("ASAN_OPTIONS") : "",
             getenv("ASAN_OPTIONS") != NULL ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    serve_start(&e->s, NULL, NULL);
    rss_start = fail_rss_kib(e->s.d.pid);
    assert_int_equal(tally_client_open(e->s.d.socket, 10000, &c), TALLY_OK);
    t0 = serve_now_ms();
    http_sample(e, &seed); /* 400 of the first 10,000 */
    for (i = 400; i < 10000; i++) {
        random_token(&seed, token);
        check(c, token, i % 2 ? "search" : "nosuch", TALLY_UNAUTHORIZED);
    }
    rss_10k = fail_rss_kib(e->s.d.pid);
    for (; i < UNKNOWN_TOKENS; i++) {
        random_token(&seed, token);
        check(c, token, i % 2 ? "search" : "nosuch", TALLY_UNAUTHORIZED);
    }
    for (i = 0; i < UNKNOWN_ENDPOINTS; i++) {
        snprintf(endpoint, sizeof(endpoint), "ep%d", i);
        check(c, e->token, endpoint, TALLY_BAD_REQUEST);
    }
    http_sample(e, &seed);
    rss_end = fail_rss_kib(e->s.d.pid);
    printf("# %d unknown tokens, %d unknown endpoints (800 over HTTP) in %lld ms; tallyd VmRSS "
           "%lld KiB at start, %lld KiB after 10,000, %lld KiB at the end (+%lld KiB)\n",
           UNKNOWN_TOKENS, UNKNOWN_ENDPOINTS, (long long)(serve_now_ms() - t0),
           (long long)rss_start, (long long)rss_10k, (long long)rss_end,
           (long long)(rss_end - rss_10k));
    nothing_created(e);
    assert_true(rss_10k > 0 && rss_end > 0);
    assert_true(rss_end - rss_10k < RSS_GROWTH_KIB);
    /* the valid token still works, and only now does the tenant exist (its first turn's
     * ledger and its child's file) */
    check(c, e->token, "search", TALLY_ADMITTED);
    tally_client_close(c);
    {
        char tenants[256];

        snprintf(tenants, sizeof(tenants), "%s/tenants", e->s.data);
        assert_true(fail_count_files(tenants) >= 2);
    }
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_noise_creates_nothing, setup, teardown),
    };

    return cmocka_run_group_tests_name("fail_noise", tests, NULL, NULL);
}

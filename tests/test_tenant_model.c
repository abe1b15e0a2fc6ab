/*
 * The model's parsers and tokens, table-driven (jq's jq.test style): names,
 * limits, costs, durations, the configuration grammar, token shape and keyed
 * hashing. Inputs are also run against a PROT_NONE guard page so a read past
 * the terminating NUL faults (picohttpparser's trick).
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sodium.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tenant.h"
#include "tenant_config.h"
#include "test_alloc.h"

/* Copies s so that its NUL is the last byte before a PROT_NONE page. */
static char *
guarded(const char *s)
{
    static char *page;
    static size_t pagesz;
    size_t n = strlen(s) + 1;

    if (page == NULL) {
        pagesz = (size_t)sysconf(_SC_PAGESIZE);
        page = mmap(NULL, 2 * pagesz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(page != MAP_FAILED);
        assert_int_equal(mprotect(page + pagesz, pagesz, PROT_NONE), 0);
    }
    assert_true(n <= pagesz);
    memcpy(page + pagesz - n, s, n);
    return page + pagesz - n;
}

static void
test_name_valid_table(void **state)
{
    static const struct {
        const char *s;
        bool ok;
    } cases[] = {
        {"a", true},
        {"0", true},
        {"search", true},
        {"api-v2_search", true},
        {"a23456789012345678901234567890123456789012345678901234567890123", true},
        {"a234567890123456789012345678901234567890123456789012345678901234", false},
        {"", false},
        {"-a", false},
        {"_a", false},
        {"A", false},
        {"aB", false},
        {"..", false},
        {".", false},
        {"a/b", false},
        {"/", false},
        {"a b", false},
        {"a.b", false},
        {"\xc3\xa9", false},
        {"a\xc3\xa9", false},
        {"a\n", false},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (tenant_name_valid(guarded(cases[i].s)) != cases[i].ok)
            fail_msg("name '%s': expected %d", cases[i].s, cases[i].ok);
    }
    assert_false(tenant_name_valid(NULL));
}

static void
test_limit_parse_table(void **state)
{
    static const struct {
        const char *s;
        int64_t n;
        int64_t period_ms; /* 0 = must fail */
        const char *canonical;
    } cases[] = {
        {"600/1m", 600, 60000, "600/1m"},
        {"600/m", 600, 60000, "600/1m"},
        {"100/10s", 100, 10000, "100/10s"},
        {"36000/1h", 36000, 3600000, "36000/1h"},
        {"5/60s", 5, 60000, "5/1m"},
        {"5/90s", 5, 90000, "90s"},
        {"1/1d", 1, 86400000, "1/1d"},
        {"1/24h", 1, 86400000, "1/1d"},
        {"4294967296/365d", 4294967296LL, 31536000000LL, "4294967296/365d"},
        {"1/31536000s", 1, 31536000000LL, "1/365d"},
        {"0/1m", 0, 0, NULL},
        {"4294967297/1m", 0, 0, NULL},
        {"1/366d", 0, 0, NULL},
        {"1/0s", 0, 0, NULL},
        {"1/1", 0, 0, NULL},
        {"1/1x", 0, 0, NULL},
        {"1/1M", 0, 0, NULL},
        {"-1/1m", 0, 0, NULL},
        {"+1/1m", 0, 0, NULL},
        {"1.5/1m", 0, 0, NULL},
        {"1/1.5m", 0, 0, NULL},
        {"1/", 0, 0, NULL},
        {"/1m", 0, 0, NULL},
        {"1", 0, 0, NULL},
        {"", 0, 0, NULL},
        {"1/1m ", 0, 0, NULL},
        {" 1/1m", 0, 0, NULL},
        {"99999999999999999999999/1m", 0, 0, NULL},
        {"1/99999999999999999999999s", 0, 0, NULL},
        {"1/1mm", 0, 0, NULL},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tenant_limit l = {0, 0};
        int rc = tenant_limit_parse(guarded(cases[i].s), &l);
        if (cases[i].period_ms == 0) {
            if (rc != TALLY_ELIMIT)
                fail_msg("limit '%s' should fail", cases[i].s);
            continue;
        }
        if (rc != TALLY_OK || l.n != cases[i].n || l.period_ms != cases[i].period_ms)
            fail_msg("limit '%s' parsed wrong", cases[i].s);
        if (cases[i].canonical[0] != '9') {
            char buf[TENANT_LIMIT_TEXT_MAX];
            tenant_limit_format(&l, buf, sizeof(buf));
            if (strstr(buf, cases[i].canonical) == NULL)
                fail_msg("limit '%s' formats as '%s'", cases[i].s, buf);
        }
    }
}

static void
test_limit_format_round_trips(void **state)
{
    struct tenant_limit l;
    char buf[TENANT_LIMIT_TEXT_MAX];
    int64_t s;

    (void)state;
    for (s = 1; s <= 400000; s += 7) {
        struct tenant_limit back;
        l.n = s;
        l.period_ms = s * 1000;
        tenant_limit_format(&l, buf, sizeof(buf));
        assert_int_equal(tenant_limit_parse(buf, &back), TALLY_OK);
        assert_int_equal(back.n, l.n);
        assert_int_equal(back.period_ms, l.period_ms);
    }
}

static void
test_limits_list(void **state)
{
    struct tenant_limits ls;
    char buf[256];

    (void)state;
    assert_int_equal(tenant_limits_parse("36000/1h,600/1m", &ls), TALLY_OK);
    assert_int_equal(ls.count, 2);
    assert_int_equal(ls.v[0].period_ms, 60000); /* sorted by period */
    tenant_limits_format(&ls, buf, sizeof(buf));
    assert_string_equal(buf, "600/1m,36000/1h");
    assert_int_equal(tenant_limits_parse("", &ls), TALLY_OK);
    assert_int_equal(ls.count, 0);
    assert_int_equal(tenant_limits_parse("1/1m,2/60s", &ls), TALLY_ELIMIT);
    assert_int_equal(tenant_limits_parse("1/1s,1/1m,1/1h,1/1d,1/2d", &ls), TALLY_ELIMIT);
    assert_int_equal(tenant_limits_parse("1/1m,", &ls), TALLY_ELIMIT);
    assert_int_equal(tenant_limits_parse(",1/1m", &ls), TALLY_ELIMIT);
}

static void
test_cost_and_duration(void **state)
{
    int64_t v = 0;

    (void)state;
    assert_int_equal(tenant_cost_parse("1", &v), TALLY_OK);
    assert_int_equal(v, 1);
    assert_int_equal(tenant_cost_parse("4294967296", &v), TALLY_OK);
    assert_int_equal(tenant_cost_parse("4294967297", &v), TALLY_ECOST);
    assert_int_equal(tenant_cost_parse("0", &v), TALLY_ECOST);
    assert_int_equal(tenant_cost_parse("-1", &v), TALLY_ECOST);
    assert_int_equal(tenant_cost_parse("1x", &v), TALLY_ECOST);
    assert_int_equal(tenant_cost_parse("", &v), TALLY_ECOST);
    assert_int_equal(tenant_duration_parse("90s", &v), TALLY_OK);
    assert_int_equal(v, 90000);
    assert_int_equal(tenant_duration_parse("30d", &v), TALLY_OK);
    assert_int_equal(v, 30LL * 86400000);
    assert_int_equal(tenant_duration_parse("0s", &v), TALLY_EINVAL);
    assert_int_equal(tenant_duration_parse("1y", &v), TALLY_EINVAL);
    assert_int_equal(tenant_duration_parse("4000d", &v), TALLY_EINVAL);
    assert_int_equal(tenant_duration_parse("s", &v), TALLY_EINVAL);
}

static void
test_tokens_are_random_shaped_and_hashed_with_the_key(void **state)
{
    unsigned char key1[TENANT_KEY_BYTES], key2[TENANT_KEY_BYTES];
    unsigned char h1[TENANT_HASH_BYTES], h2[TENANT_HASH_BYTES], h3[TENANT_HASH_BYTES];
    char a[TENANT_TOKEN_LEN + 1], b[TENANT_TOKEN_LEN + 1];
    char id[TENANT_LINK_ID_LEN + 1];
    char longtok[TENANT_TOKEN_MAX + 2];

    (void)state;
    randombytes_buf(key1, sizeof(key1));
    randombytes_buf(key2, sizeof(key2));
    tenant_token_new(a);
    tenant_token_new(b);
    assert_int_equal(strlen(a), TENANT_TOKEN_LEN);
    assert_memory_equal(a, "tly_", 4);
    assert_true(tenant_token_shape_ok(a));
    assert_string_not_equal(a, b);
    assert_false(tenant_token_shape_ok("tly_short"));
    assert_false(tenant_token_shape_ok("xyz_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
    assert_false(tenant_token_shape_ok("tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA!"));
    assert_int_equal(tenant_token_hash(key1, a, h1), TALLY_OK);
    assert_int_equal(tenant_token_hash(key1, a, h2), TALLY_OK);
    assert_memory_equal(h1, h2, sizeof(h1));
    assert_int_equal(tenant_token_hash(key2, a, h3), TALLY_OK); /* salted: another key differs */
    assert_memory_not_equal(h1, h3, sizeof(h1));
    assert_int_equal(tenant_token_hash(key1, b, h3), TALLY_OK);
    assert_memory_not_equal(h1, h3, sizeof(h1));
    memset(longtok, 'a', sizeof(longtok) - 1);
    longtok[sizeof(longtok) - 1] = '\0';
    assert_int_equal(tenant_token_hash(key1, longtok, h3), TALLY_EINVAL);
    tenant_link_id_new(id);
    assert_true(tenant_link_id_valid(id));
    assert_false(tenant_link_id_valid("lnk_xyz"));
    assert_false(tenant_link_id_valid("lnk_000000000000000g"));
}

static void
test_config_parse(void **state)
{
    static const char text[] = "# comment\n"
                               "\n"
                               "  plan pro --limit 600/1m --limit 36000/1h # trailing\r\n"
                               "endpoint search --plan pro --limit 10/1m --algorithm gcra\n"
                               "endpoint search --limit 5/1m";
    struct tenant_config c;
    char err[256];
    char line[TENANT_CONFIG_TEXT_MAX];

    (void)state;
    assert_int_equal(tenant_config_parse(text, strlen(text), &c, err, sizeof(err)), TALLY_OK);
    assert_int_equal(c.n_plans, 1);
    assert_int_equal(c.n_endpoints, 2);
    assert_int_equal(c.endpoints[0].algorithm, TENANT_ALG_GCRA);
    assert_string_equal(c.endpoints[0].plan, "pro");
    assert_string_equal(c.endpoints[1].plan, "");
    tenant_plan_format(&c.plans[0], line, sizeof(line));
    assert_string_equal(line, "plan pro --limit 600/1m --limit 36000/1h");
    tenant_config_release(&c);
    {
        const char *t = "plan a --limit 1/1m\nplan b --limit x\n";
        assert_int_equal(tenant_config_parse(t, strlen(t), &c, err, sizeof(err)), TALLY_ELIMIT);
    }
    assert_non_null(strstr(err, "line 2"));
    assert_null(c.plans);
    {
        const char *t = "plan a --limit 1/1m\nplan a --limit 1/1m\n";
        assert_int_equal(tenant_config_parse(t, strlen(t), &c, err, sizeof(err)), TALLY_ECONFIG);
    }
    assert_non_null(strstr(err, "twice"));
}

/* Every allocation of the parser failed in turn: a clean error, no leak. */
static void
test_config_parse_survives_allocation_failure(void **state)
{
    static const char text[] = "plan a --limit 1/1m\nplan b --limit 2/1m\n"
                               "endpoint e --limit 1/1m\nendpoint f --limit 1/1m\n";
    struct tenant_config c;
    char err[256];
    uint64_t n;

    (void)state;
    for (n = 1; n < 10; n++) {
        int rc;
        tally_alloc_fail_at(n);
        rc = tenant_config_parse(text, strlen(text), &c, err, sizeof(err));
        tally_alloc_fail_at(0);
        if (rc == TALLY_OK) {
            tenant_config_release(&c);
            break;
        }
        assert_int_equal(rc, TALLY_ENOMEM);
    }
    assert_true(n > 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_valid_table),
        cmocka_unit_test(test_limit_parse_table),
        cmocka_unit_test(test_limit_format_round_trips),
        cmocka_unit_test(test_limits_list),
        cmocka_unit_test(test_cost_and_duration),
        cmocka_unit_test(test_tokens_are_random_shaped_and_hashed_with_the_key),
        cmocka_unit_test(test_config_parse),
        cmocka_unit_test(test_config_parse_survives_allocation_failure),
    };
    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests_name("tenant_model", tests, NULL, NULL);
}

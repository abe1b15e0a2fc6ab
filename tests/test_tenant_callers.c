/*
 * The caller table (tenant_callers.h): caller parsing (table-driven, against a
 * PROT_NONE guard page), the keyed hash, exact budgets per caller with exact
 * Retry-After, all or nothing across a request's callers, GCRA, a clock going
 * back, the ceiling (expired entries reclaimed first, then the sketch: a flood
 * of distinct callers admits nobody over a limit and grows nothing), and
 * entries put back after a restart.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
/* clang-format on */

#include <sodium.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tenant_callers.h"
#include "test_alloc.h"

#define T0 ((int64_t)1700000200000) /* 100 s into a 5-minute window, 40 s into a minute */

static const unsigned char key32[TENANT_KEY_BYTES] = {1, 2, 3};

/* Copies len bytes of s so that they end right before a PROT_NONE page. */
static const char *
guarded(const char *s, size_t len)
{
    static char *page;
    static size_t pagesz;

    if (page == NULL) {
        pagesz = (size_t)sysconf(_SC_PAGESIZE);
        page = mmap(NULL, 2 * pagesz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(page != MAP_FAILED);
        assert_int_equal(mprotect(page + pagesz, pagesz, PROT_NONE), 0);
    }
    assert_true(len <= pagesz);
    memcpy(page + pagesz - len, s, len);
    return page + pagesz - len;
}

static void
test_caller_parse_table(void **state)
{
    char v256[300] = "ip:";
    char v257[300] = "ip:";
    const char *why = NULL;
    static const struct {
        const char *s;
        bool ok;
    } cases[] = {
        {"ip:203.0.113.7", true},
        {"account:alice@example.com", true},
        {"ip:2001:db8::1", true},
        {"a:b", true},
        {"user_id-2:x y", true},
        {"0123456789abcdef:v", true},
        {"0123456789abcdefg:v", false}, /* kind of 17 */
        {"ip:", false},
        {":x", false},
        {"ip", false},
        {"IP:1.2.3.4", false},
        {"i p:x", false},
        {"ip:\x01", false},
        {"ip:caf\xc3\xa9", false},
        {"ip:a\tb", false},
        {"ip:a\x7f", false},
        {"ip:1.2.3.4, ip:5.6.7.8", false}, /* two fields folded into one */
        {"", false},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = strlen(cases[i].s);
        int rc = tenant_caller_parse(guarded(cases[i].s, len), len, &why);
        if ((rc == TALLY_OK) != cases[i].ok)
            fail_msg("case %zu '%s': rc %d", i, cases[i].s, rc);
        assert_true(cases[i].ok ? why == NULL : why != NULL);
    }
    memset(v256 + 3, 'x', 256);
    assert_int_equal(tenant_caller_parse(guarded(v256, 259), 259, &why), TALLY_OK);
    memset(v257 + 3, 'x', 257);
    assert_int_equal(tenant_caller_parse(guarded(v257, 260), 260, &why), TALLY_EINVAL);
    assert_non_null(strstr(why, "256"));
}

static void
test_caller_hash_keyed(void **state)
{
    unsigned char a[TENANT_CALLER_KEY_BYTES], b[TENANT_CALLER_KEY_BYTES];
    unsigned char c[TENANT_CALLER_KEY_BYTES], other[TENANT_KEY_BYTES] = {9};

    (void)state;
    assert_int_equal(tenant_caller_hash(key32, "ip:1.2.3.4", 10, a), TALLY_OK);
    assert_int_equal(tenant_caller_hash(key32, "ip:1.2.3.4", 10, b), TALLY_OK);
    assert_memory_equal(a, b, sizeof(a));
    assert_int_equal(tenant_caller_hash(key32, "ip:1.2.3.5", 10, c), TALLY_OK);
    assert_memory_not_equal(a, c, sizeof(a));
    assert_int_equal(tenant_caller_hash(other, "ip:1.2.3.4", 10, c), TALLY_OK);
    assert_memory_not_equal(a, c, sizeof(a)); /* another deployment, another key */
    assert_int_equal(tenant_caller_hash(key32, "ip:1.2.3.4", 0, c), TALLY_EINVAL);
}

static void
key_of(unsigned n, unsigned char out[TENANT_CALLER_KEY_BYTES])
{
    char s[32];
    int len = snprintf(s, sizeof(s), "ip:10.0.%u.%u", n / 256, n % 256);

    assert_int_equal(tenant_caller_hash(key32, s, (size_t)len, out), TALLY_OK);
}

static struct tenant_limits
limits(const char *text)
{
    struct tenant_limits ls;

    assert_int_equal(tenant_limits_parse(text, &ls), TALLY_OK);
    return ls;
}

static bool
decide1(tenant_callers *t, enum tenant_algorithm alg, const struct tenant_limits *ls, unsigned who,
        int64_t now, struct tenant_callers_decision *d)
{
    unsigned char k[1][TENANT_CALLER_KEY_BYTES];

    key_of(who, k[0]);
    assert_int_equal(
        tenant_callers_decide(t, alg, ls, (const unsigned char(*)[16])k, 1, now, 1, d, NULL),
        TALLY_OK);
    return d->admitted;
}

static void
test_callers_five_then_exact_retry(void **state)
{
    struct tenant_limits ls = limits("5/5m,20/1h");
    struct tenant_callers_decision d;
    tenant_callers *t = NULL;

    (void)state;
    assert_int_equal(tenant_callers_open(1000, &t), TALLY_OK);
    for (int i = 0; i < 5; i++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 1, T0 + i, &d));
    assert_int_equal(d.remaining, 0);
    assert_false(decide1(t, TENANT_ALG_WINDOW, &ls, 1, T0 + 10, &d));
    assert_int_equal(d.retry_after_ms, 300000 - 100000 - 10); /* to the 5-minute window's end */
    assert_int_equal(d.limit, 5);
    assert_int_equal(d.period_ms, 300000);
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 2, T0 + 10, &d));     /* another caller */
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 1, T0 + 200000, &d)); /* next window */
    /* a clock stepping back opens nothing */
    for (int i = 0; i < 4; i++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 1, T0 + 200001, &d));
    assert_false(decide1(t, TENANT_ALG_WINDOW, &ls, 1, T0 + 1, &d));
    tenant_callers_close(t);
}

static void
test_callers_all_or_nothing(void **state)
{
    struct tenant_limits ls = limits("3/1m");
    struct tenant_callers_decision d;
    unsigned char k[3][TENANT_CALLER_KEY_BYTES];
    tenant_callers *t = NULL;

    (void)state;
    assert_int_equal(tenant_callers_open(1000, &t), TALLY_OK);
    key_of(1, k[0]);
    key_of(2, k[1]);
    memcpy(k[2], k[0], sizeof(k[0])); /* a repeated caller counts once */
    for (int i = 0; i < 3; i++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 2, T0, &d));
    /* caller 2 is spent: the pair is refused and caller 1 is not charged */
    for (int i = 0; i < 10; i++) {
        assert_int_equal(tenant_callers_decide(t, TENANT_ALG_WINDOW, &ls,
                                               (const unsigned char(*)[16])k, 3, T0 + 5, 1, &d,
                                               NULL),
                         TALLY_OK);
        assert_false(d.admitted);
        assert_int_equal(d.caller, 1);
        assert_int_equal(d.retry_after_ms, 60000 - 40000 - 5);
    }
    assert_null(tenant_callers_find(t, k[0])); /* refusals create nothing */
    for (int i = 0; i < 3; i++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 1, T0 + 6, &d));
    assert_false(decide1(t, TENANT_ALG_WINDOW, &ls, 1, T0 + 6, &d));
    /* a cost above the limit never fits */
    assert_int_equal(tenant_callers_decide(t, TENANT_ALG_WINDOW, &ls,
                                           (const unsigned char(*)[16])k + 1, 1, T0, 4, &d, NULL),
                     TALLY_OK);
    assert_true(d.never);
    tenant_callers_close(t);
}

static void
test_callers_gcra(void **state)
{
    struct tenant_limits ls = limits("5/5m");
    struct tenant_callers_decision d;
    tenant_callers *t = NULL;

    (void)state;
    assert_int_equal(tenant_callers_open(10, &t), TALLY_OK);
    for (int i = 0; i < 5; i++)
        assert_true(decide1(t, TENANT_ALG_GCRA, &ls, 7, T0, &d));
    assert_false(decide1(t, TENANT_ALG_GCRA, &ls, 7, T0, &d));
    assert_int_equal(d.retry_after_ms, 60000); /* one emission interval */
    assert_true(decide1(t, TENANT_ALG_GCRA, &ls, 7, T0 + 60000, &d));
    assert_false(decide1(t, TENANT_ALG_GCRA, &ls, 7, T0 + 60000, &d));
    tenant_callers_close(t);
}

/* At the ceiling with live entries, new callers go to the sketch: a flood of distinct
 * callers grows nothing, and no caller is admitted over its limit, in the sketch or not. */
static void
test_callers_flood_past_ceiling(void **state)
{
    struct tenant_limits ls = limits("5/5m");
    struct tenant_callers_decision d;
    struct tenant_callers_stats s0, s1;
    tenant_callers *t = NULL;
    unsigned admitted[8] = {0};

    (void)state;
    assert_int_equal(tenant_callers_open(100, &t), TALLY_OK);
    for (unsigned c = 0; c < 100; c++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, c, T0, &d));
    tenant_callers_stats(t, &s0);
    assert_int_equal(s0.entries, 100);
    assert_false(s0.sketch);
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 100, T0, &d));
    assert_true(d.sketched);
    tenant_callers_stats(t, &s0);
    for (unsigned c = 101; c < 60000; c++) {
        (void)decide1(t, TENANT_ALG_WINDOW, &ls, c, T0 + 1, &d);
        /* callers 0..7 keep trying among the flood: never more than 5 each */
        if (c % 1000 == 0) {
            for (unsigned w = 0; w < 8; w++)
                admitted[w] += decide1(t, TENANT_ALG_WINDOW, &ls, 50000 + w, T0 + 2, &d);
        }
    }
    for (unsigned w = 0; w < 8; w++)
        assert_true(admitted[w] <= 5);
    for (unsigned c = 0; c < 100; c++) {
        int n = 0;
        while (decide1(t, TENANT_ALG_WINDOW, &ls, c, T0 + 3, &d))
            n++;
        assert_int_equal(n, 4); /* exact entries stay exact */
    }
    tenant_callers_stats(t, &s1);
    assert_int_equal(s1.entries, 100);
    assert_int_equal(s1.bytes, s0.bytes);
    assert_true(s1.sketched > 50000);
    tenant_callers_close(t);
}

/* 100,000 distinct callers under the default ceiling: memory within the documented
 * bound (docs/DESIGN.md §12: 160 bytes an entry plus 4 an index slot, at most doubled
 * while the arrays grow), and no sketch. */
static void
test_callers_memory_per_caller(void **state)
{
    struct tenant_limits ls = limits("5/5m");
    struct tenant_callers_decision d;
    struct tenant_callers_stats s;
    tenant_callers *t = NULL;

    (void)state;
    assert_int_equal(sizeof(struct tenant_callers_entry), 160);
    assert_int_equal(tenant_callers_open(TENANT_MAX_CALLERS_DEFAULT, &t), TALLY_OK);
    for (unsigned c = 0; c < 100000; c++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, c, T0, &d));
    tenant_callers_stats(t, &s);
    print_message("100000 callers: %llu bytes, %llu per caller\n", (unsigned long long)s.bytes,
                  (unsigned long long)(s.bytes / 100000));
    assert_int_equal(s.entries, 100000);
    assert_false(s.sketch);
    assert_true(s.bytes <= 100000ull * 2 * (160 + 2 * 4) + 4096);
    tenant_callers_close(t);
}

/* What a legitimate newcomer sees past the ceiling: the share of 200 fresh callers whose
 * first attempt is admitted after a flood of F distinct callers (one attempt each) in the
 * same window, limit 5 per caller (docs/DESIGN.md §12 quotes these figures). */
static void
test_callers_sketch_newcomers(void **state)
{
    static const unsigned floods[] = {5000, 20000, 40000, 80000};
    struct tenant_limits ls = limits("5/5m");
    struct tenant_callers_decision d;

    (void)state;
    for (size_t f = 0; f < sizeof(floods) / sizeof(floods[0]); f++) {
        tenant_callers *t = NULL;
        unsigned ok = 0;
        assert_int_equal(tenant_callers_open(1, &t), TALLY_OK);
        for (unsigned c = 0; c < floods[f]; c++)
            (void)decide1(t, TENANT_ALG_WINDOW, &ls, c, T0, &d);
        for (unsigned c = 0; c < 200; c++)
            ok += decide1(t, TENANT_ALG_WINDOW, &ls, 1000000 + c, T0 + 1, &d);
        print_message("flood of %u callers past the ceiling: %u of 200 newcomers admitted\n",
                      floods[f], ok);
        if (f == 0)
            assert_true(ok >= 190); /* a small flood costs legitimate callers little */
        tenant_callers_close(t);
    }
}

/* Expired entries make room before the sketch is needed; a caller that was counted in
 * the sketch keeps its count when it gets an exact entry. */
static void
test_callers_reclaim_first(void **state)
{
    struct tenant_limits ls = limits("2/1m");
    struct tenant_callers_decision d;
    struct tenant_callers_stats s;
    tenant_callers *t = NULL;

    (void)state;
    assert_int_equal(tenant_callers_open(50, &t), TALLY_OK);
    for (unsigned c = 0; c < 50; c++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, c, T0, &d));
    /* a minute later every entry is whole again: new callers get exact entries */
    for (unsigned c = 100; c < 150; c++) {
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, c, T0 + 60000, &d));
        assert_false(d.sketched);
    }
    tenant_callers_stats(t, &s);
    assert_int_equal(s.entries, 50);
    assert_int_equal(s.reclaimed, 50);
    assert_false(s.sketch);
    /* full of live entries: caller 500 goes to the sketch and spends its 2 there */
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 500, T0 + 60001, &d));
    assert_true(d.sketched);
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 500, T0 + 60001, &d));
    assert_false(decide1(t, TENANT_ALG_WINDOW, &ls, 500, T0 + 60001, &d));
    tenant_callers_close(t);
}

static void
test_callers_restore(void **state)
{
    struct tenant_limits ls = limits("5/5m");
    struct tenant_callers_decision d;
    struct tenant_callers_entry saved;
    unsigned char k[TENANT_CALLER_KEY_BYTES];
    tenant_callers *t = NULL;

    (void)state;
    assert_int_equal(tenant_callers_open(10, &t), TALLY_OK);
    for (int i = 0; i < 4; i++)
        assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 3, T0, &d));
    key_of(3, k);
    saved = *tenant_callers_find(t, k);
    assert_int_equal(saved.expires_ms, T0 + 200000);
    tenant_callers_close(t);
    assert_int_equal(tenant_callers_open(10, &t), TALLY_OK);
    assert_int_equal(tenant_callers_restore(t, TENANT_ALG_WINDOW, &saved, T0 + 1), TALLY_OK);
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 3, T0 + 2, &d));
    assert_false(decide1(t, TENANT_ALG_WINDOW, &ls, 3, T0 + 2, &d));
    tenant_callers_close(t);
}

/* A HOLD taken back gives its tokens back, never more: charges made since stay. */
static void
test_callers_undo(void **state)
{
    struct tenant_limits ls = limits("3/1m");
    struct tenant_callers_decision d;
    struct tenant_callers_undo u, u2;
    unsigned char k[1][TENANT_CALLER_KEY_BYTES];
    tenant_callers *t = NULL;

    (void)state;
    key_of(9, k[0]);
    assert_int_equal(tenant_callers_open(10, &t), TALLY_OK);
    assert_int_equal(tenant_callers_decide(t, TENANT_ALG_WINDOW, &ls, (const unsigned char(*)[16])k,
                                           1, T0, 2, &d, &u),
                     TALLY_OK);
    assert_true(d.admitted);
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 9, T0, &d)); /* charged since */
    tenant_callers_undo(t, TENANT_ALG_WINDOW, &u);
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 9, T0, &d));
    assert_true(decide1(t, TENANT_ALG_WINDOW, &ls, 9, T0, &d));
    assert_false(decide1(t, TENANT_ALG_WINDOW, &ls, 9, T0, &d)); /* 3, not more */
    tenant_callers_close(t);

    /* GCRA: back only when nothing was charged since */
    assert_int_equal(tenant_callers_open(10, &t), TALLY_OK);
    assert_int_equal(tenant_callers_decide(t, TENANT_ALG_GCRA, &ls, (const unsigned char(*)[16])k,
                                           1, T0, 3, &d, &u),
                     TALLY_OK);
    tenant_callers_undo(t, TENANT_ALG_GCRA, &u);
    assert_int_equal(tenant_callers_decide(t, TENANT_ALG_GCRA, &ls, (const unsigned char(*)[16])k,
                                           1, T0, 2, &d, &u2),
                     TALLY_OK);
    assert_true(d.admitted);
    assert_true(decide1(t, TENANT_ALG_GCRA, &ls, 9, T0, &d));
    tenant_callers_undo(t, TENANT_ALG_GCRA, &u2); /* too late: stays charged */
    assert_false(decide1(t, TENANT_ALG_GCRA, &ls, 9, T0, &d));
    tenant_callers_close(t);
}

static void
test_callers_bad_arguments(void **state)
{
    struct tenant_limits ls = limits("5/5m");
    struct tenant_limits none = {0};
    struct tenant_callers_decision d;
    unsigned char k[5][TENANT_CALLER_KEY_BYTES] = {{1}, {2}, {3}, {4}, {5}};
    tenant_callers *t = NULL;

    (void)state;
    assert_int_equal(tenant_callers_open(0, &t), TALLY_EINVAL);
    assert_int_equal(tenant_callers_open(TENANT_MAX_CALLERS_MAX + 1, &t), TALLY_EINVAL);
    assert_int_equal(tenant_callers_open(10, &t), TALLY_OK);
    assert_int_equal(tenant_callers_decide(t, TENANT_ALG_WINDOW, &ls, (const unsigned char(*)[16])k,
                                           5, T0, 1, &d, NULL),
                     TALLY_EINVAL);
    assert_int_equal(tenant_callers_decide(t, TENANT_ALG_WINDOW, &none,
                                           (const unsigned char(*)[16])k, 1, T0, 1, &d, NULL),
                     TALLY_EINVAL);
    assert_int_equal(tenant_callers_decide(t, TENANT_ALG_WINDOW, &ls, (const unsigned char(*)[16])k,
                                           1, T0, 0, &d, NULL),
                     TALLY_ECOST);
    tenant_callers_close(t);
    tenant_callers_close(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caller_parse_table),
        cmocka_unit_test(test_caller_hash_keyed),
        cmocka_unit_test(test_callers_five_then_exact_retry),
        cmocka_unit_test(test_callers_all_or_nothing),
        cmocka_unit_test(test_callers_gcra),
        cmocka_unit_test(test_callers_flood_past_ceiling),
        cmocka_unit_test(test_callers_memory_per_caller),
        cmocka_unit_test(test_callers_sketch_newcomers),
        cmocka_unit_test(test_callers_reclaim_first),
        cmocka_unit_test(test_callers_restore),
        cmocka_unit_test(test_callers_undo),
        cmocka_unit_test(test_callers_bad_arguments),
    };

    assert_true(sodium_init() >= 0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

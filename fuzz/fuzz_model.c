/*
 * libFuzzer target: the model's parsers (tenant/model.c): limits (N/PERIOD),
 * limit lists, costs, durations, names, token shapes and link ids. The first
 * byte picks the parser, the rest is the text (cut at the first NUL, as a C
 * string from argv or a header would be). What parses must print in canonical
 * form, and the canonical form must parse back to the same value and print
 * the same text again.
 */
#include <string.h>

#include "fuzz_util.h"
#include "tenant.h"

#define TEXT_MAX 4096

static void
limit_one(const char *s)
{
    struct tenant_limit l, back;
    char text[TENANT_LIMIT_TEXT_MAX], again[TENANT_LIMIT_TEXT_MAX];

    if (tenant_limit_parse(s, &l) != TALLY_OK)
        return;
    FUZZ_CHECK(l.n >= 1 && l.n <= TENANT_LIMIT_MAX_N);
    FUZZ_CHECK(l.period_ms >= 1000 && l.period_ms <= TENANT_LIMIT_MAX_PERIOD_MS);
    /* whole seconds, or a month (stored on billing day 1) */
    FUZZ_CHECK(l.period_ms % 1000 == 0 || l.period_ms == tenant_month_period(1));
    tenant_limit_format(&l, text, sizeof(text));
    FUZZ_CHECK(strlen(text) < sizeof(text) - 1); /* not truncated */
    FUZZ_CHECK(tenant_limit_parse(text, &back) == TALLY_OK);
    FUZZ_CHECK(back.n == l.n && back.period_ms == l.period_ms);
    tenant_limit_format(&back, again, sizeof(again));
    FUZZ_CHECK(strcmp(text, again) == 0);
}

static void
limits_list(const char *s)
{
    struct tenant_limits ls, back;
    char text[TENANT_MAX_WINDOWS * TENANT_LIMIT_TEXT_MAX];
    uint32_t i;

    if (tenant_limits_parse(s, &ls) != TALLY_OK)
        return;
    FUZZ_CHECK(ls.count <= TENANT_MAX_WINDOWS);
    for (i = 1; i < ls.count; i++)
        FUZZ_CHECK(ls.v[i - 1].period_ms < ls.v[i].period_ms); /* sorted, distinct */
    tenant_limits_format(&ls, text, sizeof(text));
    FUZZ_CHECK(tenant_limits_parse(text, &back) == TALLY_OK);
    FUZZ_CHECK(back.count == ls.count);
    for (i = 0; i < ls.count; i++)
        FUZZ_CHECK(back.v[i].n == ls.v[i].n && back.v[i].period_ms == ls.v[i].period_ms);
}

static void
cost_one(const char *s)
{
    char text[32];
    int64_t v = 0, back = 0;

    if (tenant_cost_parse(s, &v) != TALLY_OK)
        return;
    FUZZ_CHECK(v >= 1 && v <= TENANT_COST_MAX);
    snprintf(text, sizeof(text), "%lld", (long long)v);
    FUZZ_CHECK(tenant_cost_parse(text, &back) == TALLY_OK && back == v);
}

static void
duration_one(const char *s)
{
    int64_t ms = 0;

    if (tenant_duration_parse(s, &ms) != TALLY_OK)
        return;
    FUZZ_CHECK(ms >= 1000 && ms <= 10LL * 366 * 24 * 3600 * 1000);
}

static void
name_one(const char *s)
{
    size_t i, n = strlen(s);

    if (!tenant_name_valid(s))
        return;
    /* A valid name is a safe file name: no '/', no "..", no dot at all. */
    FUZZ_CHECK(n >= 1 && n <= TENANT_NAME_MAX);
    for (i = 0; i < n; i++)
        FUZZ_CHECK((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                   (i > 0 && (s[i] == '_' || s[i] == '-')));
    FUZZ_CHECK(tenant_name_list_has(s, s));
}

static void
token_one(const char *s)
{
    unsigned char key[TENANT_KEY_BYTES] = {0};
    unsigned char hash[TENANT_HASH_BYTES];
    int rc = tenant_token_hash(key, s, hash);

    FUZZ_CHECK(rc == (strlen(s) > TENANT_TOKEN_MAX ? TALLY_EINVAL : TALLY_OK));
    if (tenant_token_shape_ok(s))
        FUZZ_CHECK(strlen(s) == TENANT_TOKEN_LEN && strncmp(s, "tly_", 4) == 0);
    if (tenant_link_id_valid(s))
        FUZZ_CHECK(strlen(s) == TENANT_LINK_ID_LEN);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char s[TEXT_MAX + 1];
    size_t n;

    if (size < 1)
        return 0;
    n = size - 1 < TEXT_MAX ? size - 1 : TEXT_MAX;
    memcpy(s, data + 1, n);
    s[n] = '\0';
    switch (data[0] % 6) {
    case 0:
        limit_one(s);
        break;
    case 1:
        limits_list(s);
        break;
    case 2:
        cost_one(s);
        break;
    case 3:
        duration_one(s);
        break;
    case 4:
        name_one(s);
        break;
    default:
        token_one(s);
        break;
    }
    return 0;
}

/*
 * The model's small parsers and the token machinery: names that may become
 * file names, limits in N/PERIOD syntax, costs and durations, tokens and their
 * keyed hashes. Every parser is strict: it accepts exactly the documented
 * grammar and refuses everything else, so a typo never becomes a policy.
 */
#include "tenant.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

bool
tenant_name_valid(const char *s)
{
    size_t i;

    if (s == NULL || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
        return false;
    for (i = 1; s[i] != '\0'; i++) {
        char c = s[i];
        if (i > TENANT_NAME_MAX - 1)
            return false;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool
tenant_name_list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    const char *p = list;

    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return false;
}

/* Parses a run of decimal digits (no sign, at least one digit) into *out,
 * refusing values above max. Returns the first byte after the digits or NULL. */
static const char *
parse_digits(const char *s, int64_t max, int64_t *out)
{
    int64_t v = 0;
    const char *p = s;

    if (*p < '0' || *p > '9')
        return NULL;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (p - s > 19)
            return NULL;
        v = v * 10 + (*p - '0');
        if (v > max)
            return NULL;
    }
    *out = v;
    return p;
}

static int64_t
unit_ms(char u)
{
    switch (u) {
    case 's':
        return 1000;
    case 'm':
        return 60 * 1000;
    case 'h':
        return 3600 * 1000;
    case 'd':
        return 24 * 3600 * 1000;
    default:
        return 0;
    }
}

int
tenant_limit_parse(const char *s, struct tenant_limit *out)
{
    int64_t n = 0;
    int64_t count = 1;
    int64_t unit;
    const char *p;

    if (s == NULL)
        return TALLY_ELIMIT;
    p = parse_digits(s, TENANT_LIMIT_MAX_N, &n);
    if (p == NULL || n < 1 || *p != '/')
        return TALLY_ELIMIT;
    p++;
    if (strcmp(p, "month") == 0) { /* stored on day 1; a tenant's copy takes its billing day */
        out->n = n;
        out->period_ms = tenant_month_period(1);
        return TALLY_OK;
    }
    if (*p >= '0' && *p <= '9') {
        p = parse_digits(p, TENANT_LIMIT_MAX_PERIOD_MS / 1000, &count);
        if (p == NULL || count < 1)
            return TALLY_ELIMIT;
    }
    unit = unit_ms(*p);
    if (unit == 0 || p[1] != '\0')
        return TALLY_ELIMIT;
    if (count > TENANT_LIMIT_MAX_PERIOD_MS / unit)
        return TALLY_ELIMIT;
    out->n = n;
    out->period_ms = count * unit;
    return TALLY_OK;
}

void
tenant_limit_format(const struct tenant_limit *l, char *buf, size_t len)
{
    static const char units[] = {'d', 'h', 'm', 's'};
    size_t i;

    if (tenant_period_is_month(l->period_ms)) {
        snprintf(buf, len, "%lld/month", (long long)l->n);
        return;
    }
    for (i = 0; i < sizeof(units); i++) {
        int64_t u = unit_ms(units[i]);
        if (l->period_ms % u == 0) {
            snprintf(buf, len, "%lld/%lld%c", (long long)l->n, (long long)(l->period_ms / u),
                     units[i]);
            return;
        }
    }
    snprintf(buf, len, "%lld/%llds", (long long)l->n, (long long)(l->period_ms / 1000));
}

int
tenant_limits_add(struct tenant_limits *ls, const struct tenant_limit *l)
{
    uint32_t i;
    uint32_t at;

    if (ls->count >= TENANT_MAX_WINDOWS)
        return TALLY_ELIMIT;
    for (i = 0; i < ls->count; i++) {
        if (ls->v[i].period_ms == l->period_ms)
            return TALLY_ELIMIT;
    }
    at = ls->count;
    while (at > 0 && ls->v[at - 1].period_ms > l->period_ms) {
        ls->v[at] = ls->v[at - 1];
        at--;
    }
    ls->v[at] = *l;
    ls->count++;
    return TALLY_OK;
}

int
tenant_billing_day_parse(const char *s, int64_t *out)
{
    int64_t d = 0;
    const char *p = s != NULL ? parse_digits(s, TENANT_BILLING_DAY_MAX, &d) : NULL;

    if (p == NULL || p == s || *p != '\0' || d < 1)
        return TALLY_EINVAL;
    *out = d;
    return TALLY_OK;
}

void
tenant_limits_bind_month(struct tenant_limits *ls, int64_t billing_day)
{
    int64_t period = tenant_month_period(billing_day);

    for (uint32_t i = 0; period > 0 && i < ls->count && i < TENANT_MAX_WINDOWS; i++) {
        if (tenant_period_is_month(ls->v[i].period_ms))
            ls->v[i].period_ms = period;
    }
}

bool
tenant_limits_have_month(const struct tenant_limits *ls)
{
    for (uint32_t i = 0; i < ls->count && i < TENANT_MAX_WINDOWS; i++) {
        if (tenant_period_is_month(ls->v[i].period_ms))
            return true;
    }
    return false;
}

int
tenant_limits_parse(const char *s, struct tenant_limits *out)
{
    char item[TENANT_LIMIT_TEXT_MAX];
    struct tenant_limit l;
    const char *p = s;
    int rc;

    memset(out, 0, sizeof(*out));
    if (s == NULL || *s == '\0')
        return TALLY_OK;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n == 0 || n >= sizeof(item))
            return TALLY_ELIMIT;
        memcpy(item, p, n);
        item[n] = '\0';
        rc = tenant_limit_parse(item, &l);
        if (rc != TALLY_OK)
            return rc;
        rc = tenant_limits_add(out, &l);
        if (rc != TALLY_OK)
            return rc;
        if (comma == NULL)
            return TALLY_OK;
        p = comma + 1;
    }
}

void
tenant_limits_format(const struct tenant_limits *ls, char *buf, size_t len)
{
    size_t used = 0;
    uint32_t i;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (i = 0; i < ls->count && used < len; i++) {
        char one[TENANT_LIMIT_TEXT_MAX];
        tenant_limit_format(&ls->v[i], one, sizeof(one));
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i > 0 ? "," : "", one);
    }
}

int
tenant_cost_parse(const char *s, int64_t *out)
{
    int64_t v = 0;
    const char *p;

    if (s == NULL)
        return TALLY_ECOST;
    p = parse_digits(s, TENANT_COST_MAX, &v);
    if (p == NULL || *p != '\0' || v < 1)
        return TALLY_ECOST;
    *out = v;
    return TALLY_OK;
}

int
tenant_duration_parse(const char *s, int64_t *out_ms)
{
    const int64_t max_ms = 10LL * 366 * 24 * 3600 * 1000;
    int64_t count = 0;
    int64_t unit;
    const char *p;

    if (s == NULL)
        return TALLY_EINVAL;
    p = parse_digits(s, max_ms / 1000, &count);
    if (p == NULL || count < 1)
        return TALLY_EINVAL;
    unit = unit_ms(*p);
    if (unit == 0 || p[1] != '\0' || count > max_ms / unit)
        return TALLY_EINVAL;
    *out_ms = count * unit;
    return TALLY_OK;
}

void
tenant_token_new(char token[TENANT_TOKEN_LEN + 1])
{
    unsigned char raw[TENANT_TOKEN_RAW_BYTES];
    const size_t prefix = sizeof(TENANT_TOKEN_PREFIX) - 1;

    randombytes_buf(raw, sizeof(raw));
    memcpy(token, TENANT_TOKEN_PREFIX, prefix);
    sodium_bin2base64(token + prefix, TENANT_TOKEN_LEN + 1 - prefix, raw, sizeof(raw),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof(raw));
}

bool
tenant_token_shape_ok(const char *s)
{
    const size_t prefix = sizeof(TENANT_TOKEN_PREFIX) - 1;
    size_t i;

    if (s == NULL || strncmp(s, TENANT_TOKEN_PREFIX, prefix) != 0)
        return false;
    for (i = prefix; s[i] != '\0'; i++) {
        char c = s[i];
        if (i >= TENANT_TOKEN_LEN)
            return false;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return i == TENANT_TOKEN_LEN;
}

int
tenant_token_hash(const unsigned char key[TENANT_KEY_BYTES], const char *token,
                  unsigned char out[TENANT_HASH_BYTES])
{
    size_t n = strnlen(token, TENANT_TOKEN_MAX + 1);

    if (n > TENANT_TOKEN_MAX)
        return TALLY_EINVAL;
    crypto_generichash(out, TENANT_HASH_BYTES, (const unsigned char *)token, n, key,
                       TENANT_KEY_BYTES);
    return TALLY_OK;
}

void
tenant_link_id_new(char id[TENANT_LINK_ID_LEN + 1])
{
    unsigned char raw[8];

    randombytes_buf(raw, sizeof(raw));
    memcpy(id, "lnk_", 4);
    sodium_bin2hex(id + 4, TENANT_LINK_ID_LEN + 1 - 4, raw, sizeof(raw));
}

bool
tenant_link_id_valid(const char *s)
{
    size_t i;

    if (s == NULL || strncmp(s, "lnk_", 4) != 0 || strlen(s) != TENANT_LINK_ID_LEN)
        return false;
    for (i = 4; i < TENANT_LINK_ID_LEN; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    }
    return true;
}

void
tenant_hash_short(const unsigned char hash[TENANT_HASH_BYTES], char out[13])
{
    sodium_bin2hex(out, 13, hash, 6);
}

bool
tenant_limits_equal(const struct tenant_limits *a, const struct tenant_limits *b)
{
    if (a->count != b->count)
        return false;
    for (uint32_t i = 0; i < a->count; i++) {
        if (a->v[i].n != b->v[i].n || a->v[i].period_ms != b->v[i].period_ms)
            return false;
    }
    return true;
}

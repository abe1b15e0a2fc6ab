/*
 * tenant: the model of docs/DESIGN.md §2 (names, limits, plans, endpoint policies,
 * links, token hashing). Pure code over libsodium; no files, no clock reads.
 * The counting arithmetic lives beside it in tenant_count.h.
 *
 * Header-wide rule: strings passed in are borrowed for the call; results are
 * written to caller-owned out-parameters marked OUT.
 */
#ifndef TENANT_H
#define TENANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally_common.h"

/* Names become file names: [a-z0-9][a-z0-9_-]{0,62}. */
#define TENANT_NAME_MAX 63

/* Limits: N/PERIOD with 1 <= N <= 2^32 and 1 s <= PERIOD <= 365 d. */
#define TENANT_LIMIT_MAX_N         4294967296LL
#define TENANT_LIMIT_MAX_PERIOD_MS (365LL * 24 * 3600 * 1000)
#define TENANT_MAX_WINDOWS         4 /* limits per list (e.g. 10/1s, 600/1m, 36000/1h, 1e6/1d) */
#define TENANT_COST_MAX            TENANT_LIMIT_MAX_N
#define TENANT_CONCURRENCY_MAX     1024
#define TENANT_LIMIT_TEXT_MAX      32 /* "4294967296/31536000s" fits */

/* Live (not revoked, not expired) links per tenant: a plan's --max-links, 1 to
 * this, which is also the default. The child counter's link table holds 2^20. */
#define TENANT_MAX_LINKS 1000000
/* Endpoint names in a deployment (default policies and plan overrides alike):
 * a supervisor's ledger holds at most this many per tenant (SUP_MAX_ENDPOINTS). */
#define TENANT_MAX_ENDPOINTS 256

/* N/month: the calendar month in UTC from 00:00 on a billing day D (1..28) to 00:00 on day D of
 * the next month. Its period_ms is TENANT_MONTH_MS + D: no N/PERIOD text gives it (not whole
 * seconds), it sorts after every period up to 31 days, and wherever a length is needed (rates,
 * bounds) it reads as 31 days, the longest month. Stored plans and policies hold day 1; a
 * tenant's copy is bound to its billing day (tenant_limits_bind_month). Window ids and ends come
 * from tenant_window_id / tenant_window_end_ms (tenant_count.h), which know the calendar. */
#define TENANT_MONTH_MS        (31LL * 24 * 3600 * 1000)
#define TENANT_BILLING_DAY_MAX 28

struct tenant_limit {
    int64_t n;         /* tokens per window, 1..2^32 */
    int64_t period_ms; /* window length, 1000..365 d, whole seconds */
};

struct tenant_limits {
    uint32_t count; /* 0..TENANT_MAX_WINDOWS */
    struct tenant_limit v[TENANT_MAX_WINDOWS];
};

enum tenant_algorithm { TENANT_ALG_WINDOW = 0, TENANT_ALG_GCRA = 1 };
enum tenant_unavailable { TENANT_UNAVAIL_CLOSED = 0, TENANT_UNAVAIL_OPEN = 1 };
/* What an endpoint's budgets are keyed by: the bearer token's link, or the callers the
 * proxy vouches for (X-Tally-Caller, for routes without a credential). Every policy of
 * one endpoint name has the same key. */
enum tenant_key { TENANT_KEY_TOKEN = 0, TENANT_KEY_CALLER = 1 };

/* Caller endpoints: callers counted exactly per endpoint (--max-callers), 1 to this;
 * the default when not given. */
#define TENANT_MAX_CALLERS_DEFAULT 1000000
#define TENANT_MAX_CALLERS_MAX     16777216

/** True iff period_ms is a calendar month (TENANT_MONTH_MS + 1..28). */
bool tenant_period_is_month(int64_t period_ms);
/** The period of a month on `billing_day` (1..28), -1 otherwise. */
int64_t tenant_month_period(int64_t billing_day);
/** True iff two periods count the same window kind: equal, or both months (any billing day). */
bool tenant_periods_match(int64_t a, int64_t b);
/** Parses a billing day: a decimal integer 1..28. TALLY_OK or TALLY_EINVAL. */
TALLY_MUST_CHECK int tenant_billing_day_parse(const char *s, int64_t *out /* OUT */);
/** Rebinds every month limit of `ls` to `billing_day` (1..28; anything else leaves ls as is). */
void tenant_limits_bind_month(struct tenant_limits *ls, int64_t billing_day);
/** True iff `ls` holds a month limit. */
bool tenant_limits_have_month(const struct tenant_limits *ls);

/** True iff `s` (borrowed, NUL-terminated) is a valid tenant/plan/endpoint name. */
bool tenant_name_valid(const char *s);

/** True iff `name` is one of the comma-separated names of `list` (both borrowed). */
bool tenant_name_list_has(const char *list, const char *name);

/** Parses "N/PERIOD" strictly into *out. TALLY_OK or TALLY_ELIMIT. */
TALLY_MUST_CHECK int tenant_limit_parse(const char *s, struct tenant_limit *out /* OUT */);
/** Writes the canonical text of `l` ("600/1m") into buf of `len` bytes. */
void tenant_limit_format(const struct tenant_limit *l, char *buf, size_t len);
/** Adds `l` to `ls` keeping it sorted by period; a second limit with the same
 *  period or more than TENANT_MAX_WINDOWS limits is TALLY_ELIMIT. */
TALLY_MUST_CHECK int tenant_limits_add(struct tenant_limits *ls, const struct tenant_limit *l);
/** Parses a comma-separated list ("600/1m,36000/1h"; "" is the empty list). */
TALLY_MUST_CHECK int tenant_limits_parse(const char *s, struct tenant_limits *out /* OUT */);
/** True iff the two lists hold the same windows in the same order. */
bool tenant_limits_equal(const struct tenant_limits *a, const struct tenant_limits *b);
/** Canonical comma-separated text of `ls` into buf of `len` bytes ("" when empty). */
void tenant_limits_format(const struct tenant_limits *ls, char *buf, size_t len);
/** Parses a cost: a decimal integer 1..TENANT_COST_MAX. TALLY_OK or TALLY_ECOST. */
TALLY_MUST_CHECK int tenant_cost_parse(const char *s, int64_t *out /* OUT */);
/** Parses a duration "90s", "15m", "12h", "30d" (positive, at most 10 years) into ms. */
TALLY_MUST_CHECK int tenant_duration_parse(const char *s, int64_t *out_ms /* OUT */);

/* Plans and endpoint policies, as stored and as applied. */
struct tenant_plan {
    char name[TENANT_NAME_MAX + 1];
    struct tenant_limits limits;      /* tenant-wide, summed over every endpoint and link */
    struct tenant_limits link_limits; /* per link across endpoints */
    int64_t concurrency;              /* expensive operations in flight per link, 0 = none */
    int64_t max_links;                /* live links per tenant; 0 = TENANT_MAX_LINKS */
};

struct tenant_endpoint {
    char name[TENANT_NAME_MAX + 1];
    char plan[TENANT_NAME_MAX + 1];     /* "" = the default for every plan */
    struct tenant_limits limits;        /* per link on this endpoint */
    struct tenant_limits tenant_limits; /* whole tenant on this endpoint */
    struct tenant_limits degraded_limits;
    enum tenant_algorithm algorithm;
    enum tenant_unavailable on_unavailable;
    int64_t cost; /* default cost, >= 1 */
    bool expensive;
    bool shadow;
    enum tenant_key key; /* TENANT_KEY_CALLER: keyed by X-Tally-Caller, no token */
    int64_t max_callers; /* caller endpoints: exact entries; 0 = TENANT_MAX_CALLERS_DEFAULT */
};

/* A tenant as an operator sets it (`tally tenant set`, a `tenant` line of a configuration
 * file): its plan, its billing day and what it overrides of the plan (a custom contract). */
#define TENANT_OVR_LIMITS      1u
#define TENANT_OVR_LINK_LIMITS 2u
#define TENANT_OVR_CONCURRENCY 4u
struct tenant_account {
    char id[TENANT_NAME_MAX + 1];
    char plan[TENANT_NAME_MAX + 1];
    int64_t billing_day; /* 1..28 */
    uint32_t overrides;  /* TENANT_OVR_*: the values below replace the plan's */
    struct tenant_limits limits, link_limits;
    int64_t concurrency;
};

/* Tokens and keys. */
#define TENANT_KEY_BYTES       32
#define TENANT_HASH_BYTES      32
#define TENANT_TOKEN_RAW_BYTES 24 /* 192 random bits */
#define TENANT_TOKEN_PREFIX    "tly_"
#define TENANT_TOKEN_LEN       (4 + 32) /* prefix + base64url(24 bytes) */
#define TENANT_TOKEN_MAX       128      /* longest input we even hash */
#define TENANT_LINK_ID_LEN     (4 + 16) /* "lnk_" + 16 hex */

/** Fills `token` (TENANT_TOKEN_LEN + 1 bytes) with a fresh token from randombytes_buf.
 *  Wipe it with sodium_memzero when done. */
void tenant_token_new(char token[TENANT_TOKEN_LEN + 1] /* OUT */);
/** True iff `s` has the shape of a token (prefix, length, alphabet); cheap precheck. */
bool tenant_token_shape_ok(const char *s);
/** Keyed BLAKE2b-256 of `token` (borrowed) under `key`. TALLY_OK or TALLY_EINVAL
 *  when the token is longer than TENANT_TOKEN_MAX. */
TALLY_MUST_CHECK int tenant_token_hash(const unsigned char key[TENANT_KEY_BYTES], const char *token,
                                       unsigned char out[TENANT_HASH_BYTES] /* OUT */);
/** Fills `id` (TENANT_LINK_ID_LEN + 1 bytes) with a fresh random link id "lnk_<16 hex>". */
void tenant_link_id_new(char id[TENANT_LINK_ID_LEN + 1] /* OUT */);
/** True iff `s` looks like a link id. */
bool tenant_link_id_valid(const char *s);
/** Lowercase hex of the first 6 bytes of a hash, for logs (never the token). */
void tenant_hash_short(const unsigned char hash[TENANT_HASH_BYTES], char out[13] /* OUT */);

#endif /* TENANT_H */

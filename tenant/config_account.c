/*
 * `tenant` lines of the configuration grammar: a tenant's plan, billing day and the values it
 * overrides of its plan, parsed and printed canonically so that `tally export` prints what
 * `tally apply` reads back. The options are those of `tally tenant set`.
 */
#include "tenant_config.h"

#include <stdio.h>
#include <string.h>

static int
account_limit(struct tenant_limits *ls, const char *opt, const char *v, char *err, size_t errlen)
{
    struct tenant_limit l;

    if (tenant_limit_parse(v, &l) != TALLY_OK) {
        snprintf(err, errlen,
                 "invalid limit '%.80s' for %s: use N/PERIOD, N from 1 to 2^32, PERIOD up to "
                 "365d in s, m, h or d, or month (e.g. 600/1m, 100000/month)",
                 v, opt);
        return TALLY_ELIMIT;
    }
    if (tenant_limits_add(ls, &l) != TALLY_OK) {
        snprintf(err, errlen, "%s '%.80s': at most %d limits, each with a different period", opt, v,
                 TENANT_MAX_WINDOWS);
        return TALLY_ELIMIT;
    }
    return TALLY_OK;
}

static int
account_option(int argc, char **argv, int *i, struct tenant_account *out, char *err, size_t errlen)
{
    bool missing = false;
    const char *v;
    int64_t k = 0;

    if ((v = tenant_opt_value(argc, argv, i, "--plan", &missing)) != NULL) {
        int rc = tenant_name_check("plan", v, err, errlen);
        if (rc == TALLY_OK)
            snprintf(out->plan, sizeof(out->plan), "%s", v);
        return rc;
    }
    if ((v = tenant_opt_value(argc, argv, i, "--billing-day", &missing)) != NULL) {
        if (tenant_billing_day_parse(v, &out->billing_day) == TALLY_OK)
            return TALLY_OK;
        snprintf(err, errlen, "invalid --billing-day '%.80s': a day of the month from 1 to 28", v);
        return TALLY_EINVAL;
    }
    if ((v = tenant_opt_value(argc, argv, i, "--limit", &missing)) != NULL) {
        out->overrides |= TENANT_OVR_LIMITS;
        return account_limit(&out->limits, "--limit", v, err, errlen);
    }
    if ((v = tenant_opt_value(argc, argv, i, "--link-limit", &missing)) != NULL) {
        out->overrides |= TENANT_OVR_LINK_LIMITS;
        return account_limit(&out->link_limits, "--link-limit", v, err, errlen);
    }
    if ((v = tenant_opt_value(argc, argv, i, "--concurrency", &missing)) != NULL) {
        if (tenant_cost_parse(v, &k) != TALLY_OK || k > TENANT_CONCURRENCY_MAX) {
            snprintf(err, errlen, "invalid --concurrency '%.80s': a whole number from 1 to %d", v,
                     TENANT_CONCURRENCY_MAX);
            return TALLY_EINVAL;
        }
        out->overrides |= TENANT_OVR_CONCURRENCY;
        out->concurrency = k;
        return TALLY_OK;
    }
    if (missing)
        snprintf(err, errlen, "%.80s needs a value", argv[*i]);
    else
        snprintf(err, errlen, "unknown tenant option '%.80s'", argv[*i]);
    return TALLY_EINVAL;
}

int
tenant_account_parse_args(int argc, char **argv, struct tenant_account *out, char *err,
                          size_t errlen)
{
    int rc;

    memset(out, 0, sizeof(*out));
    out->billing_day = 1;
    rc = tenant_name_check("tenant", argc > 0 ? argv[0] : NULL, err, errlen);
    if (rc != TALLY_OK)
        return rc;
    snprintf(out->id, sizeof(out->id), "%s", argv[0]);
    for (int i = 1; i < argc; i++) {
        rc = account_option(argc, argv, &i, out, err, errlen);
        if (rc != TALLY_OK)
            return rc;
    }
    if (out->plan[0] == '\0') {
        snprintf(err, errlen, "tenant %s needs --plan PLAN", out->id);
        return TALLY_EINVAL;
    }
    return TALLY_OK;
}

static size_t
account_limits(char *buf, size_t len, size_t used, const char *opt, const struct tenant_limits *ls)
{
    for (uint32_t i = 0; i < ls->count && used < len; i++) {
        char one[TENANT_LIMIT_TEXT_MAX];
        tenant_limit_format(&ls->v[i], one, sizeof(one));
        used += (size_t)snprintf(buf + used, len - used, " %s %s", opt, one);
    }
    return used;
}

void
tenant_account_format(const struct tenant_account *t, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "tenant %s --plan %s --billing-day %lld", t->id,
                                   t->plan, (long long)t->billing_day);

    if (t->overrides & TENANT_OVR_LIMITS)
        used = account_limits(buf, len, used, "--limit", &t->limits);
    if (t->overrides & TENANT_OVR_LINK_LIMITS)
        used = account_limits(buf, len, used, "--link-limit", &t->link_limits);
    if ((t->overrides & TENANT_OVR_CONCURRENCY) && used < len)
        snprintf(buf + used, len - used, " --concurrency %lld", (long long)t->concurrency);
}

/*
 * The configuration grammar: `plan NAME ...` and `endpoint NAME ...` with the
 * options of `tally plan set` and `tally endpoint set`. One parser serves the
 * command line and the configuration file (`tally apply`), and the canonical
 * formatter serves `tally export`, so what export prints apply reads back.
 */
#include "tenant_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *
tenant_opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    const char *a = argv[*i];

    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

static int bad(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
bad(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

static int
add_limit(struct tenant_limits *ls, const char *opt, const char *v, char *err, size_t errlen)
{
    struct tenant_limit l;

    if (tenant_limit_parse(v, &l) != TALLY_OK) {
        snprintf(err, errlen,
                 "invalid limit '%s' for %s: use N/PERIOD, N from 1 to 2^32, PERIOD up to 365d "
                 "in s, m, h or d, or month (e.g. 600/1m, 100000/month)",
                 v, opt);
        return TALLY_ELIMIT;
    }
    if (tenant_limits_add(ls, &l) != TALLY_OK) {
        snprintf(err, errlen, "%s '%s': at most %d limits, each with a different period", opt, v,
                 TENANT_MAX_WINDOWS);
        return TALLY_ELIMIT;
    }
    return TALLY_OK;
}

int
tenant_name_check(const char *what, const char *name, char *err, size_t errlen)
{
    if (name == NULL || strncmp(name, "--", 2) == 0) {
        snprintf(err, errlen, "missing %s name", what);
        return TALLY_EINVAL;
    }
    if (!tenant_name_valid(name)) {
        snprintf(err, errlen, "invalid %s name '%.80s': use [a-z0-9][a-z0-9_-]{0,62}", what, name);
        return TALLY_ENAME;
    }
    return TALLY_OK;
}

int
tenant_plan_parse_args(int argc, char **argv, struct tenant_plan *out, char *err, size_t errlen)
{
    int rc;
    int i;

    memset(out, 0, sizeof(*out));
    rc = tenant_name_check("plan", argc > 0 ? argv[0] : NULL, err, errlen);
    if (rc != TALLY_OK)
        return rc;
    snprintf(out->name, sizeof(out->name), "%s", argv[0]);
    for (i = 1; i < argc; i++) {
        bool missing = false;
        const char *v;
        if ((v = tenant_opt_value(argc, argv, &i, "--limit", &missing)) != NULL) {
            rc = add_limit(&out->limits, "--limit", v, err, errlen);
        } else if ((v = tenant_opt_value(argc, argv, &i, "--link-limit", &missing)) != NULL) {
            rc = add_limit(&out->link_limits, "--link-limit", v, err, errlen);
        } else if ((v = tenant_opt_value(argc, argv, &i, "--concurrency", &missing)) != NULL) {
            int64_t k = 0;
            if (tenant_cost_parse(v, &k) != TALLY_OK || k > TENANT_CONCURRENCY_MAX)
                return bad(err, errlen, TALLY_EINVAL,
                           "invalid --concurrency '%s': a whole number from 1 to 1024", v);
            out->concurrency = k;
        } else if ((v = tenant_opt_value(argc, argv, &i, "--max-links", &missing)) != NULL) {
            int64_t k = 0;
            if (tenant_cost_parse(v, &k) != TALLY_OK || k > TENANT_MAX_LINKS)
                return bad(err, errlen, TALLY_EINVAL,
                           "invalid --max-links '%s': a whole number from 1 to %d", v,
                           TENANT_MAX_LINKS);
            out->max_links = k == TENANT_MAX_LINKS ? 0 : k;
        } else if (missing) {
            return bad(err, errlen, TALLY_EINVAL, "%s needs a value", argv[i]);
        } else {
            return bad(err, errlen, TALLY_EINVAL, "unknown plan option '%.80s'", argv[i]);
        }
        if (rc != TALLY_OK)
            return rc;
    }
    if (out->limits.count == 0)
        return bad(err, errlen, TALLY_ELIMIT, "plan %s needs at least one --limit N/PERIOD",
                   out->name);
    return TALLY_OK;
}

static int
parse_endpoint_flag(int argc, char **argv, int *i, struct tenant_endpoint *out, char *err,
                    size_t errlen)
{
    bool missing = false;
    const char *v;

    if ((v = tenant_opt_value(argc, argv, i, "--limit", &missing)) != NULL)
        return add_limit(&out->limits, "--limit", v, err, errlen);
    if ((v = tenant_opt_value(argc, argv, i, "--tenant-limit", &missing)) != NULL)
        return add_limit(&out->tenant_limits, "--tenant-limit", v, err, errlen);
    if ((v = tenant_opt_value(argc, argv, i, "--degraded-limit", &missing)) != NULL)
        return add_limit(&out->degraded_limits, "--degraded-limit", v, err, errlen);
    if ((v = tenant_opt_value(argc, argv, i, "--plan", &missing)) != NULL) {
        int rc = tenant_name_check("plan", v, err, errlen);
        if (rc == TALLY_OK)
            snprintf(out->plan, sizeof(out->plan), "%s", v);
        return rc;
    }
    if ((v = tenant_opt_value(argc, argv, i, "--algorithm", &missing)) != NULL) {
        if (strcmp(v, "window") == 0)
            out->algorithm = TENANT_ALG_WINDOW;
        else if (strcmp(v, "gcra") == 0)
            out->algorithm = TENANT_ALG_GCRA;
        else
            return bad(err, errlen, TALLY_EINVAL, "invalid --algorithm '%.80s': window or gcra", v);
        return TALLY_OK;
    }
    if ((v = tenant_opt_value(argc, argv, i, "--on-unavailable", &missing)) != NULL) {
        if (strcmp(v, "open") == 0)
            out->on_unavailable = TENANT_UNAVAIL_OPEN;
        else if (strcmp(v, "closed") == 0)
            out->on_unavailable = TENANT_UNAVAIL_CLOSED;
        else
            return bad(err, errlen, TALLY_EINVAL,
                       "invalid --on-unavailable '%.80s': open or closed", v);
        return TALLY_OK;
    }
    if ((v = tenant_opt_value(argc, argv, i, "--key", &missing)) != NULL) {
        if (strcmp(v, "token") == 0)
            out->key = TENANT_KEY_TOKEN;
        else if (strcmp(v, "caller") == 0)
            out->key = TENANT_KEY_CALLER;
        else
            return bad(err, errlen, TALLY_EINVAL, "invalid --key '%.80s': token or caller", v);
        return TALLY_OK;
    }
    if ((v = tenant_opt_value(argc, argv, i, "--max-callers", &missing)) != NULL) {
        int64_t k = 0;
        if (tenant_cost_parse(v, &k) != TALLY_OK || k > TENANT_MAX_CALLERS_MAX)
            return bad(err, errlen, TALLY_EINVAL,
                       "invalid --max-callers '%.80s': a whole number from 1 to %d", v,
                       TENANT_MAX_CALLERS_MAX);
        out->max_callers = k == TENANT_MAX_CALLERS_DEFAULT ? 0 : k;
        return TALLY_OK;
    }
    if ((v = tenant_opt_value(argc, argv, i, "--cost", &missing)) != NULL) {
        if (tenant_cost_parse(v, &out->cost) != TALLY_OK)
            return bad(err, errlen, TALLY_ECOST,
                       "invalid --cost '%.80s': a whole number from 1 to 2^32", v);
        return TALLY_OK;
    }
    if (missing)
        return bad(err, errlen, TALLY_EINVAL, "%s needs a value", argv[*i]);
    if (strcmp(argv[*i], "--expensive") == 0) {
        out->expensive = true;
        return TALLY_OK;
    }
    if (strcmp(argv[*i], "--shadow") == 0) {
        out->shadow = true;
        return TALLY_OK;
    }
    return bad(err, errlen, TALLY_EINVAL, "unknown endpoint option '%.80s'", argv[*i]);
}

/* A caller endpoint has no tenant and no link: what would need one is refused. */
static int
caller_check(const struct tenant_endpoint *e, char *err, size_t errlen)
{
    if (e->key != TENANT_KEY_CALLER) {
        if (e->max_callers != 0)
            return bad(err, errlen, TALLY_EINVAL, "endpoint %s: --max-callers needs --key caller",
                       e->name);
        return TALLY_OK;
    }
    if (e->tenant_limits.count != 0)
        return bad(err, errlen, TALLY_EINVAL,
                   "endpoint %s: --key caller takes no --tenant-limit (a caller has no tenant)",
                   e->name);
    if (e->expensive)
        return bad(err, errlen, TALLY_EINVAL,
                   "endpoint %s: --key caller cannot be --expensive (slots are per link)", e->name);
    return TALLY_OK;
}

int
tenant_endpoint_parse_args(int argc, char **argv, struct tenant_endpoint *out, char *err,
                           size_t errlen)
{
    int rc;
    int i;

    memset(out, 0, sizeof(*out));
    out->cost = 1;
    rc = tenant_name_check("endpoint", argc > 0 ? argv[0] : NULL, err, errlen);
    if (rc != TALLY_OK)
        return rc;
    snprintf(out->name, sizeof(out->name), "%s", argv[0]);
    for (i = 1; i < argc; i++) {
        rc = parse_endpoint_flag(argc, argv, &i, out, err, errlen);
        if (rc != TALLY_OK)
            return rc;
    }
    if (out->limits.count == 0)
        return bad(err, errlen, TALLY_ELIMIT, "endpoint %s needs at least one --limit N/PERIOD",
                   out->name);
    if (out->algorithm == TENANT_ALG_GCRA &&
        (tenant_limits_have_month(&out->limits) || tenant_limits_have_month(&out->tenant_limits)))
        return bad(err, errlen, TALLY_ELIMIT,
                   "endpoint %s: --algorithm gcra takes no N/month limit (a month has no fixed "
                   "length); use --algorithm window",
                   out->name);
    if (out->on_unavailable == TENANT_UNAVAIL_OPEN && out->degraded_limits.count == 0)
        return bad(err, errlen, TALLY_ELIMIT,
                   "endpoint %s: --on-unavailable open needs a --degraded-limit N/PERIOD",
                   out->name);
    return caller_check(out, err, errlen);
}

/* Appends " OPT L" for each limit of ls to buf. */
static size_t
append_limits(char *buf, size_t len, size_t used, const char *opt, const struct tenant_limits *ls)
{
    uint32_t i;

    for (i = 0; i < ls->count && used < len; i++) {
        char one[TENANT_LIMIT_TEXT_MAX];
        tenant_limit_format(&ls->v[i], one, sizeof(one));
        used += (size_t)snprintf(buf + used, len - used, " %s %s", opt, one);
    }
    return used;
}

void
tenant_plan_format(const struct tenant_plan *p, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "plan %s", p->name);

    used = append_limits(buf, len, used, "--limit", &p->limits);
    used = append_limits(buf, len, used, "--link-limit", &p->link_limits);
    if (p->concurrency > 0 && used < len)
        used += (size_t)snprintf(buf + used, len - used, " --concurrency %lld",
                                 (long long)p->concurrency);
    if (p->max_links > 0 && used < len)
        snprintf(buf + used, len - used, " --max-links %lld", (long long)p->max_links);
}

void
tenant_endpoint_format(const struct tenant_endpoint *e, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "endpoint %s", e->name);

    if (e->plan[0] != '\0' && used < len)
        used += (size_t)snprintf(buf + used, len - used, " --plan %s", e->plan);
    used = append_limits(buf, len, used, "--limit", &e->limits);
    used = append_limits(buf, len, used, "--tenant-limit", &e->tenant_limits);
    if (used < len)
        used += (size_t)snprintf(
            buf + used, len - used, " --algorithm %s --cost %lld --on-unavailable %s",
            e->algorithm == TENANT_ALG_GCRA ? "gcra" : "window", (long long)e->cost,
            e->on_unavailable == TENANT_UNAVAIL_OPEN ? "open" : "closed");
    used = append_limits(buf, len, used, "--degraded-limit", &e->degraded_limits);
    if (e->expensive && used < len)
        used += (size_t)snprintf(buf + used, len - used, " --expensive");
    if (e->shadow && used < len)
        used += (size_t)snprintf(buf + used, len - used, " --shadow");
    if (e->key == TENANT_KEY_CALLER && used < len)
        used += (size_t)snprintf(buf + used, len - used, " --key caller");
    if (e->max_callers > 0 && used < len)
        snprintf(buf + used, len - used, " --max-callers %lld", (long long)e->max_callers);
}

/* ---- the configuration file ---- */

/* Splits `line` (modified in place) on blanks into at most `max` words. */
static int
split_words(char *line, char **words, int max)
{
    int n = 0;
    char *p = line;

    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p == '\0' || *p == '#')
            return n;
        if (n == max)
            return -1;
        words[n++] = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
        if (*p == '\0')
            return n;
        *p++ = '\0';
    }
}

static int
grow(void **items, size_t *cap, size_t n, size_t size)
{
    void *p;
    size_t want = *cap == 0 ? 16 : *cap * 2;

    if (n < *cap)
        return TALLY_OK;
    p = tally_realloc(*items, want * size);
    if (p == NULL)
        return TALLY_ENOMEM;
    *items = p;
    *cap = want;
    return TALLY_OK;
}

/* Whole-file checks: no duplicates, every --plan names a plan of the file. */
static int
config_validate(const struct tenant_config *c, char *err, size_t errlen)
{
    size_t i;
    size_t j;

    for (i = 0; i < c->n_plans; i++) {
        for (j = i + 1; j < c->n_plans; j++) {
            if (strcmp(c->plans[i].name, c->plans[j].name) == 0) {
                snprintf(err, errlen, "plan %s is defined twice", c->plans[i].name);
                return TALLY_ECONFIG;
            }
        }
    }
    for (i = 0; i < c->n_endpoints; i++) {
        const struct tenant_endpoint *e = &c->endpoints[i];
        bool plan_found = e->plan[0] == '\0';
        for (j = 0; j < c->n_plans && !plan_found; j++)
            plan_found = strcmp(c->plans[j].name, e->plan) == 0;
        if (!plan_found) {
            snprintf(err, errlen, "endpoint %s names plan %s, which the file does not define",
                     e->name, e->plan);
            return TALLY_ECONFIG;
        }
        for (j = i + 1; j < c->n_endpoints; j++) {
            if (strcmp(e->name, c->endpoints[j].name) == 0 &&
                strcmp(e->plan, c->endpoints[j].plan) == 0) {
                snprintf(err, errlen, "endpoint %s%s%s is defined twice", e->name,
                         e->plan[0] != '\0' ? " --plan " : "", e->plan);
                return TALLY_ECONFIG;
            }
            if (strcmp(e->name, c->endpoints[j].name) == 0 && e->key != c->endpoints[j].key) {
                snprintf(err, errlen,
                         "endpoint %s is keyed by caller in one policy and by token in another",
                         e->name);
                return TALLY_ECONFIG;
            }
        }
    }
    for (i = 0; i < c->n_tenants; i++) {
        const struct tenant_account *t = &c->tenants[i];
        bool plan_found = false;
        for (j = 0; j < c->n_plans && !plan_found; j++)
            plan_found = strcmp(c->plans[j].name, t->plan) == 0;
        if (!plan_found) {
            snprintf(err, errlen, "tenant %s names plan %s, which the file does not define", t->id,
                     t->plan);
            return TALLY_ECONFIG;
        }
        for (j = i + 1; j < c->n_tenants; j++) {
            if (strcmp(t->id, c->tenants[j].id) == 0) {
                snprintf(err, errlen, "tenant %s is defined twice", t->id);
                return TALLY_ECONFIG;
            }
        }
    }
    return TALLY_OK;
}

int
tenant_config_parse(const char *text, size_t len, struct tenant_config *out, char *err,
                    size_t errlen)
{
    char line[TENANT_CONFIG_LINE_MAX + 1];
    char *words[TENANT_CONFIG_WORDS_MAX];
    char why[256];
    size_t cap_plans = 0;
    size_t cap_endpoints = 0;
    size_t cap_tenants = 0;
    size_t at = 0;
    size_t lineno = 0;
    int rc = TALLY_OK;

    memset(out, 0, sizeof(*out));
    if (len > TENANT_CONFIG_FILE_MAX) {
        snprintf(err, errlen, "file is larger than %d bytes", TENANT_CONFIG_FILE_MAX);
        return TALLY_ETOOBIG;
    }
    if (memchr(text, '\0', len) != NULL) {
        snprintf(err, errlen, "file contains a NUL byte");
        return TALLY_ECONFIG;
    }
    while (at < len && rc == TALLY_OK) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
        int nwords;

        lineno++;
        if (n > TENANT_CONFIG_LINE_MAX) {
            snprintf(err, errlen, "line %zu: longer than %d bytes", lineno, TENANT_CONFIG_LINE_MAX);
            rc = TALLY_ECONFIG;
            break;
        }
        memcpy(line, text + at, n);
        line[n] = '\0';
        at += n + 1;
        nwords = split_words(line, words, TENANT_CONFIG_WORDS_MAX);
        if (nwords == 0)
            continue;
        if (nwords < 0) {
            snprintf(err, errlen, "line %zu: more than %d words", lineno, TENANT_CONFIG_WORDS_MAX);
            rc = TALLY_ECONFIG;
        } else if (out->n_plans + out->n_endpoints + out->n_tenants >= TENANT_CONFIG_ITEMS_MAX) {
            snprintf(err, errlen, "line %zu: more than %d items", lineno, TENANT_CONFIG_ITEMS_MAX);
            rc = TALLY_ETOOBIG;
        } else if (strcmp(words[0], "plan") == 0) {
            rc = grow((void **)&out->plans, &cap_plans, out->n_plans, sizeof(*out->plans));
            if (rc == TALLY_OK)
                rc = tenant_plan_parse_args(nwords - 1, words + 1, &out->plans[out->n_plans], why,
                                            sizeof(why));
            if (rc == TALLY_OK)
                out->n_plans++;
            else
                snprintf(err, errlen, "line %zu: %s", lineno,
                         rc == TALLY_ENOMEM ? "out of memory" : why);
        } else if (strcmp(words[0], "endpoint") == 0) {
            rc = grow((void **)&out->endpoints, &cap_endpoints, out->n_endpoints,
                      sizeof(*out->endpoints));
            if (rc == TALLY_OK)
                rc = tenant_endpoint_parse_args(
                    nwords - 1, words + 1, &out->endpoints[out->n_endpoints], why, sizeof(why));
            if (rc == TALLY_OK)
                out->n_endpoints++;
            else
                snprintf(err, errlen, "line %zu: %s", lineno,
                         rc == TALLY_ENOMEM ? "out of memory" : why);
        } else if (strcmp(words[0], "tenant") == 0) {
            rc = grow((void **)&out->tenants, &cap_tenants, out->n_tenants, sizeof(*out->tenants));
            if (rc == TALLY_OK)
                rc = tenant_account_parse_args(nwords - 1, words + 1, &out->tenants[out->n_tenants],
                                               why, sizeof(why));
            if (rc == TALLY_OK)
                out->n_tenants++;
            else
                snprintf(err, errlen, "line %zu: %s", lineno,
                         rc == TALLY_ENOMEM ? "out of memory" : why);
        } else {
            snprintf(err, errlen,
                     "line %zu: unknown item '%.40s': expected plan, endpoint or tenant", lineno,
                     words[0]);
            rc = TALLY_ECONFIG;
        }
    }
    if (rc == TALLY_OK)
        rc = config_validate(out, err, errlen);
    if (rc != TALLY_OK)
        tenant_config_release(out);
    return rc;
}

void
tenant_config_release(struct tenant_config *c)
{
    tally_free(c->plans);
    tally_free(c->endpoints);
    tally_free(c->tenants);
    memset(c, 0, sizeof(*c));
}

/*
 * Tenants: `tenant add|set|list|show|remove`. A tenant has a plan, a billing
 * day (its `N/month` windows start at 00:00 UTC that day) and may override its
 * plan's limits, per-link limits and concurrency (a custom contract). `show`
 * prints the limits in force and which of them are the tenant's own. Every
 * change is one transaction, and a running tallyd has it before `tally`
 * returns (tally_main.c), a lowered override included.
 */
#include "tally_cli.h"
#include "tenant_config.h"

#include <string.h>
#include <time.h>

void
cli_format_time(int64_t ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (ms == 0 || gmtime_r(&t, &tm) == NULL) {
        snprintf(buf, len, "-");
        return;
    }
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void
cli_account_of(const struct store_tenant *t, struct tenant_account *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", t->id);
    snprintf(out->plan, sizeof(out->plan), "%s", t->plan);
    out->billing_day = t->billing_day;
    out->overrides = t->overrides;
    out->limits = t->limits;
    out->link_limits = t->link_limits;
    out->concurrency = t->concurrency;
}

void
cli_tenant_of(const struct tenant_account *a, struct store_tenant *out)
{
    snprintf(out->id, sizeof(out->id), "%s", a->id);
    snprintf(out->plan, sizeof(out->plan), "%s", a->plan);
    out->billing_day = a->billing_day;
    out->overrides = a->overrides;
    out->limits = a->limits;
    out->link_limits = a->link_limits;
    out->concurrency = a->concurrency;
}

static int
print_tenant_row(void *ctx, const struct store_tenant *t)
{
    char created[32];

    (void)ctx;
    cli_format_time(t->created_ms, created, sizeof(created));
    printf("%-24s %-16s %6lld %s\n", t->id, t->plan, (long long)t->links_live, created);
    return TALLY_OK;
}

static void
print_limits_line(const char *what, const struct tenant_limits *ls, bool own)
{
    char text[TENANT_MAX_WINDOWS * TENANT_LIMIT_TEXT_MAX];

    tenant_limits_format(ls, text, sizeof(text));
    printf("%s: %s (%s)\n", what, text[0] != '\0' ? text : "none", own ? "override" : "plan");
}

static int
tenant_show(store_db *db, const char *id)
{
    struct store_tenant t;
    struct tenant_plan plan, eff;
    char created[32];
    int rc = store_tenant_get(db, id, &t);

    if (rc == TALLY_OK)
        rc = store_plan_get(db, t.plan, &plan);
    if (rc != TALLY_OK)
        return cli_store_fail(rc, id);
    store_tenant_effective(&t, &plan, &eff);
    cli_format_time(t.created_ms, created, sizeof(created));
    printf("tenant: %s\nplan: %s\nbilling day: %lld\nlive links: %lld\ncreated: %s\n", t.id, t.plan,
           (long long)t.billing_day, (long long)t.links_live, created);
    print_limits_line("limits", &eff.limits, t.overrides & STORE_OVR_LIMITS);
    print_limits_line("link limits", &eff.link_limits, t.overrides & STORE_OVR_LINK_LIMITS);
    printf("concurrency: %lld (%s)\n", (long long)eff.concurrency,
           t.overrides & STORE_OVR_CONCURRENCY ? "override" : "plan");
    return EXIT_OK;
}

/* What a move to another plan checks in each link of the tenant: its endpoint restrictions
 * must have a policy under the new plan. */
struct plan_check {
    store_db *db;
    const char *plan;
    char tail[160]; /* ends the line printed */
    int code;       /* EXIT_OK until a link fails (printed) */
};

static int
check_link_plan(void *ctx, const struct store_link *l)
{
    struct plan_check *pc = ctx;

    if (l->revoked_ms != 0 || l->endpoints[0] == '\0' || pc->code != EXIT_OK)
        return TALLY_OK;
    pc->code = cli_link_check_endpoints(pc->db, pc->plan, l->endpoints, pc->tail);
    return TALLY_OK;
}

int
cli_tenant_plan_check(store_db *db, const char *id, const char *plan, const char *tail, int *rc)
{
    struct plan_check pc = {db, plan, "", EXIT_OK};
    struct tenant_plan p;
    int64_t live = 0;

    *rc = store_plan_get(db, plan, &p);
    if (*rc == TALLY_ENOTFOUND)
        return cli_fail(EXIT_FAIL, "plan %s: not found%s", plan, tail);
    if (*rc == TALLY_OK)
        *rc = store_link_live_count(db, id, cli_now_ms(), &live);
    if (*rc != TALLY_OK)
        return EXIT_OK;
    if (live > (p.max_links > 0 ? p.max_links : TENANT_MAX_LINKS))
        return cli_fail(EXIT_FAIL,
                        "tenant %s has %lld live links, more than plan %s allows (--max-links "
                        "%lld): revoke some first%s",
                        id, (long long)live, plan, (long long)p.max_links, tail);
    snprintf(pc.tail, sizeof(pc.tail), " (a link of tenant %s is restricted to it)%s", id, tail);
    *rc = store_link_each(db, id, check_link_plan, &pc);
    return *rc != TALLY_OK ? EXIT_OK : pc.code;
}

/* `tally tenant set ID --plan PLAN`, inside the transaction. */
static int
tenant_set_plan(store_db *db, const char *id, const char *plan, int *rc)
{
    int code = cli_tenant_plan_check(db, id, plan, "", rc);

    if (code == EXIT_OK && *rc == TALLY_OK)
        *rc = store_tenant_set_plan(db, id, plan);
    return code;
}

/* The options of `tenant add` and `tenant set`. */
struct tenant_args {
    const char *id;
    const char *plan;        /* NULL: unchanged */
    int64_t billing_day;     /* 0: unchanged (add: 1) */
    bool reset;              /* drop every override first */
    struct store_tenant ovr; /* overrides given: bits and values */
};

static int
add_override_limit(struct tenant_limits *ls, const char *opt, const char *v)
{
    struct tenant_limit l;

    if (tenant_limit_parse(v, &l) != TALLY_OK)
        return cli_fail(EXIT_USAGE,
                        "invalid limit '%.80s' for %s: use N/PERIOD, N from 1 to 2^32, PERIOD "
                        "up to 365d in s, m, h or d, or month (e.g. 600/1m, 100000/month)",
                        v, opt);
    if (tenant_limits_add(ls, &l) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "%s '%.80s': at most %d limits, each with a different period",
                        opt, v, TENANT_MAX_WINDOWS);
    return EXIT_OK;
}

static int
tenant_option(struct cli *c, int *i, bool set, struct tenant_args *a)
{
    char err[256];
    bool missing = false;
    const char *v;
    int64_t k = 0;

    if ((v = tenant_opt_value(c->argc, c->argv, i, "--plan", &missing)) != NULL) {
        if (tenant_name_check("plan", v, err, sizeof(err)) != TALLY_OK)
            return cli_fail(EXIT_USAGE, "%s", err);
        a->plan = v;
    } else if ((v = tenant_opt_value(c->argc, c->argv, i, "--billing-day", &missing)) != NULL) {
        if (tenant_billing_day_parse(v, &a->billing_day) != TALLY_OK)
            return cli_fail(EXIT_USAGE,
                            "invalid --billing-day '%.80s': a day of the month from 1 to 28", v);
    } else if (!set) {
        return cli_fail(EXIT_USAGE, missing ? "%.80s needs a value" : "unexpected argument '%.80s'",
                        c->argv[*i]);
    } else if ((v = tenant_opt_value(c->argc, c->argv, i, "--limit", &missing)) != NULL) {
        a->ovr.overrides |= STORE_OVR_LIMITS;
        return add_override_limit(&a->ovr.limits, "--limit", v);
    } else if ((v = tenant_opt_value(c->argc, c->argv, i, "--link-limit", &missing)) != NULL) {
        a->ovr.overrides |= STORE_OVR_LINK_LIMITS;
        return add_override_limit(&a->ovr.link_limits, "--link-limit", v);
    } else if ((v = tenant_opt_value(c->argc, c->argv, i, "--concurrency", &missing)) != NULL) {
        if (tenant_cost_parse(v, &k) != TALLY_OK || k > TENANT_CONCURRENCY_MAX)
            return cli_fail(EXIT_USAGE,
                            "invalid --concurrency '%.80s': a whole number from 1 to %d", v,
                            TENANT_CONCURRENCY_MAX);
        a->ovr.overrides |= STORE_OVR_CONCURRENCY;
        a->ovr.concurrency = k;
    } else if (strcmp(c->argv[*i], "--reset") == 0) {
        a->reset = true;
    } else {
        return cli_fail(EXIT_USAGE, missing ? "%.80s needs a value" : "unexpected argument '%.80s'",
                        c->argv[*i]);
    }
    return EXIT_OK;
}

static int
tenant_args_parse(struct cli *c, const char *sub, struct tenant_args *a)
{
    char err[256];
    bool add = strcmp(sub, "add") == 0, set = strcmp(sub, "set") == 0;

    memset(a, 0, sizeof(*a));
    if (c->argc < 2 || tenant_name_check("tenant", c->argv[1], err, sizeof(err)) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "%s",
                        c->argc < 2 ? "missing tenant id (see tally --help)" : err);
    a->id = c->argv[1];
    for (int i = 2; i < c->argc; i++) {
        int code = add || set ? tenant_option(c, &i, set, a)
                              : cli_fail(EXIT_USAGE, "unexpected argument '%.80s'", c->argv[i]);
        if (code != EXIT_OK)
            return code;
    }
    if (add && a->plan == NULL)
        return cli_fail(EXIT_USAGE, "usage: tally tenant add ID --plan PLAN [--billing-day D]");
    if (set && a->plan == NULL && a->billing_day == 0 && !a->reset && a->ovr.overrides == 0)
        return cli_fail(EXIT_USAGE,
                        "usage: tally tenant set ID [--plan PLAN] [--billing-day D] [--limit "
                        "N/PERIOD ...] [--link-limit N/PERIOD ...] [--concurrency K] [--reset]");
    return EXIT_OK;
}

/* `tenant set`'s overrides, inside the transaction: --reset drops the tenant's, the options
 * given replace theirs, the others stay. */
static int
tenant_set_overrides(store_db *db, const struct tenant_args *a)
{
    struct store_tenant t;
    int rc = store_tenant_get(db, a->id, &t);

    if (rc != TALLY_OK || (!a->reset && a->ovr.overrides == 0))
        return rc;
    if (a->reset)
        t.overrides = 0;
    t.overrides |= a->ovr.overrides;
    if (a->ovr.overrides & STORE_OVR_LIMITS)
        t.limits = a->ovr.limits;
    if (a->ovr.overrides & STORE_OVR_LINK_LIMITS)
        t.link_limits = a->ovr.link_limits;
    if (a->ovr.overrides & STORE_OVR_CONCURRENCY)
        t.concurrency = a->ovr.concurrency;
    return store_tenant_set_overrides(db, &t);
}

/* add or set inside one transaction; EXIT_OK with *rc the store's result, or a printed exit. */
static int
tenant_write(store_db *db, const char *sub, const struct tenant_args *a, int *rc)
{
    struct store_tenant t;
    int code = EXIT_OK;

    if (strcmp(sub, "add") == 0) {
        struct tenant_plan p;
        *rc = store_plan_get(db, a->plan, &p);
        if (*rc == TALLY_ENOTFOUND)
            return cli_fail(EXIT_FAIL, "plan %s: not found", a->plan);
        if (*rc == TALLY_OK)
            *rc = store_tenant_add(db, a->id, a->plan, cli_now_ms());
    } else {
        *rc = store_tenant_get(db, a->id, &t);
        if (*rc == TALLY_ENOTFOUND)
            return cli_fail(EXIT_FAIL, "tenant %s: not found; nothing changed", a->id);
        if (*rc == TALLY_OK && a->plan != NULL)
            code = tenant_set_plan(db, a->id, a->plan, rc);
        if (code == EXIT_OK && *rc == TALLY_OK)
            *rc = tenant_set_overrides(db, a);
    }
    if (code == EXIT_OK && *rc == TALLY_OK && a->billing_day != 0)
        *rc = store_tenant_set_billing_day(db, a->id, a->billing_day);
    return code;
}

int
cli_tenant(struct cli *c)
{
    const char *sub = c->argc > 0 ? c->argv[0] : "";
    struct tenant_args a;
    store_db *db = NULL;
    int code;
    int rc = TALLY_OK;

    if (strcmp(sub, "list") == 0) {
        if (c->argc != 1)
            return cli_fail(EXIT_USAGE, "usage: tally tenant list");
    } else if (strcmp(sub, "add") == 0 || strcmp(sub, "set") == 0 || strcmp(sub, "show") == 0 ||
               strcmp(sub, "remove") == 0) {
        code = tenant_args_parse(c, sub, &a);
        if (code != EXIT_OK)
            return code;
    } else {
        return cli_fail(EXIT_USAGE, "usage: tally tenant add|set|list|show|remove ...");
    }
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        return code;
    if (strcmp(sub, "list") == 0) {
        rc = store_tenant_each(db, print_tenant_row, NULL);
        code = rc != TALLY_OK ? cli_store_fail(rc, "tenant list") : EXIT_OK;
    } else if (strcmp(sub, "show") == 0) {
        code = tenant_show(db, a.id);
    } else if ((rc = store_db_begin(db)) != TALLY_OK) {
        code = cli_store_fail(rc, sub);
    } else {
        code = strcmp(sub, "remove") == 0 ? (rc = store_tenant_remove(db, a.id), EXIT_OK)
                                          : tenant_write(db, sub, &a, &rc);
        if (code != EXIT_OK) {
            store_db_rollback(db);
        } else {
            rc = store_db_end(db, rc);
            code = rc != TALLY_OK ? cli_store_fail(rc, a.id) : EXIT_OK;
        }
    }
    store_db_close(db);
    return code;
}

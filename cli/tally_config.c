/*
 * Plans and endpoint policies: `plan`, `endpoint`, `apply` and `export`.
 * The configuration file is the command line written down: one `plan NAME
 * ...` or `endpoint NAME ...` line per item, with exactly the options of
 * `plan set` and `endpoint set`, so one parser serves both and `export`
 * prints what `apply` reads.
 */
#include "tally_cli.h"
#include "tenant_config.h"

#include <errno.h>
#include <string.h>

static int
print_plan(void *ctx, const struct tenant_plan *p)
{
    char line[TENANT_CONFIG_TEXT_MAX];

    tenant_plan_format(p, line, sizeof(line));
    fprintf(ctx, "%s\n", line);
    return TALLY_OK;
}

static int
print_endpoint(void *ctx, const struct tenant_endpoint *e)
{
    char line[TENANT_CONFIG_TEXT_MAX];

    tenant_endpoint_format(e, line, sizeof(line));
    fprintf(ctx, "%s\n", line);
    return TALLY_OK;
}

/* Runs `fn` inside one write transaction; prints and maps the error. */
static int
write_one(store_db *db, int rc, const char *what)
{
    rc = store_db_end(db, rc);
    if (rc != TALLY_OK)
        return cli_store_fail(rc, what);
    return EXIT_OK;
}

/* endpoint set inside its transaction: a new name beyond TENANT_MAX_ENDPOINTS
 * names in the deployment is refused (a supervisor could not hold them all). */
static int
endpoint_put_capped(store_db *db, const struct tenant_endpoint *e)
{
    int64_t names = 0;
    int64_t other = 0;
    int rc = store_endpoint_key_other(db, e, &other);

    if (rc == TALLY_OK && other > 0) {
        store_db_rollback(db);
        return cli_fail(EXIT_USAGE,
                        "endpoint %s is keyed by %s in another policy: every policy of one "
                        "endpoint has the same --key; nothing changed",
                        e->name, e->key == TENANT_KEY_CALLER ? "token" : "caller");
    }
    if (rc == TALLY_OK)
        rc = store_endpoint_put(db, e);
    if (rc == TALLY_OK)
        rc = store_endpoint_names(db, &names);
    if (rc == TALLY_OK && names > TENANT_MAX_ENDPOINTS) {
        store_db_rollback(db);
        return cli_fail(EXIT_FAIL,
                        "endpoint %s: %d endpoint names are defined, the most a tenant may have: "
                        "remove one first; nothing changed",
                        e->name, TENANT_MAX_ENDPOINTS);
    }
    return write_one(db, rc, "endpoint set");
}

int
cli_plan(struct cli *c)
{
    char err[256];
    struct tenant_plan p;
    store_db *db = NULL;
    const char *sub = c->argc > 0 ? c->argv[0] : "";
    int code;
    int rc;

    if (strcmp(sub, "set") == 0) {
        rc = tenant_plan_parse_args(c->argc - 1, c->argv + 1, &p, err, sizeof(err));
        if (rc != TALLY_OK)
            return cli_fail(EXIT_USAGE, "%s", err);
    } else if (strcmp(sub, "show") == 0 || strcmp(sub, "remove") == 0) {
        if (c->argc != 2)
            return cli_fail(EXIT_USAGE, "usage: tally plan %s NAME", sub);
        if (tenant_name_check("plan", c->argv[1], err, sizeof(err)) != TALLY_OK)
            return cli_fail(EXIT_USAGE, "%s", err);
    } else if (strcmp(sub, "list") == 0) {
        if (c->argc != 1)
            return cli_fail(EXIT_USAGE, "usage: tally plan list");
    } else {
        return cli_fail(EXIT_USAGE, "usage: tally plan set|list|show|remove ...");
    }
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        return code;
    if (strcmp(sub, "set") == 0) {
        rc = store_db_begin(db);
        code = rc != TALLY_OK ? cli_store_fail(rc, "plan set")
                              : write_one(db, store_plan_put(db, &p), "plan set");
    } else if (strcmp(sub, "remove") == 0) {
        rc = store_db_begin(db);
        code = rc != TALLY_OK ? cli_store_fail(rc, "plan remove")
                              : write_one(db, store_plan_delete(db, c->argv[1]), c->argv[1]);
    } else if (strcmp(sub, "show") == 0) {
        rc = store_plan_get(db, c->argv[1], &p);
        code = rc != TALLY_OK ? cli_store_fail(rc, c->argv[1]) : print_plan(stdout, &p);
    } else {
        rc = store_plan_each(db, print_plan, stdout);
        code = rc != TALLY_OK ? cli_store_fail(rc, "plan list") : EXIT_OK;
    }
    store_db_close(db);
    return code;
}

/* `endpoint show|remove NAME [--plan PLAN]` */
static int
endpoint_target(struct cli *c, char *plan, char *err, size_t errlen)
{
    int i;

    plan[0] = '\0';
    if (c->argc < 2 || tenant_name_check("endpoint", c->argv[1], err, errlen) != TALLY_OK) {
        if (c->argc < 2)
            snprintf(err, errlen, "usage: tally endpoint %s NAME [--plan PLAN]", c->argv[0]);
        return TALLY_EINVAL;
    }
    for (i = 2; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--plan", &missing);
        if (v == NULL) {
            snprintf(err, errlen, "unexpected argument '%.80s'", c->argv[i]);
            return TALLY_EINVAL;
        }
        if (tenant_name_check("plan", v, err, errlen) != TALLY_OK)
            return TALLY_ENAME;
        snprintf(plan, TENANT_NAME_MAX + 1, "%s", v);
    }
    return TALLY_OK;
}

int
cli_endpoint(struct cli *c)
{
    char err[256];
    char plan[TENANT_NAME_MAX + 1] = "";
    struct tenant_endpoint e;
    store_db *db = NULL;
    const char *sub = c->argc > 0 ? c->argv[0] : "";
    int code;
    int rc;

    if (strcmp(sub, "set") == 0) {
        rc = tenant_endpoint_parse_args(c->argc - 1, c->argv + 1, &e, err, sizeof(err));
        if (rc != TALLY_OK)
            return cli_fail(EXIT_USAGE, "%s", err);
    } else if (strcmp(sub, "show") == 0 || strcmp(sub, "remove") == 0) {
        if (endpoint_target(c, plan, err, sizeof(err)) != TALLY_OK)
            return cli_fail(EXIT_USAGE, "%s", err);
    } else if (strcmp(sub, "list") == 0) {
        if (c->argc != 1)
            return cli_fail(EXIT_USAGE, "usage: tally endpoint list");
    } else {
        return cli_fail(EXIT_USAGE, "usage: tally endpoint set|list|show|remove ...");
    }
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        return code;
    if (strcmp(sub, "set") == 0) {
        struct tenant_plan p;
        rc = e.plan[0] != '\0' ? store_plan_get(db, e.plan, &p) : TALLY_OK;
        if (rc == TALLY_ENOTFOUND)
            code = cli_fail(EXIT_FAIL, "plan %s: not found", e.plan);
        else if (rc == TALLY_OK && (rc = store_db_begin(db)) == TALLY_OK)
            code = endpoint_put_capped(db, &e);
        else
            code = cli_store_fail(rc, "endpoint set");
    } else if (strcmp(sub, "remove") == 0) {
        rc = store_db_begin(db);
        code = rc != TALLY_OK
                   ? cli_store_fail(rc, "endpoint remove")
                   : write_one(db, store_endpoint_delete(db, plan, c->argv[1]), c->argv[1]);
    } else if (strcmp(sub, "show") == 0) {
        rc = store_endpoint_get(db, plan, c->argv[1], &e);
        code = rc != TALLY_OK ? cli_store_fail(rc, c->argv[1]) : print_endpoint(stdout, &e);
    } else {
        rc = store_endpoint_each(db, print_endpoint, stdout);
        code = rc != TALLY_OK ? cli_store_fail(rc, "endpoint list") : EXIT_OK;
    }
    store_db_close(db);
    return code;
}

static int
print_tenant(void *ctx, const struct store_tenant *t)
{
    char line[TENANT_CONFIG_TEXT_MAX];
    struct tenant_account a;

    cli_account_of(t, &a);
    tenant_account_format(&a, line, sizeof(line));
    fprintf(ctx, "%s\n", line);
    return TALLY_OK;
}

int
cli_export(struct cli *c)
{
    store_db *db = NULL;
    int code;
    int rc;

    if (c->argc != 0)
        return cli_fail(EXIT_USAGE, "export takes no arguments");
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        return code;
    printf("# tally configuration: plans, endpoint policies, tenants (tally apply FILE)\n");
    rc = store_plan_each(db, print_plan, stdout);
    if (rc == TALLY_OK)
        rc = store_endpoint_each(db, print_endpoint, stdout);
    if (rc == TALLY_OK)
        rc = store_tenant_each(db, print_tenant, stdout);
    store_db_close(db);
    return rc != TALLY_OK ? cli_store_fail(rc, "export") : EXIT_OK;
}

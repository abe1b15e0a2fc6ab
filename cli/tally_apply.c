/*
 * `tally apply FILE [--dry-run]`: makes the stored plans and endpoint policies
 * equal to the file's, and the tenants it names (their plan, billing day and
 * overrides), in one transaction. The file is parsed and validated as
 * a whole first; any error (a bad line, a duplicate, a plan still used by a
 * tenant) rolls everything back, so an invalid file changes nothing. Each
 * change is printed as one line (`create plan pro ...`, `update ...`,
 * `delete ...`); with --dry-run the transaction is rolled back.
 */
#include "tally_cli.h"
#include "tenant_config.h"

#include <errno.h>
#include <string.h>

struct current {
    struct tenant_config cfg; /* what the database holds now */
    size_t cap_plans;
    size_t cap_endpoints;
};

static int
collect_plan(void *ctx, const struct tenant_plan *p)
{
    struct current *cur = ctx;

    if (cur->cfg.n_plans == cur->cap_plans) {
        size_t cap = cur->cap_plans == 0 ? 16 : cur->cap_plans * 2;
        void *n = tally_realloc(cur->cfg.plans, cap * sizeof(*p));
        if (n == NULL)
            return TALLY_ENOMEM;
        cur->cfg.plans = n;
        cur->cap_plans = cap;
    }
    cur->cfg.plans[cur->cfg.n_plans++] = *p;
    return TALLY_OK;
}

static int
collect_endpoint(void *ctx, const struct tenant_endpoint *e)
{
    struct current *cur = ctx;

    if (cur->cfg.n_endpoints == cur->cap_endpoints) {
        size_t cap = cur->cap_endpoints == 0 ? 16 : cur->cap_endpoints * 2;
        void *n = tally_realloc(cur->cfg.endpoints, cap * sizeof(*e));
        if (n == NULL)
            return TALLY_ENOMEM;
        cur->cfg.endpoints = n;
        cur->cap_endpoints = cap;
    }
    cur->cfg.endpoints[cur->cfg.n_endpoints++] = *e;
    return TALLY_OK;
}

static int
read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n;

    *out = NULL;
    if (f == NULL)
        return cli_fail(EXIT_FAIL, "%s: %s", path, strerror(errno));
    buf = tally_malloc(TENANT_CONFIG_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        return cli_fail(EXIT_IOERR, "out of memory");
    }
    n = fread(buf, 1, TENANT_CONFIG_FILE_MAX + 1, f);
    if (ferror(f)) {
        fclose(f);
        tally_free(buf);
        return cli_fail(EXIT_FAIL, "%s: read error", path);
    }
    fclose(f);
    *out = buf;
    *len = n;
    return EXIT_OK;
}

/* Plans: create or update what the file has, in file order. */
static int
apply_plans(store_db *db, const struct tenant_config *want)
{
    char now_line[TENANT_CONFIG_TEXT_MAX];
    char was_line[TENANT_CONFIG_TEXT_MAX];
    struct tenant_plan was;
    size_t i;
    int rc;

    for (i = 0; i < want->n_plans; i++) {
        const struct tenant_plan *p = &want->plans[i];
        rc = store_plan_get(db, p->name, &was);
        if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
            return rc;
        tenant_plan_format(p, now_line, sizeof(now_line));
        if (rc == TALLY_OK) {
            tenant_plan_format(&was, was_line, sizeof(was_line));
            if (strcmp(was_line, now_line) == 0)
                continue;
        }
        printf("%s %s\n", rc == TALLY_OK ? "update" : "create", now_line);
        rc = store_plan_put(db, p);
        if (rc != TALLY_OK)
            return rc;
    }
    return TALLY_OK;
}

static int
apply_endpoints(store_db *db, const struct tenant_config *want)
{
    char now_line[TENANT_CONFIG_TEXT_MAX];
    char was_line[TENANT_CONFIG_TEXT_MAX];
    struct tenant_endpoint was;
    size_t i;
    int rc;

    for (i = 0; i < want->n_endpoints; i++) {
        const struct tenant_endpoint *e = &want->endpoints[i];
        rc = store_endpoint_get(db, e->plan, e->name, &was);
        if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
            return rc;
        tenant_endpoint_format(e, now_line, sizeof(now_line));
        if (rc == TALLY_OK) {
            tenant_endpoint_format(&was, was_line, sizeof(was_line));
            if (strcmp(was_line, now_line) == 0)
                continue;
        }
        printf("%s %s\n", rc == TALLY_OK ? "update" : "create", now_line);
        rc = store_endpoint_put(db, e);
        if (rc != TALLY_OK)
            return rc;
    }
    return TALLY_OK;
}

/* Tenants: create the file's that are missing, give the others the file's plan, billing day
 * and overrides (what a line does not override goes back to the plan's). Tenants the file does
 * not name are left alone: they hold links, `tally tenant remove` removes them. */
static int
apply_tenants(store_db *db, const struct tenant_config *want, bool *moved)
{
    char now_line[TENANT_CONFIG_TEXT_MAX];
    char was_line[TENANT_CONFIG_TEXT_MAX];

    for (size_t i = 0; i < want->n_tenants; i++) {
        const struct tenant_account *a = &want->tenants[i];
        struct store_tenant t;
        struct tenant_account was;
        int rc = store_tenant_get(db, a->id, &t);

        if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
            return rc;
        tenant_account_format(a, now_line, sizeof(now_line));
        if (rc == TALLY_OK) {
            cli_account_of(&t, &was);
            tenant_account_format(&was, was_line, sizeof(was_line));
            if (strcmp(was_line, now_line) == 0)
                continue;
        }
        printf("%s %s\n", rc == TALLY_OK ? "update" : "create", now_line);
        if (rc == TALLY_ENOTFOUND)
            rc = store_tenant_add(db, a->id, a->plan, cli_now_ms());
        else if (strcmp(t.plan, a->plan) != 0) {
            moved[i] = true;
            rc = store_tenant_set_plan(db, a->id, a->plan);
        }
        if (rc == TALLY_OK)
            rc = store_tenant_set_billing_day(db, a->id, a->billing_day);
        if (rc == TALLY_OK) {
            cli_tenant_of(a, &t);
            rc = store_tenant_set_overrides(db, &t);
        }
        if (rc != TALLY_OK)
            return rc;
    }
    return TALLY_OK;
}

/* The tenants the file moves to another plan (`moved`, set by apply_tenants) must fit it as
 * `tally tenant set --plan` requires, checked once the file's plans, endpoints and deletions
 * are in place: the first that does not is printed and the transaction rolled back. */
static int
check_moves(store_db *db, const struct tenant_config *want, const bool *moved, const char *path,
            int *rc)
{
    char tail[4200];

    snprintf(tail, sizeof(tail), " (%s); nothing changed", path);
    for (size_t i = 0; i < want->n_tenants; i++) {
        int code;

        if (!moved[i])
            continue;
        code = cli_tenant_plan_check(db, want->tenants[i].id, want->tenants[i].plan, tail, rc);
        if (code != EXIT_OK || *rc != TALLY_OK)
            return code == EXIT_OK ? EXIT_OK : EXIT_DATAERR;
    }
    return EXIT_OK;
}

/* Deletes what the database has and the file does not. */
static int
apply_deletes(store_db *db, const struct tenant_config *want, const struct tenant_config *have,
              const char **in_use)
{
    size_t i;
    size_t j;
    int rc;

    for (i = 0; i < have->n_endpoints; i++) {
        const struct tenant_endpoint *e = &have->endpoints[i];
        bool keep = false;
        for (j = 0; j < want->n_endpoints && !keep; j++)
            keep = strcmp(want->endpoints[j].name, e->name) == 0 &&
                   strcmp(want->endpoints[j].plan, e->plan) == 0;
        if (keep)
            continue;
        printf("delete endpoint %s%s%s\n", e->name, e->plan[0] != '\0' ? " --plan " : "", e->plan);
        rc = store_endpoint_delete(db, e->plan, e->name);
        if (rc != TALLY_OK)
            return rc;
    }
    for (i = 0; i < have->n_plans; i++) {
        bool keep = false;
        for (j = 0; j < want->n_plans && !keep; j++)
            keep = strcmp(want->plans[j].name, have->plans[i].name) == 0;
        if (keep)
            continue;
        printf("delete plan %s\n", have->plans[i].name);
        rc = store_plan_delete(db, have->plans[i].name);
        if (rc == TALLY_EINUSE)
            *in_use = have->plans[i].name;
        if (rc != TALLY_OK)
            return rc;
    }
    return TALLY_OK;
}

/* True when the file names more than TENANT_MAX_ENDPOINTS distinct endpoints. */
static bool
endpoint_names_over(const struct tenant_config *want)
{
    const char *seen[TENANT_MAX_ENDPOINTS];
    size_t n = 0;

    for (size_t i = 0; i < want->n_endpoints; i++) {
        size_t j = 0;
        while (j < n && strcmp(seen[j], want->endpoints[i].name) != 0)
            j++;
        if (j < n)
            continue;
        if (n == TENANT_MAX_ENDPOINTS)
            return true;
        seen[n++] = want->endpoints[i].name;
    }
    return false;
}

int
cli_apply(struct cli *c)
{
    struct tenant_config want = {0};
    struct current have = {0};
    bool *moved = NULL;
    const char *path = NULL;
    const char *in_use = NULL;
    store_db *db = NULL;
    char err[512];
    char *text = NULL;
    size_t len = 0;
    bool dry = false;
    int code = EXIT_OK;
    int rc;
    int i;

    for (i = 0; i < c->argc; i++) {
        if (strcmp(c->argv[i], "--dry-run") == 0)
            dry = true;
        else if (path == NULL && strncmp(c->argv[i], "--", 2) != 0)
            path = c->argv[i];
        else
            return cli_fail(EXIT_USAGE, "usage: tally apply FILE [--dry-run]");
    }
    if (path == NULL)
        return cli_fail(EXIT_USAGE, "usage: tally apply FILE [--dry-run]");
    code = read_file(path, &text, &len);
    if (code != EXIT_OK)
        return code;
    rc = tenant_config_parse(text, len, &want, err, sizeof(err));
    tally_free(text);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_DATAERR, "%s: %s; nothing changed", path, err);
    if (endpoint_names_over(&want)) {
        tenant_config_release(&want);
        return cli_fail(EXIT_DATAERR,
                        "%s: more than %d endpoint names, the most a tenant may have; nothing "
                        "changed",
                        path, TENANT_MAX_ENDPOINTS);
    }
    moved = tally_calloc(want.n_tenants + 1, sizeof(*moved));
    if (moved == NULL) {
        code = cli_fail(EXIT_IOERR, "out of memory");
        goto out;
    }
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        goto out;
    rc = store_db_begin(db);
    if (rc == TALLY_OK)
        rc = store_plan_each(db, collect_plan, &have);
    if (rc == TALLY_OK)
        rc = store_endpoint_each(db, collect_endpoint, &have);
    if (rc == TALLY_OK)
        rc = apply_plans(db, &want);
    if (rc == TALLY_OK)
        rc = apply_endpoints(db, &want);
    if (rc == TALLY_OK)
        rc = apply_tenants(db, &want, moved);
    if (rc == TALLY_OK)
        rc = apply_deletes(db, &want, &have.cfg, &in_use);
    if (rc == TALLY_OK && in_use == NULL)
        code = check_moves(db, &want, moved, path, &rc);
    fflush(stdout);
    if (code != EXIT_OK) {
        store_db_rollback(db); /* the line is printed */
        goto out;
    }
    if (rc == TALLY_OK && !dry) {
        rc = store_db_commit(db);
    } else {
        store_db_rollback(db);
    }
    if (in_use != NULL)
        code = cli_fail(EXIT_DATAERR, "%s: plan %s is still used by tenants; nothing changed", path,
                        in_use);
    else if (rc != TALLY_OK)
        code = cli_store_fail(rc, "apply");
    else if (dry)
        printf("dry run: nothing changed\n");
out:
    tally_free(moved);
    store_db_close(db);
    tenant_config_release(&want);
    tenant_config_release(&have.cfg);
    return code;
}

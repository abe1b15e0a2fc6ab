/*
 * Links: `link create|revoke|list`. A token is printed once, at creation, and
 * wiped from memory right after; only its keyed hash is stored. Nothing lists
 * or logs tokens.
 */
#include "tally_cli.h"
#include "tenant_config.h"

#include <sodium.h>
#include <string.h>

struct link_args {
    const char *tenant;
    char endpoints[STORE_LINK_ENDPOINTS_MAX];
    int64_t expires_in_ms;
    bool json;
};

static int
link_create_args(struct cli *c, struct link_args *a)
{
    char err[256];
    size_t used = 0;
    int i;

    memset(a, 0, sizeof(*a));
    if (c->argc < 2 || tenant_name_check("tenant", c->argv[1], err, sizeof(err)) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "%s", c->argc < 2 ? "missing tenant id" : err);
    a->tenant = c->argv[1];
    for (i = 2; i < c->argc; i++) {
        bool missing = false;
        const char *v;
        if ((v = tenant_opt_value(c->argc, c->argv, &i, "--endpoint", &missing)) != NULL) {
            if (tenant_name_check("endpoint", v, err, sizeof(err)) != TALLY_OK)
                return cli_fail(EXIT_USAGE, "%s", err);
            if (used + strlen(v) + 2 > sizeof(a->endpoints))
                return cli_fail(EXIT_USAGE, "too many --endpoint restrictions");
            used += (size_t)snprintf(a->endpoints + used, sizeof(a->endpoints) - used, "%s%s",
                                     used > 0 ? "," : "", v);
        } else if ((v = tenant_opt_value(c->argc, c->argv, &i, "--expires", &missing)) != NULL) {
            if (tenant_duration_parse(v, &a->expires_in_ms) != TALLY_OK)
                return cli_fail(EXIT_USAGE,
                                "invalid --expires '%.80s': a duration like 90s, 15m, 12h, 30d", v);
        } else if (strcmp(c->argv[i], "--json") == 0) {
            a->json = true;
        } else {
            if (missing)
                return cli_fail(EXIT_USAGE, "%s needs a value", c->argv[i]);
            return cli_fail(EXIT_USAGE, "unexpected argument '%.80s'", c->argv[i]);
        }
    }
    return EXIT_OK;
}

/* Every restricted endpoint must have a policy for the tenant's plan. */
int
cli_link_check_endpoints(store_db *db, const char *plan, const char *list, const char *tail)
{
    char name[TENANT_NAME_MAX + 1];
    struct tenant_endpoint e;
    const char *p = list;

    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        int rc;
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        rc = store_endpoint_resolve(db, plan, name, &e);
        if (rc == TALLY_ENOTFOUND)
            return cli_fail(EXIT_FAIL, "endpoint %s is not defined for plan %s%s", name, plan,
                            tail);
        if (rc != TALLY_OK)
            return cli_store_fail(rc, name);
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return EXIT_OK;
}

/* Inside link create's transaction: room under the plan's --max-links for one
 * more live link? EXIT_OK (with *rc a store error, if any) or EXIT_FAIL, printed. */
static int
link_room(store_db *db, const struct store_tenant *t, int64_t now_ms, int *rc)
{
    struct tenant_plan p;
    int64_t live = 0;
    int64_t cap;

    *rc = store_plan_get(db, t->plan, &p);
    if (*rc == TALLY_OK)
        *rc = store_link_live_count(db, t->id, now_ms, &live);
    if (*rc != TALLY_OK)
        return EXIT_OK;
    cap = p.max_links > 0 ? p.max_links : TENANT_MAX_LINKS;
    if (live < cap)
        return EXIT_OK;
    return cli_fail(EXIT_FAIL,
                    "tenant %s has %lld live links, the cap of plan %s (--max-links %lld): revoke "
                    "one first; nothing created",
                    t->id, (long long)live, p.name, (long long)cap);
}

static int
link_create(struct cli *c)
{
    char token[TENANT_TOKEN_LEN + 1];
    unsigned char *key = NULL;
    struct store_tenant t;
    struct store_link l;
    struct link_args a;
    store_db *db = NULL;
    int code = link_create_args(c, &a);
    int rc;

    if (code != EXIT_OK)
        return code;
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        return code;
    rc = store_tenant_get(db, a.tenant, &t);
    if (rc != TALLY_OK) {
        code = rc == TALLY_ENOTFOUND ? cli_fail(EXIT_FAIL, "tenant %s: not found", a.tenant)
                                     : cli_store_fail(rc, a.tenant);
        goto out;
    }
    code = cli_link_check_endpoints(db, t.plan, a.endpoints, "");
    if (code != EXIT_OK)
        goto out;
    rc = store_key_load(c->data, &key);
    if (rc != TALLY_OK) {
        code = cli_fail(EXIT_CONFIG, "%s (%s/%s)", tally_strerror(rc), c->data, STORE_KEY_FILE);
        goto out;
    }
    memset(&l, 0, sizeof(l));
    tenant_link_id_new(l.id);
    tenant_token_new(token);
    if (tenant_token_hash(key, token, l.hash) != TALLY_OK) {
        code = cli_fail(EXIT_IOERR, "token hashing failed");
        goto out;
    }
    snprintf(l.tenant, sizeof(l.tenant), "%s", a.tenant);
    snprintf(l.endpoints, sizeof(l.endpoints), "%s", a.endpoints);
    l.created_ms = cli_now_ms();
    l.expires_ms = a.expires_in_ms > 0 ? l.created_ms + a.expires_in_ms : 0;
    rc = store_db_begin(db);
    if (rc == TALLY_OK)
        code = link_room(db, &t, l.created_ms, &rc);
    if (code != EXIT_OK) {
        store_db_rollback(db);
        goto out;
    }
    if (rc == TALLY_OK)
        rc = store_link_insert(db, &l);
    rc = store_db_end(db, rc);
    if (rc != TALLY_OK) {
        code = cli_store_fail(rc, "link create");
        goto out;
    }
    if (a.json) {
        char expires[32];
        cli_format_time(l.expires_ms, expires, sizeof(expires));
        printf("{\"token\":\"%s\",\"id\":\"%s\",\"tenant\":\"%s\",\"expires\":%s%s%s}\n", token,
               l.id, l.tenant, l.expires_ms ? "\"" : "", l.expires_ms ? expires : "null",
               l.expires_ms ? "\"" : "");
    } else {
        printf("%s\n", token);
    }
    fflush(stdout);
out:
    sodium_memzero(token, sizeof(token));
    store_key_free(key);
    store_db_close(db);
    return code;
}

static int
link_revoke(struct cli *c)
{
    unsigned char hash[TENANT_HASH_BYTES];
    unsigned char *key = NULL;
    struct store_link l;
    store_db *db = NULL;
    const char *arg;
    int code;
    int rc;

    if (c->argc != 2)
        return cli_fail(EXIT_USAGE, "usage: tally link revoke TOKEN-OR-ID");
    arg = c->argv[1];
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        return code;
    if (tenant_link_id_valid(arg)) {
        rc = store_link_by_id(db, arg, &l);
    } else {
        rc = store_key_load(c->data, &key);
        if (rc == TALLY_OK)
            rc = tenant_token_hash(key, arg, hash);
        if (rc == TALLY_OK)
            rc = store_link_by_hash(db, hash, &l);
        sodium_memzero(hash, sizeof(hash));
    }
    if (rc == TALLY_ENOTFOUND || rc == TALLY_EINVAL) {
        code = cli_fail(EXIT_FAIL, "no such link");
    } else if (rc != TALLY_OK) {
        code = cli_store_fail(rc, "link revoke");
    } else {
        rc = store_db_begin(db);
        if (rc == TALLY_OK)
            rc = store_link_revoke(db, l.id, cli_now_ms());
        rc = store_db_end(db, rc);
        code = rc != TALLY_OK ? cli_store_fail(rc, "link revoke") : EXIT_OK;
        if (code == EXIT_OK)
            fprintf(stderr, "tally: revoked %s\n", l.id);
    }
    store_key_free(key);
    store_db_close(db);
    return code;
}

static int
print_link_row(void *ctx, const struct store_link *l)
{
    int64_t now_ms = *(const int64_t *)ctx;
    const char *status = l->revoked_ms != 0                                ? "revoked"
                         : (l->expires_ms != 0 && now_ms >= l->expires_ms) ? "expired"
                                                                           : "live";
    char created[32];
    char expires[32];

    cli_format_time(l->created_ms, created, sizeof(created));
    cli_format_time(l->expires_ms, expires, sizeof(expires));
    printf("%s %-7s %s %s %s\n", l->id, status, created, expires,
           l->endpoints[0] != '\0' ? l->endpoints : "*");
    return TALLY_OK;
}

static int
link_list(struct cli *c)
{
    struct store_tenant t;
    store_db *db = NULL;
    char err[256];
    int64_t now_ms = cli_now_ms();
    int code;
    int rc;

    if (c->argc != 2 || tenant_name_check("tenant", c->argv[1], err, sizeof(err)) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "%s", c->argc != 2 ? "usage: tally link list TENANT" : err);
    code = cli_open(c, &db);
    if (code != EXIT_OK)
        return code;
    rc = store_tenant_get(db, c->argv[1], &t);
    if (rc == TALLY_OK)
        rc = store_link_each(db, c->argv[1], print_link_row, &now_ms);
    store_db_close(db);
    return rc != TALLY_OK ? cli_store_fail(rc, c->argv[1]) : EXIT_OK;
}

int
cli_link(struct cli *c)
{
    const char *sub = c->argc > 0 ? c->argv[0] : "";

    if (strcmp(sub, "create") == 0)
        return link_create(c);
    if (strcmp(sub, "revoke") == 0)
        return link_revoke(c);
    if (strcmp(sub, "list") == 0)
        return link_list(c);
    return cli_fail(EXIT_USAGE, "usage: tally link create|revoke|list ...");
}

/*
 * `tally check TOKEN ENDPOINT [--cost C]`, decided in-process from the
 * configuration database. Auth comes first: nothing is read or written for a
 * budget until the token's keyed hash resolves to a live link allowed on the
 * endpoint; unknown, revoked, expired and not-allowed tokens get the same
 * answer. The decision runs inside one BEGIN IMMEDIATE transaction, so
 * concurrent checks from any number of processes are serialised by SQLite and
 * a window never admits more than its limit. A refusal rolls back: refused
 * requests are not charged.
 */
#include "tally_cli.h"
#include "tenant_config.h"
#include "tenant_count.h"

#include <sodium.h>
#include <string.h>

/* Persisted form of a slot table: header, then the held entries only. */
struct slot_blob {
    int64_t next_id;
    int64_t last_now_ms;
    int64_t held;
    struct tenant_slot v[TENANT_CONCURRENCY_MAX];
};

struct check_ctx {
    store_db *db;
    struct store_link link;
    struct store_tenant tenant;
    struct tenant_plan plan;
    struct tenant_endpoint ep;
    struct tenant_budget budgets[TENANT_PATH_MAX_BUDGETS];
    char keys[TENANT_PATH_MAX_BUDGETS][2 * TENANT_NAME_MAX + 40];
    struct tenant_path path;
    struct tenant_slot slot_v[TENANT_CONCURRENCY_MAX];
    struct tenant_slot_table slots;
    char slot_key[TENANT_LINK_ID_LEN + 8];
};

/* Adds a budget for `ls` (skipped when empty), loading its state by key. */
static int
add_budget(struct check_ctx *c, enum tenant_scope scope, enum tenant_algorithm alg,
           const struct tenant_limits *ls, const char *key)
{
    uint32_t i = c->path.count;
    struct tenant_budget *b = &c->budgets[i];
    bool found = false;
    int rc;

    if (ls->count == 0)
        return TALLY_OK;
    rc = tenant_budget_init(b, scope, alg, ls);
    if (rc != TALLY_OK)
        return rc;
    snprintf(c->keys[i], sizeof(c->keys[i]), "%c:%s", alg == TENANT_ALG_GCRA ? 'g' : 'w', key);
    rc = store_counter_get(c->db, c->tenant.id, c->keys[i], &b->st, sizeof(b->st), &found);
    if (rc != TALLY_OK)
        return rc;
    c->path.budgets[i] = b;
    c->path.count++;
    return TALLY_OK;
}

static int
load_slots(struct check_ctx *c, struct slot_blob *blob)
{
    bool found = false;
    int64_t i;
    int rc;

    snprintf(c->slot_key, sizeof(c->slot_key), "s:%s", c->link.id);
    rc = tenant_slot_table_init(&c->slots, c->slot_v, TENANT_CONCURRENCY_MAX);
    if (rc != TALLY_OK)
        return rc;
    memset(blob, 0, sizeof(*blob));
    rc = store_counter_get(c->db, c->tenant.id, c->slot_key, blob, sizeof(*blob), &found);
    if (rc != TALLY_OK || !found)
        return rc;
    if (blob->held < 0 || blob->held > TENANT_CONCURRENCY_MAX)
        return TALLY_ECORRUPT;
    c->slots.next_id = blob->next_id;
    c->slots.last_now_ms = blob->last_now_ms;
    for (i = 0; i < blob->held; i++)
        c->slot_v[i] = blob->v[i];
    c->path.slots = &c->slots;
    return TALLY_OK;
}

static int
save_slots(struct check_ctx *c, struct slot_blob *blob)
{
    int64_t i;

    memset(blob, 0, sizeof(*blob));
    blob->next_id = c->slots.next_id;
    blob->last_now_ms = c->slots.last_now_ms;
    for (i = 0; i < c->slots.capacity; i++) {
        if (c->slot_v[i].id != 0)
            blob->v[blob->held++] = c->slot_v[i];
    }
    /* Fixed size keeps the row readable by store_counter_get's size check. */
    return store_counter_put(c->db, c->tenant.id, c->slot_key, blob, sizeof(*blob));
}

static int
build_path(struct check_ctx *c, struct slot_blob *blob)
{
    char key[2 * TENANT_NAME_MAX + 32];
    int rc;

    memset(&c->path, 0, sizeof(c->path));
    rc = add_budget(c, TENANT_SCOPE_PLAN, TENANT_ALG_WINDOW, &c->plan.limits, "plan");
    if (rc == TALLY_OK) {
        snprintf(key, sizeof(key), "link:%s", c->link.id);
        rc = add_budget(c, TENANT_SCOPE_LINK, TENANT_ALG_WINDOW, &c->plan.link_limits, key);
    }
    if (rc == TALLY_OK) {
        snprintf(key, sizeof(key), "ep:%s", c->ep.name);
        rc =
            add_budget(c, TENANT_SCOPE_ENDPOINT_TENANT, c->ep.algorithm, &c->ep.tenant_limits, key);
    }
    if (rc == TALLY_OK) {
        snprintf(key, sizeof(key), "ep:%s:%s", c->ep.name, c->link.id);
        rc = add_budget(c, TENANT_SCOPE_ENDPOINT_LINK, c->ep.algorithm, &c->ep.limits, key);
    }
    if (rc == TALLY_OK && c->ep.expensive && c->plan.concurrency > 0) {
        rc = load_slots(c, blob);
        c->path.slots = &c->slots;
        c->path.slot_limit = c->plan.concurrency;
    }
    return rc;
}

static int
save_path(struct check_ctx *c, struct slot_blob *blob)
{
    uint32_t i;
    int rc = TALLY_OK;

    for (i = 0; i < c->path.count && rc == TALLY_OK; i++)
        rc = store_counter_put(c->db, c->tenant.id, c->keys[i], &c->budgets[i].st,
                               sizeof(c->budgets[i].st));
    if (rc == TALLY_OK && c->path.slots != NULL)
        rc = save_slots(c, blob);
    return rc;
}

static void
print_decision(const struct tenant_decision *d, int64_t now_ms)
{
    if (d->admitted) {
        printf("admitted scope=%s", tenant_scope_name(d->scope));
        if (d->scope != TENANT_SCOPE_NONE)
            printf(" limit=%lld remaining=%lld reset=%lld", (long long)d->limit,
                   (long long)d->remaining,
                   (long long)tenant_retry_after_seconds(d->reset_ms - now_ms));
        if (d->slot_id != 0)
            printf(" lease=%lld", (long long)d->slot_id);
        printf("\n");
    } else if (d->never) {
        printf("refused scope=%s retry_after=never (cost above the limit)\n",
               tenant_scope_name(d->scope));
    } else {
        printf("refused scope=%s retry_after=%lld\n", tenant_scope_name(d->scope),
               (long long)tenant_retry_after_seconds(d->retry_after_ms));
    }
}

/* Reads a token from stdin (one line) into buf. */
static bool
read_token(char *buf, size_t len)
{
    size_t n;

    if (fgets(buf, (int)len, stdin) == NULL)
        return false;
    n = strcspn(buf, "\r\n");
    buf[n] = '\0';
    return true;
}

/* Resolves the link and policy; EXIT_OK or the exit code already reported. */
static int
authorize(struct check_ctx *c, const unsigned char hash[TENANT_HASH_BYTES], const char *endpoint,
          int64_t now_ms)
{
    int rc = store_link_by_hash(c->db, hash, &c->link);

    if (rc == TALLY_ENOTFOUND || (rc == TALLY_OK && !store_link_allows(&c->link, endpoint, now_ms)))
        return cli_fail(EXIT_UNAUTH, "unauthorized");
    if (rc == TALLY_OK)
        rc = store_tenant_get(c->db, c->link.tenant, &c->tenant);
    if (rc == TALLY_ENOTFOUND)
        return cli_fail(EXIT_UNAUTH, "unauthorized");
    if (rc == TALLY_OK)
        rc = store_plan_get(c->db, c->tenant.plan, &c->plan);
    if (rc == TALLY_OK)
        rc = store_endpoint_resolve(c->db, c->tenant.plan, endpoint, &c->ep);
    if (rc == TALLY_ENOTFOUND)
        return cli_fail(EXIT_USAGE, "endpoint %s is not defined for plan %s", endpoint,
                        c->tenant.plan);
    if (rc != TALLY_OK)
        return cli_store_fail(rc, "check");
    return EXIT_OK;
}

int
cli_check(struct cli *c)
{
    static struct check_ctx ctx; /* large (slot tables): static, one check per process */
    static struct slot_blob blob;
    struct tenant_decision d;
    unsigned char hash[TENANT_HASH_BYTES];
    unsigned char *key = NULL;
    char token[TENANT_TOKEN_MAX + 2];
    const char *endpoint;
    int64_t cost = 0;
    int64_t now_ms;
    char err[256];
    int code;
    int rc;
    int i;

    if (c->argc < 2)
        return cli_fail(EXIT_USAGE, "usage: tally check TOKEN ENDPOINT [--cost C]");
    endpoint = c->argv[1];
    if (tenant_name_check("endpoint", endpoint, err, sizeof(err)) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "%s", err);
    for (i = 2; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--cost", &missing);
        if (v == NULL)
            return cli_fail(EXIT_USAGE, "unexpected argument '%.80s'", c->argv[i]);
        if (tenant_cost_parse(v, &cost) != TALLY_OK)
            return cli_fail(EXIT_USAGE, "invalid --cost '%.80s': a whole number from 1 to 2^32", v);
    }
    if (strcmp(c->argv[0], "-") == 0) {
        if (!read_token(token, sizeof(token)))
            return cli_fail(EXIT_USAGE, "no token on stdin");
    } else {
        snprintf(token, sizeof(token), "%s", c->argv[0]);
    }
    code = cli_open(c, &ctx.db);
    if (code != EXIT_OK)
        goto out;
    rc = store_key_load(c->data, &key);
    if (rc != TALLY_OK) {
        code = cli_fail(EXIT_CONFIG, "%s", tally_strerror(rc));
        goto out;
    }
    rc = tenant_token_hash(key, token, hash);
    sodium_memzero(token, sizeof(token));
    if (rc != TALLY_OK)
        memset(hash, 0, sizeof(hash));
    rc = store_db_begin(ctx.db);
    if (rc != TALLY_OK) {
        code = cli_store_fail(rc, "check");
        goto out;
    }
    now_ms = cli_now_ms();
    code = authorize(&ctx, hash, endpoint, now_ms);
    if (code == EXIT_OK) {
        rc = build_path(&ctx, &blob);
        if (rc == TALLY_OK)
            rc = tenant_path_decide(&ctx.path, now_ms, cost > 0 ? cost : ctx.ep.cost, &d);
        if (rc == TALLY_OK && d.admitted)
            rc = save_path(&ctx, &blob);
        if (rc == TALLY_OK && d.admitted)
            rc = store_db_commit(ctx.db);
        if (rc != TALLY_OK) {
            code = cli_store_fail(rc, "check");
        } else {
            print_decision(&d, now_ms);
            code = d.admitted ? EXIT_OK : EXIT_FAIL;
        }
    }
    store_db_rollback(ctx.db);
out:
    sodium_memzero(hash, sizeof(hash));
    store_key_free(key);
    store_db_close(ctx.db);
    return code;
}

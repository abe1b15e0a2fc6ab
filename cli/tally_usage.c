/*
 * `tally usage [TENANT] [--window current|previous] [--json]`: what each budget of a tenant
 * (or of every tenant) admitted in the current or the previous window of each of its limits,
 * as its supervisor's ledger counts it (sup_usage.h): one line per budget and limit, or one
 * JSON document for scripts. A tenant that has made no request shows zeros. When tallyd runs,
 * it is asked first (FLUSH) to have the tenant's child counters give their leases back, and the
 * ledger is read once they are back (at most SETTLE_MS later), so leases that were out count
 * what they admitted, not what they reserved.
 */
#include "proto_client.h"
#include "proto_stats.h"
#include "sup_usage.h"
#include "tally.h"
#include "tally_cli.h"
#include "tenant_config.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#define FLUSH_TIMEOUT_MS 2000
#define SETTLE_MS        3000
#define SETTLE_STEP_MS   20

struct usage_out {
    const char *tenant;
    bool json;
    bool first; /* no JSON row printed yet */
};

static const char *
or_dash(const char *s)
{
    return s[0] != '\0' ? s : "-";
}

static int
print_row(void *ctx, const struct sup_usage_row *r)
{
    struct usage_out *o = ctx;
    char limit[TENANT_LIMIT_TEXT_MAX], start[32], end[32];

    tenant_limit_format(&r->limit, limit, sizeof(limit));
    cli_format_time(r->start_ms, start, sizeof(start));
    cli_format_time(r->end_ms, end, sizeof(end));
    if (r->start_ms == 0)
        snprintf(start, sizeof(start), "1970-01-01T00:00:00Z");
    if (!o->json) {
        printf("%-20s %-8s %-16s %-20s %-18s %s %s %lld\n", o->tenant, tenant_scope_name(r->scope),
               or_dash(r->endpoint), or_dash(r->link), limit, start, end, (long long)r->admitted);
        return 0;
    }
    printf("%s\n    {\"tenant\":\"%s\",\"scope\":\"%s\",\"endpoint\":\"%s\",\"link\":\"%s\","
           "\"limit\":\"%s\",\"start\":\"%s\",\"end\":\"%s\",\"admitted\":%lld,"
           "\"leases_out\":%u}",
           o->first ? "" : ",", o->tenant, tenant_scope_name(r->scope), r->endpoint, r->link, limit,
           start, end, (long long)r->admitted, r->leases_out);
    o->first = false;
    return 0;
}

/* Asks a running tallyd to have `tenant`'s child counters give their leases back. False when
 * no tallyd answers (then no child holds a lease the ledger does not know as outstanding). */
static bool
flush(const struct cli *c, const char *tenant)
{
    char path[STORE_PATH_MAX];
    uint8_t msg[PROTO_CLIENT_MSG_MAX];
    tally_client *client = NULL;
    struct proto_frame f;
    uint8_t status = 1;
    bool ok = false;

    snprintf(path, sizeof(path), "%s/tally.sock", c->data);
    if (tally_client_open(path, FLUSH_TIMEOUT_MS, &client) == TALLY_OK) {
        uint32_t id = proto_client_next_id(client);
        size_t len = proto_flush_encode(msg, id, tenant);

        ok = len > 0 && proto_client_request(client, msg, len, id, &f) == TALLY_OK &&
             f.type == PROTO_C_FLUSH_REPLY && proto_status_decode(&f, &status) == TALLY_OK &&
             status == 0;
    }
    tally_client_close(client);
    return ok;
}

static int
count_out(void *ctx, const struct sup_usage_row *r)
{
    *(uint32_t *)ctx += r->leases_out;
    return 0;
}

/* After a FLUSH: until the tenant's ledger has no lease out, or the count stops falling (a
 * lease an earlier run of tallyd held and no row resumed stays out, as spent, to its deadline),
 * SETTLE_MS at most. */
static void
settle(const struct cli *c, const char *tenant, int64_t now_ms)
{
    uint32_t before = UINT32_MAX;
    int same = 0;

    for (int waited = 0; waited < SETTLE_MS; waited += SETTLE_STEP_MS) {
        struct timespec ts = {0, SETTLE_STEP_MS * 1000000L};
        uint32_t out = 0;

        if (sup_usage_read(c->data, tenant, now_ms, false, count_out, &out) != TALLY_OK || out == 0)
            return;
        same = out < before ? 0 : same + 1;
        before = out;
        if (same * SETTLE_STEP_MS >= 300)
            return;
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

struct usage_all {
    const struct cli *c;
    struct usage_out *o;
    int64_t now_ms;
    bool previous;
};

static int
usage_one(struct usage_all *a, const char *tenant)
{
    if (flush(a->c, tenant))
        settle(a->c, tenant, a->now_ms);
    a->o->tenant = tenant;
    return sup_usage_read(a->c->data, tenant, a->now_ms, a->previous, print_row, a->o);
}

static int
usage_each(void *ctx, const struct store_tenant *t)
{
    return usage_one(ctx, t->id);
}

int
cli_usage(struct cli *c)
{
    struct usage_out o = {NULL, false, true};
    struct usage_all a = {c, &o, cli_now_ms(), false};
    const char *tenant = NULL;
    store_db *db = NULL;
    char err[256];
    int code, rc;

    for (int i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--window", &missing);

        if (v != NULL && (strcmp(v, "current") == 0 || strcmp(v, "previous") == 0)) {
            a.previous = strcmp(v, "previous") == 0;
        } else if (v != NULL || missing) {
            return cli_fail(EXIT_USAGE, "invalid --window '%.80s': current or previous",
                            v != NULL ? v : "");
        } else if (strcmp(c->argv[i], "--json") == 0) {
            o.json = true;
        } else if (c->argv[i][0] != '-' && tenant == NULL) {
            if (tenant_name_check("tenant", c->argv[i], err, sizeof(err)) != TALLY_OK)
                return cli_fail(EXIT_USAGE, "%s", err);
            tenant = c->argv[i];
        } else {
            return cli_fail(EXIT_USAGE,
                            "usage: tally usage [TENANT] [--window current|previous] [--json]");
        }
    }
    code = cli_open(c, &db); /* the data dir must be initialised */
    if (code != EXIT_OK)
        return code;
    if (tenant != NULL) {
        struct store_tenant t;
        rc = store_tenant_get(db, tenant, &t);
        if (rc != TALLY_OK) {
            store_db_close(db);
            return cli_store_fail(rc, tenant);
        }
    }
    if (o.json)
        printf("{\"window\":\"%s\",\"budgets\":[", a.previous ? "previous" : "current");
    rc = tenant != NULL ? usage_one(&a, tenant) : store_tenant_each(db, usage_each, &a);
    store_db_close(db);
    if (rc != TALLY_OK) {
        fflush(stdout);
        return cli_store_fail(rc, tenant != NULL ? tenant : "usage");
    }
    if (o.json)
        printf("%s]}\n", o.first ? "" : "\n");
    return EXIT_OK;
}

/*
 * `tally check TOKEN ENDPOINT [--cost C]` asks the running tallyd over its
 * Unix socket (DATA/tally.sock, or --socket PATH), exactly as an application
 * using libtally would, and maps the answer to the documented exit codes.
 * With no daemon there it says so in one line and exits 3. Also: the
 * notification every changing command sends so a running daemon re-reads
 * the configuration before the command returns.
 */
#include "proto_client.h"
#include "tally.h"
#include "tally_cli.h"
#include "tenant_config.h"

#include <sodium.h>
#include <string.h>

#define CHECK_TIMEOUT_MS 5000

static void
socket_path(const struct cli *c, const char *arg, char *buf, size_t len)
{
    if (arg != NULL)
        snprintf(buf, len, "%s", arg);
    else
        snprintf(buf, len, "%s/tally.sock", c->data);
}

void
cli_notify_daemon(const struct cli *c)
{
    char path[STORE_PATH_MAX];
    tally_client *client = NULL;

    socket_path(c, NULL, path, sizeof(path));
    if (tally_client_open(path, 2000, &client) != TALLY_OK)
        return; /* no daemon: it reads the configuration when it starts */
    if (tally_reload(client) != TALLY_OK)
        fprintf(stderr, "tally: warning: the running tallyd did not confirm the reload; it "
                        "re-reads the configuration within a second\n");
    tally_client_close(client);
}

static void
print_result(const struct tally_result *r)
{
    switch (r->status) {
    case TALLY_ADMITTED:
        printf("admitted scope=%s", r->scope);
        if (r->limit >= 0)
            printf(" limit=%lld reset=%lld", (long long)r->limit,
                   (long long)((r->reset_ms + 999) / 1000));
        if (r->slot_id != 0)
            printf(" lease=%lld", (long long)r->slot_id);
        if (r->degraded)
            printf(" degraded");
        if (r->shadow_refused)
            printf(" shadow_refused");
        printf("\n");
        break;
    case TALLY_REFUSED:
        if (r->never)
            printf("refused scope=%s retry_after=never (cost above the limit)\n", r->scope);
        else
            printf("refused scope=%s retry_after=%lld\n", r->scope,
                   (long long)((r->retry_after_ms + 999) / 1000));
        break;
    default:
        break;
    }
}

int
cli_check(struct cli *c)
{
    char path[STORE_PATH_MAX];
    char token[PROTO_TOKEN_WIRE_MAX + 2];
    const char *sock = NULL;
    const char *endpoint;
    tally_client *client = NULL;
    struct tally_result r;
    int64_t cost = 0;
    char err[256];
    int code;
    int rc;
    int i;

    if (c->argc < 2)
        return cli_fail(EXIT_USAGE, "usage: tally check TOKEN ENDPOINT [--cost C] [--socket PATH]");
    endpoint = c->argv[1];
    if (tenant_name_check("endpoint", endpoint, err, sizeof(err)) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "%s", err);
    for (i = 2; i < c->argc; i++) {
        bool missing = false;
        const char *v;
        if ((v = tenant_opt_value(c->argc, c->argv, &i, "--cost", &missing)) != NULL) {
            if (tenant_cost_parse(v, &cost) != TALLY_OK)
                return cli_fail(EXIT_USAGE, "invalid --cost '%.80s': a whole number from 1 to 2^32",
                                v);
        } else if ((v = tenant_opt_value(c->argc, c->argv, &i, "--socket", &missing)) != NULL) {
            sock = v;
        } else {
            if (missing)
                return cli_fail(EXIT_USAGE, "%s needs a value", c->argv[i]);
            return cli_fail(EXIT_USAGE, "unexpected argument '%.80s'", c->argv[i]);
        }
    }
    if (strcmp(c->argv[0], "-") == 0) {
        if (fgets(token, sizeof(token), stdin) == NULL)
            return cli_fail(EXIT_USAGE, "no token on stdin");
        token[strcspn(token, "\r\n")] = '\0';
    } else {
        snprintf(token, sizeof(token), "%s", c->argv[0]);
        /* Out of /proc/PID/cmdline (ps) from now on; `-` reads it from stdin instead. */
        sodium_memzero(c->argv[0], strlen(c->argv[0]));
    }
    socket_path(c, sock, path, sizeof(path));
    rc = tally_client_open(path, CHECK_TIMEOUT_MS, &client);
    if (rc != TALLY_OK) {
        sodium_memzero(token, sizeof(token));
        if (sock == NULL && store_datadir_check(c->data) != TALLY_OK)
            return cli_fail(EXIT_CONFIG,
                            "data directory %s is not initialised: run 'tally init --data %s'",
                            c->data, c->data);
        return cli_fail(EXIT_UNAVAIL, "tallyd is not running (no answer on %s): %s", path,
                        tally_strerror(rc));
    }
    rc = tally_check(client, token, endpoint, cost, &r);
    sodium_memzero(token, sizeof(token));
    tally_client_close(client);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_UNAVAIL, "tallyd did not answer: %s", tally_strerror(rc));
    print_result(&r);
    switch (r.status) {
    case TALLY_ADMITTED:
        code = EXIT_OK;
        break;
    case TALLY_REFUSED:
        code = EXIT_FAIL;
        break;
    case TALLY_UNAUTHORIZED:
        code = cli_fail(EXIT_UNAUTH, "unauthorized");
        break;
    case TALLY_UNAVAILABLE:
        code = cli_fail(EXIT_UNAVAIL, "unavailable: %s (retry after %llds)",
                        r.detail[0] != '\0' ? r.detail : "authority unreachable",
                        (long long)((r.retry_after_ms + 999) / 1000));
        break;
    case TALLY_BAD_REQUEST:
        code = cli_fail(EXIT_USAGE, "bad request: %s", r.detail);
        break;
    default:
        code = cli_fail(EXIT_IOERR, "tallyd could not decide: %s", r.detail);
        break;
    }
    return code;
}

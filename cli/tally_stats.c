/*
 * `tally stats [TENANT] [--socket PATH]`: asks the running tallyd (STATS over
 * its Unix socket, proto/PROTOCOL.md) for its counters and prints them as a
 * small table; with a tenant, one line per endpoint that has a child counter
 * (its mode, whether its supervisor answers, its links, leases and counts).
 * With no daemon it says so in one line and exits 3; an unknown tenant
 * exits 1. libtally's blocking client: one request, one answer, a 5 s timeout.
 */
#include "proto_client.h"
#include "proto_stats.h"
#include "tally.h"
#include "tally_cli.h"
#include "tenant_config.h"

#include <stdlib.h>
#include <string.h>

#define STATS_TIMEOUT_MS 5000

/* STATS over a libtally connection (HELLO done); the answer into *out. */
static int
ask(tally_client *c, const char *tenant, struct proto_stats_reply *out)
{
    uint8_t msg[PROTO_CLIENT_MSG_MAX];
    uint32_t id = proto_client_next_id(c);
    struct proto_frame f;
    int rc = proto_client_request(c, msg, proto_stats_encode(msg, id, tenant), id, &f);

    if (rc == TALLY_OK && proto_stats_reply_decode(&f, out) != TALLY_OK)
        rc = TALLY_EPROTO; /* an older tallyd answers ERROR: no STATS there */
    return rc;
}

static void
print_daemon(const struct proto_stats_reply *m)
{
    printf("decisions    checks %llu  admitted %llu  refused %llu  unauthorized %llu\n"
           "             bad_request %llu  unavailable %llu  internal %llu\n"
           "             degraded %llu  shadow_refused %llu\n",
           (unsigned long long)m->checks, (unsigned long long)m->admitted,
           (unsigned long long)m->refused, (unsigned long long)m->unauthorized,
           (unsigned long long)m->bad_request, (unsigned long long)m->unavailable,
           (unsigned long long)m->internal, (unsigned long long)m->degraded,
           (unsigned long long)m->shadow_refused);
    printf("supervisors  live %u  starts %llu  restarts %llu  idle_exits %llu  crashes %llu\n",
           m->sup_live, (unsigned long long)m->sup_starts, (unsigned long long)m->sup_restarts,
           (unsigned long long)m->sup_idle_exits, (unsigned long long)m->sup_crashes);
    printf("children     %u  links %u  reloads %llu\n", m->children, m->links_live,
           (unsigned long long)m->reloads);
}

static void
print_tenant(const char *tenant, const struct proto_stats_reply *m)
{
    static const char *const modes[] = {"normal", "degraded", "unavailable"};
    unsigned i;

    if (m->sup_up)
        printf("tenant %s  supervisor up (pid %u)\n", tenant, m->sup_pid);
    else
        printf("tenant %s  supervisor not running\n", tenant);
    if (m->n_endpoints == 0) {
        printf("no endpoint of %s has a child counter yet\n", tenant);
        return;
    }
    printf("%-20s %-12s %-9s %6s %6s %10s %10s %10s %11s\n", "endpoint", "mode", "reachable",
           "links", "leases", "admitted", "refused", "degraded", "unavailable");
    for (i = 0; i < m->n_endpoints; i++) {
        const struct proto_stats_endpoint *e = &m->ep[i];
        printf("%-20s %-12s %-9s %6u %6u %10llu %10llu %10llu %11llu\n", e->name, modes[e->mode],
               e->reachable ? "yes" : "no", e->links, e->leases, (unsigned long long)e->admitted,
               (unsigned long long)e->refused, (unsigned long long)e->degraded,
               (unsigned long long)e->unavailable);
    }
    if (m->more)
        printf("(more endpoints than shown)\n");
}

int
cli_stats(struct cli *c)
{
    static struct proto_stats_reply m;
    char path[STORE_PATH_MAX];
    const char *tenant = "";
    const char *sock = NULL;
    char err[256];
    tally_client *client = NULL;
    int rc, i;

    for (i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--socket", &missing);
        if (v != NULL) {
            sock = v;
        } else if (missing) {
            return cli_fail(EXIT_USAGE, "--socket needs a value");
        } else if (c->argv[i][0] != '-' && tenant[0] == '\0') {
            tenant = c->argv[i];
            if (tenant_name_check("tenant", tenant, err, sizeof(err)) != TALLY_OK)
                return cli_fail(EXIT_USAGE, "%s", err);
        } else {
            return cli_fail(EXIT_USAGE, "usage: tally stats [TENANT] [--socket PATH]");
        }
    }
    if (sock != NULL)
        snprintf(path, sizeof(path), "%s", sock);
    else
        snprintf(path, sizeof(path), "%s/tally.sock", c->data);
    rc = tally_client_open(path, STATS_TIMEOUT_MS, &client);
    if (rc == TALLY_EUNAVAIL || rc == TALLY_EPERM || rc == TALLY_ETOOBIG) {
        if (sock == NULL && store_datadir_check(c->data) != TALLY_OK)
            return cli_fail(EXIT_CONFIG,
                            "data directory %s is not initialised: run 'tally init --data %s'",
                            c->data, c->data);
        return cli_fail(EXIT_UNAVAIL, "tallyd is not running (no answer on %s)", path);
    }
    if (rc == TALLY_OK)
        rc = ask(client, tenant, &m);
    tally_client_close(client);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_UNAVAIL, "tallyd did not answer STATS: %s", tally_strerror(rc));
    if (m.tenant_status == PROTO_STATS_UNKNOWN)
        return cli_fail(EXIT_FAIL, "tenant %s: not found", tenant);
    print_daemon(&m);
    if (tenant[0] != '\0')
        print_tenant(tenant, &m);
    return EXIT_OK;
}

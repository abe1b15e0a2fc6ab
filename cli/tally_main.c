/*
 * `tally`: the administration command. A thin main: it resolves the data dir,
 * dispatches on the verb and maps results to the documented exit codes. Every
 * error is one line on stderr; stdout carries only what was asked for.
 */
#include "tally_cli.h"

#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char usage_text[] =
    "usage: tally [--data DIR] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  init                                   create the data dir, its key and database\n"
    "  plan set NAME --limit N/PERIOD ... [--link-limit N/PERIOD ...] [--concurrency K]\n"
    "        [--max-links N]                  live links per tenant (default 1000000)\n"
    "  plan list | show NAME | remove NAME\n"
    "  endpoint set NAME [--plan PLAN] --limit N/PERIOD ... [--tenant-limit N/PERIOD ...]\n"
    "        [--algorithm window|gcra] [--cost C] [--expensive]\n"
    "        [--on-unavailable open|closed] [--degraded-limit N/PERIOD ...] [--shadow]\n"
    "  endpoint list | show NAME [--plan PLAN] | remove NAME [--plan PLAN]\n"
    "  apply FILE [--dry-run]                 make plans and endpoints match FILE,\n"
    "                                         and the tenants it names\n"
    "  export                                 print plans, endpoints and tenants as a FILE\n"
    "  tenant add ID --plan PLAN [--billing-day D]     D 1-28: its months start then\n"
    "  tenant set ID [--plan PLAN] [--billing-day D] [--limit N/PERIOD ...]\n"
    "        [--link-limit N/PERIOD ...] [--concurrency K] [--reset]\n"
    "                                         the tenant's own limits (--reset drops them)\n"
    "  tenant list | show ID | remove ID\n"
    "  link create TENANT [--endpoint NAME ...] [--expires DURATION] [--json]\n"
    "  link revoke TOKEN-OR-ID | list TENANT\n"
    "  check TOKEN ENDPOINT [--cost C]        (TOKEN '-' reads it from stdin)\n"
    "  stats [TENANT]                         counters of the running tallyd\n"
    "  usage [TENANT] [--window current|previous] [--json]\n"
    "                                         admitted per budget and window (billing)\n"
    "  cluster init --listen HOST:PORT        make this host the first member of a cluster\n"
    "  cluster invite [--ttl DURATION]        a one-time code for the next host (1h)\n"
    "  cluster join CODE --listen HOST:PORT [--role voter|front]\n"
    "                                         join with an empty data dir\n"
    "  cluster status                         members, leader and log of the running tallyd\n"
    "  cluster leave [MEMBER]                 remove this host, or member MEMBER\n"
    "\n"
    "Limits are N/PERIOD with PERIOD one of s, m, h, d, optionally prefixed by a\n"
    "count (100/10s, 600/1m, 36000/1h); 1 <= N <= 2^32, PERIOD at most 365d; or\n"
    "N/month, the calendar month in UTC from the tenant's billing day (not for gcra).\n"
    "Names match [a-z0-9][a-z0-9_-]{0,62}. Durations: 90s, 15m, 12h, 30d.\n"
    "Caps: a tenant's live links (its plan's --max-links, at most 1000000); 256\n"
    "endpoint names in all (link create / endpoint set past a cap: exit 1,\n"
    "apply: exit 65; nothing changed).\n"
    "The data dir is --data DIR, else $TALLY_DATA, else " TALLY_DEFAULT_DATA_DIR ".\n"
    "In a cluster a change goes through the leader: in force on this host and on every\n"
    "member that answers before the command returns (docs/CLUSTER.md).\n"
    "\n"
    "exit codes:\n"
    "  0 success (check: admitted)      1 failed: not found, exists, in use, cap reached\n"
    "                                     (check: refused)\n"
    "  2 check: unauthorized            3 check: unavailable; stats, cluster status: no tallyd;\n"
    "                                     a change in a cluster: no leader reachable, nothing\n"
    "                                     changed\n"
    "  64 usage: bad syntax, name, limit or cost; nothing changed\n"
    "  65 apply: invalid file; nothing changed\n"
    "  74 storage error                 78 data dir not initialised or key unreadable\n";

int
cli_store_fail(int rc, const char *what)
{
    int code = EXIT_IOERR;
    const char *why = cli_cluster_why(&code);

    if (why != NULL) /* the commit went to the cluster and failed there */
        return cli_fail(code, "%s: %s", what, why);
    switch (rc) {
    case TALLY_ENOTFOUND:
    case TALLY_EEXIST:
    case TALLY_EINUSE:
        return cli_fail(EXIT_FAIL, "%s: %s", what, tally_strerror(rc));
    case TALLY_ENODATA:
    case TALLY_ENOKEY:
    case TALLY_ESCHEMA:
        return cli_fail(EXIT_CONFIG, "%s: %s", what, tally_strerror(rc));
    default:
        return cli_fail(EXIT_IOERR, "%s: %s", what, tally_strerror(rc));
    }
}

int
cli_open(const struct cli *c, store_db **out)
{
    int rc = store_datadir_check(c->data);

    *out = NULL;
    if (rc != TALLY_OK)
        return cli_fail(EXIT_CONFIG,
                        "data directory %s is not initialised: run 'tally init --data %s'", c->data,
                        c->data);
    rc = store_config_open(c->data, false, out);
    if (rc != TALLY_OK)
        return cli_fail(rc == TALLY_ESCHEMA ? EXIT_CONFIG : EXIT_IOERR, "%s (%s)",
                        tally_strerror(rc), store_open_errmsg());
    /* A member of a cluster changes its file only by the log: a local commit would make it
     * differ from the others'. */
    rc = cli_cluster_capture(c, *out);
    if (rc != EXIT_OK) {
        store_db_close(*out);
        *out = NULL;
    }
    return rc;
}

int64_t
cli_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
cli_init(struct cli *c)
{
    int rc;

    if (c->argc != 0)
        return cli_fail(EXIT_USAGE, "init takes no arguments");
    rc = store_datadir_init(c->data);
    if (rc == TALLY_EEXIST)
        return cli_fail(EXIT_FAIL, "data directory %s is already initialised", c->data);
    if (rc != TALLY_OK)
        return cli_fail(rc == TALLY_EPERM ? EXIT_CONFIG : EXIT_IOERR, "init %s: %s", c->data,
                        tally_strerror(rc));
    fprintf(stderr, "tally: initialised %s\n", c->data);
    return EXIT_OK;
}

/* Commands that change the configuration: a running tallyd must see the change
 * before they return (a revoked link is refused from then on). */
static bool
is_change(const char *verb, int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";
    int i;

    if (strcmp(verb, "apply") == 0) {
        for (i = 0; i < argc; i++) {
            if (strcmp(argv[i], "--dry-run") == 0)
                return false;
        }
        return true;
    }
    if (strcmp(verb, "plan") == 0 || strcmp(verb, "endpoint") == 0)
        return strcmp(sub, "set") == 0 || strcmp(sub, "remove") == 0;
    if (strcmp(verb, "tenant") == 0)
        return strcmp(sub, "add") == 0 || strcmp(sub, "set") == 0 || strcmp(sub, "remove") == 0;
    if (strcmp(verb, "link") == 0)
        return strcmp(sub, "create") == 0 || strcmp(sub, "revoke") == 0;
    return false;
}

static const struct {
    const char *verb;
    int (*run)(struct cli *c);
} verbs[] = {
    {"init", cli_init},   {"plan", cli_plan},       {"endpoint", cli_endpoint},
    {"apply", cli_apply}, {"export", cli_export},   {"tenant", cli_tenant},
    {"usage", cli_usage}, {"link", cli_link},       {"check", cli_check},
    {"stats", cli_stats}, {"cluster", cli_cluster},
};

int
main(int argc, char **argv)
{
    const char *data_arg = NULL;
    struct cli c;
    size_t i;
    int at = 1;
    bool dumpable = false;
    int n, rc;

    umask(077);
    if (sodium_init() < 0)
        return cli_fail(EXIT_IOERR, "libsodium failed to initialise");
    /* tokens and the key stay out of core files; TALLY_DUMPABLE=1 was asked for */
    rc = store_process_private(&dumpable);
    if (rc != TALLY_OK)
        fprintf(stderr, "tally: warning: cannot keep this process out of core files: %s\n",
                tally_strerror(rc));
    /* --data may stand anywhere (`tally init --data DIR` reads naturally): take
     * it out of argv first, then the global flags, then the verb. */
    n = 1;
    for (int j = 1; j < argc; j++) {
        if (strcmp(argv[j], "--data") == 0) {
            if (j + 1 >= argc)
                return cli_fail(EXIT_USAGE, "--data needs a directory");
            data_arg = argv[++j];
        } else if (strncmp(argv[j], "--data=", 7) == 0) {
            data_arg = argv[j] + 7;
        } else {
            argv[n++] = argv[j];
        }
    }
    argc = n;
    argv[argc] = NULL;
    if (at < argc && (strcmp(argv[at], "--help") == 0 || strcmp(argv[at], "-h") == 0)) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (at < argc && strcmp(argv[at], "--version") == 0) {
        printf("tally %s\n", TALLY_VERSION);
        return EXIT_OK;
    }
    if (at < argc && strncmp(argv[at], "--", 2) == 0)
        return cli_fail(EXIT_USAGE, "unknown option '%s' (see tally --help)", argv[at]);
    if (at >= argc)
        return cli_fail(EXIT_USAGE, "missing command (see tally --help)");
    c.data = store_datadir_pick(data_arg, TALLY_DEFAULT_DATA_DIR);
    c.argc = argc - at - 1;
    c.argv = argv + at + 1;
    for (i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        if (strcmp(argv[at], verbs[i].verb) == 0) {
            int code = verbs[i].run(&c);
            if (code == EXIT_OK && is_change(argv[at], c.argc, c.argv))
                cli_notify_daemon(&c);
            return code;
        }
    }
    return cli_fail(EXIT_USAGE, "unknown command '%s' (see tally --help)", argv[at]);
}

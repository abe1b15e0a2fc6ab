/*
 * Shared pieces of the `tally` command: exit codes, error lines, the parsers
 * for plan and endpoint options (used by `plan set`, `endpoint set` and
 * `apply`, so the file format and the command line are one grammar).
 */
#ifndef TALLY_CLI_H
#define TALLY_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "store_config.h"
#include "tally_log.h"
#include "tenant.h"

/* Exit codes, documented in `tally --help`. */
enum cli_exit {
    EXIT_OK = 0,
    EXIT_FAIL = 1,     /* not found, exists, in use; `check`: refused */
    EXIT_UNAUTH = 2,   /* `check`: unknown, revoked or expired token */
    EXIT_UNAVAIL = 3,  /* `check`: the daemon or authority cannot be reached; a change in a
                          cluster: no leader reachable */
    EXIT_USAGE = 64,   /* bad syntax, name, limit or cost: nothing changed */
    EXIT_DATAERR = 65, /* `apply`: the file is invalid: nothing changed */
    EXIT_IOERR = 74,   /* storage error */
    EXIT_CONFIG = 78   /* data dir not initialised, key unreadable */
};

struct cli {
    const char *data; /* resolved data dir */
    int argc;         /* arguments after the verb */
    char **argv;
};

/** Prints "tally: <message>" on stderr as one line; returns `code`. */
#define cli_fail(code, ...) tally_fail("tally", (code), __VA_ARGS__)
/** Exit code and one stderr line for a tally result code from the store. */
int cli_store_fail(int rc, const char *what);
/** Opens the config database of an initialised data dir, printing the error. */
int cli_open(const struct cli *c, store_db **out /* OUT */);
/** Tells a running tallyd to re-read the configuration now (best effort: no
 *  daemon, nothing to do). Called after every successful change. */
void cli_notify_daemon(const struct cli *c);
/** Milliseconds of wall clock now. */
int64_t cli_now_ms(void);
/** ms since the epoch as 2024-01-31T12:00:00Z into buf ("-" for 0). */
void cli_format_time(int64_t ms, char *buf, size_t len);
/** Every endpoint of the comma-separated `list` must have a policy for `plan`: EXIT_OK, else
 *  the exit code of the line printed (ending with `tail`). */
int cli_link_check_endpoints(store_db *db, const char *plan, const char *list, const char *tail);
/** Whether tenant `id` may be moved to `plan` (`tenant set --plan` and `apply` both ask): its
 *  live links within the plan's --max-links, and every endpoint its links are restricted to
 *  defined for the plan. EXIT_OK, else the exit code of the one line printed (ending with
 *  `tail`); a store error is left in *rc with EXIT_OK. */
int cli_tenant_plan_check(store_db *db, const char *id, const char *plan, const char *tail,
                          int *rc);
/** The account of a stored tenant (plan, billing day, overrides), and back (other fields of
 *  *out as they were). */
void cli_account_of(const struct store_tenant *t, struct tenant_account *out /* OUT */);
void cli_tenant_of(const struct tenant_account *a, struct store_tenant *out /* IN/OUT */);
/** `tally usage`. */
int cli_usage(struct cli *c);

int cli_init(struct cli *c);
int cli_plan(struct cli *c);
int cli_endpoint(struct cli *c);
int cli_apply(struct cli *c);
int cli_export(struct cli *c);
int cli_tenant(struct cli *c);
int cli_link(struct cli *c);
int cli_check(struct cli *c);
int cli_stats(struct cli *c);
/** `tally cluster init|status` (tally_cluster.c). */
int cli_cluster(struct cli *c);
/** In a cluster data dir, db's changes go through the cluster's log instead of being committed
 *  (tally_cluster_config.c); elsewhere nothing. EXIT_OK, else the exit code of the line
 *  printed. */
int cli_cluster_capture(const struct cli *c, store_db *db);
/** Why the last change could not go through the cluster, and its exit code (*code); NULL when
 *  it did not fail there. */
const char *cli_cluster_why(int *code /* OUT */);

#endif /* TALLY_CLI_H */

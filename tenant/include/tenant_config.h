/*
 * The configuration grammar shared by `tally plan set`, `tally endpoint set`,
 * `tally apply` and `tally export`. A file is lines of `plan NAME OPTIONS`,
 * `endpoint NAME OPTIONS` and `tenant ID OPTIONS`, `#` starts a comment; see
 * the README.
 *
 * Header-wide rule: on error the functions write one line (no newline) into
 * err and return a TALLY_E* code; outputs are caller-owned.
 */
#ifndef TENANT_CONFIG_H
#define TENANT_CONFIG_H

#include "tenant.h"

#define TENANT_CONFIG_FILE_MAX  (1024 * 1024)
#define TENANT_CONFIG_LINE_MAX  4096
#define TENANT_CONFIG_WORDS_MAX 64
#define TENANT_CONFIG_ITEMS_MAX 10000
#define TENANT_CONFIG_TEXT_MAX  1024 /* longest canonical line */

/** Value of option `name` at argv[*i], as "--name V" or "--name=V" (advancing *i
 *  past V); NULL if argv[*i] is another option; *missing set when V is absent. */
const char *tenant_opt_value(int argc, char **argv, int *i, const char *name, bool *missing);
/** TALLY_OK when `name` is a valid name, else TALLY_ENAME/TALLY_EINVAL with err set;
 *  `what` ("plan", "tenant") names it in the message. */
int tenant_name_check(const char *what, const char *name, char *err, size_t errlen);

/** Parses `NAME [--limit L]... [--link-limit L]... [--concurrency K]` (argv[0] is NAME). */
int tenant_plan_parse_args(int argc, char **argv, struct tenant_plan *out /* OUT */, char *err,
                           size_t errlen);
/** Parses `NAME [--plan P] --limit L... [--tenant-limit L]... [--algorithm window|gcra]
 *  [--cost C] [--expensive] [--on-unavailable open|closed] [--degraded-limit L]... [--shadow]`. */
int tenant_endpoint_parse_args(int argc, char **argv, struct tenant_endpoint *out /* OUT */,
                               char *err, size_t errlen);
/** The canonical one-line form ("plan pro --limit 600/1m ..."), the file format. */
void tenant_plan_format(const struct tenant_plan *p, char *buf, size_t len);
void tenant_endpoint_format(const struct tenant_endpoint *e, char *buf, size_t len);

/** Parses `ID --plan P [--billing-day D] [--limit L]... [--link-limit L]... [--concurrency K]`
 *  (argv[0] is ID): a `tenant` line; billing day 1 unless given. */
int tenant_account_parse_args(int argc, char **argv, struct tenant_account *out /* OUT */,
                              char *err, size_t errlen);
/** The canonical line ("tenant acme --plan pro --billing-day 15 --limit 200000/month"). */
void tenant_account_format(const struct tenant_account *t, char *buf, size_t len);

struct tenant_config {
    struct tenant_plan *plans;
    size_t n_plans;
    struct tenant_endpoint *endpoints;
    size_t n_endpoints;
    struct tenant_account *tenants;
    size_t n_tenants;
};

/** Parses and validates a whole file (`text`, `len` bytes, borrowed): each line,
 *  then no duplicates and every `--plan` defined in the file. *out is owned by the
 *  caller, release with tenant_config_release(); on error nothing is left to free. */
int tenant_config_parse(const char *text, size_t len, struct tenant_config *out /* OUT */,
                        char *err, size_t errlen);
void tenant_config_release(struct tenant_config *c);

#endif /* TENANT_CONFIG_H */

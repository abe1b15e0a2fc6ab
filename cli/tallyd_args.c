/*
 * tallyd's command line (tallyd_args.h): every option as --name VALUE or
 * --name=VALUE, checked here so that a bad value is one plain line on stderr
 * and exit 64 before anything starts.
 */
#include "tallyd_args.h"

#include "sup_callers.h"

#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "proto_http.h"
#include "tally_log.h"
#include "tenant.h"

static const char usage_text[] =
    "usage: tallyd [--data DIR] [--http ADDR:PORT] [--socket PATH]\n"
    "              [--durability strict|batched] [--wait-ms MS] [--idle-exit-ms MS]\n"
    "              [--tcp ADDR:PORT] [--log-level debug|info|warn|error]\n"
    "              [--max-supervisors N] [--max-connections N]\n"
    "              [--batch-sync-ms MS] [--journal-compact-rows N]\n"
    "              [--child-idle-ms MS] [--max-open-children N] [--keep-lease-ms MS]\n"
    "              [--election-timeout-ms MS] [--snapshot-every N]\n"
    "              [--help] [--version]\n"
    "\n"
    "Runs the tally daemon in the foreground until SIGINT or SIGTERM.\n"
    "\n"
    "  --data DIR         data dir, initialised by 'tally init' (else $TALLY_DATA,\n"
    "                     else " TALLY_DEFAULT_DATA_DIR ")\n"
    "  --http ADDR:PORT   HTTP listener, default 127.0.0.1:8080; IPv6 as [::1]:8080;\n"
    "                     port 0 picks a free port, reported in the start line\n"
    "  --socket PATH      binary protocol socket (mode 0660), default DATA/tally.sock\n"
    "  --tcp ADDR:PORT    also serve the binary protocol on TCP (off by default; no\n"
    "                     auth beyond the token: bind to loopback or a private net)\n"
    "  --durability MODE  strict (default): every grant and lease mark is fsynced\n"
    "                     before use; batched: grants fsynced every 100 ms\n"
    "                     (--batch-sync-ms), no lease marks (safe from kill -9; an\n"
    "                     OS crash or power loss may forget the grants of the last\n"
    "                     100 ms: see README)\n"
    "  --wait-ms MS       longest wait of a request for its tenant's supervisor\n"
    "                     (default 50)\n"
    "  --idle-exit-ms MS  a supervisor with no message for this long exits; the\n"
    "                     next request brings it back (default 10000)\n"
    "  --max-supervisors N  supervisor processes running at once (1 to 100000;\n"
    "                     default: an eighth of the memory at 2 MiB each, at most\n"
    "                     a quarter of the open-file limit, 64 to 4096); at the\n"
    "                     ceiling the least recently used hibernates and the\n"
    "                     tenant that needs one waits for it\n"
    "  --max-connections N  open connections per protocol (default 10000, 1 to\n"
    "                     1000000): HTTP, and the binary protocol (Unix + TCP); one\n"
    "                     more gets 503 too_many_connections (HTTP) or ERROR -18\n"
    "                     \"too many connections\" (binary), then is closed\n"
    "  --batch-sync-ms MS with --durability batched only: the longest a grant\n"
    "                     stays unsynced (default 100, 1 to 60000): an OS crash or\n"
    "                     power loss may forget the grants of the last MS\n"
    "  --journal-compact-rows N  a supervisor compacts its journal once it grew by\n"
    "                     N rows (default 4096, 16 to 100000000); tuning and tests\n"
    "  --child-idle-ms MS a child counter (tenant, endpoint) with no request for\n"
    "                     this long returns its leases, closes its file and is\n"
    "                     freed; its next request opens it again (default 60000,\n"
    "                     1 to 86400000)\n"
    "  --max-open-children N  child counter files open at once, about 3\n"
    "                     descriptors each (default 1024, 1 to 1000000): above it\n"
    "                     the least recently used idle one closes first; the soft\n"
    "                     ulimit -n is raised (up to the hard one) to fit them\n"
    "  --keep-lease-ms MS longest life of a kept lease, cut at the end of its\n"
    "                     windows (default 3600000, 5000 to 31536000000): longer\n"
    "                     means fewer supervisor round trips, shorter means less\n"
    "                     stranded when a holder vanishes\n"
    "  --election-timeout-ms MS  in a cluster (tally cluster init): how long\n"
    "                     followers wait for the leader before electing another\n"
    "                     (default 1000, 100 to 60000)\n"
    "  --snapshot-every N in a cluster: log batches between two snapshots of the\n"
    "                     state (members, tally.db, every ledger), after which the\n"
    "                     log forgets them (default 100000, 16 to 100000000)\n"
    "\n";
/* The rest (one string would pass the 4095 bytes C guarantees). */
static const char usage_tail[] =
    "  --log-level LEVEL  lowest level logged: debug, info (default), warn, error\n"
    "\n"
    "HTTP: /v1/check, /v1/release, /healthz, /metrics (Prometheus text).\n"
    "Binary protocol: proto/PROTOCOL.md. Every HTTP answer carries Cache-Control: no-store.\n"
    "Logs: one JSON line on stderr per event (start, reload, supervisor start/exit,\n"
    "endpoint degraded/recovered, stop), none per request, never a token.\n"
    "\n"
    "exit codes:\n"
    "  0 stopped by SIGINT or SIGTERM    1 runtime failure (address in use, another\n"
    "                                    tallyd on this data dir, ...)\n"
    "  64 usage error                    78 data dir not initialised\n";

/* "1.2.3.4:80" or "[::1]:80" into host (64 bytes), *port, *ipv6. */
static bool
parse_addr(const char *s, char *out_host, int *out_port, bool *out_ipv6)
{
    const char *port_s, *host_end;
    const char *host = s;
    unsigned char probe[16];
    size_t len, i;
    long port = 0;

    if (s[0] == '[') {
        host = s + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL || host_end[1] != ':')
            return false;
        port_s = host_end + 2;
        *out_ipv6 = true;
    } else {
        host_end = strrchr(s, ':');
        if (host_end == NULL)
            return false;
        port_s = host_end + 1;
        *out_ipv6 = false;
    }
    len = (size_t)(host_end - host);
    if (len == 0 || len >= 64)
        return false;
    memcpy(out_host, host, len);
    out_host[len] = '\0';
    if (uv_inet_pton(*out_ipv6 ? AF_INET6 : AF_INET, out_host, probe) != 0)
        return false;
    len = strlen(port_s);
    if (len == 0 || len > 5)
        return false;
    for (i = 0; i < len; i++) {
        if (port_s[i] < '0' || port_s[i] > '9')
            return false;
        port = port * 10 + (port_s[i] - '0');
    }
    if (port > 65535)
        return false;
    *out_port = (int)port;
    return true;
}

/* A whole number (milliseconds, or a count) in [min, max]; absent gives dflt. */
static bool
parse_ms(const char *s, int64_t min, int64_t max, int64_t dflt, int64_t *out)
{
    int64_t v = 0;
    const char *p;

    if (s == NULL) {
        *out = dflt;
        return true;
    }
    for (p = s; *p >= '0' && *p <= '9' && v <= max; p++)
        v = v * 10 + (*p - '0');
    if (p == s || *p != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

int
tallyd_parse_args(int argc, char **argv, struct tallyd_opts *o)
{
    static const char *const names[] = {"--data",
                                        "--http",
                                        "--socket",
                                        "--durability",
                                        "--wait-ms",
                                        "--idle-exit-ms",
                                        "--supervise",
                                        "--tcp",
                                        "--log-level",
                                        "--max-supervisors",
                                        "--max-connections",
                                        "--batch-sync-ms",
                                        "--journal-compact-rows",
                                        "--child-idle-ms",
                                        "--max-open-children",
                                        "--keep-lease-ms",
                                        "--fork-server",
                                        "--callers",
                                        "--election-timeout-ms",
                                        "--snapshot-every"};
    const char **slots[] = {&o->data,
                            &o->http,
                            &o->socket,
                            &o->durability,
                            &o->wait_ms,
                            &o->idle_exit_ms,
                            &o->supervise,
                            &o->tcp,
                            &o->log_level,
                            &o->max_supervisors,
                            &o->max_connections,
                            &o->batch_sync_ms,
                            &o->journal_compact_rows,
                            &o->child_idle_ms,
                            &o->max_open_children,
                            &o->keep_lease_ms,
                            &o->fork_server,
                            &o->callers,
                            &o->election_timeout_ms,
                            &o->snapshot_every};
    enum tally_log_level level;
    struct sockaddr_un sun;
    int i;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL, *eq;
        size_t k, name_len;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage_text, stdout);
            fputs(usage_tail, stdout);
            return TALLYD_EXIT_OK;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("tallyd %s\n", TALLY_VERSION);
            return TALLYD_EXIT_OK;
        }
        eq = strchr(arg, '=');
        name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (strlen(names[k]) == name_len && strncmp(arg, names[k], name_len) == 0)
                break;
        }
        if (k == sizeof(names) / sizeof(names[0]))
            return tallyd_fail(TALLYD_EXIT_USAGE, "%s '%s'; see 'tallyd --help'",
                               arg[0] == '-' ? "unknown option" : "unexpected argument", arg);
        if (eq != NULL)
            value = eq + 1;
        else if (i + 1 < argc)
            value = argv[++i];
        if (value == NULL || value[0] == '\0')
            return tallyd_fail(TALLYD_EXIT_USAGE, "option %s needs a value; see 'tallyd --help'",
                               names[k]);
        *slots[k] = value;
    }
    if (o->http == NULL)
        o->http = "127.0.0.1:8080";
    if (!parse_addr(o->http, o->host, &o->port, &o->ipv6))
        return tallyd_fail(TALLYD_EXIT_USAGE,
                           "invalid --http '%s': use IPV4:PORT or [IPV6]:PORT, port 0-65535",
                           o->http);
    if (o->tcp != NULL && !parse_addr(o->tcp, o->tcp_host, &o->tcp_port, &o->tcp_ipv6))
        return tallyd_fail(TALLYD_EXIT_USAGE,
                           "invalid --tcp '%s': use IPV4:PORT or [IPV6]:PORT, port 0-65535",
                           o->tcp);
    if (o->log_level != NULL) {
        if (tally_log_level_parse(o->log_level, &level) != TALLY_OK)
            return tallyd_fail(TALLYD_EXIT_USAGE,
                               "invalid --log-level '%s': use debug, info, warn or error",
                               o->log_level);
        tally_log_set_level(level);
    }
    if (o->durability == NULL)
        o->durability = "strict";
    if (strcmp(o->durability, "strict") != 0 && strcmp(o->durability, "batched") != 0)
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --durability '%s': use strict or batched",
                           o->durability);
    if (!parse_ms(o->election_timeout_ms, 100, 60000, 1000, &o->election))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --election-timeout-ms '%s': 100 to 60000",
                           o->election_timeout_ms);
    if (!parse_ms(o->snapshot_every, 16, 100000000, 100000, &o->snapshots))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --snapshot-every '%s': 16 to 100000000",
                           o->snapshot_every);
    if (!parse_ms(o->wait_ms, 1, 60000, 50, &o->wait))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --wait-ms '%s': 1 to 60000", o->wait_ms);
    if (!parse_ms(o->idle_exit_ms, 1, 86400000, 10000, &o->idle_exit))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --idle-exit-ms '%s': 1 to 86400000",
                           o->idle_exit_ms);
    if (!parse_ms(o->max_supervisors, 1, 100000, 0, &o->max_sups))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --max-supervisors '%s': 1 to 100000",
                           o->max_supervisors);
    if (!parse_ms(o->max_connections, 1, PROTO_HTTP_LIMIT_CONNECTIONS,
                  PROTO_HTTP_DEFAULT_MAX_CONNECTIONS, &o->max_conns))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --max-connections '%s': 1 to %d",
                           o->max_connections, PROTO_HTTP_LIMIT_CONNECTIONS);
    if (o->batch_sync_ms != NULL && strcmp(o->durability, "batched") != 0)
        return tallyd_fail(TALLYD_EXIT_USAGE, "--batch-sync-ms needs --durability batched");
    if (!parse_ms(o->batch_sync_ms, 1, 60000, 0, &o->batch_sync))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --batch-sync-ms '%s': 1 to 60000",
                           o->batch_sync_ms);
    if (!parse_ms(o->journal_compact_rows, 16, 100000000, 0, &o->compact_rows))
        return tallyd_fail(TALLYD_EXIT_USAGE,
                           "invalid --journal-compact-rows '%s': 16 to 100000000",
                           o->journal_compact_rows);
    if (!parse_ms(o->child_idle_ms, 1, 86400000, 60000, &o->child_idle))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --child-idle-ms '%s': 1 to 86400000",
                           o->child_idle_ms);
    if (!parse_ms(o->keep_lease_ms, 5000, 31536000000, 0, &o->keep_lease))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --keep-lease-ms '%s': 5000 to 31536000000",
                           o->keep_lease_ms);
    if (!parse_ms(o->max_open_children, 1, 1000000, 1024, &o->max_open))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --max-open-children '%s': 1 to 1000000",
                           o->max_open_children);
    if (!parse_ms(o->callers, 0, SUP_CALLER_SHARDS - 1, 0, &o->callers_shard))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid --callers '%s': 0 to %d", o->callers,
                           SUP_CALLER_SHARDS - 1);
    if (o->supervise != NULL && !tenant_name_valid(o->supervise))
        return tallyd_fail(TALLYD_EXIT_USAGE, "invalid tenant name for --supervise");
    if (o->socket != NULL && strlen(o->socket) >= sizeof(sun.sun_path))
        return tallyd_fail(TALLYD_EXIT_USAGE, "--socket path is longer than %zu bytes",
                           sizeof(sun.sun_path) - 1);
    return -1;
}

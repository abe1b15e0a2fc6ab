/*
 * tallyd's command line (docs/DESIGN.md §9): the options, their checks and the
 * usage text (cli/tallyd_args.c).
 */
#ifndef TALLYD_ARGS_H
#define TALLYD_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "tally_log.h"

enum tallyd_exit {
    TALLYD_EXIT_OK = 0,
    TALLYD_EXIT_FAIL = 1,
    TALLYD_EXIT_USAGE = 64,
    TALLYD_EXIT_CONFIG = 78
};

struct tallyd_opts {
    const char *data;
    const char *http;
    const char *socket;
    const char *durability;
    const char *wait_ms;
    const char *idle_exit_ms;
    const char *supervise; /* internal: run as the supervisor of this tenant */
    const char *tcp;
    const char *log_level;
    const char *max_supervisors;
    const char *max_connections;
    const char *batch_sync_ms;
    const char *journal_compact_rows;
    const char *child_idle_ms;
    const char *max_open_children;
    const char *keep_lease_ms;
    const char *election_timeout_ms;
    const char *snapshot_every;
    const char *callers;     /* internal: run as caller authority N (sup_callers.h) */
    const char *fork_server; /* internal: run as the fork server; the value is spare room for
                                the title of each supervisor it forks */
    int64_t wait;
    int64_t idle_exit;
    int64_t max_sups;
    int64_t max_conns;
    int64_t batch_sync;    /* --batch-sync-ms, 0 when not given (strict) */
    int64_t compact_rows;  /* --journal-compact-rows, 0 when not given */
    int64_t child_idle;    /* --child-idle-ms */
    int64_t max_open;      /* --max-open-children */
    int64_t keep_lease;    /* --keep-lease-ms, 0 when not given */
    int64_t election;      /* --election-timeout-ms */
    int64_t snapshots;     /* --snapshot-every */
    int64_t callers_shard; /* --callers */
    char host[64];         /* from --http, without brackets */
    int port;
    bool ipv6;
    char tcp_host[64]; /* from --tcp */
    int tcp_port;
    bool tcp_ipv6;
};

/** Parses argv into *o (zeroed by the caller), checking every value. Returns -1 to go on, else
 *  the exit code (after --help, --version or a usage error, which it prints). */
int tallyd_parse_args(int argc, char **argv, struct tallyd_opts *o);
/** The daemon (tallyd.c): parses argv, then serves or supervises; returns the exit code. */
int tallyd_main(int argc, char **argv);
/** Prints "tallyd: MESSAGE" on stderr; returns code. */
#define tallyd_fail(code, ...) tally_fail("tallyd", (code), __VA_ARGS__)

#endif /* TALLYD_ARGS_H */

/*
 * tallyd: the daemon's body, tallyd_main(), called by the thin main
 * (tallyd_main.c) and by the suites' build with the power-loss shim
 * (tests/support/tallyd_powerloss.c). It parses the command line (tallyd_args.c),
 * checks that the data dir was initialised, hardens the process, and then either
 * serves (sup_server_run, supervisor/front/) or, with --supervise, is one tenant's
 * supervisor process, spawned by tallyd itself (sup_process_run,
 * supervisor/ledger/), or, with --fork-server, is the helper that forks them
 * (sup_forkserver_run).
 */
#include "store.h"
#include "store_paths.h"
#include "sup_callers.h"
#include "sup_front.h"
#include "sup_ledger.h"
#include "tally_log.h"
#include "tallyd_args.h"
#include "tenant.h"

#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The argument strings from `--fork-server` to the last, when they lie end to end
 * as the kernel lays them out: the room each forked supervisor writes its title
 * into (title_len excludes the last terminator, which stays). */
static char *
title_room(int argc, char **argv, size_t *title_len)
{
    int i, from = -1;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fork-server") == 0)
            from = i;
    }
    if (from < 0)
        return NULL;
    for (i = from; i + 1 < argc; i++) {
        if (argv[i + 1] != argv[i] + strlen(argv[i]) + 1)
            return NULL;
    }
    *title_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[from]);
    return argv[from];
}

int
tallyd_main(int argc, char **argv)
{
    struct sigaction sa;
    struct tallyd_opts o;
    const char *data;
    char lock[STORE_PATH_MAX];
    struct tally_log l;
    bool dumpable = false;
    int lock_fd = -1;
    int code, rc;

    memset(&o, 0, sizeof(o));
    code = tallyd_parse_args(argc, argv, &o);
    if (code >= 0)
        return code;
    data = store_datadir_pick(o.data, TALLY_DEFAULT_DATA_DIR);
    if (store_datadir_check(data) != TALLY_OK)
        return tallyd_fail(TALLYD_EXIT_CONFIG,
                           "data directory %s is not initialised: run 'tally init --data %s'", data,
                           data);
    /* A peer that went away is UV_EPIPE on the write, not a signal. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
    if (sodium_init() < 0)
        return tallyd_fail(TALLYD_EXIT_FAIL, "cannot initialise libsodium");
    /* Secrets: files private whatever the caller's umask; no core file and no
     * ptrace by others (TALLY_DUMPABLE=1 keeps them, for debugging). */
    umask(077);
    rc = store_process_private(&dumpable);
    if ((rc != TALLY_OK || dumpable) && tally_log_begin(&l, TALLY_LOG_WARN, "process_dumpable")) {
        /* Core files and ptrace by this user can read the key and tokens in flight. */
        tally_log_str(&l, "reason", rc != TALLY_OK ? "prctl failed" : "TALLY_DUMPABLE=1");
        if (rc != TALLY_OK)
            tally_log_str(&l, "error", tally_strerror(rc));
        tally_log_end(&l);
    }
    if (o.callers != NULL) {
        struct sup_callers_opts co = {
            .data = data,
            .shard = (unsigned)o.callers_shard,
            .strict = strcmp(o.durability, "strict") == 0,
            .idle_exit_ms = o.idle_exit,
            .channel_fd = 3,
        };
        return sup_callers_run(&co);
    }
    if (o.supervise != NULL || o.fork_server != NULL) {
        struct sup_process_opts so = {
            .data = data,
            .tenant = o.supervise,
            .strict = strcmp(o.durability, "strict") == 0,
            .idle_exit_ms = o.idle_exit,
            .channel_fd = 3,
            .batch_sync_ms = o.batch_sync,
            .journal_compact_rows = (uint64_t)o.compact_rows,
            .keep_lease_ms = o.keep_lease,
        };
        size_t title_len = 0;
        char *title;

        if (o.supervise != NULL)
            return sup_process_run(&so);
        title = title_room(argc, argv, &title_len);
        return sup_forkserver_run(&so, 3, title, title_len);
    }
    snprintf(lock, sizeof(lock), "%s/tallyd.lock", data);
    rc = store_lock_take(lock, &lock_fd);
    if (rc == TALLY_ELOCKED)
        return tallyd_fail(TALLYD_EXIT_FAIL, "another tallyd is running on %s", data);
    if (rc != TALLY_OK)
        return tallyd_fail(TALLYD_EXIT_FAIL, "cannot lock %s: %s", lock, tally_strerror(rc));
    {
        struct sup_server_opts so = {
            .data = data,
            .http = o.http,
            .host = o.host,
            .port = o.port,
            .ipv6 = o.ipv6,
            .socket = o.socket,
            .tcp = o.tcp,
            .tcp_host = o.tcp_host,
            .tcp_port = o.tcp_port,
            .tcp_ipv6 = o.tcp_ipv6,
            .strict = strcmp(o.durability, "strict") == 0,
            .wait_ms = o.wait,
            .idle_exit_ms = o.idle_exit,
            .max_supervisors =
                o.max_sups > 0 ? (uint32_t)o.max_sups : sup_max_supervisors_default(),
            .max_connections = (uint32_t)o.max_conns,
            .batch_sync_ms = o.batch_sync,
            .journal_compact_rows = (uint64_t)o.compact_rows,
            .keep_lease_ms = o.keep_lease,
            .child_idle_ms = o.child_idle,
            .max_open_children = (uint32_t)o.max_open,
            .election_ms = (uint32_t)o.election,
            .snapshot_every = (uint32_t)o.snapshots,
        };
        code = sup_server_run(&so);
    }
    close(lock_fd);
    return code;
}

/*
 * The supervisor process of one tenant: the single writer of the tenant's
 * budgets. tallyd starts it as `tallyd --supervise TENANT --data DIR ...` with
 * the lease channel on fd 3. It locks the tenant, replays its journal
 * (DATA/tenants/T/ledger.db) into a sup_ledger, and then answers lease
 * messages; the records of each loop turn are committed in one transaction
 * (synchronous=FULL in strict durability) before any reply of that turn is
 * written (output gate). It exits on EOF of its channel (tallyd went away),
 * on SIGTERM/SIGINT, and after idle_exit_ms without a message (hibernation),
 * though not before idle_exit_ms past the latest time a DENY of it told a child
 * to come back, when that time was at most 60 s away.
 */
#ifndef SUP_PROCESS_H
#define SUP_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sup_process_opts {
    const char *data;
    const char *tenant;
    bool strict;          /* synchronous=FULL; NORMAL otherwise (batched) */
    int64_t idle_exit_ms; /* 0 = 10000 */
    int channel_fd;       /* 3 */
    /* Batched: the longest a commit stays unsynced, in ms (tallyd --batch-sync-ms);
     * 0 = 100. Ignored when strict. */
    int64_t batch_sync_ms;
    /* Journal rows since the last compaction that trigger the next (tallyd
     * --journal-compact-rows); 0 = 4096, at least 16. */
    uint64_t journal_compact_rows;
    /* Longest life of a kept lease (tallyd --keep-lease-ms); 0 = the ledger's default (1 h). */
    int64_t keep_lease_ms;
};

/** Runs the supervisor until it should exit; returns the exit status: 0 (idle,
 *  EOF or signal), 75 (another supervisor holds the tenant), 74 (storage error,
 *  the journal is left as it was, or its event loop could not be set up or torn
 *  down: logged), 78 (unknown tenant or data dir). */
int sup_process_run(const struct sup_process_opts *o);

/** Sets SQLite up the way a supervisor wants it (no bulk page cache) and
 *  initialises it; once per process, before any database is opened. The fork
 *  server calls it before forking so its children start with it done;
 *  sup_process_run calls it otherwise. */
void sup_process_prepare(void);
/** In a spare (a process forked ahead of its tenant): does what sup_process_run would do
 *  first for any tenant of o->data (the process's first writes to its memory, its
 *  connection to tally.db, kept for the first read of the configuration). Failures are
 *  left for sup_process_run to meet and report. */
void sup_process_warm(const struct sup_process_opts *o);

/* The fork server's message version (forkserver.c describes the messages). */
#define SUP_FORK_VERSION 1
/* An unsolicited message of the fork server: this byte, then a spare's pid (4 bytes, little
 * endian). tallyd, its parent, reaps it if it dies before it has a tenant. */
#define SUP_FORK_SPARE 2

/** Runs the fork server on control socket `ctl` (SOCK_SEQPACKET): forks one
 *  supervisor per request, `tmpl` giving every option but the tenant and fd;
 *  `title` (title_len bytes of this process's argument strings, borrowed) is
 *  overwritten in each child with `--supervise TENANT`, NULL to leave it.
 *  Returns 0 at EOF of ctl; a child never returns (it exits with
 *  sup_process_run's status). Single-threaded process only. */
int sup_forkserver_run(const struct sup_process_opts *tmpl, int ctl, char *title, size_t title_len);

#endif /* SUP_PROCESS_H */

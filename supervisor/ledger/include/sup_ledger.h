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

#include "proto_lease.h"
#include "store_snapshot.h"
#include "tenant.h"

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

/* A never-seen tenant's first turn, made without its supervisor (first_turn.c): the requests
 * of its first child counters (a HELLO and the ACQUIREs behind it), at most this many. */
#define SUP_FIRST_TURN_MAX 32

/* The tenant's configuration, as its supervisor would read it. */
struct sup_first_turn {
    const char *tenant;
    const struct tenant_plan *plan;          /* borrowed for sup_first_turn_open, copied */
    const struct tenant_endpoint *endpoints; /* sup_tenant_policies', likewise */
    size_t endpoint_count;
    int64_t keep_lease_ms; /* as sup_process_opts */
    /* Whether a link may call an endpoint now: asked for each ACQUIRE and SLOT_ACQUIRE of the
     * run, on its thread. */
    bool (*link_allows)(void *ctx, const char *link_id, const char *endpoint, int64_t now_ms);
    void *link_ctx;
};

typedef struct sup_first_ledger sup_first_ledger;

/** Any thread: takes the tenant's supervisor.lock and, when the tenant has no ledger yet, makes
 *  it, opens its ledger and commits its first epoch (synchronous=FULL whatever the durability:
 *  a first turn's answers leave once its commit returns). *out is owned by the caller, release
 *  with sup_first_turn_close. TALLY_OK; TALLY_ELOCKED (a supervisor holds the tenant),
 *  TALLY_EEXIST (the tenant has a ledger: its supervisor's to replay), TALLY_ECONFIG, a storage
 *  error, TALLY_ENOMEM: nothing held. */
TALLY_MUST_CHECK int sup_first_turn_open(const char *data, const struct sup_first_turn *t,
                                         sup_first_ledger **out /* OUT */);
/** Any thread, once per fl: the turn over in[0..n_in) (1..SUP_FIRST_TURN_MAX requests, borrowed),
 *  their records committed in one transaction, and only then the replies: out[i] answers in[i],
 *  then the RECALLs that fit in `cap` (>= n_in), *n in all, as a supervisor would have sent
 *  them. TALLY_OK, or a storage error or TALLY_ENOMEM: nothing answered (*n 0), the requests
 *  are the supervisor's to answer. */
TALLY_MUST_CHECK int sup_first_turn_run(sup_first_ledger *fl, const struct proto_lease_msg *in,
                                        size_t n_in, struct proto_lease_msg *out, size_t cap,
                                        size_t *n /* OUT */);
/** Any thread: keeps up to `want` of DATA/pool's ledgers open as a first turn opens a ledger
 *  (store_journal_pool_open): a turn's open then links one into place. *made counts them. */
int sup_first_turn_pool_open(unsigned want, unsigned *made);
/** Any thread: the ledger closed as written (its WAL kept for the supervisor's replay) and the
 *  lock released. NULL is a no-op. */
void sup_first_turn_close(sup_first_ledger *fl);

/** The endpoint policies of tenant `t` (borrowed from `snap`): per endpoint name, the plan's
 *  own or else the default, with its months on the tenant's billing day. *out is owned by the
 *  caller (tally_free), *n entries. TALLY_OK or TALLY_ENOMEM. */
TALLY_MUST_CHECK int sup_tenant_policies(const store_snapshot *snap,
                                         const struct store_snap_tenant *t,
                                         struct tenant_endpoint **out /* OUT */,
                                         size_t *n /* OUT */);

#endif /* SUP_PROCESS_H */

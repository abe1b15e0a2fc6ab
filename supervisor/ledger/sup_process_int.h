/*
 * Internals shared by the supervisor process's files: process.c (the loop, the
 * channel, timers, configuration) and process_journal.c (the journal: commits,
 * batched syncs, compaction, replay). Not installed.
 * process_journal.c logs, stops and reads the clock through process.c's sp_* helpers, and
 * process.c drives the journal: one process, its I/O on one side of the file boundary.
 */
#ifndef SUP_PROCESS_INT_H
#define SUP_PROCESS_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "proto_stream.h"
#include "store_config.h"
#include "store_journal.h"
#include "store_snapshot.h"
#include "sup_lease.h"
#include "sup_ledger.h"
#include "tally_log.h"

#define BATCH_RECORDS      256
#define RELOAD_CHECK_MS    250 /* a change made with tally is in force within 1 s */
#define RELOAD_QUIET_TICKS 4   /* the reload timer stops after this many ticks with no message */
/* The journal is compacted once it has grown by this many rows and by at least
 * the size of the last snapshot (sup_process_opts.journal_compact_rows overrides it). */
#define COMPACT_ROWS_DEFAULT 4096
/* Batched mode: the longest a commit stays unsynced (sup_process_opts.batch_sync_ms,
 * tallyd --batch-sync-ms, overrides it). */
#define BATCH_SYNC_MS_DEFAULT 100

struct sp {
    const struct sup_process_opts *o;
    uv_loop_t loop;
    uv_check_t check;
    uv_timer_t expire_timer;
    uv_timer_t idle_timer;
    uv_timer_t reload_timer; /* runs only while messages come: stopped after a quiet second */
    unsigned quiet_ticks;    /* reload ticks since the last message */
    uv_timer_t sync_timer;   /* batched mode: fsyncs the journal's unsynced commits */
    uv_signal_t sigterm;
    uv_signal_t sigint;
    proto_conn *conn;
    struct store_config_stamp config_stamp; /* tally.db when its configuration was read */
    store_db *journal;
    store_snapshot *snap;
    sup_ledger *ledger;
    struct tenant_endpoint *eps;
    size_t n_eps;
    struct sup_record recs[BATCH_RECORDS];
    struct sup_records batch;
    uint8_t *out;
    size_t out_len;
    size_t out_cap;
    int exit_code;
    bool stopping;
    bool failed;   /* a commit failed: memory is ahead of disk */
    bool unsynced; /* batched mode: commits not yet fsynced */
    uint64_t sync_ms;
    uint64_t records_total;
    uint64_t journal_rows;   /* rows in the journal now */
    uint64_t compacted_rows; /* rows the last compaction left */
    uint64_t compact_rows;
};

extern const struct store_upgrade sp_journal_upgrade; /* format 1 to today's */

/* process.c */
int64_t sp_wall_ms(void);
/** One JSON line (tally_log.h) naming the tenant and this process. */
bool sp_log_begin(const struct sp *s, struct tally_log *l, enum tally_log_level level,
                  const char *event);
void sp_log_event(const struct sp *s, enum tally_log_level level, const char *event);
void sp_log_error(const struct sp *s, enum tally_log_level level, const char *event, int rc,
                  const char *detail);
void sp_stop(struct sp *s, int code);

/* process_config.c */
/** Reads the tenant's configuration into s->snap and resolves its endpoints (s->eps);
 *  TALLY_ENOTFOUND when the tenant is gone. */
int sp_load_config(struct sp *s, const struct store_snap_tenant **t);
/** The ledger's link check: the link belongs to this tenant and may use the endpoint now. */
bool sp_link_allows(void *ctx, const char *link_id, const char *endpoint, int64_t now_ms);
/** In a spare: opens tally.db and reads its schema, for the first sp_load_config. */
void sp_config_warm(const char *data);

/* process_journal.c */
/** Commits the turn's records, then writes its replies; a failed commit stops the process (74)
 *  without a reply. */
void sp_flush(struct sp *s);
/** Replaces the journal by a snapshot of the ledger once it has grown enough. */
void sp_maybe_compact(struct sp *s);
/** Replays the journal into the ledger. TALLY_OK or the error that stopped it. */
int sp_replay(struct sp *s);

#endif /* SUP_PROCESS_INT_H */

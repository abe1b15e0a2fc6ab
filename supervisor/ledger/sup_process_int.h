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
    uint64_t deny_back_ms; /* loop time a DENY told a child to come back at, the latest (0: none) */
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
    bool failed;     /* a commit failed: memory is ahead of disk */
    bool unsynced;   /* batched mode: commits not yet fsynced */
    bool shrink_due; /* the start's memory goes back at the first reload tick */
    uint64_t sync_ms;
    uint64_t records_total;
    uint64_t journal_rows;   /* rows in the journal now */
    uint64_t compacted_rows; /* rows the last compaction left */
    uint64_t compact_rows;
    /* Cluster mode (process_cluster.c): the journal is the cluster log's, written through
     * tallyd; the replies of a turn leave once its records are committed there. */
    bool cluster;
    int64_t started_ms;  /* wall clock at the start, for the ready line */
    uint64_t sync_nonce; /* the SYNC sent; READY must echo it */
    uint64_t jseq;       /* the last BATCH sent */
    uint64_t jdone;      /* the last BATCH committed */
    uint8_t *held;       /* replies waiting for their records' DONE, in order */
    size_t held_len, held_cap;
    struct sp_mark {
        uint64_t seq; /* held[..end) leaves once BATCH seq is done */
        size_t end;
    } * marks;
    size_t n_marks, cap_marks;
    uint8_t *early; /* frames come before READY: [type, flags, id, len, payload]... */
    size_t early_len, early_cap;
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
/** A libuv failure of the process itself (not of storage): the call and libuv's words. */
void sp_log_uv_error(const struct sp *s, const char *event, const char *call, int uv_rc);
/** The exit status for a failed start or open: 75 locked (another supervisor runs), 78 no such
 *  tenant or a bad name, else 74. */
int sp_exit_code_for(int rc);

/* process_config.c */
/** Reads the tenant's configuration into s->snap and resolves its endpoints (s->eps);
 *  TALLY_ENOTFOUND when the tenant is gone. */
int sp_load_config(struct sp *s, const struct store_snap_tenant **t);
/** The ledger's link check: the link belongs to this tenant and may use the endpoint now. */
bool sp_link_allows(void *ctx, const char *link_id, const char *endpoint, int64_t now_ms);
/** Reads tally.db again if it changed (its stamp), and gives the ledger the new limits; a
 *  tenant removed stops the process. Before the ledger is open (a cluster's READY), nothing. */
void sp_reload(struct sp *s);
/** The reload timer (data: the sp): stops itself after RELOAD_QUIET_TICKS quiet ticks. */
void sp_on_reload_tick(uv_timer_t *h);
/** In a spare: opens tally.db and reads its schema, for the first sp_load_config. */
void sp_config_warm(const char *data);
/** Closes the spare's connection to tally.db once the first sp_load_config has read it (with
 *  the memory, at the first reload tick, and at the exit). */
void sp_config_release(void);

/** Queues a reply (or a pushed message: request_id 0) for the end of the turn. */
int sp_queue_reply(struct sp *s, const struct proto_lease_msg *reply, uint32_t request_id);

/* process_cluster.c */
/** True when DATA belongs to a cluster member (DATA/cluster/members exists). */
bool sp_cluster_detect(const char *data);
/** Sends SYNC: READY comes once the log's earlier records are applied here. */
int sp_cluster_sync(struct sp *s);
/** A journal frame from tallyd (READY or DONE); READY runs `ready` (the ledger is opened). */
void sp_cluster_on_frame(struct sp *s, const struct proto_frame *f, void (*ready)(struct sp *s));
/** Keeps a frame that came before READY; sp_cluster_early_each hands them back. */
int sp_cluster_keep_early(struct sp *s, const struct proto_frame *f);
void sp_cluster_early_each(struct sp *s, void (*fn)(struct sp *s, const struct proto_frame *f));
/** Sends records v[0..n) as BATCH frames of `op` (APPEND or CHUNK; BEGIN and END with n 0). */
int sp_cluster_append(struct sp *s, uint8_t op, const struct sup_record *v, size_t n);
/** The turn's replies (s->out): out now, or held until the turn's last BATCH is done. */
void sp_cluster_out(struct sp *s);
void sp_cluster_free(struct sp *s);

/* process.c */
/** Gives back what the start used (SQLite's caches, the heap's free tops): an idle supervisor
 *  keeps little memory. */
void sp_shrink(struct sp *s);

/* process_journal.c */
/** Commits the turn's records, then writes its replies; a failed commit stops the process (74)
 *  without a reply. */
void sp_flush(struct sp *s);
/** Replaces the journal by a snapshot of the ledger once it has grown enough. */
void sp_maybe_compact(struct sp *s);
/** Replays the journal into the ledger. TALLY_OK or the error that stopped it. */
int sp_replay(struct sp *s);

#endif /* SUP_PROCESS_INT_H */

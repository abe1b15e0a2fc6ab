/*
 * The supervisor's journal (process.c holds the loop): each turn's records
 * committed in one transaction before the turn's replies are written, the
 * batched mode's fsync timer, compaction by a snapshot of the ledger, and the
 * replay at start. A commit that fails leaves memory ahead of disk: the
 * process exits 74 without replying and the replay rebuilds what was durable.
 * The file and its SQL are store_journal's; the records' bytes are the codec's
 * (journal_codec.c).
 */
#include "sup_process_int.h"

#include <stdio.h>
#include <string.h>

#include "store_journal.h"
#include "sup_journal_codec.h"

const struct store_upgrade sp_journal_upgrade = {sup_record_upgrade, NULL};

/* A store_record_encode_fn over an array of records (ctx). */
static int
encode_at(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len)
{
    const struct sup_record *v = ctx;

    return sup_record_encode(&v[i], buf, cap, len);
}

/* Batched mode: every commit so far becomes durable. A failed fsync may have
 * lost them (the kernel may drop the dirty pages), so it is a failed commit. */
static void
on_sync(uv_timer_t *t)
{
    struct sp *s = t->data;
    int rc;

    if (s->failed || !s->unsynced)
        return;
    rc = store_db_sync(s->journal);
    if (rc != TALLY_OK) {
        sp_log_error(s, TALLY_LOG_ERROR, "journal_sync_failed", rc, store_db_errmsg(s->journal));
        s->failed = true;
        sp_stop(s, 74);
        return;
    }
    s->unsynced = false;
}

/* Called after each successful commit. */
static void
committed(struct sp *s)
{
    if (s->o->strict || s->cluster) /* a cluster's records are durable in the log */
        return;
    s->unsynced = true;
    if (s->sync_ms > 0 && !uv_is_active((uv_handle_t *)&s->sync_timer))
        uv_timer_start(&s->sync_timer, on_sync, s->sync_ms, 0);
}

/* Cluster mode: BEGIN, the records in CHUNKs, END; each copy swaps at END, all at once. */
static int
replace_on_log(struct sp *s, const struct sup_records *snap)
{
    int rc = sp_cluster_append(s, PROTO_JOURNAL_BEGIN, NULL, 0);

    if (rc == TALLY_OK && snap->count > 0)
        rc = sp_cluster_append(s, PROTO_JOURNAL_CHUNK, snap->v, snap->count);
    if (rc == TALLY_OK)
        rc = sp_cluster_append(s, PROTO_JOURNAL_END, NULL, 0);
    return rc;
}

/* Replaces the journal by a snapshot of the ledger, in one transaction, once it
 * has grown enough: replay at start stays proportional to the live state, not
 * to history. Called between turns only, when every record is durable, so the
 * snapshot is exactly the durable state. A failure changes nothing (the
 * transaction rolls back) and waits for the next threshold. */
void
sp_maybe_compact(struct sp *s)
{
    struct sup_records snap = {NULL, 0, 0};
    uint64_t grown = s->journal_rows - s->compacted_rows;
    size_t needed = 0;
    struct tally_log l;
    int64_t t0;
    int rc;

    if (s->batch.count > 0 || grown < s->compact_rows || grown < s->compacted_rows)
        return;
    t0 = sp_wall_ms();
    rc = sup_ledger_snapshot(s->ledger, &snap, &needed);
    if (rc == TALLY_ETOOBIG) {
        snap.v = tally_calloc(needed, sizeof(*snap.v));
        snap.cap = needed;
        rc = snap.v == NULL ? TALLY_ENOMEM : sup_ledger_snapshot(s->ledger, &snap, &needed);
    }
    if (rc == TALLY_OK && s->cluster) /* on the log: every copy replaced at the same record */
        rc = replace_on_log(s, &snap);
    else if (rc == TALLY_OK)
        rc = store_journal_replace(s->journal, snap.count, encode_at, snap.v);
    if (sp_log_begin(s, &l, rc == TALLY_OK ? TALLY_LOG_INFO : TALLY_LOG_ERROR,
                     "journal_compacted")) {
        tally_log_int(&l, "rows_before", (int64_t)s->journal_rows);
        tally_log_int(&l, "rows_after", (int64_t)(rc == TALLY_OK ? snap.count : s->journal_rows));
        tally_log_int(&l, "ms", sp_wall_ms() - t0);
        if (rc != TALLY_OK)
            tally_log_str(&l, "error", tally_strerror(rc));
        tally_log_end(&l);
    }
    if (rc == TALLY_OK) {
        s->journal_rows = snap.count;
        committed(s);
    }
    s->compacted_rows = s->journal_rows;
    tally_free(snap.v);
}

/* The RECALLs this turn's decisions queued (a budget ran short under kept leases), after the
 * replies: one may name a lease granted in this very turn. They change nothing durable, so
 * one lost (a full channel, a closed one) only lets its lease live to its deadline. */
static void
send_recalls(struct sp *s)
{
    struct proto_lease_msg m;
    uint8_t frame[PROTO_LEASE_FRAME_MAX];

    while (sup_ledger_next_recall(s->ledger, &m) == TALLY_OK) {
        size_t len = 0;
        if (s->conn != NULL && proto_lease_encode(&m, 0, frame, sizeof(frame), &len) == TALLY_OK)
            (void)proto_conn_send(s->conn, frame, len);
    }
}

/* Cluster mode: the RECALLs go after the replies they may follow, held with them. */
static void
queue_recalls(struct sp *s)
{
    struct proto_lease_msg m;

    while (sup_ledger_next_recall(s->ledger, &m) == TALLY_OK)
        (void)sp_queue_reply(s, &m, 0);
}

/* A commit this slow holds every waiting request of the tenant past any --wait-ms: said once
 * per slow commit, so that answers given up at their deadline can be traced to the disk. */
#define COMMIT_SLOW_MS 250

static void
log_slow_commit(struct sp *s, uint64_t t0_ns, uint32_t records)
{
    int64_t ms = (int64_t)((uv_hrtime() - t0_ns) / 1000000);
    struct tally_log l;

    if (ms >= COMMIT_SLOW_MS && sp_log_begin(s, &l, TALLY_LOG_WARN, "journal_commit_slow")) {
        tally_log_int(&l, "ms", ms);
        tally_log_int(&l, "records", records);
        tally_log_end(&l);
    }
}

/* Commits the turn's records, then writes its replies. */
void
sp_flush(struct sp *s)
{
    int rc = TALLY_OK;

    if (s->failed)
        return; /* exiting 74: no second try, no second line, no reply */
    if (s->cluster && s->ledger == NULL)
        return; /* before READY: nothing decided yet */
    if (s->cluster && s->conn == NULL) {
        /* tallyd went away: the turn is lost, unanswered; the log keeps what it had. */
        s->batch.count = 0;
        s->out_len = 0;
        return;
    }
    if (s->batch.count > 0) {
        uint64_t t0 = uv_hrtime();

        rc = s->cluster ? sp_cluster_append(s, PROTO_JOURNAL_APPEND, s->recs, s->batch.count)
                        : store_journal_append(s->journal, s->batch.count, encode_at, s->recs);
        log_slow_commit(s, t0, (uint32_t)s->batch.count);
        if (rc != TALLY_OK) {
            sp_log_error(s, TALLY_LOG_ERROR, "journal_commit_failed", rc,
                         s->cluster ? "not sent to tallyd" : store_db_errmsg(s->journal));
            s->out_len = 0; /* never answer what is not durable */
            s->failed = true;
            sp_stop(s, 74);
            return;
        }
        s->records_total += s->batch.count;
        s->journal_rows += s->batch.count;
        s->batch.count = 0;
        committed(s);
    }
    if (s->cluster) {
        queue_recalls(s);
        sp_cluster_out(s); /* the replies and recalls: with their records */
    } else {
        if (s->out_len > 0 && s->conn != NULL)
            (void)proto_conn_send(s->conn, s->out, s->out_len);
        s->out_len = 0;
        send_recalls(s);
    }
    sp_maybe_compact(s);
}

/* A store_record_visit_fn: one stored record into the ledger (ctx). */
static int
replay_one(void *ctx, const uint8_t *p, size_t len)
{
    struct sp *s = ctx;
    struct sup_record rec;
    int rc = sup_record_decode(p, len, &rec);

    if (rc == TALLY_OK)
        rc = sup_ledger_replay(s->ledger, &rec);
    s->records_total++;
    s->journal_rows++;
    return rc;
}

int
sp_replay(struct sp *s)
{
    return store_journal_each(s->journal, replay_one, s);
}

/*
 * A supervisor in a cluster (sup_process_int.h): its journal is the cluster's log. The leader's
 * tallyd runs every tenant's supervisor; each turn's records go to tallyd as BATCH frames
 * (proto_lease.h), tallyd appends them to the log, and every member, the leader included,
 * writes committed records into its copy of the tenant's journal. The turn's replies leave only
 * once tallyd says the turn's last BATCH is committed on a majority (DONE): in a cluster this
 * replaces "commit, then reply", so a grant answered is in a majority's logs and a new leader
 * replays it. Before replaying its copy, a supervisor asks tallyd for a barrier (SYNC, then
 * READY once every record earlier in the log is applied on this host): the batches of a
 * supervisor of the tenant that went away just before are in the copy it reads.
 */
#include "sup_process_int.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store_paths.h"
#include "sup_journal_codec.h"

bool
sp_cluster_detect(const char *data)
{
    char path[STORE_PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/cluster/members", data);

    return n > 0 && (size_t)n < sizeof(path) && access(path, F_OK) == 0;
}

static void
put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void
put_u32(uint8_t *p, size_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static uint64_t
get_u64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static int
send_frame(struct sp *s, uint8_t type, const uint8_t *payload, size_t len)
{
    uint8_t head[PROTO_FRAME_HEADER];

    if (s->conn == NULL)
        return TALLY_EUNAVAIL;
    proto_frame_header(head, type, 0, 0, len);
    proto_conn_cork(s->conn);
    if (proto_conn_send(s->conn, head, sizeof(head)) != TALLY_OK ||
        (len > 0 && proto_conn_send(s->conn, payload, len) != TALLY_OK)) {
        proto_conn_uncork(s->conn);
        return TALLY_EUNAVAIL;
    }
    proto_conn_uncork(s->conn);
    return TALLY_OK;
}

int
sp_cluster_sync(struct sp *s)
{
    uint8_t p[8];

    randombytes_buf(&s->sync_nonce, sizeof(s->sync_nonce));
    /* Seqs from a random start below 2^62: a DONE for an earlier process is not ours. */
    randombytes_buf(&s->jseq, sizeof(s->jseq));
    s->jseq &= ((uint64_t)1 << 62) - 1;
    s->jdone = s->jseq;
    put_u64(p, s->sync_nonce);
    return send_frame(s, PROTO_JOURNAL_SYNC, p, sizeof(p));
}

/* ---- replies held for their records ---- */

static int
hold(struct sp *s, const uint8_t *p, size_t len, uint64_t seq)
{
    if (s->held_cap - s->held_len < len) {
        size_t cap = s->held_cap == 0 ? 64 * 1024 : s->held_cap;
        uint8_t *n;
        while (cap - s->held_len < len)
            cap *= 2;
        n = tally_realloc(s->held, cap);
        if (n == NULL)
            return TALLY_ENOMEM;
        s->held = n;
        s->held_cap = cap;
    }
    if (s->n_marks > 0 && s->marks[s->n_marks - 1].seq == seq) {
        s->marks[s->n_marks - 1].end += len;
    } else {
        if (s->n_marks == s->cap_marks) {
            size_t cap = s->cap_marks == 0 ? 64 : s->cap_marks * 2;
            struct sp_mark *m = tally_realloc(s->marks, cap * sizeof(*m));
            if (m == NULL)
                return TALLY_ENOMEM;
            s->marks = m;
            s->cap_marks = cap;
        }
        s->marks[s->n_marks].seq = seq;
        s->marks[s->n_marks].end = s->held_len + len;
        s->n_marks++;
    }
    memcpy(s->held + s->held_len, p, len);
    s->held_len += len;
    return TALLY_OK;
}

/* What waited for BATCH jdone leaves, in order. */
static void
release(struct sp *s)
{
    size_t k = 0, end = 0;

    while (k < s->n_marks && s->marks[k].seq <= s->jdone)
        end = s->marks[k++].end;
    if (k == 0)
        return;
    if (s->conn != NULL)
        (void)proto_conn_send(s->conn, s->held, end);
    memmove(s->held, s->held + end, s->held_len - end);
    s->held_len -= end;
    memmove(s->marks, s->marks + k, (s->n_marks - k) * sizeof(*s->marks));
    s->n_marks -= k;
    for (size_t i = 0; i < s->n_marks; i++)
        s->marks[i].end -= end;
}

void
sp_cluster_out(struct sp *s)
{
    if (s->out_len == 0)
        return;
    /* Nothing of this turn or an earlier one waits: out now (a reply that changed nothing
     * still leaves after every reply before it). */
    if (s->jdone == s->jseq && s->n_marks == 0) {
        if (s->conn != NULL)
            (void)proto_conn_send(s->conn, s->out, s->out_len);
    } else if (hold(s, s->out, s->out_len, s->jseq) != TALLY_OK) {
        sp_log_event(s, TALLY_LOG_ERROR, "journal_hold_failed");
        s->failed = true;
        sp_stop(s, 74);
    }
    s->out_len = 0;
}

/* ---- BATCH frames ---- */

static int
send_batch(struct sp *s, uint8_t op, const uint8_t *body, size_t len)
{
    static uint8_t p[9 + PROTO_JOURNAL_BODY_MAX];

    if (len > PROTO_JOURNAL_BODY_MAX)
        return TALLY_ETOOBIG;
    put_u64(p, s->jseq + 1);
    p[8] = op;
    if (len > 0)
        memcpy(p + 9, body, len);
    if (send_frame(s, PROTO_JOURNAL_BATCH, p, 9 + len) != TALLY_OK)
        return TALLY_EUNAVAIL;
    s->jseq++;
    return TALLY_OK;
}

int
sp_cluster_append(struct sp *s, uint8_t op, const struct sup_record *v, size_t n)
{
    static uint8_t body[PROTO_JOURNAL_BODY_MAX];
    size_t len = 4, count = 0;
    int rc;

    if (n == 0)
        return send_batch(s, op, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        size_t rl = 0;
        if (len + 4 + STORE_RECORD_MAX > sizeof(body)) { /* full: this BATCH goes, next one */
            put_u32(body, count);
            rc = send_batch(s, op, body, len);
            if (rc != TALLY_OK)
                return rc;
            len = 4;
            count = 0;
        }
        rc = sup_record_encode(&v[i], body + len + 4, STORE_RECORD_MAX, &rl);
        if (rc != TALLY_OK)
            return rc;
        put_u32(body + len, rl);
        len += 4 + rl;
        count++;
    }
    put_u32(body, count);
    return send_batch(s, op, body, len);
}

/* ---- tallyd's answers ---- */

void
sp_cluster_on_frame(struct sp *s, const struct proto_frame *f, void (*ready)(struct sp *s))
{
    struct tally_log l;

    if (f->type == PROTO_JOURNAL_READY && f->payload_len == 9 && s->ledger == NULL &&
        get_u64(f->payload) == s->sync_nonce) {
        if (f->payload[8] != 0) {
            sp_log_event(s, TALLY_LOG_INFO, "supervisor_not_leader");
            sp_stop(s, 0);
            return;
        }
        ready(s);
        return;
    }
    if (f->type == PROTO_JOURNAL_DONE && f->payload_len == 9 && !s->failed) {
        uint64_t seq = get_u64(f->payload);
        if (seq <= s->jdone || seq > s->jseq)
            return; /* an earlier process's, or a repeat */
        if (f->payload[8] != 0) {
            /* Not known to be committed: memory may be ahead of the log. What the log holds is
             * replayed by the next supervisor; nothing of this one's is answered. */
            if (sp_log_begin(s, &l, TALLY_LOG_WARN, "journal_not_committed")) {
                tally_log_int(&l, "seq", (int64_t)(seq - s->jdone));
                tally_log_end(&l);
            }
            s->failed = true;
            s->held_len = 0;
            s->n_marks = 0;
            sp_stop(s, 74);
            return;
        }
        s->jdone = seq;
        release(s);
    }
}

/* ---- frames before READY ---- */

int
sp_cluster_keep_early(struct sp *s, const struct proto_frame *f)
{
    size_t need = 12 + f->payload_len;

    if (s->early_cap - s->early_len < need) {
        size_t cap = s->early_cap == 0 ? 16 * 1024 : s->early_cap;
        uint8_t *n;
        while (cap - s->early_len < need)
            cap *= 2;
        if (cap > PROTO_CONN_OUT_MAX)
            return TALLY_ETOOBIG;
        n = tally_realloc(s->early, cap);
        if (n == NULL)
            return TALLY_ENOMEM;
        s->early = n;
        s->early_cap = cap;
    }
    proto_frame_header(s->early + s->early_len, f->type, f->flags, f->request_id, f->payload_len);
    memcpy(s->early + s->early_len + 12, f->payload, f->payload_len);
    s->early_len += need;
    return TALLY_OK;
}

void
sp_cluster_early_each(struct sp *s, void (*fn)(struct sp *s, const struct proto_frame *f))
{
    size_t at = 0;

    while (at + 12 <= s->early_len && !s->stopping) {
        const uint8_t *h = s->early + at;
        struct proto_frame f;
        size_t len = ((size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3]) - 8;

        f.version = h[4];
        f.type = h[5];
        f.flags = (uint16_t)(h[6] << 8 | h[7]);
        f.request_id = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
        f.payload = h + 12;
        f.payload_len = len;
        fn(s, &f);
        at += 12 + len;
    }
    tally_free(s->early);
    s->early = NULL;
    s->early_len = s->early_cap = 0;
}

void
sp_cluster_free(struct sp *s)
{
    tally_free(s->held);
    tally_free(s->marks);
    tally_free(s->early);
    s->held = s->early = NULL;
    s->marks = NULL;
}

/*
 * Journal records at rest (sup_journal_codec.h): the ledger owns struct sup_record, so it owns
 * how a record is written to the journal file. Encoding field by field, in little-endian order
 * behind a format byte, means a change to the struct changes this file and its format number,
 * never what an old journal means: a replay meets either a format it reads or a clear refusal.
 * The format-1 decoder reads tally 0.1.0's raw struct bytes at their fixed offsets, once, when
 * such a journal is upgraded in place (store_journal_open).
 */
#include "sup_journal_codec.h"

#include "store_journal.h"
#include "store_record.h"

/* An entry of a HEARTBEAT's debts is in use when it names a link or carries debt: entries
 * after the last one in use are not written (the decoder zero-fills them). */
static uint8_t
entries_used(const struct sup_record *r)
{
    uint8_t n = PROTO_LEASE_HB_MAX;

    while (n > 0 && r->e[n - 1].link[0] == '\0' && r->e[n - 1].debt == 0)
        n--;
    return n;
}

int
sup_record_encode(const struct sup_record *r, uint8_t *buf, size_t cap, size_t *len)
{
    struct store_rec_writer w;
    uint8_t ne = entries_used(r);
    size_t i;

    *len = 0;
    if (cap < SUP_RECORD_ENCODED_MAX)
        return TALLY_ETOOBIG;
    store_rec_writer_init(&w, buf, cap);
    store_rec_put_u8(&w, SUP_RECORD_FORMAT);
    store_rec_put_u32(&w, r->kind);
    store_rec_put_u32(&w, r->flags);
    store_rec_put_u32(&w, r->holders);
    store_rec_put_i64(&w, r->now_ms);
    store_rec_put_str(&w, r->origin.child, sizeof(r->origin.child));
    store_rec_put_u64(&w, r->origin.incarnation);
    store_rec_put_u64(&w, r->origin.seq);
    store_rec_put_str(&w, r->endpoint, sizeof(r->endpoint));
    store_rec_put_str(&w, r->link, sizeof(r->link));
    store_rec_put_u64(&w, r->lease_id);
    store_rec_put_i64(&w, r->n);
    store_rec_put_i64(&w, r->ttl_ms);
    store_rec_put_i64(&w, r->deadline_ms);
    store_rec_put_u64(&w, r->report_lease);
    store_rec_put_i64(&w, r->report_used);
    store_rec_put_i64(&w, r->credited);
    store_rec_put_i64(&w, r->debt);
    store_rec_put_u64(&w, r->epoch);
    store_rec_put_i64(&w, r->retry_after_ms);
    store_rec_put_i64(&w, r->limit);
    store_rec_put_u32(&w, r->scope);
    store_rec_put_u32(&w, r->deny_flags);
    store_rec_put_i64(&w, r->slot_id);
    store_rec_put_u32(&w, r->count);
    store_rec_put_u32(&w, r->error);
    store_rec_put_i64(&w, r->period_ms);
    for (i = 0; i < 4; i++)
        store_rec_put_i64(&w, r->v[i]);
    store_rec_put_u8(&w, ne);
    for (i = 0; i < ne; i++) {
        store_rec_put_str(&w, r->e[i].link, sizeof(r->e[i].link));
        store_rec_put_i64(&w, r->e[i].debt);
    }
    if (w.bad)
        return TALLY_EINVAL; /* a string without its NUL: every record fits in the maximum */
    *len = w.at;
    return TALLY_OK;
}

int
sup_record_decode(const uint8_t *p, size_t len, struct sup_record *out)
{
    struct store_rec_reader r;
    uint8_t format, ne;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (len == 0)
        return TALLY_ECORRUPT;
    format = p[0];
    if (format > SUP_RECORD_FORMAT)
        return TALLY_ESCHEMA;
    if (format != SUP_RECORD_FORMAT)
        return TALLY_ECORRUPT; /* format 1 is only read by the upgrade of a format-1 file */
    store_rec_reader_init(&r, p + 1, len - 1);
    out->version = SUP_RECORD_VERSION;
    out->kind = store_rec_get_u32(&r);
    out->flags = store_rec_get_u32(&r);
    out->holders = store_rec_get_u32(&r);
    out->now_ms = store_rec_get_i64(&r);
    store_rec_get_str(&r, out->origin.child, sizeof(out->origin.child));
    out->origin.incarnation = store_rec_get_u64(&r);
    out->origin.seq = store_rec_get_u64(&r);
    store_rec_get_str(&r, out->endpoint, sizeof(out->endpoint));
    store_rec_get_str(&r, out->link, sizeof(out->link));
    out->lease_id = store_rec_get_u64(&r);
    out->n = store_rec_get_i64(&r);
    out->ttl_ms = store_rec_get_i64(&r);
    out->deadline_ms = store_rec_get_i64(&r);
    out->report_lease = store_rec_get_u64(&r);
    out->report_used = store_rec_get_i64(&r);
    out->credited = store_rec_get_i64(&r);
    out->debt = store_rec_get_i64(&r);
    out->epoch = store_rec_get_u64(&r);
    out->retry_after_ms = store_rec_get_i64(&r);
    out->limit = store_rec_get_i64(&r);
    out->scope = store_rec_get_u32(&r);
    out->deny_flags = store_rec_get_u32(&r);
    out->slot_id = store_rec_get_i64(&r);
    out->count = store_rec_get_u32(&r);
    out->error = store_rec_get_u32(&r);
    out->period_ms = store_rec_get_i64(&r);
    for (i = 0; i < 4; i++)
        out->v[i] = store_rec_get_i64(&r);
    ne = store_rec_get_u8(&r);
    if (ne > PROTO_LEASE_HB_MAX)
        r.bad = true;
    for (i = 0; i < ne && !r.bad; i++) {
        store_rec_get_str(&r, out->e[i].link, sizeof(out->e[i].link));
        out->e[i].debt = store_rec_get_i64(&r);
    }
    if (!store_rec_reader_done(&r)) {
        memset(out, 0, sizeof(*out));
        return TALLY_ECORRUPT;
    }
    return TALLY_OK;
}

/* Format 1: struct sup_record of tally 0.1.0 on x86-64, little-endian, no padding:
 *   0 version u32 (1)   4 kind u32   8 flags u32   12 holders u32   16 now_ms i64
 *   24 origin.child char[64]   88 origin.incarnation u64   96 origin.seq u64
 *   104 endpoint char[64]   168 link char[24]   192 lease_id   200 n   208 ttl_ms
 *   216 deadline_ms   224 report_lease   232 report_used   240 credited   248 debt
 *   256 epoch   264 retry_after_ms   272 limit (8 bytes each)   280 scope u32
 *   284 deny_flags u32   288 slot_id i64   296 count u32   300 error u32   304 period_ms i64
 *   312 v[4] i64   344 e[4] {link char[24], debt i64}   472 end. */
int
sup_record_decode_v1(const uint8_t *p, size_t len, struct sup_record *out)
{
    struct store_rec_reader r;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (len != SUP_RECORD_V1_SIZE)
        return TALLY_ECORRUPT;
    store_rec_reader_init(&r, p, len);
    if (store_rec_get_u32(&r) != 1)
        return TALLY_ECORRUPT;
    out->version = SUP_RECORD_VERSION;
    out->kind = store_rec_get_u32(&r);
    out->flags = store_rec_get_u32(&r);
    out->holders = store_rec_get_u32(&r);
    out->now_ms = store_rec_get_i64(&r);
    store_rec_get_chars(&r, out->origin.child, sizeof(out->origin.child), 64);
    out->origin.incarnation = store_rec_get_u64(&r);
    out->origin.seq = store_rec_get_u64(&r);
    store_rec_get_chars(&r, out->endpoint, sizeof(out->endpoint), 64);
    store_rec_get_chars(&r, out->link, sizeof(out->link), 24);
    out->lease_id = store_rec_get_u64(&r);
    out->n = store_rec_get_i64(&r);
    out->ttl_ms = store_rec_get_i64(&r);
    out->deadline_ms = store_rec_get_i64(&r);
    out->report_lease = store_rec_get_u64(&r);
    out->report_used = store_rec_get_i64(&r);
    out->credited = store_rec_get_i64(&r);
    out->debt = store_rec_get_i64(&r);
    out->epoch = store_rec_get_u64(&r);
    out->retry_after_ms = store_rec_get_i64(&r);
    out->limit = store_rec_get_i64(&r);
    out->scope = store_rec_get_u32(&r);
    out->deny_flags = store_rec_get_u32(&r);
    out->slot_id = store_rec_get_i64(&r);
    out->count = store_rec_get_u32(&r);
    out->error = store_rec_get_u32(&r);
    out->period_ms = store_rec_get_i64(&r);
    for (i = 0; i < 4; i++)
        out->v[i] = store_rec_get_i64(&r);
    for (i = 0; i < 4; i++) {
        char spare[24];
        int64_t debt;
        if (i < PROTO_LEASE_HB_MAX) {
            store_rec_get_chars(&r, out->e[i].link, sizeof(out->e[i].link), 24);
            out->e[i].debt = store_rec_get_i64(&r);
            continue;
        }
        store_rec_get_chars(&r, spare, sizeof(spare), 24);
        debt = store_rec_get_i64(&r);
        if (spare[0] != '\0' || debt != 0)
            r.bad = true; /* more debts than this binary's heartbeat holds */
    }
    if (!store_rec_reader_done(&r)) {
        memset(out, 0, sizeof(*out));
        return TALLY_ECORRUPT;
    }
    return TALLY_OK;
}

int
sup_record_upgrade(void *ctx, int from_format, const uint8_t *old, size_t old_len, uint8_t *buf,
                   size_t cap, size_t *len)
{
    struct sup_record rec;
    int rc;

    (void)ctx;
    *len = 0;
    if (from_format != 1)
        return TALLY_ESCHEMA;
    rc = sup_record_decode_v1(old, old_len, &rec);
    if (rc == TALLY_OK)
        rc = sup_record_encode(&rec, buf, cap, len);
    return rc;
}

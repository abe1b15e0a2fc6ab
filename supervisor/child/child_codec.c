/*
 * Lease rows at rest (sup_child_codec.h): the child owns struct sup_child_lease_rec, so it owns
 * how a row is written to its file. Encoding field by field, in little-endian order behind a
 * format byte, means a change to the struct changes this file and its format number, never
 * what an old row means. The format-1 decoder reads tally 0.1.0's raw struct bytes at their
 * fixed offsets, once, when such a file is upgraded in place (store_child_open).
 */
#include "sup_child_codec.h"

#include "store_record.h"

int
sup_child_rec_encode(const struct sup_child_lease_rec *r, uint8_t *buf, size_t cap, size_t *len)
{
    struct store_rec_writer w;

    *len = 0;
    if (cap < SUP_CHILD_REC_ENCODED_MAX)
        return TALLY_ETOOBIG;
    store_rec_writer_init(&w, buf, cap);
    store_rec_put_u8(&w, SUP_CHILD_REC_FORMAT);
    store_rec_put_u64(&w, r->lease_id);
    store_rec_put_u64(&w, r->incarnation);
    store_rec_put_str(&w, r->link, sizeof(r->link));
    store_rec_put_i64(&w, r->n);
    store_rec_put_i64(&w, r->mark);
    store_rec_put_i64(&w, r->ttl_ms);
    store_rec_put_i64(&w, r->sent_mono_ms);
    store_rec_put_i64(&w, r->deadline_mono_ms);
    store_rec_put_i64(&w, r->deadline_wall_ms);
    store_rec_put_u8(&w, (uint8_t)(r->flags & SUP_CHILD_REC_ALL));
    if (w.bad)
        return TALLY_EINVAL; /* a link without its NUL: every row fits in the maximum */
    *len = w.at;
    return TALLY_OK;
}

int
sup_child_rec_decode(const uint8_t *p, size_t len, struct sup_child_lease_rec *out)
{
    struct store_rec_reader r;

    memset(out, 0, sizeof(*out));
    if (len == 0)
        return TALLY_ECORRUPT;
    if (p[0] > SUP_CHILD_REC_FORMAT)
        return TALLY_ESCHEMA;
    if (p[0] < 2)
        return TALLY_ECORRUPT; /* format 1 is only read by the upgrade of a format-1 file */
    store_rec_reader_init(&r, p + 1, len - 1);
    out->lease_id = store_rec_get_u64(&r);
    out->incarnation = store_rec_get_u64(&r);
    store_rec_get_str(&r, out->link, sizeof(out->link));
    out->n = store_rec_get_i64(&r);
    out->mark = store_rec_get_i64(&r);
    out->ttl_ms = store_rec_get_i64(&r);
    out->sent_mono_ms = store_rec_get_i64(&r);
    out->deadline_mono_ms = store_rec_get_i64(&r);
    out->deadline_wall_ms = store_rec_get_i64(&r);
    if (p[0] >= 3)
        out->flags = store_rec_get_u8(&r); /* format 2 had none */
    if (!store_rec_reader_done(&r) || (out->flags & ~SUP_CHILD_REC_ALL) != 0) {
        memset(out, 0, sizeof(*out));
        return TALLY_ECORRUPT;
    }
    return TALLY_OK;
}

/* Format 1: struct sup_child_lease_rec of tally 0.1.0 on x86-64, little-endian, no padding:
 *   0 lease_id u64   8 incarnation u64   16 link char[24]   40 n   48 mark   56 ttl_ms
 *   64 sent_mono_ms   72 deadline_mono_ms   80 deadline_wall_ms (i64 each)   88 end. */
int
sup_child_rec_decode_v1(const uint8_t *p, size_t len, struct sup_child_lease_rec *out)
{
    struct store_rec_reader r;

    memset(out, 0, sizeof(*out));
    if (len != SUP_CHILD_REC_V1_SIZE)
        return TALLY_ECORRUPT;
    store_rec_reader_init(&r, p, len);
    out->lease_id = store_rec_get_u64(&r);
    out->incarnation = store_rec_get_u64(&r);
    store_rec_get_chars(&r, out->link, sizeof(out->link), 24);
    out->n = store_rec_get_i64(&r);
    out->mark = store_rec_get_i64(&r);
    out->ttl_ms = store_rec_get_i64(&r);
    out->sent_mono_ms = store_rec_get_i64(&r);
    out->deadline_mono_ms = store_rec_get_i64(&r);
    out->deadline_wall_ms = store_rec_get_i64(&r);
    if (!store_rec_reader_done(&r)) {
        memset(out, 0, sizeof(*out));
        return TALLY_ECORRUPT;
    }
    return TALLY_OK;
}

int
sup_child_rec_upgrade(void *ctx, int from_format, const uint8_t *old, size_t old_len, uint8_t *buf,
                      size_t cap, size_t *len)
{
    struct sup_child_lease_rec rec;
    int rc;

    (void)ctx;
    *len = 0;
    if (from_format != 1)
        return TALLY_ESCHEMA;
    /* A row format 1 could not read was skipped at every start: drop it (its lease expires
     * as spent at the supervisor, as it would have). */
    if (sup_child_rec_decode_v1(old, old_len, &rec) != TALLY_OK)
        return TALLY_ENOTFOUND;
    rc = sup_child_rec_encode(&rec, buf, cap, len);
    return rc == TALLY_OK ? TALLY_OK : TALLY_ENOTFOUND;
}

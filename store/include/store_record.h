/*
 * store_record: the byte cursors of records at rest. Records kept in tally's files (journal
 * records, a child's lease rows) are encoded field by field in little-endian order behind a
 * leading record-format version byte, never copied as a struct, so a file outlives any change
 * of a struct's layout. The owner of each record kind writes its codec with these cursors; the
 * store keeps the bytes and the file's format version (store_journal.h, store_child.h).
 *
 * A cursor turns an overrun into a flag instead of a read or write past the end: a codec reads
 * or writes every field, then checks the flag once (like proto_frame.h's cursors, which are
 * big-endian for the wire). Strings are a u8 length and the bytes, no NUL.
 * struct store_upgrade is how a file's owner lends the store its re-encoding of older
 * records when a file of an older format is opened.
 * Header-wide rule: the buffers are borrowed; nothing allocates.
 */
#ifndef STORE_RECORD_H
#define STORE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The largest record a store file accepts, encoded: a bound for the callers' buffers. */
#define STORE_RECORD_MAX 1024

/* Re-encodes one record of file format `from_format` (`old`, old_len bytes, borrowed) into
 * buf (cap bytes): TALLY_OK with *len set, TALLY_ENOTFOUND to drop the record (child files
 * only), another error to abort the upgrade (the file is then left as it was). */
typedef int (*store_record_upgrade_fn)(void *ctx, int from_format, const uint8_t *old,
                                       size_t old_len, uint8_t *buf, size_t cap,
                                       size_t *len /* OUT */);

struct store_upgrade {
    store_record_upgrade_fn fn;
    void *ctx;
};

struct store_rec_writer {
    uint8_t *p;
    size_t cap;
    size_t at;
    bool bad; /* a field did not fit (or a string was too long): the record is not written */
};

struct store_rec_reader {
    const uint8_t *p;
    size_t len;
    size_t at;
    bool bad; /* ran past the end, or a string was too long or held a NUL */
};

static inline void
store_rec_writer_init(struct store_rec_writer *w, uint8_t *p, size_t cap)
{
    w->p = p;
    w->cap = cap;
    w->at = 0;
    w->bad = false;
}

static inline void
store_rec_put_uint(struct store_rec_writer *w, uint64_t v, size_t n)
{
    size_t i;

    if (w->bad || w->cap - w->at < n) {
        w->bad = true;
        return;
    }
    for (i = 0; i < n; i++)
        w->p[w->at + i] = (uint8_t)(v >> (8 * i));
    w->at += n;
}

static inline void
store_rec_put_u8(struct store_rec_writer *w, uint8_t v)
{
    store_rec_put_uint(w, v, 1);
}

static inline void
store_rec_put_u32(struct store_rec_writer *w, uint32_t v)
{
    store_rec_put_uint(w, v, 4);
}

static inline void
store_rec_put_u64(struct store_rec_writer *w, uint64_t v)
{
    store_rec_put_uint(w, v, 8);
}

static inline void
store_rec_put_i64(struct store_rec_writer *w, int64_t v)
{
    store_rec_put_uint(w, (uint64_t)v, 8);
}

/* Writes the string held in `s` (an array of cap bytes, NUL-terminated within it). */
static inline void
store_rec_put_str(struct store_rec_writer *w, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);

    if (n == cap || n > UINT8_MAX) {
        w->bad = true; /* no NUL inside its array: not a string this code wrote */
        return;
    }
    store_rec_put_u8(w, (uint8_t)n);
    if (w->bad || w->cap - w->at < n) {
        w->bad = true;
        return;
    }
    memcpy(w->p + w->at, s, n);
    w->at += n;
}

static inline void
store_rec_reader_init(struct store_rec_reader *r, const uint8_t *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->at = 0;
    r->bad = false;
}

static inline uint64_t
store_rec_get_uint(struct store_rec_reader *r, size_t n)
{
    uint64_t v = 0;
    size_t i;

    if (r->bad || r->len - r->at < n) {
        r->bad = true;
        return 0;
    }
    for (i = 0; i < n; i++)
        v |= (uint64_t)r->p[r->at + i] << (8 * i);
    r->at += n;
    return v;
}

static inline uint8_t
store_rec_get_u8(struct store_rec_reader *r)
{
    return (uint8_t)store_rec_get_uint(r, 1);
}

static inline uint32_t
store_rec_get_u32(struct store_rec_reader *r)
{
    return (uint32_t)store_rec_get_uint(r, 4);
}

static inline uint64_t
store_rec_get_u64(struct store_rec_reader *r)
{
    return store_rec_get_uint(r, 8);
}

static inline int64_t
store_rec_get_i64(struct store_rec_reader *r)
{
    return (int64_t)store_rec_get_uint(r, 8);
}

/* Reads a string into `out` (cap bytes, NUL included; zero-filled past the string, so a decoded
 * struct compares equal to the zero-filled one that was encoded). */
static inline void
store_rec_get_str(struct store_rec_reader *r, char *out, size_t cap)
{
    size_t n = store_rec_get_u8(r);

    memset(out, 0, cap);
    if (r->bad || n >= cap || r->len - r->at < n || memchr(r->p + r->at, '\0', n) != NULL) {
        r->bad = true;
        return;
    }
    memcpy(out, r->p + r->at, n);
    r->at += n;
}

/* Moves to byte `at` (format-1 decoders read fields at fixed offsets). */
static inline void
store_rec_seek(struct store_rec_reader *r, size_t at)
{
    if (at > r->len)
        r->bad = true;
    else
        r->at = at;
}

/* Reads a fixed char array of `n` bytes at the cursor (format 1): it must hold a NUL. */
static inline void
store_rec_get_chars(struct store_rec_reader *r, char *out, size_t cap, size_t n)
{
    size_t len;

    memset(out, 0, cap);
    if (r->bad || r->len - r->at < n) {
        r->bad = true;
        return;
    }
    len = strnlen((const char *)r->p + r->at, n);
    if (len == n || len >= cap) {
        r->bad = true;
        return;
    }
    memcpy(out, r->p + r->at, len);
    r->at += n;
}

/* True iff every byte was read and nothing ran past the end. */
static inline bool
store_rec_reader_done(const struct store_rec_reader *r)
{
    return !r->bad && r->at == r->len;
}

#endif /* STORE_RECORD_H */

/*
 * The journal record codec: struct sup_record to and from the bytes kept in the journal file
 * (store_journal.h). Record format 2, written today: a version byte (2), then every field in
 * little-endian order, strings as a u8 length and their bytes, the heartbeat entries as a
 * count and the entries in use. Format 1 is the raw struct of tally 0.1.0 (472 bytes on
 * x86-64), read only to upgrade a file, at the offsets that struct had.
 * Header-wide rule: buffers are borrowed; nothing allocates; any thread.
 */
#ifndef SUP_JOURNAL_CODEC_H
#define SUP_JOURNAL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "sup_lease.h"

#define SUP_RECORD_FORMAT      2   /* the leading byte of a record written today */
#define SUP_RECORD_V1_SIZE     472 /* sizeof(struct sup_record) in tally 0.1.0 */
#define SUP_RECORD_ENCODED_MAX 512 /* the largest encoding (all strings at their longest) */

/** Encodes `r` (borrowed) into buf (cap bytes). TALLY_OK with *len set; TALLY_ETOOBIG when cap
 *  is too small; TALLY_EINVAL for a string without its NUL. */
TALLY_MUST_CHECK int sup_record_encode(const struct sup_record *r, uint8_t *buf, size_t cap,
                                       size_t *len /* OUT */);
/** Decodes a format-2 record into *out (zero-filled first). TALLY_OK; TALLY_ESCHEMA for a record
 *  of a newer format; TALLY_ECORRUPT for anything else that is not exactly one record. */
TALLY_MUST_CHECK int sup_record_decode(const uint8_t *p, size_t len,
                                       struct sup_record *out /* OUT */);
/** Decodes a format-1 record (the 0.1.0 struct's bytes) into *out. TALLY_OK or TALLY_ECORRUPT. */
TALLY_MUST_CHECK int sup_record_decode_v1(const uint8_t *p, size_t len,
                                          struct sup_record *out /* OUT */);
/** A store_record_upgrade_fn (store_record.h): a format-1 record re-encoded as format 2.
 *  ctx is unused. */
int sup_record_upgrade(void *ctx, int from_format, const uint8_t *old, size_t old_len, uint8_t *buf,
                       size_t cap, size_t *len /* OUT */);

#endif /* SUP_JOURNAL_CODEC_H */

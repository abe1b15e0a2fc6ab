/*
 * The lease row codec: struct sup_child_lease_rec to and from the bytes kept in the child's file
 * (store_child.h). Row format 3, written today: a version byte (3), the lease id, incarnation,
 * link (a u8 length and its bytes), n, mark, ttl_ms, sent_mono_ms, deadline_mono_ms and
 * deadline_wall_ms, every number 8 bytes little-endian, then the flags (SUP_CHILD_REC_*, one
 * byte). Format 2 is the same without the flags (read as none). Format 1 is the raw struct of tally
 * 0.1.0 (88 bytes on x86-64), read only to upgrade a file, at the offsets that struct had.
 * Header-wide rule: buffers are borrowed; nothing allocates; any thread.
 */
#ifndef SUP_CHILD_CODEC_H
#define SUP_CHILD_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "sup_child_host.h"

#define SUP_CHILD_REC_FORMAT      3  /* the leading byte of a row written today */
#define SUP_CHILD_REC_V1_SIZE     88 /* sizeof(struct sup_child_lease_rec) in tally 0.1.0 */
#define SUP_CHILD_REC_ENCODED_MAX 97 /* the largest encoding (the longest link) */

/** Encodes `r` (borrowed) into buf (cap bytes). TALLY_OK with *len set; TALLY_ETOOBIG when cap
 *  is too small; TALLY_EINVAL for a link without its NUL. */
TALLY_MUST_CHECK int sup_child_rec_encode(const struct sup_child_lease_rec *r, uint8_t *buf,
                                          size_t cap, size_t *len /* OUT */);
/** Decodes a format-2 or format-3 row into *out (zero-filled first). TALLY_OK; TALLY_ESCHEMA for
 *  a row of a newer format; TALLY_ECORRUPT for anything else that is not exactly one row (an
 *  unknown flag included). */
TALLY_MUST_CHECK int sup_child_rec_decode(const uint8_t *p, size_t len,
                                          struct sup_child_lease_rec *out /* OUT */);
/** Decodes a format-1 row (the 0.1.0 struct's bytes) into *out. TALLY_OK or TALLY_ECORRUPT. */
TALLY_MUST_CHECK int sup_child_rec_decode_v1(const uint8_t *p, size_t len,
                                             struct sup_child_lease_rec *out /* OUT */);
/** A store_record_upgrade_fn (store_record.h): a format-1 row re-encoded as today's format, or
 *  TALLY_ENOTFOUND for a row format 1 could not read either (dropped). ctx is unused. */
int sup_child_rec_upgrade(void *ctx, int from_format, const uint8_t *old, size_t old_len,
                          uint8_t *buf, size_t cap, size_t *len /* OUT */);

#endif /* SUP_CHILD_CODEC_H */

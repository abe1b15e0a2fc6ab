/*
 * store_use: exact use counters of live leases, in a file shared with the page cache,
 * DATA/lease-use.map (docs/DESIGN.md §5 "What a crash costs", §10). A child counter bumps
 * its lease's counter with a plain store on every admission, before the answer leaves: no
 * system call on the hot path. The page cache keeps those stores when tallyd is killed (kill -9),
 * not across a reboot, so the file records the kernel's boot id and a restart trusts a counter
 * only on the same boot, for the same lease, and never above the lease's durable mark; anything
 * else falls back to the mark (the most that can have been admitted).
 *
 * Format (host-local: it is never read on another boot, so never on another machine; native
 * byte order, checked by the magic): a header page, then slots of 64 bytes.
 *   header: magic "TALLYUSE" (8), format 1 (u32), slot size 64 (u32), capacity (u32),
 *           high water (u32: slots ever handed out since the reset), boot id (16),
 *           check (u64, over the bytes before it)
 *   slot:   lease id (u64, 0 = free), used (i64), deadline (i64, monotonic ms),
 *           spare (8), key (16: the caller's name for the lease), spare (16)
 * The file is extended (allocated, not sparse: a write to a hole could fault on a full disk)
 * 64 slots at a time as the high water grows; the whole capacity is mapped at open, so a
 * counter's address never changes.
 *
 * Header-wide rules: one thread; the handle is not carried across fork().
 */
#ifndef STORE_USE_H
#define STORE_USE_H

#include <stdint.h>

#include "tally_common.h"

#define STORE_USE_FILE          "lease-use.map" /* under the data dir; fixed */
#define STORE_USE_SLOTS_DEFAULT (1u << 18)      /* 16 MiB of address space, 64 B per lease */
#define STORE_USE_KEY           16
#define STORE_USE_BOOT_ID       16

typedef struct store_use store_use;

/* What the open found. */
enum store_use_start {
    STORE_USE_RESUMED = 0, /* this boot's file: its live slots may be adopted */
    STORE_USE_CREATED,     /* no file (or an empty one): created */
    STORE_USE_OTHER_BOOT,  /* written on another boot: emptied */
    STORE_USE_CORRUPT,     /* not a use file of this format: emptied */
};

struct store_use_stats {
    uint32_t capacity, high_water, bound, orphans;
    uint64_t adopted; /* counters trusted at a resume */
    uint64_t ignored; /* a slot for the lease, but above its mark: not trusted */
    uint64_t full;    /* binds refused: every slot taken, or the file could not grow */
};

/** The running kernel's boot id (/proc/sys/kernel/random/boot_id) into out. TALLY_OK, or
 *  TALLY_EIO when it cannot be read (not Linux, no /proc). */
TALLY_MUST_CHECK int store_use_boot_id(uint8_t out[STORE_USE_BOOT_ID] /* OUT */);

/** Opens (creates, 0600) DATA/lease-use.map for boot `boot_id` with `capacity` slots (0 = the
 *  default). On the same boot, slots that still name a lease whose deadline is after
 *  `now_mono_ms` are kept for store_use_bind to adopt; everything else is emptied. *how says
 *  what was found. *out is owned by the caller, release with store_use_close(). TALLY_OK, or
 *  TALLY_EIO/EFULL/EREADONLY/EPERM/ENOMEM (then the caller goes on without counters). */
TALLY_MUST_CHECK int store_use_open(const char *data, const uint8_t boot_id[STORE_USE_BOOT_ID],
                                    uint32_t capacity, int64_t now_mono_ms,
                                    store_use **out /* OUT */, enum store_use_start *how /* OUT */);

/** A counter for the lease named `key` (the caller's name for it) with `lease_id`, living until
 *  `deadline_mono_ms`. *used in: the most that can have been admitted on it (0 for a new
 *  lease, its durable mark for a resumed one); out: what was admitted exactly, when a slot
 *  kept from before the restart names this lease and holds at most that; else unchanged. The
 *  counter holds *used. NULL when no slot is free (the lease goes on without). Valid until
 *  store_use_unbind or store_use_close. */
int64_t *store_use_bind(store_use *u, const uint8_t key[STORE_USE_KEY], uint64_t lease_id,
                        int64_t deadline_mono_ms, int64_t *used /* IN, OUT */);
/** Stores what lease `counter` admitted: a plain store, no system call. */
static inline void
store_use_set(int64_t *counter, int64_t used)
{
    __atomic_store_n(counter, used, __ATOMIC_RELEASE);
}
/** Frees the slot of `counter` (NULL is a no-op). */
void store_use_unbind(store_use *u, int64_t *counter);
/** Frees the slots kept from before the restart whose lease is past its deadline. */
void store_use_sweep(store_use *u, int64_t now_mono_ms);
void store_use_stats(const store_use *u, struct store_use_stats *out /* OUT */);
/** Unmaps and closes; the file keeps every bound slot (NULL is a no-op). */
void store_use_close(store_use *u);

#endif /* STORE_USE_H */

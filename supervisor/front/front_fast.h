/*
 * What a decision on a live lease needs, at the cost of a table lookup.
 *
 * The clock of the turn: the loop's I/O callbacks of one turn share one reading of both
 * clocks (front_now()), taken when first asked after the loop last polled; a prepare and a
 * check handle mark it stale around every poll. Outside a running front (a thread of the
 * pool, a suite calling in directly) front_now() reads the clocks every time.
 *
 * The token memo: (token, endpoint) -> (link, child), filled after the full check (the keyed
 * BLAKE2b of the token found a live link allowed on the endpoint, the endpoint's policy is
 * the child's). Its key is a SipHash-2-4 128-bit tag of token and endpoint under a random
 * key made at start and never written anywhere; the tag is compared in constant time and no
 * clear token is kept. An entry holds only while the front's epoch is unchanged: any reload
 * of the configuration (a revoked or changed link, a changed policy) and any child leaving
 * the table move the epoch, and every entry is then checked again the slow way. A link's
 * expiry (and restriction) is checked on every hit, by the same rule as the long way.
 */
#ifndef FRONT_FAST_H
#define FRONT_FAST_H

#include <stdbool.h>
#include <stdint.h>

#include <sodium.h>
#include <uv.h>

#include "store_snapshot.h"
#include "sup_child_host.h"

#define FRONT_TAG_BYTES crypto_shorthash_siphashx24_BYTES

struct front_child;

struct front_clock {
    bool live;  /* a front's handles keep `valid` honest */
    bool valid; /* read since the loop last polled */
    struct sup_time t;
    uint64_t mono_ns;
};

extern _Thread_local struct front_clock front_clock_turn;

/* Both clocks, read now: monotonic for durations and deadlines, wall for window ids. */
struct sup_time front_clock_read(uint64_t *mono_ns);

/* The clocks of this loop turn (read now when no front runs on this thread). */
static inline struct sup_time
front_now(void)
{
    if (!front_clock_turn.live)
        return front_clock_read(NULL);
    if (!front_clock_turn.valid) {
        front_clock_turn.t = front_clock_read(&front_clock_turn.mono_ns);
        front_clock_turn.valid = true;
    }
    return front_clock_turn.t;
}

/* The monotonic clock of this turn in ns (for latency histograms). */
static inline uint64_t
front_now_ns(void)
{
    if (!front_clock_turn.live) {
        uint64_t ns;
        (void)front_clock_read(&ns);
        return ns;
    }
    (void)front_now();
    return front_clock_turn.mono_ns;
}

struct front_memo_entry {
    unsigned char tag[FRONT_TAG_BYTES];
    uint64_t epoch; /* 0: empty */
    const struct store_snap_link *link;
    struct front_child *fc;
};

struct front_fast {
    uv_prepare_t prepare;
    uv_check_t check;
    struct front_memo_entry *memo; /* direct-mapped */
    uint32_t mask;
    uint64_t epoch; /* >= 1 */
    unsigned char key[crypto_shorthash_siphashx24_KEYBYTES];
};

/* Starts the clock handles on `loop` (their data: `data`) and sizes the memo; TALLY_ENOMEM. */
int front_fast_open(struct front_fast *ff, uv_loop_t *loop, void *data);
/* Closes both handles, each calling `cb` once closed; the clock is read raw from now on. */
void front_fast_close(struct front_fast *ff, uv_close_cb cb);
/* Frees the memo (after front_fast_close's callbacks). */
void front_fast_free(struct front_fast *ff);
/* Forgets every entry (a new epoch): a reload, a child leaving. */
static inline void
front_fast_forget(struct front_fast *ff)
{
    ff->epoch++;
}
/* Sizes the memo for `links` live links (after a reload; every entry is forgotten). */
void front_fast_size(struct front_fast *ff, uint64_t links);
/* The tag of (token, endpoint); false when they are too long to be memoised. */
bool front_fast_tag(const struct front_fast *ff, const char *token, const char *endpoint,
                    unsigned char tag[FRONT_TAG_BYTES]);
/* The entry of `tag` in the current epoch, NULL when there is none. */
const struct front_memo_entry *front_fast_find(const struct front_fast *ff,
                                               const unsigned char tag[FRONT_TAG_BYTES]);
/* Remembers (tag -> link, child) for the current epoch. */
void front_fast_put(struct front_fast *ff, const unsigned char tag[FRONT_TAG_BYTES],
                    const struct store_snap_link *link, struct front_child *fc);

#endif

/*
 * The clock of the turn and the token memo (front_fast.h).
 */
#include "front_fast.h"

#include <string.h>
#include <time.h>

#include "tally_common.h"
#include "tenant.h"

#define MEMO_MIN 1024u
#define MEMO_MAX 65536u /* 2.5 MB: the hot links of any deployment */

_Thread_local struct front_clock front_clock_turn;

struct sup_time
front_clock_read(uint64_t *mono_ns)
{
    struct sup_time t;
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    t.mono_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (mono_ns != NULL)
        *mono_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    clock_gettime(CLOCK_REALTIME, &ts);
    t.wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return t;
}

/* Around every poll: the next callback reads the clocks again. */
static void
on_prepare(uv_prepare_t *h)
{
    (void)h;
    front_clock_turn.valid = false;
}

static void
on_check(uv_check_t *h)
{
    (void)h;
    front_clock_turn.valid = false;
}

static uint32_t
memo_slots(uint64_t links)
{
    uint32_t n = MEMO_MIN;

    while (n < MEMO_MAX && (uint64_t)n < 2 * links)
        n *= 2;
    return n;
}

int
front_fast_open(struct front_fast *ff, uv_loop_t *loop, void *data)
{
    /* ff starts zeroed (its front is calloc'd); a reload may have sized the memo. */
    if (ff->memo == NULL) /* else sized by a reload already */
        front_fast_size(ff, 0);
    if (ff->memo == NULL)
        return TALLY_ENOMEM;
    randombytes_buf(ff->key, sizeof(ff->key));
    uv_prepare_init(loop, &ff->prepare);
    uv_check_init(loop, &ff->check);
    ff->prepare.data = ff->check.data = data;
    uv_prepare_start(&ff->prepare, on_prepare);
    uv_check_start(&ff->check, on_check);
    front_clock_turn.valid = false;
    front_clock_turn.live = true;
    return TALLY_OK;
}

void
front_fast_close(struct front_fast *ff, uv_close_cb cb)
{
    front_clock_turn.live = false;
    front_clock_turn.valid = false;
    uv_close((uv_handle_t *)&ff->prepare, cb);
    uv_close((uv_handle_t *)&ff->check, cb);
}

void
front_fast_free(struct front_fast *ff)
{
    tally_free(ff->memo);
    ff->memo = NULL;
    sodium_memzero(ff->key, sizeof(ff->key));
}

void
front_fast_size(struct front_fast *ff, uint64_t links)
{
    uint32_t n = memo_slots(links);

    ff->epoch++; /* from 1: an entry of epoch 0 is empty */
    if (ff->memo == NULL || n != ff->mask + 1) {
        struct front_memo_entry *m = tally_calloc(n, sizeof(*m));
        if (m == NULL)
            return; /* the memo keeps its size */
        tally_free(ff->memo);
        ff->memo = m;
        ff->mask = n - 1;
    }
}

bool
front_fast_tag(const struct front_fast *ff, const char *token, const char *endpoint,
               unsigned char tag[FRONT_TAG_BYTES])
{
    unsigned char in[TENANT_TOKEN_MAX + 1 + TENANT_NAME_MAX];
    size_t t = strnlen(token, TENANT_TOKEN_MAX + 1), e = strnlen(endpoint, TENANT_NAME_MAX + 1);

    if (t > TENANT_TOKEN_MAX || e > TENANT_NAME_MAX)
        return false;
    memcpy(in, token, t);
    in[t] = '\0'; /* neither holds a NUL: (token, endpoint) pairs never run together */
    memcpy(in + t + 1, endpoint, e);
    crypto_shorthash_siphashx24(tag, in, t + 1 + e, ff->key);
    sodium_memzero(in, t); /* the clear token lives no longer than the request's own copy */
    return true;
}

/* Constant time: every byte of both tags is read and folded, with no branch on their values
 * (sodium_memcmp does the same a byte at a time, about as costly here as the SipHash). */
_Static_assert(FRONT_TAG_BYTES == 16, "tag_equal folds two 64-bit words");

static bool
tag_equal(const unsigned char *a, const unsigned char *b)
{
    uint64_t a0, a1, b0, b1;

    memcpy(&a0, a, 8);
    memcpy(&a1, a + 8, 8);
    memcpy(&b0, b, 8);
    memcpy(&b1, b + 8, 8);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

static uint32_t
slot_of(const struct front_fast *ff, const unsigned char tag[FRONT_TAG_BYTES])
{
    uint32_t x;

    memcpy(&x, tag, sizeof(x)); /* a keyed PRF's output: any 32 bits spread evenly */
    return x & ff->mask;
}

/* Two ways: an entry lives at its slot or at the slot's neighbour, so two hot tokens whose
 * tags share a slot do not evict each other. */
const struct front_memo_entry *
front_fast_find(const struct front_fast *ff, const unsigned char tag[FRONT_TAG_BYTES])
{
    uint32_t s = slot_of(ff, tag);

    for (int way = 0; way < 2; way++) {
        const struct front_memo_entry *e = &ff->memo[s ^ (uint32_t)way];
        if (e->epoch == ff->epoch && tag_equal(e->tag, tag))
            return e;
    }
    return NULL;
}

void
front_fast_put(struct front_fast *ff, const unsigned char tag[FRONT_TAG_BYTES],
               const struct store_snap_link *link, struct front_child *fc)
{
    uint32_t s = slot_of(ff, tag);
    struct front_memo_entry *e = &ff->memo[s], *o = &ff->memo[s ^ 1];

    /* An empty (or stale) way first; with both taken, the first way's entry moves to the
     * second (whose entry is dropped) and the new one takes the first. */
    if (e->epoch == ff->epoch) {
        if (o->epoch == ff->epoch)
            *o = *e;
        else
            e = o;
    }
    memcpy(e->tag, tag, FRONT_TAG_BYTES);
    e->epoch = ff->epoch;
    e->link = link;
    e->fc = fc;
}

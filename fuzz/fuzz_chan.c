/*
 * libFuzzer target: the host channel (cluster/chan.c). The first byte picks a
 * mode:
 *   0: the bytes are what a stranger sends a listener, fed in pieces cut by the
 *      input itself: the listener must fail or wait, never deliver a message or
 *      become established (nobody holds a member's key);
 *   1: the same after a real handshake: bytes injected into an established
 *      channel are never delivered;
 *   2: the bytes are messages (split at 0xff) sent both ways through a real pair,
 *      delivered in pieces of a size the input picks: they come out the same.
 */
#include <sodium.h>
#include <string.h>

#include "cluster_chan.h"
#include "fuzz_util.h"

#define MSG_N 256

static struct cluster_hostkey key_l, key_d;

struct side {
    cluster_chan *ch;
    size_t n;
    const uint8_t *expect[MSG_N];
    size_t expect_len[MSG_N];
    bool mismatch;
};

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    uint8_t seed[crypto_kx_SEEDBYTES];

    (void)argc;
    (void)argv;
    if (sodium_init() < 0)
        abort();
    memset(seed, 1, sizeof(seed));
    crypto_kx_seed_keypair(key_l.pk, key_l.sk, seed);
    memset(seed, 2, sizeof(seed));
    crypto_kx_seed_keypair(key_d.pk, key_d.sk, seed);
    return 0;
}

static void
on_msg(void *ctx, const uint8_t *msg, size_t len)
{
    struct side *s = ctx;

    if (s->n >= MSG_N || s->expect_len[s->n] != len ||
        (len > 0 && memcmp(s->expect[s->n], msg, len) != 0))
        s->mismatch = true;
    s->n++;
}

static int
members_only(void *ctx, const uint8_t pk[CLUSTER_KEY_BYTES])
{
    (void)ctx;
    return memcmp(pk, key_d.pk, CLUSTER_KEY_BYTES) == 0 ? TALLY_OK : TALLY_EUNAUTH;
}

/* Moves from's output into to in pieces of cut bytes; to's result. */
static int
pump(struct side *from, struct side *to, size_t cut)
{
    const uint8_t *p;
    size_t n, off = 0;
    int rc = TALLY_OK;
    uint8_t *copy;

    cluster_chan_output(from->ch, &p, &n);
    if (n == 0)
        return TALLY_OK;
    copy = malloc(n);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, p, n);
    cluster_chan_output_done(from->ch, n);
    while (off < n && rc == TALLY_OK) {
        size_t k = n - off < cut ? n - off : cut;
        rc = cluster_chan_input(to->ch, copy + off, k);
        off += k;
    }
    free(copy);
    return rc;
}

static void
open_pair(struct side *d, struct side *l)
{
    struct cluster_chan_cfg cd = {CLUSTER_CHAN_DIALER, &key_d, key_l.pk, NULL, on_msg, d};
    struct cluster_chan_cfg cl = {CLUSTER_CHAN_LISTENER, &key_l, NULL, members_only, on_msg, l};

    FUZZ_CHECK(cluster_chan_open(&cd, &d->ch) == TALLY_OK);
    FUZZ_CHECK(cluster_chan_open(&cl, &l->ch) == TALLY_OK);
}

/* Feeds data to ch in pieces whose sizes come from the data; the first error. */
static int
feed(cluster_chan *ch, const uint8_t *data, size_t size)
{
    size_t off = 0;
    int rc = TALLY_OK;

    while (off < size && rc == TALLY_OK) {
        size_t k = 1 + data[off] % 97;
        if (k > size - off)
            k = size - off;
        rc = cluster_chan_input(ch, data + off, k);
        off += k;
    }
    if (rc != TALLY_OK) /* failed for good */
        FUZZ_CHECK(cluster_chan_input(ch, data, size) == rc);
    return rc;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct side d = {0}, l = {0};

    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0: {
        struct cluster_chan_cfg cl = {CLUSTER_CHAN_LISTENER, &key_l, NULL,
                                      members_only,          on_msg, &l};
        FUZZ_CHECK(cluster_chan_open(&cl, &l.ch) == TALLY_OK);
        (void)feed(l.ch, data + 1, size - 1);
        FUZZ_CHECK(l.n == 0);
        FUZZ_CHECK(!cluster_chan_established(l.ch));
        cluster_chan_close(l.ch);
        return 0;
    }
    case 1:
        open_pair(&d, &l);
        FUZZ_CHECK(pump(&d, &l, 4096) == TALLY_OK);
        FUZZ_CHECK(pump(&l, &d, 4096) == TALLY_OK);
        FUZZ_CHECK(pump(&d, &l, 4096) == TALLY_OK);
        FUZZ_CHECK(cluster_chan_established(l.ch) && cluster_chan_established(d.ch));
        (void)feed(l.ch, data + 1, size - 1);
        FUZZ_CHECK(l.n == 0);
        break;
    default: {
        size_t cut = size > 1 ? 1 + data[1] % 61 : 1;
        size_t start = 2, n = 0;

        open_pair(&d, &l);
        FUZZ_CHECK(pump(&d, &l, cut) == TALLY_OK);
        FUZZ_CHECK(pump(&l, &d, cut) == TALLY_OK);
        FUZZ_CHECK(pump(&d, &l, cut) == TALLY_OK);
        for (size_t i = 2; i <= size && n < MSG_N; i++) {
            if (i < size && data[i] != 0xff)
                continue;
            d.expect[n] = l.expect[n] = data + start;
            d.expect_len[n] = l.expect_len[n] = i - start;
            FUZZ_CHECK(cluster_chan_send(d.ch, data + start, i - start) == TALLY_OK);
            FUZZ_CHECK(cluster_chan_send(l.ch, data + start, i - start) == TALLY_OK);
            n++;
            start = i + 1;
        }
        FUZZ_CHECK(pump(&d, &l, cut) == TALLY_OK);
        FUZZ_CHECK(pump(&l, &d, cut) == TALLY_OK);
        FUZZ_CHECK(l.n == n && d.n == n);
        FUZZ_CHECK(!l.mismatch && !d.mismatch);
        break;
    }
    }
    cluster_chan_close(d.ch);
    cluster_chan_close(l.ch);
    return 0;
}

/*
 * The host channel without I/O (cluster/chan.c): two channels wired through
 * memory. Messages of every size cross both ways whole and in order whatever
 * the cut of the bytes (generated schedules, seeded); a dialer that pinned
 * another key, a listener's refusal, a recorded session replayed, any one byte
 * altered and a dialer that cannot prove its key each end the handshake with
 * nothing delivered; bounds on sizes and on what waits for the peer hold;
 * nothing of a message travels in the clear.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_chan.h"
#include "test_support.h"

#define MSG_N 64

struct side {
    cluster_chan *ch;
    size_t n;              /* messages delivered */
    size_t len[MSG_N];     /* their lengths */
    bool intact[MSG_N];    /* and whether every byte is the pattern's */
    uint8_t refuse_pk[32]; /* listener: this key is refused */
    bool refuse;
    size_t asked; /* listener: keys checked */
};

static struct cluster_hostkey key_d, key_l, key_x;

static uint8_t
pattern(size_t msg, size_t i)
{
    return (uint8_t)(msg * 131u + i * 7u + (i >> 9));
}

static void
on_msg(void *ctx, const uint8_t *msg, size_t len)
{
    struct side *s = ctx;
    bool ok = true;

    assert_true(s->n < MSG_N);
    for (size_t i = 0; i < len && ok; i++)
        ok = msg[i] == pattern(s->n, i);
    s->len[s->n] = len;
    s->intact[s->n] = ok;
    s->n++;
}

static int
peer_ok(void *ctx, const uint8_t pk[32])
{
    struct side *s = ctx;

    s->asked++;
    if (s->refuse && memcmp(pk, s->refuse_pk, 32) == 0)
        return TALLY_EUNAUTH;
    return memcmp(pk, key_d.pk, 32) == 0 ? TALLY_OK : TALLY_EUNAUTH;
}

static void
open_pair(struct side *d, struct side *l, const struct cluster_hostkey *dk, const uint8_t *pinned)
{
    struct cluster_chan_cfg cd = {CLUSTER_CHAN_DIALER, dk, pinned, NULL, on_msg, d};
    struct cluster_chan_cfg cl = {CLUSTER_CHAN_LISTENER, &key_l, NULL, peer_ok, on_msg, l};

    assert_int_equal(cluster_chan_open(&cd, &d->ch), TALLY_OK);
    assert_int_equal(cluster_chan_open(&cl, &l->ch), TALLY_OK);
}

/* What `from` has for its peer, taken out of it (malloc'd; NULL when nothing). */
static uint8_t *
take_output(struct side *from, size_t *n)
{
    const uint8_t *p;
    uint8_t *copy;

    cluster_chan_output(from->ch, &p, n);
    if (*n == 0)
        return NULL;
    copy = malloc(*n);
    assert_non_null(copy);
    memcpy(copy, p, *n);
    cluster_chan_output_done(from->ch, *n);
    return copy;
}

/* Moves what `from` has for its peer into `to`, in pieces of at most cut bytes (0: whole).
 * The copy is kept in rec (if given) as a wire recording. Returns to's result. */
static int
pump(struct side *from, struct side *to, size_t cut, uint8_t *rec, size_t *rec_len)
{
    size_t n, off = 0;
    uint8_t *copy = take_output(from, &n);
    int rc = TALLY_OK;

    if (copy == NULL)
        return TALLY_OK;
    if (rec != NULL) {
        memcpy(rec + *rec_len, copy, n);
        *rec_len += n;
    }
    while (off < n && rc == TALLY_OK) {
        size_t k = cut == 0 || n - off < cut ? n - off : cut;
        rc = cluster_chan_input(to->ch, copy + off, k);
        off += k;
    }
    free(copy);
    return rc;
}

/* Pumps both ways until neither side has anything left; the first error. */
static int
settle(struct side *d, struct side *l, size_t cut)
{
    for (int i = 0; i < 8; i++) {
        int rc = pump(d, l, cut, NULL, NULL);
        if (rc != TALLY_OK)
            return rc;
        rc = pump(l, d, cut, NULL, NULL);
        if (rc != TALLY_OK)
            return rc;
    }
    return TALLY_OK;
}

static void
send_pattern(struct side *s, size_t msg, size_t len)
{
    uint8_t *b = malloc(len + 1);

    assert_non_null(b);
    for (size_t i = 0; i < len; i++)
        b[i] = pattern(msg, i);
    assert_int_equal(cluster_chan_send(s->ch, b, len), TALLY_OK);
    free(b);
}

static void
close_pair(struct side *d, struct side *l)
{
    cluster_chan_close(d->ch);
    cluster_chan_close(l->ch);
}

static int
group_setup(void **state)
{
    (void)state;
    if (sodium_init() < 0)
        return -1;
    cluster_hostkey_generate(&key_d);
    cluster_hostkey_generate(&key_l);
    cluster_hostkey_generate(&key_x);
    return 0;
}

/* ---- the handshake ---- */

static void
test_chan_handshake_establishes_both(void **state)
{
    struct side d = {0}, l = {0};

    (void)state;
    open_pair(&d, &l, &key_d, key_l.pk);
    assert_false(cluster_chan_established(d.ch));
    assert_null(cluster_chan_peer(l.ch)); /* the listener knows nobody yet */
    assert_int_equal(cluster_chan_send(d.ch, (const uint8_t *)"x", 1), TALLY_EUNAVAIL);
    assert_int_equal(settle(&d, &l, 0), TALLY_OK);
    assert_true(cluster_chan_established(d.ch));
    assert_true(cluster_chan_established(l.ch));
    assert_memory_equal(cluster_chan_peer(l.ch), key_d.pk, 32);
    assert_memory_equal(cluster_chan_peer(d.ch), key_l.pk, 32);
    assert_int_equal(l.asked, 1);
    assert_int_equal(d.n + l.n, 0); /* the proofs are not messages */
    close_pair(&d, &l);
}

/* Messages of sizes 0..MSG_MAX cross both ways whole and in order, whatever the cut. */
static void
test_chan_messages_cross_whatever_the_cut(void **state)
{
    uint64_t seed = test_seed(), r = seed;
    static const size_t sizes[] = {0, 1, 16, 4096, 65535, 65536, 300001, CLUSTER_CHAN_MSG_MAX};

    (void)state;
    for (int run = 0; run < 40; run++) {
        struct side d = {0}, l = {0};
        size_t cut =
            (size_t)test_rand_range(&r, 0, 3) == 0 ? 0 : (size_t)test_rand_range(&r, 1, 700);
        size_t n = (size_t)test_rand_range(&r, 1, 12);
        size_t lens[12];

        open_pair(&d, &l, &key_d, key_l.pk);
        assert_int_equal(settle(&d, &l, cut), TALLY_OK);
        for (size_t i = 0; i < n; i++) {
            lens[i] = sizes[test_rand_range(&r, 0, 7)];
            if (lens[i] > 70000 && test_rand_range(&r, 0, 3) > 0)
                lens[i] = (size_t)test_rand_range(&r, 0, 70000); /* keep the run short */
            send_pattern(&d, i, lens[i]);
            send_pattern(&l, i, lens[i]);
            if (test_rand_range(&r, 0, 2) == 0)
                assert_int_equal(settle(&d, &l, cut), TALLY_OK);
        }
        assert_int_equal(settle(&d, &l, cut), TALLY_OK);
        assert_int_equal(d.n, n);
        assert_int_equal(l.n, n);
        for (size_t i = 0; i < n; i++) {
            if (d.len[i] != lens[i] || l.len[i] != lens[i] || !d.intact[i] || !l.intact[i])
                fail_msg("seed %llu run %d message %zu: lengths %zu/%zu of %zu, intact %d/%d",
                         (unsigned long long)seed, run, i, d.len[i], l.len[i], lens[i], d.intact[i],
                         l.intact[i]);
        }
        close_pair(&d, &l);
    }
}

static void
test_chan_dialer_that_pinned_another_key_is_refused(void **state)
{
    struct side d = {0}, l = {0};

    (void)state;
    open_pair(&d, &l, &key_d, key_x.pk); /* the listener is not the host it meant */
    assert_int_equal(settle(&d, &l, 0), TALLY_EUNAUTH);
    assert_false(cluster_chan_established(l.ch));
    assert_false(cluster_chan_established(d.ch));
    assert_int_equal(l.asked, 0); /* its key never opened */
    close_pair(&d, &l);
}

static void
test_chan_listener_refuses_unknown_or_revoked_keys(void **state)
{
    struct side d = {0}, l = {0}, d2 = {0}, l2 = {0};

    (void)state;
    open_pair(&d, &l, &key_x, key_l.pk); /* a key that is not a member */
    assert_int_equal(settle(&d, &l, 0), TALLY_EUNAUTH);
    assert_memory_equal(cluster_chan_peer(l.ch), key_x.pk, 32); /* for the log */
    assert_false(cluster_chan_established(l.ch));
    /* Failed for good: the same error, nothing sent. */
    assert_int_equal(cluster_chan_input(l.ch, (const uint8_t *)"x", 1), TALLY_EUNAUTH);
    assert_int_equal(cluster_chan_send(l.ch, (const uint8_t *)"x", 1), TALLY_EUNAVAIL);
    close_pair(&d, &l);

    l2.refuse = true; /* a member revoked */
    memcpy(l2.refuse_pk, key_d.pk, 32);
    open_pair(&d2, &l2, &key_d, key_l.pk);
    assert_int_equal(settle(&d2, &l2, 0), TALLY_EUNAUTH);
    assert_int_equal(l2.n, 0);
    close_pair(&d2, &l2);
}

/* A dialer that has the listener's key and claims a member's key without its secret:
 * its first message opens, but its proof does not. */
static void
test_chan_dialer_without_the_secret_key_fails(void **state)
{
    struct side d = {0}, l = {0};
    struct cluster_hostkey fake = key_x;
    const uint8_t *p;
    size_t n;

    (void)state;
    memcpy(fake.pk, key_d.pk, 32); /* claims key_d, holds key_x's secret */
    open_pair(&d, &l, &fake, key_l.pk);
    assert_int_equal(pump(&d, &l, 0, NULL, NULL), TALLY_OK); /* admitted by its claim */
    assert_int_equal(l.asked, 1);
    /* The listener's answer alone (not its proof, which the dialer could not open): the
     * dialer then sends its own proof. */
    cluster_chan_output(l.ch, &p, &n);
    assert_true(n > 36);
    assert_int_equal(cluster_chan_input(d.ch, p, 36), TALLY_OK);
    assert_int_equal(pump(&d, &l, 0, NULL, NULL), TALLY_EUNAUTH); /* the proof fails */
    assert_false(cluster_chan_established(l.ch));
    close_pair(&d, &l);
}

/* A whole session recorded and replayed to a new listener: the listener answers with a new
 * ephemeral key, so the recorded proof and messages do not open. */
static void
test_chan_replayed_session_gets_nowhere(void **state)
{
    struct side d = {0}, l = {0}, l2 = {0};
    struct cluster_chan_cfg cl = {CLUSTER_CHAN_LISTENER, &key_l, NULL, peer_ok, on_msg, &l2};
    static uint8_t rec[4096];
    size_t rec_len = 0;
    int rc;

    (void)state;
    open_pair(&d, &l, &key_d, key_l.pk);
    assert_int_equal(pump(&d, &l, 0, rec, &rec_len), TALLY_OK);
    assert_int_equal(pump(&l, &d, 0, NULL, NULL), TALLY_OK);
    send_pattern(&d, 0, 100);
    assert_int_equal(pump(&d, &l, 0, rec, &rec_len), TALLY_OK);
    assert_int_equal(l.n, 1);

    assert_int_equal(cluster_chan_open(&cl, &l2.ch), TALLY_OK);
    rc = cluster_chan_input(l2.ch, rec, rec_len);
    assert_int_equal(rc, TALLY_EUNAUTH);
    assert_int_equal(l2.n, 0);
    assert_false(cluster_chan_established(l2.ch));
    cluster_chan_close(l2.ch);
    close_pair(&d, &l);
}

/* Moves from's output into to, the byte at stream offset flip_at (counted over everything
 * from has sent, *sent) inverted. Returns to's result (TALLY_OK when nothing moved). */
static int
pump_flip(struct side *from, struct side *to, size_t *sent, size_t flip_at)
{
    size_t n;
    uint8_t *copy = take_output(from, &n);
    int rc;

    if (copy == NULL)
        return TALLY_OK;
    if (flip_at >= *sent && flip_at < *sent + n)
        copy[flip_at - *sent] ^= 0x5a;
    *sent += n;
    rc = cluster_chan_input(to->ch, copy, n);
    free(copy);
    return rc;
}

/* One session in which the byte at flip_at of one direction's stream is altered: the
 * handshake, then a 40-byte message each way. Returns the bytes that direction sent. */
static size_t
altered_session(bool dialer_side, size_t flip_at, struct side *d, struct side *l)
{
    size_t sent_d = 0, sent_l = 0;
    int rc_l = TALLY_OK, rc_d = TALLY_OK;
    bool sent_msgs = false;

    open_pair(d, l, &key_d, key_l.pk);
    for (int step = 0; step < 6; step++) {
        if (!sent_msgs && cluster_chan_established(d->ch) && cluster_chan_established(l->ch)) {
            send_pattern(d, 0, 40);
            send_pattern(l, 0, 40);
            sent_msgs = true;
        }
        if (rc_l == TALLY_OK)
            rc_l = pump_flip(d, l, &sent_d, dialer_side ? flip_at : SIZE_MAX);
        if (rc_d == TALLY_OK)
            rc_d = pump_flip(l, d, &sent_l, dialer_side ? SIZE_MAX : flip_at);
    }
    return dialer_side ? sent_d : sent_l;
}

/* Every single byte of a session altered in turn (handshake, headers, lengths, sealed
 * bytes), in each direction: the side receiving it fails or waits for more, and never
 * delivers a message. */
static void
test_chan_any_altered_byte_is_caught(void **state)
{
    (void)state;
    for (int dir = 0; dir < 2; dir++) {
        struct side d = {0}, l = {0};
        size_t total = altered_session(dir == 0, SIZE_MAX, &d, &l); /* clean: its length */

        assert_int_equal(d.n, 1);
        assert_int_equal(l.n, 1);
        close_pair(&d, &l);
        for (size_t k = 0; k < total; k++) {
            struct side d2 = {0}, l2 = {0};

            (void)altered_session(dir == 0, k, &d2, &l2);
            if ((dir == 0 ? l2.n : d2.n) != 0)
                fail_msg("%s byte %zu of %zu altered: a message was delivered",
                         dir == 0 ? "dialer" : "listener", k, total);
            close_pair(&d2, &l2);
        }
    }
}

static void
test_chan_sizes_and_backlog_are_bounded(void **state)
{
    struct side d = {0}, l = {0};
    uint8_t *big = calloc(1, CLUSTER_CHAN_MSG_MAX + 1);
    uint8_t bad[4] = {0xff, 0xff, 0xff, 0xff};
    int rc = TALLY_OK;
    int sent = 0;

    (void)state;
    assert_non_null(big);
    open_pair(&d, &l, &key_d, key_l.pk);
    assert_int_equal(settle(&d, &l, 0), TALLY_OK);
    assert_int_equal(cluster_chan_send(d.ch, big, CLUSTER_CHAN_MSG_MAX + 1), TALLY_ETOOBIG);
    /* Nobody drains: the backlog stops a little past its cap. */
    while ((rc = cluster_chan_send(d.ch, big, CLUSTER_CHAN_MSG_MAX)) == TALLY_OK)
        sent++;
    assert_int_equal(rc, TALLY_EUNAVAIL);
    assert_in_range(sent, CLUSTER_CHAN_OUT_MAX / CLUSTER_CHAN_MSG_MAX,
                    CLUSTER_CHAN_OUT_MAX / CLUSTER_CHAN_MSG_MAX + 1);
    /* A length beyond the largest message ends the channel at once (no waiting for it). */
    assert_int_equal(cluster_chan_input(l.ch, bad, sizeof(bad)), TALLY_EPROTO);
    free(big);
    close_pair(&d, &l);
}

static bool
contains(const uint8_t *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);

    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return true;
    return false;
}

/* A message's bytes never appear on the wire. */
static void
test_chan_nothing_in_the_clear(void **state)
{
    struct side d = {0}, l = {0};
    static uint8_t rec[8192];
    size_t rec_len = 0;
    const char *secret = "plan pro 36000/1h tenant acme-corp";

    (void)state;
    open_pair(&d, &l, &key_d, key_l.pk);
    assert_int_equal(settle(&d, &l, 0), TALLY_OK);
    assert_int_equal(cluster_chan_send(d.ch, (const uint8_t *)secret, strlen(secret)), TALLY_OK);
    assert_int_equal(pump(&d, &l, 0, rec, &rec_len), TALLY_OK);
    assert_int_equal(l.n, 1);
    assert_false(contains(rec, rec_len, "acme"));
    assert_false(contains(rec, rec_len, "36000"));
    close_pair(&d, &l);
}

/* A finish is seen as one; nothing may follow it. */
static void
test_chan_finish_ends_the_stream(void **state)
{
    struct side d = {0}, l = {0};

    (void)state;
    open_pair(&d, &l, &key_d, key_l.pk);
    assert_int_equal(settle(&d, &l, 0), TALLY_OK);
    send_pattern(&d, 0, 10);
    assert_int_equal(cluster_chan_finish(d.ch), TALLY_OK);
    assert_int_equal(cluster_chan_send(d.ch, (const uint8_t *)"x", 1), TALLY_EUNAVAIL);
    assert_int_equal(cluster_chan_finish(d.ch), TALLY_EUNAVAIL);
    assert_int_equal(settle(&d, &l, 3), TALLY_OK);
    assert_int_equal(l.n, 1);
    assert_true(cluster_chan_peer_finished(l.ch));
    send_pattern(&l, 0, 5); /* the other direction still works */
    assert_int_equal(settle(&d, &l, 0), TALLY_OK);
    assert_int_equal(d.n, 1);
    close_pair(&d, &l);
}

static void
test_chan_keys_print_and_parse(void **state)
{
    char hex[65];
    uint8_t back[32];

    (void)state;
    cluster_key_hex(key_d.pk, hex);
    assert_int_equal(strlen(hex), 64);
    assert_int_equal(cluster_key_parse(hex, back), TALLY_OK);
    assert_memory_equal(back, key_d.pk, 32);
    assert_int_equal(cluster_key_parse("abc", back), TALLY_EINVAL);
    hex[10] = 'g';
    assert_int_equal(cluster_key_parse(hex, back), TALLY_EINVAL);
    assert_int_equal(cluster_key_parse(NULL, back), TALLY_EINVAL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chan_handshake_establishes_both),
        cmocka_unit_test(test_chan_messages_cross_whatever_the_cut),
        cmocka_unit_test(test_chan_dialer_that_pinned_another_key_is_refused),
        cmocka_unit_test(test_chan_listener_refuses_unknown_or_revoked_keys),
        cmocka_unit_test(test_chan_dialer_without_the_secret_key_fails),
        cmocka_unit_test(test_chan_replayed_session_gets_nowhere),
        cmocka_unit_test(test_chan_any_altered_byte_is_caught),
        cmocka_unit_test(test_chan_sizes_and_backlog_are_bounded),
        cmocka_unit_test(test_chan_nothing_in_the_clear),
        cmocka_unit_test(test_chan_finish_ends_the_stream),
        cmocka_unit_test(test_chan_keys_print_and_parse),
    };

    return cmocka_run_group_tests_name("cluster_chan", tests, group_setup, NULL);
}

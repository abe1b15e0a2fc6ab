/*
 * The host channel's protocol without I/O (cluster_chan.h): the handshake that
 * proves both static keys and derives one key per direction, then
 * crypto_secretstream per direction for the messages. Input is buffered until a
 * whole handshake message, header or sealed message is there; output is a byte
 * queue the caller drains into its socket. Any failure is final: a channel that
 * saw one bad byte is never trusted again, its keys are wiped, and every later
 * call answers the same error.
 */
#include "cluster_chan.h"

#include <sodium.h>
#include <string.h>

#define MAGIC         "TLH1"
#define MAGIC_LEN     4
#define HELLO_D_LEN   (MAGIC_LEN + CLUSTER_KEY_BYTES + CLUSTER_KEY_BYTES + AEAD_ABYTES)
#define HELLO_L_LEN   (MAGIC_LEN + CLUSTER_KEY_BYTES)
#define AEAD_ABYTES   crypto_aead_xchacha20poly1305_ietf_ABYTES
#define SS_HEADER     crypto_secretstream_xchacha20poly1305_HEADERBYTES
#define SS_ABYTES     crypto_secretstream_xchacha20poly1305_ABYTES
#define LEN_BYTES     4
#define SEALED_MAX    (CLUSTER_CHAN_MSG_MAX + SS_ABYTES)
#define KEY_CONTEXT_D "tally host channel 1 dialer->listener"
#define KEY_CONTEXT_L "tally host channel 1 listener->dialer"

/* What the channel waits for next, in this order. */
enum chan_state {
    CHAN_HELLO,   /* the peer's handshake message (a listener's: 84 bytes; a dialer's: 36) */
    CHAN_HEADER,  /* the peer's secretstream header */
    CHAN_CONFIRM, /* the peer's first message, empty: it proves the peer's key */
    CHAN_OPEN,    /* established: messages */
    CHAN_DONE,    /* the peer's final message came */
    CHAN_FAILED,  /* rc says why */
};

/* Both directions' keys of one X25519 exchange (crypto_kx, the dialer as its client). */
struct kx_pair {
    uint8_t d2l[crypto_kx_SESSIONKEYBYTES];
    uint8_t l2d[crypto_kx_SESSIONKEYBYTES];
};

struct cluster_chan {
    enum cluster_chan_role role;
    enum chan_state state;
    int rc; /* CHAN_FAILED: the error every later call answers */
    struct cluster_hostkey self;
    struct cluster_hostkey eph; /* this side's ephemeral pair, wiped once the keys are made */
    uint8_t peer_pk[CLUSTER_KEY_BYTES];
    bool peer_known;
    bool finish_sent;
    cluster_chan_peer_fn peer_ok;
    cluster_chan_msg_fn on_msg;
    void *ctx;
    uint8_t hello_d[HELLO_D_LEN]; /* the dialer's handshake message: part of the transcript */
    uint8_t es_d2l[crypto_kx_SESSIONKEYBYTES]; /* es: also seals the dialer's static key */
    uint8_t rx_key[crypto_secretstream_xchacha20poly1305_KEYBYTES]; /* until the header */
    crypto_secretstream_xchacha20poly1305_state push, pull;
    uint8_t *in; /* bytes received and not used yet */
    size_t in_len, in_cap;
    uint8_t *out; /* bytes for the peer: [out_off, out_len) wait */
    size_t out_off, out_len, out_cap;
    uint8_t *plain; /* one opened message */
    size_t plain_cap;
};

/* ---- keys ---- */

void
cluster_hostkey_generate(struct cluster_hostkey *k)
{
    crypto_kx_keypair(k->pk, k->sk);
}

void
cluster_hostkey_wipe(struct cluster_hostkey *k)
{
    sodium_memzero(k, sizeof(*k));
}

void
cluster_key_hex(const uint8_t pk[CLUSTER_KEY_BYTES], char out[2 * CLUSTER_KEY_BYTES + 1])
{
    sodium_bin2hex(out, 2 * CLUSTER_KEY_BYTES + 1, pk, CLUSTER_KEY_BYTES);
}

int
cluster_key_parse(const char *s, uint8_t pk[CLUSTER_KEY_BYTES])
{
    size_t bin_len = 0;
    const char *end = NULL;

    if (s == NULL || strlen(s) != 2 * CLUSTER_KEY_BYTES)
        return TALLY_EINVAL;
    if (sodium_hex2bin(pk, CLUSTER_KEY_BYTES, s, 2 * CLUSTER_KEY_BYTES, NULL, &bin_len, &end) !=
            0 ||
        bin_len != CLUSTER_KEY_BYTES || *end != '\0')
        return TALLY_EINVAL;
    return TALLY_OK;
}

/* One exchange between own pair and peer_pk, from this side's role. */
static int
kx(enum cluster_chan_role role, const struct cluster_hostkey *own, const uint8_t *peer_pk,
   struct kx_pair *k /* OUT */)
{
    int rc;

    if (role == CLUSTER_CHAN_DIALER)
        rc = crypto_kx_client_session_keys(k->l2d, k->d2l, own->pk, own->sk, peer_pk);
    else
        rc = crypto_kx_server_session_keys(k->d2l, k->l2d, own->pk, own->sk, peer_pk);
    return rc == 0 ? TALLY_OK : TALLY_EUNAUTH; /* a low-order point: not a real key */
}

/* The AEAD of the dialer's static key inside its handshake message: keyed by es, which
 * is new with every ephemeral key, so a zero nonce is used once. */
static const uint8_t zero_nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];

/* This side's send key (into its push state, its header into header) and the peer's
 * (rx_key, until the peer's header comes), from the four exchanges and the transcript.
 * The ephemeral pair and es are wiped whatever happens. */
static int
derive(cluster_chan *ch, const uint8_t hello_l[HELLO_L_LEN], const uint8_t *e_peer,
       uint8_t header[SS_HEADER] /* OUT */)
{
    struct kx_pair ss, ee, se;
    uint8_t th[crypto_generichash_BYTES], tx[crypto_secretstream_xchacha20poly1305_KEYBYTES];
    crypto_generichash_state h;
    bool dialer = ch->role == CLUSTER_CHAN_DIALER;
    int rc;

    /* ss: both static keys; ee: both ephemeral keys; se: the dialer's static key with the
     * listener's ephemeral one. es (the dialer's ephemeral key with the listener's static
     * one) came with the first message. */
    rc = kx(ch->role, &ch->self, ch->peer_pk, &ss);
    if (rc == TALLY_OK)
        rc = kx(ch->role, &ch->eph, e_peer, &ee);
    if (rc == TALLY_OK)
        rc = dialer ? kx(ch->role, &ch->self, e_peer, &se)
                    : kx(ch->role, &ch->eph, ch->peer_pk, &se);
    if (rc != TALLY_OK)
        goto out;
    crypto_generichash_init(&h, NULL, 0, sizeof(th));
    crypto_generichash_update(&h, ch->hello_d, sizeof(ch->hello_d));
    crypto_generichash_update(&h, hello_l, HELLO_L_LEN);
    crypto_generichash_final(&h, th, sizeof(th));
    for (int dir = 0; dir < 2; dir++) {
        bool d2l = dir == 0;
        uint8_t *key = d2l == dialer ? tx : ch->rx_key;
        const char *label = d2l ? KEY_CONTEXT_D : KEY_CONTEXT_L;

        crypto_generichash_init(&h, th, sizeof(th), sizeof(tx));
        crypto_generichash_update(&h, (const uint8_t *)label, strlen(label));
        crypto_generichash_update(&h, ch->es_d2l, sizeof(ch->es_d2l));
        crypto_generichash_update(&h, d2l ? ss.d2l : ss.l2d, sizeof(ss.d2l));
        crypto_generichash_update(&h, d2l ? ee.d2l : ee.l2d, sizeof(ee.d2l));
        crypto_generichash_update(&h, d2l ? se.d2l : se.l2d, sizeof(se.d2l));
        crypto_generichash_final(&h, key, sizeof(tx));
    }
    crypto_secretstream_xchacha20poly1305_init_push(&ch->push, header, tx);
out:
    sodium_memzero(&ss, sizeof(ss));
    sodium_memzero(&ee, sizeof(ee));
    sodium_memzero(&se, sizeof(se));
    sodium_memzero(tx, sizeof(tx));
    sodium_memzero(th, sizeof(th));
    sodium_memzero(&h, sizeof(h));
    cluster_hostkey_wipe(&ch->eph);
    sodium_memzero(ch->es_d2l, sizeof(ch->es_d2l));
    return rc;
}

/* ---- buffers ---- */

/* Room for n more bytes of output: TALLY_OK, TALLY_EUNAVAIL past CLUSTER_CHAN_OUT_MAX. */
static int
out_reserve(cluster_chan *ch, size_t n)
{
    size_t cap;
    uint8_t *p;

    if (ch->out_off > 0 && ch->out_len + n > ch->out_cap) { /* the sent prefix goes first */
        memmove(ch->out, ch->out + ch->out_off, ch->out_len - ch->out_off);
        ch->out_len -= ch->out_off;
        ch->out_off = 0;
    }
    if (ch->out_len + n <= ch->out_cap)
        return TALLY_OK;
    if (ch->out_len + n > CLUSTER_CHAN_OUT_MAX + LEN_BYTES + SEALED_MAX)
        return TALLY_EUNAVAIL;
    cap = ch->out_cap == 0 ? 4096 : ch->out_cap;
    while (cap < ch->out_len + n)
        cap *= 2;
    p = tally_realloc(ch->out, cap);
    if (p == NULL)
        return TALLY_ENOMEM;
    ch->out = p;
    ch->out_cap = cap;
    return TALLY_OK;
}

static int
out_put(cluster_chan *ch, const void *p, size_t n)
{
    int rc = out_reserve(ch, n);

    if (rc == TALLY_OK) {
        memcpy(ch->out + ch->out_len, p, n);
        ch->out_len += n;
    }
    return rc;
}

/* Seals msg with tag as one length-prefixed message into the output. */
static int
out_seal(cluster_chan *ch, const uint8_t *msg, size_t len, uint8_t tag)
{
    size_t sealed = len + SS_ABYTES;
    int rc = out_reserve(ch, LEN_BYTES + sealed);
    uint8_t *p;

    if (rc != TALLY_OK)
        return rc;
    p = ch->out + ch->out_len;
    p[0] = (uint8_t)(sealed >> 24);
    p[1] = (uint8_t)(sealed >> 16);
    p[2] = (uint8_t)(sealed >> 8);
    p[3] = (uint8_t)sealed;
    crypto_secretstream_xchacha20poly1305_push(&ch->push, p + LEN_BYTES, NULL, msg, len, NULL, 0,
                                               tag);
    ch->out_len += LEN_BYTES + sealed;
    return TALLY_OK;
}

/* Makes the channel fail for good: keys wiped, nothing more in or out. */
static int
fail(cluster_chan *ch, int rc)
{
    ch->state = CHAN_FAILED;
    ch->rc = rc;
    cluster_hostkey_wipe(&ch->eph);
    sodium_memzero(ch->es_d2l, sizeof(ch->es_d2l));
    sodium_memzero(ch->rx_key, sizeof(ch->rx_key));
    sodium_memzero(&ch->push, sizeof(ch->push));
    sodium_memzero(&ch->pull, sizeof(ch->pull));
    ch->out_off = ch->out_len = 0; /* a half-made handshake is not sent */
    return rc;
}

/* ---- the handshake ---- */

/* This side's header and first (empty) message: the peer's proof that we hold our key. */
static int
send_header(cluster_chan *ch, const uint8_t header[SS_HEADER])
{
    int rc = out_put(ch, header, SS_HEADER);

    return rc == TALLY_OK ? out_seal(ch, NULL, 0, crypto_secretstream_xchacha20poly1305_TAG_MESSAGE)
                          : rc;
}

/* Dialer: its first message, "TLH1" e_d AEAD(es, s_d), made at open. */
static int
dialer_hello(cluster_chan *ch)
{
    struct kx_pair es;
    unsigned long long clen = 0;
    int rc;

    cluster_hostkey_generate(&ch->eph);
    rc = kx(ch->role, &ch->eph, ch->peer_pk, &es);
    if (rc != TALLY_OK)
        return rc; /* the pinned key is a low-order point: not a host's */
    memcpy(ch->es_d2l, es.d2l, sizeof(es.d2l));
    sodium_memzero(&es, sizeof(es));
    memcpy(ch->hello_d, MAGIC, MAGIC_LEN);
    memcpy(ch->hello_d + MAGIC_LEN, ch->eph.pk, CLUSTER_KEY_BYTES);
    crypto_aead_xchacha20poly1305_ietf_encrypt(
        ch->hello_d + MAGIC_LEN + CLUSTER_KEY_BYTES, &clen, ch->self.pk, CLUSTER_KEY_BYTES,
        ch->hello_d, MAGIC_LEN + CLUSTER_KEY_BYTES, NULL, zero_nonce, ch->es_d2l);
    return out_put(ch, ch->hello_d, sizeof(ch->hello_d));
}

/* Listener: the dialer's first message. Its static key opens (or the peer is refused),
 * then the answer "TLH1" e_l, our header and our first message go out. */
static int
listener_on_hello(cluster_chan *ch, const uint8_t *p)
{
    struct kx_pair es;
    uint8_t hello_l[HELLO_L_LEN], header[SS_HEADER];
    int rc;

    if (memcmp(p, MAGIC, MAGIC_LEN) != 0)
        return TALLY_EPROTO;
    memcpy(ch->hello_d, p, HELLO_D_LEN);
    rc = kx(ch->role, &ch->self, p + MAGIC_LEN, &es);
    if (rc != TALLY_OK)
        return rc;
    memcpy(ch->es_d2l, es.d2l, sizeof(es.d2l));
    sodium_memzero(&es, sizeof(es));
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            ch->peer_pk, NULL, NULL, p + MAGIC_LEN + CLUSTER_KEY_BYTES,
            CLUSTER_KEY_BYTES + AEAD_ABYTES, p, MAGIC_LEN + CLUSTER_KEY_BYTES, zero_nonce,
            ch->es_d2l) != 0)
        return TALLY_EUNAUTH; /* sealed to another key, or altered */
    ch->peer_known = true;
    if (ch->peer_ok(ch->ctx, ch->peer_pk) != TALLY_OK)
        return TALLY_EUNAUTH;
    cluster_hostkey_generate(&ch->eph);
    memcpy(hello_l, MAGIC, MAGIC_LEN);
    memcpy(hello_l + MAGIC_LEN, ch->eph.pk, CLUSTER_KEY_BYTES);
    rc = derive(ch, hello_l, p + MAGIC_LEN, header);
    if (rc == TALLY_OK)
        rc = out_put(ch, hello_l, sizeof(hello_l));
    return rc == TALLY_OK ? send_header(ch, header) : rc;
}

/* Dialer: the listener's answer; then our header and first message go out. */
static int
dialer_on_hello(cluster_chan *ch, const uint8_t *p)
{
    uint8_t header[SS_HEADER];
    int rc;

    if (memcmp(p, MAGIC, MAGIC_LEN) != 0)
        return TALLY_EPROTO;
    rc = derive(ch, p, p + MAGIC_LEN, header);
    return rc == TALLY_OK ? send_header(ch, header) : rc;
}

/* ---- input ---- */

static uint32_t
get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The next whole unit at p (avail bytes): *used is 0 while it is incomplete. */
static int
take(cluster_chan *ch, const uint8_t *p, size_t avail, size_t *used /* OUT */)
{
    unsigned long long mlen = 0;
    uint8_t tag = 0;
    size_t sealed;
    int rc;

    *used = 0;
    switch (ch->state) {
    case CHAN_HELLO: {
        size_t need = ch->role == CLUSTER_CHAN_LISTENER ? HELLO_D_LEN : HELLO_L_LEN;

        if (avail < need)
            return TALLY_OK;
        rc = ch->role == CLUSTER_CHAN_LISTENER ? listener_on_hello(ch, p) : dialer_on_hello(ch, p);
        if (rc == TALLY_OK) {
            ch->state = CHAN_HEADER;
            *used = need;
        }
        return rc;
    }
    case CHAN_HEADER:
        if (avail < SS_HEADER)
            return TALLY_OK;
        if (crypto_secretstream_xchacha20poly1305_init_pull(&ch->pull, p, ch->rx_key) != 0)
            return TALLY_EUNAUTH;
        sodium_memzero(ch->rx_key, sizeof(ch->rx_key));
        ch->state = CHAN_CONFIRM;
        *used = SS_HEADER;
        return TALLY_OK;
    case CHAN_CONFIRM:
    case CHAN_OPEN:
        if (avail < LEN_BYTES)
            return TALLY_OK;
        sealed = get_be32(p);
        if (sealed < SS_ABYTES || sealed > SEALED_MAX)
            return TALLY_EPROTO;
        if (avail < LEN_BYTES + sealed)
            return TALLY_OK;
        if (ch->plain_cap < sealed - SS_ABYTES + 1) {
            size_t cap = sealed - SS_ABYTES + 1;
            uint8_t *n = tally_realloc(ch->plain, cap);
            if (n == NULL)
                return TALLY_ENOMEM;
            ch->plain = n;
            ch->plain_cap = cap;
        }
        if (crypto_secretstream_xchacha20poly1305_pull(&ch->pull, ch->plain, &mlen, &tag,
                                                       p + LEN_BYTES, sealed, NULL, 0) != 0)
            return TALLY_EUNAUTH;
        *used = LEN_BYTES + sealed;
        if (ch->state == CHAN_CONFIRM) { /* the peer's proof: empty, an ordinary message */
            if (mlen != 0 || tag != crypto_secretstream_xchacha20poly1305_TAG_MESSAGE)
                return TALLY_EPROTO;
            ch->state = CHAN_OPEN;
            return TALLY_OK;
        }
        if (tag == crypto_secretstream_xchacha20poly1305_TAG_FINAL) {
            if (mlen != 0)
                return TALLY_EPROTO;
            ch->state = CHAN_DONE;
            return TALLY_OK;
        }
        if (tag != crypto_secretstream_xchacha20poly1305_TAG_MESSAGE)
            return TALLY_EPROTO;
        ch->on_msg(ch->ctx, ch->plain, (size_t)mlen);
        return TALLY_OK;
    case CHAN_DONE:
        return TALLY_EPROTO; /* nothing follows the final message */
    case CHAN_FAILED:
        break;
    }
    return ch->rc;
}

int
cluster_chan_input(cluster_chan *ch, const uint8_t *p, size_t n)
{
    size_t off = 0, used;
    int rc;

    if (ch->state == CHAN_FAILED)
        return ch->rc;
    if (n > 0 && ch->in_len + n > ch->in_cap) {
        size_t cap = ch->in_cap == 0 ? 4096 : ch->in_cap;
        uint8_t *b;

        while (cap < ch->in_len + n)
            cap *= 2;
        b = tally_realloc(ch->in, cap);
        if (b == NULL)
            return fail(ch, TALLY_ENOMEM);
        ch->in = b;
        ch->in_cap = cap;
    }
    if (n > 0) {
        memcpy(ch->in + ch->in_len, p, n);
        ch->in_len += n;
    }
    do {
        rc = take(ch, ch->in + off, ch->in_len - off, &used);
        if (rc != TALLY_OK)
            return fail(ch, rc);
        off += used;
    } while (used > 0 && off < ch->in_len);
    memmove(ch->in, ch->in + off, ch->in_len - off);
    ch->in_len -= off;
    return TALLY_OK;
}

/* ---- the rest of the API ---- */

int
cluster_chan_open(const struct cluster_chan_cfg *cfg, cluster_chan **out)
{
    cluster_chan *ch = NULL;
    int rc = TALLY_EINVAL;

    *out = NULL;
    if (cfg == NULL || cfg->self == NULL || cfg->on_msg == NULL ||
        (cfg->role == CLUSTER_CHAN_DIALER && cfg->peer_pk == NULL) ||
        (cfg->role == CLUSTER_CHAN_LISTENER && cfg->peer_ok == NULL))
        goto out;
    rc = TALLY_ENOMEM;
    ch = tally_calloc(1, sizeof(*ch));
    if (ch == NULL)
        goto out;
    ch->role = cfg->role;
    ch->state = CHAN_HELLO;
    ch->self = *cfg->self;
    ch->peer_ok = cfg->peer_ok;
    ch->on_msg = cfg->on_msg;
    ch->ctx = cfg->ctx;
    if (ch->role == CLUSTER_CHAN_DIALER) {
        memcpy(ch->peer_pk, cfg->peer_pk, CLUSTER_KEY_BYTES);
        ch->peer_known = true;
        rc = dialer_hello(ch);
        if (rc != TALLY_OK)
            goto out;
    }
    *out = ch;
    ch = NULL;
    rc = TALLY_OK;
out:
    cluster_chan_close(ch);
    return rc;
}

void
cluster_chan_close(cluster_chan *ch)
{
    if (ch == NULL)
        return;
    tally_free(ch->in);
    tally_free(ch->out);
    if (ch->plain != NULL)
        sodium_memzero(ch->plain, ch->plain_cap);
    tally_free(ch->plain);
    sodium_memzero(ch, sizeof(*ch));
    tally_free(ch);
}

int
cluster_chan_send(cluster_chan *ch, const uint8_t *msg, size_t len)
{
    if (len > CLUSTER_CHAN_MSG_MAX)
        return TALLY_ETOOBIG;
    if ((ch->state != CHAN_OPEN && ch->state != CHAN_DONE) || ch->finish_sent ||
        ch->out_len - ch->out_off > CLUSTER_CHAN_OUT_MAX)
        return TALLY_EUNAVAIL;
    return out_seal(ch, msg, len, crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
}

int
cluster_chan_finish(cluster_chan *ch)
{
    int rc;

    if ((ch->state != CHAN_OPEN && ch->state != CHAN_DONE) || ch->finish_sent)
        return TALLY_EUNAVAIL;
    rc = out_seal(ch, NULL, 0, crypto_secretstream_xchacha20poly1305_TAG_FINAL);
    if (rc == TALLY_OK)
        ch->finish_sent = true;
    return rc;
}

void
cluster_chan_output(const cluster_chan *ch, const uint8_t **p, size_t *n)
{
    *p = ch->out + ch->out_off;
    *n = ch->out_len - ch->out_off;
}

void
cluster_chan_output_done(cluster_chan *ch, size_t n)
{
    if (NEVER(n > ch->out_len - ch->out_off))
        n = ch->out_len - ch->out_off;
    ch->out_off += n;
    if (ch->out_off == ch->out_len)
        ch->out_off = ch->out_len = 0;
}

bool
cluster_chan_established(const cluster_chan *ch)
{
    return ch->state == CHAN_OPEN || ch->state == CHAN_DONE;
}

bool
cluster_chan_peer_finished(const cluster_chan *ch)
{
    return ch->state == CHAN_DONE;
}

const uint8_t *
cluster_chan_peer(const cluster_chan *ch)
{
    return ch->peer_known ? ch->peer_pk : NULL;
}

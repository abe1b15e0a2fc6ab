/*
 * The channel between two hosts of a cluster: mutual authentication by static
 * host keys pinned at join, then every message encrypted and authenticated.
 * This header is the protocol without I/O (bytes in, bytes out), so the same
 * code runs over a TCP connection (cluster_conn.h), in the suites over memory,
 * and under the fuzzer. docs/CLUSTER-CHANNEL.md gives the wire format.
 *
 * Handshake (the dialer knows the listener's static key; the listener knows
 * every member's):
 *   dialer   -> "TLH1" e_d  AEAD(k_es, s_d)          84 bytes
 *   listener -> "TLH1" e_l                            36 bytes
 * then each side sends its secretstream header (24 bytes) and a first empty
 * message. A side is established once the peer's first message opens: the keys
 * mix the four X25519 exchanges es, ss, ee, se (crypto_kx) and a hash of both
 * handshake messages, so only the holders of the two static secret keys reach
 * that point, and a recorded session replayed gets nowhere (fresh e_l).
 * Messages: a 4-byte big-endian length, then a secretstream message of that
 * length (plaintext + 17 bytes). A closing side may send a final message;
 * secretstream's counters make reordered, dropped or replayed messages fail.
 *
 * Single-threaded: a channel is used by one thread.
 */
#ifndef CLUSTER_CHAN_H
#define CLUSTER_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally_common.h"

#define CLUSTER_KEY_BYTES 32
/* The largest message a channel carries (a raft batch or a snapshot chunk at most). */
#define CLUSTER_CHAN_MSG_MAX (1u << 20)
/* Bytes a channel queues for its peer before cluster_chan_send refuses more. */
#define CLUSTER_CHAN_OUT_MAX (8u << 20)

/* A host's static X25519 key pair (crypto_kx). The secret half is wiped by
 * cluster_hostkey_wipe(). */
struct cluster_hostkey {
    uint8_t pk[CLUSTER_KEY_BYTES];
    uint8_t sk[CLUSTER_KEY_BYTES];
};

/** A new random key pair. Any thread (after sodium_init). */
void cluster_hostkey_generate(struct cluster_hostkey *k /* OUT */);
/** Wipes k (both halves). */
void cluster_hostkey_wipe(struct cluster_hostkey *k);
/** The key's printable form: 64 lowercase hex digits and a NUL into out[65]. */
void cluster_key_hex(const uint8_t pk[CLUSTER_KEY_BYTES], char out[2 * CLUSTER_KEY_BYTES + 1]);
/** Parses 64 hex digits (either case, nothing else) into pk. TALLY_OK or TALLY_EINVAL. */
TALLY_MUST_CHECK int cluster_key_parse(const char *s, uint8_t pk[CLUSTER_KEY_BYTES] /* OUT */);

typedef struct cluster_chan cluster_chan;

enum cluster_chan_role {
    CLUSTER_CHAN_DIALER,   /* opened the connection; knows whom it dialed */
    CLUSTER_CHAN_LISTENER, /* accepted it; learns who dialed from the first message */
};

/** Listener: is this static key a member allowed in? TALLY_OK admits; anything else
 *  refuses the channel (TALLY_EUNAUTH from cluster_chan_input). */
typedef int (*cluster_chan_peer_fn)(void *ctx, const uint8_t pk[CLUSTER_KEY_BYTES]);
/** One message from the peer, authenticated and decrypted: msg is valid until return. */
typedef void (*cluster_chan_msg_fn)(void *ctx, const uint8_t *msg, size_t len);

struct cluster_chan_cfg {
    enum cluster_chan_role role;
    const struct cluster_hostkey *self; /* borrowed: copied by cluster_chan_open */
    const uint8_t *peer_pk;             /* dialer: the host dialed (copied); listener: unused */
    cluster_chan_peer_fn peer_ok;       /* listener: required; dialer: unused */
    cluster_chan_msg_fn on_msg;         /* required */
    void *ctx;                          /* handed to both callbacks */
};

/** A channel in its first state; a dialer's first message is already waiting in its
 *  output. *out is owned by the caller, release with cluster_chan_close(). TALLY_OK,
 *  TALLY_EINVAL (a missing key or callback) or TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_chan_open(const struct cluster_chan_cfg *cfg,
                                       cluster_chan **out /* OUT */);
/** Wipes every key and frees ch. NULL is a no-op. */
void cluster_chan_close(cluster_chan *ch);

/** Bytes received from the peer, any cut. Complete messages are handed to on_msg before
 *  it returns. TALLY_OK (more may come), TALLY_EPROTO (not this protocol, or a length
 *  out of bounds), TALLY_EUNAUTH (the peer is refused or failed to prove its key, or a
 *  message does not open: tampered, replayed, reordered) or TALLY_ENOMEM. After an error
 *  the channel takes nothing more (the same error again): drop the connection. */
TALLY_MUST_CHECK int cluster_chan_input(cluster_chan *ch, const uint8_t *p, size_t n);
/** Seals msg (len <= CLUSTER_CHAN_MSG_MAX) into the output. TALLY_OK, TALLY_ETOOBIG,
 *  TALLY_EUNAVAIL (not established yet, failed or finished, or CLUSTER_CHAN_OUT_MAX
 *  bytes wait already: the peer does not read) or TALLY_ENOMEM. */
TALLY_MUST_CHECK int cluster_chan_send(cluster_chan *ch, const uint8_t *msg, size_t len);
/** Queues the final message: the peer sees the channel finish rather than cut. Nothing
 *  can be sent after it. TALLY_OK or as cluster_chan_send. */
TALLY_MUST_CHECK int cluster_chan_finish(cluster_chan *ch);

/** The bytes waiting for the peer (*p valid until the next call on ch). */
void cluster_chan_output(const cluster_chan *ch, const uint8_t **p /* OUT */, size_t *n /* OUT */);
/** n of those bytes were sent. */
void cluster_chan_output_done(cluster_chan *ch, size_t n);

/** True once the peer proved its key (its first message opened). */
bool cluster_chan_established(const cluster_chan *ch);
/** True once the peer's final message came: nothing more will. */
bool cluster_chan_peer_finished(const cluster_chan *ch);
/** The peer's static key: a dialer's from the start, a listener's once the first
 *  message opened (NULL before), kept after a failure so that a refused key can be
 *  logged. Valid while ch is. */
const uint8_t *cluster_chan_peer(const cluster_chan *ch);

#endif /* CLUSTER_CHAN_H */

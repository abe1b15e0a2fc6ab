/*
 * What the blocking and the asynchronous clients of libtally share: the
 * connection with its handshake, and the translation of a CHECK_REPLY into the
 * public struct tally_result. Internal to libtally.
 */
#ifndef PROTO_CLIENT_INT_H
#define PROTO_CLIENT_INT_H

#include <stdint.h>

#include "proto_client.h"
#include "tally.h"

/** Takes the connected socket of `c` (after the handshake, nothing unread) and the
 *  window the server announced; `c` keeps no socket and is still to be closed. */
void tally__client_detach(tally_client *c, int *fd /* OUT */, uint32_t *max_inflight /* OUT */);

/** Fills *out from a decoded CHECK_REPLY. */
void tally__result_from_reply(const struct proto_check_reply *r, struct tally_result *out);

/** Fills *m for a CHECK of (token, endpoint, cost): TALLY_EINVAL for an endpoint
 *  too long or a cost out of range. The caller wipes *m (it holds the token). */
int tally__check_prepare(struct proto_check *m, const char *token, const char *endpoint,
                         int64_t cost);

#endif /* PROTO_CLIENT_INT_H */

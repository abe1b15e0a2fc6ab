/*
 * Sample lease messages for the codec's tests (tests/proto_lease_sample.c).
 */
#ifndef PROTO_LEASE_SAMPLE_H
#define PROTO_LEASE_SAMPLE_H

#include <stdint.h>

#include "proto_lease.h"

/** Fills *m with one valid message of `type` (origin: child "search", incarnation 3, seq
 *  1000 + type), fields away from zero. 0, or -1 for a type that is not a lease message. */
int lease_sample(uint8_t type, struct proto_lease_msg *m);

#endif /* PROTO_LEASE_SAMPLE_H */

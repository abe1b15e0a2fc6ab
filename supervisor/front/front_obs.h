/*
 * What tallyd's front observes about itself (front_obs.c): decision latency,
 * lease round-trip times, shadow refusals and each endpoint's service mode
 * (normal, degraded, unavailable) with one log line per transition. Fixed
 * tables only: nothing here allocates, and no table grows with tokens, links
 * or tenants.
 *
 * Header-wide rules: loop thread only; internal to supervisor/.
 */
#ifndef FRONT_OBS_H
#define FRONT_OBS_H

#include <stdbool.h>
#include <stdint.h>

#include "proto_client.h"
#include "store_snapshot.h"
#include "sup_front_service.h"

/* Lease requests whose answer is awaited, by (child, seq) hash, each with the time of
 * its first send. A request whose slot is taken by another before its answer simply
 * goes unmeasured. */
#define FRONT_OBS_RTT_SLOTS 256

struct front_obs_rtt {
    const void *child;
    uint64_t incarnation; /* the child's, when it sent: seqs start again with each */
    uint64_t seq;
    uint64_t sent_ns; /* its first send */
};

struct front_obs {
    struct front_obs_rtt rtt[FRONT_OBS_RTT_SLOTS];
    bool forget_again; /* front.c: drop remembered refusals again at the next poll */
};

/* Service mode of an endpoint's child counter, as its answers show it. */
enum front_mode { FRONT_MODE_NORMAL = 0, FRONT_MODE_DEGRADED = 1, FRONT_MODE_UNAVAILABLE = 2 };

/** A lease request (incarnation, seq) of child `fc` went to its supervisor now: its first
 *  send starts its round trip, a retransmission does not. */
void front_obs_lease_sent(sup_front *f, struct front_child *fc, uint64_t incarnation, uint64_t seq);
/** A reply for (fc, incarnation, seq) came back: the round trip from its request's first
 *  send goes into the histogram. */
void front_obs_lease_answered(sup_front *f, const struct front_child *fc, uint64_t incarnation,
                              uint64_t seq);
/** The answer about to go out for r (before shadow mode rewrites it): decision
 *  latency and the mode transitions of r's child. */
void front_obs_reply(sup_front *f, struct sup_front_req *r, const struct proto_check_reply *reply);
/** Logs a reload: what the new snapshot holds against the old (either may be NULL). */
void front_obs_reload(const store_snapshot *old_snap, const store_snapshot *snap, bool forced);

#endif /* FRONT_OBS_H */

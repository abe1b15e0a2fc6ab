/*
 * A fixture for the child counter suites (test_sup_child.c, test_sup_child_durable.c): one child
 * of endpoint "search", incarnation 7, degraded limit 3/1m, on a clock the test moves (cx_at),
 * with helpers to expect its messages and to answer them as the supervisor would.
 */
#ifndef SUP_SIM_CX_H
#define SUP_SIM_CX_H

#include <stdbool.h>
#include <stdint.h>

#include "sup_child_host.h"

#define LINK_A "lnk_000000000000000a"
#define LINK_B "lnk_000000000000000b"
#define WALL0  ((int64_t)1700000000000)

struct cx {
    sup_child *c;
    struct sup_child_config cfg;
    struct sup_time now;
    uint64_t next_lease;
    bool welcome_due; /* cx_welcome was called: the HELLO, when it comes, is answered */
};

/** Sets the clock to `ms` after the start (monotonic 5000 + ms, wall WALL0 + ms). */
struct sup_time cx_at(struct cx *x, int64_t ms);
void cx_open(struct cx *x, bool strict, enum tenant_unavailable unavailable);
void cx_close(struct cx *x);
/** The next message (a HELLO met after cx_welcome is answered and skipped). */
struct proto_lease_msg cx_next(struct cx *x);
/** The next message, which must be of `type`. */
struct proto_lease_msg cx_expect(struct cx *x, uint8_t type);
void cx_expect_nothing(struct cx *x);
struct sup_child_event cx_deliver(struct cx *x, const struct proto_lease_msg *reply);
void cx_reply_to(const struct proto_lease_msg *req, struct proto_lease_msg *r, uint8_t type);
/** Answers the HELLO with a WELCOME (T_lease 5 s): now if one is due, else when the child
 *  says it (a child says HELLO only once it has something for its supervisor), inside the
 *  cx_expect that meets it. */
void cx_welcome(struct cx *x);
struct sup_child_event cx_grant(struct cx *x, const struct proto_lease_msg *acq, int64_t n,
                                int64_t ttl_ms, uint32_t flags, uint64_t *lease_id);
/** Answers a NEXT ask: a lease of n whose windows start start_ms from now (ttl_ms includes the
 *  wait), with `flags`. */
struct sup_child_event cx_grant_next(struct cx *x, const struct proto_lease_msg *acq, int64_t n,
                                     int64_t start_ms, int64_t life_ms, uint32_t flags);
struct sup_admit cx_admit(struct cx *x, const char *link, int64_t cost, unsigned flags);
/** The lease on `link` admits until `until` (monotonic, exclusive): one token at until - 1, a
 *  wait at until. */
void cx_assert_usable_until(struct cx *x, const char *link, int64_t until);
/** Writes every pending row as durable; returns how many (*last gets the last one). */
int cx_persist_all(struct cx *x, struct sup_child_persist *last);

#endif /* SUP_SIM_CX_H */

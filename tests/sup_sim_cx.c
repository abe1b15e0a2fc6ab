/*
 * The child suites' fixture (sup_sim_cx.h): a child counter of endpoint "search" (incarnation
 * 7, degraded 3/1m) on a hand-driven clock, and hand-made replies to what it sends.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>

#include "sup_sim_cx.h"

struct sup_time
cx_at(struct cx *x, int64_t ms)
{
    x->now.mono_ms = 5000 + ms;
    x->now.wall_ms = WALL0 + ms;
    return x->now;
}

void
cx_open(struct cx *x, bool strict, enum tenant_unavailable unavailable)
{
    memset(x, 0, sizeof(*x));
    strcpy(x->cfg.tenant, "acme");
    strcpy(x->cfg.policy.name, "search");
    x->cfg.policy.cost = 1;
    x->cfg.policy.on_unavailable = unavailable;
    x->cfg.policy.degraded_limits.count = 1;
    x->cfg.policy.degraded_limits.v[0] = (struct tenant_limit){3, 60000};
    x->cfg.incarnation = 7;
    x->cfg.persist_marks = strict;
    x->next_lease = 100;
    assert_int_equal(sup_child_open(&x->cfg, &x->c), TALLY_OK);
    cx_at(x, 0);
}

void
cx_close(struct cx *x)
{
    sup_child_close(x->c);
}

/* The next message, which must be of `type`. */
static void welcome(struct cx *x, const struct proto_lease_msg *h);

struct proto_lease_msg
cx_next(struct cx *x)
{
    struct proto_lease_msg m;

    assert_int_equal(sup_child_next_message(x->c, x->now, &m), TALLY_OK);
    if (m.type == PROTO_LEASE_HELLO && x->welcome_due) {
        welcome(x, &m);
        assert_int_equal(sup_child_next_message(x->c, x->now, &m), TALLY_OK);
    }
    return m;
}

struct proto_lease_msg
cx_expect(struct cx *x, uint8_t type)
{
    struct proto_lease_msg m;

    if (type == PROTO_LEASE_HELLO)
        assert_int_equal(sup_child_next_message(x->c, x->now, &m), TALLY_OK);
    else
        m = cx_next(x);
    if (m.type != type)
        fail_msg("expected %s, got %s", proto_lease_type_name(type), proto_lease_type_name(m.type));
    assert_int_equal(proto_lease_validate(&m), TALLY_OK);
    return m;
}

void
cx_expect_nothing(struct cx *x)
{
    struct proto_lease_msg m;

    if (sup_child_next_message(x->c, x->now, &m) == TALLY_OK)
        fail_msg("unexpected %s", proto_lease_type_name(m.type));
}

struct sup_child_event
cx_deliver(struct cx *x, const struct proto_lease_msg *reply)
{
    struct sup_child_event ev;

    assert_int_equal(sup_child_on_message(x->c, x->now, reply, &ev), TALLY_OK);
    return ev;
}

void
cx_reply_to(const struct proto_lease_msg *req, struct proto_lease_msg *r, uint8_t type)
{
    memset(r, 0, sizeof(*r));
    r->type = type;
    r->origin = req->origin;
}

static void
welcome(struct cx *x, const struct proto_lease_msg *h)
{
    struct proto_lease_msg r;

    assert_string_equal(h->hello.tenant, "acme");
    assert_int_equal(h->origin.incarnation, 7);
    cx_reply_to(h, &r, PROTO_LEASE_WELCOME);
    r.welcome.children = 2;
    r.welcome.lease_ttl_ms = 5000;
    r.welcome.heartbeat_ms = 1000;
    (void)cx_deliver(x, &r);
    x->welcome_due = false;
}

void
cx_welcome(struct cx *x)
{
    struct proto_lease_msg h;

    x->welcome_due = true;
    if (sup_child_next_message(x->c, x->now, &h) != TALLY_OK)
        return; /* nothing asked yet: no HELLO yet */
    assert_int_equal(h.type, PROTO_LEASE_HELLO);
    welcome(x, &h);
}

struct sup_child_event
cx_grant(struct cx *x, const struct proto_lease_msg *acq, int64_t n, int64_t ttl_ms, uint32_t flags,
         uint64_t *lease_id)
{
    struct sup_child_event ev = cx_grant_next(x, acq, n, 0, ttl_ms, flags);

    if (lease_id != NULL)
        *lease_id = x->next_lease;
    return ev;
}

struct sup_child_event
cx_grant_next(struct cx *x, const struct proto_lease_msg *acq, int64_t n, int64_t start_ms,
              int64_t life_ms, uint32_t flags)
{
    struct proto_lease_msg r;

    cx_reply_to(acq, &r, PROTO_LEASE_GRANT);
    strcpy(r.grant.endpoint, acq->acquire.endpoint);
    strcpy(r.grant.link, acq->acquire.link);
    r.grant.lease_id = ++x->next_lease;
    r.grant.n = n;
    r.grant.ttl_ms = start_ms + life_ms;
    r.grant.start_ms = start_ms;
    r.grant.flags = flags;
    return cx_deliver(x, &r);
}

void
cx_assert_usable_until(struct cx *x, const char *link, int64_t until)
{
    x->now.mono_ms = until - 1;
    assert_int_equal(cx_admit(x, link, 1, 0).verdict, SUP_ADMIT_OK);
    x->now.mono_ms = until;
    assert_int_equal(cx_admit(x, link, 1, 0).verdict, SUP_ADMIT_WAIT);
}

struct sup_admit
cx_admit(struct cx *x, const char *link, int64_t cost, unsigned flags)
{
    struct sup_admit a;

    assert_int_equal(sup_child_admit(x->c, link, cost, x->now, flags, &a), TALLY_OK);
    return a;
}

/* Writes every pending row at once, as a durable transaction would. */
int
cx_persist_all(struct cx *x, struct sup_child_persist *last)
{
    struct sup_child_persist p;
    int n = 0;

    while (sup_child_next_persist(x->c, &p) == TALLY_OK) {
        struct sup_child_event ev;

        sup_child_persisted(x->c, &p, &ev);
        if (last != NULL)
            *last = p;
        n++;
    }
    return n;
}

/*
 * The child's table of requests in flight: a free entry (within the supervisor's window of
 * seqs), the table grown on demand from CHILD_REQ_INITIAL entries up to SUP_CHILD_INFLIGHT, a
 * new request with the next seq of this incarnation, and finding one by seq. The messages
 * themselves are child_wire.c's.
 */
#include "sup_child_int.h"

#include <stdio.h>
#include <string.h>

/* A free request entry, or NULL when the table is full or a new seq would stretch the seqs in
 * flight beyond the supervisor's window. */
static struct child_req *
req_free(sup_child *c)
{
    struct child_req *r = NULL;
    uint64_t oldest = c->next_seq + 1;

    for (uint32_t i = 0; i < c->req_cap; i++) {
        if (c->req[i].seq == 0) {
            if (r == NULL)
                r = &c->req[i];
        } else if (c->req[i].seq < oldest) {
            oldest = c->req[i].seq;
        }
    }
    if (c->next_seq + 1 - oldest >= CHILD_SEQ_WINDOW || c->next_seq >= PROTO_LEASE_ID_MAX)
        return NULL;
    return r;
}

/* True iff a request could go out now: a free entry, or room to grow the table, within the
 * window of seqs. */
bool
sup__child_req_room(const sup_child *c)
{
    uint64_t oldest = c->next_seq + 1;
    bool free_entry = c->req_cap < SUP_CHILD_INFLIGHT;

    for (uint32_t i = 0; i < c->req_cap; i++) {
        if (c->req[i].seq == 0)
            free_entry = true;
        else if (c->req[i].seq < oldest)
            oldest = c->req[i].seq;
    }
    return free_entry && c->next_seq + 1 - oldest < CHILD_SEQ_WINDOW &&
           c->next_seq < PROTO_LEASE_ID_MAX;
}

/* Doubles the request table (up to SUP_CHILD_INFLIGHT): the first new entry, or NULL. */
static struct child_req *
req_grow(sup_child *c)
{
    uint32_t old = c->req_cap, cap = old * 2 > SUP_CHILD_INFLIGHT ? SUP_CHILD_INFLIGHT : old * 2;
    struct child_req *n;

    if (cap <= old || !sup__child_req_room(c))
        return NULL;
    n = tally_realloc(c->req, cap * sizeof(*n));
    if (n == NULL)
        return NULL;
    memset(n + old, 0, (cap - old) * sizeof(*n));
    c->req = n;
    c->req_cap = cap;
    return &n[old];
}

struct child_req *
sup__child_req_new(sup_child *c, uint8_t type, int32_t link, int64_t now_mono)
{
    struct child_req *r = req_free(c);

    if (r == NULL)
        r = req_grow(c);
    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->seq = ++c->next_seq;
    r->link = link;
    r->first_mono = -1;
    r->first_wall = -1;
    r->next_mono = now_mono;
    r->backoff = c->retransmit_ms;
    r->msg.type = type;
    snprintf(r->msg.origin.child, sizeof(r->msg.origin.child), "%s", c->policy.name);
    r->msg.origin.incarnation = c->incarnation;
    r->msg.origin.seq = r->seq;
    return r;
}

struct child_req *
sup__child_req_find(sup_child *c, uint64_t seq)
{
    for (uint32_t i = 0; i < c->req_cap; i++) {
        if (seq != 0 && c->req[i].seq == seq)
            return &c->req[i];
    }
    return NULL;
}

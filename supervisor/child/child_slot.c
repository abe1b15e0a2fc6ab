/*
 * The child's concurrency slots (sup_child.h): a SLOT_ACQUIRE or SLOT_RELEASE is a request like
 * any other (child_wire.c sends and retransmits it); giving up on an acquire marks it, and a slot
 * granted to nobody is released at once when its grant arrives.
 */
#include "sup_child_int.h"

#include <stdio.h>

int
sup_child_slot_acquire(sup_child *c, const char *link, struct sup_time now, uint64_t *op)
{
    struct child_link *k;
    struct child_req *r;
    int32_t index;
    int rc;

    *op = 0;
    k = sup__child_link_get(c, link, now.mono_ms, &rc, &index);
    if (k == NULL)
        return rc;
    r = sup__child_req_new(c, PROTO_LEASE_SLOT_ACQUIRE, index, now.mono_ms);
    if (r == NULL)
        return TALLY_EFULL;
    snprintf(r->msg.slot_acquire.endpoint, sizeof(r->msg.slot_acquire.endpoint), "%s",
             c->policy.name);
    snprintf(r->msg.slot_acquire.link, sizeof(r->msg.slot_acquire.link), "%s", k->id);
    *op = r->seq;
    return TALLY_OK;
}

void
sup_child_slot_cancel(sup_child *c, uint64_t op)
{
    struct child_req *r = sup__child_req_find(c, op);

    if (r != NULL && r->msg.type == PROTO_LEASE_SLOT_ACQUIRE)
        r->cancelled = true;
}

int
sup_child_slot_release(sup_child *c, const char *link, int64_t slot_id, struct sup_time now)
{
    struct child_link *k;
    struct child_req *r;
    int32_t index;
    int rc;

    if (slot_id < 1)
        return TALLY_EINVAL;
    k = sup__child_link_get(c, link, now.mono_ms, &rc, &index);
    if (k == NULL)
        return rc;
    r = sup__child_req_new(c, PROTO_LEASE_SLOT_RELEASE, index, now.mono_ms);
    if (r == NULL)
        return TALLY_EFULL;
    snprintf(r->msg.slot_release.link, sizeof(r->msg.slot_release.link), "%s", k->id);
    r->msg.slot_release.slot_id = slot_id;
    return TALLY_OK;
}

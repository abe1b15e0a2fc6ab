/*
 * A visitor over the leases a child holds (sup_child.h), for the suites'
 * checks only: compiled into the suites that link tally_child_internal, never
 * into tallyd.
 */
#include "sup_child_int.h"

int
sup_child_each_lease(const sup_child *c, int (*cb)(void *ctx, const struct sup_child_lease_info *l),
                     void *ctx)
{
    for (uint32_t i = 0; i < c->link_hw; i++) {
        const struct child_link *k = c->links[i];

        for (int j = 0; k != NULL && j < CHILD_LEASES; j++) {
            const struct child_lease *cl = &k->l[j];
            struct sup_child_lease_info info;
            int rc;

            if (cl->state == CL_FREE)
                continue;
            info.link = k->id;
            info.lease_id = cl->id;
            info.n = cl->n;
            info.used = cl->used;
            info.mark = cl->mark_durable;
            info.mark_first = child_first_mark(cl);
            info.row_durable = cl->row_durable;
            info.deadline_mono_ms = cl->deadline_mono;
            info.live = cl->state == CL_LIVE;
            info.foreign = cl->foreign;
            info.pass = cl->pass;
            rc = cb(ctx, &info);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/*
 * The answer to a request, in one place: shadow mode turns a refusal into a
 * flagged admission, the counters and the endpoint's mode (front_obs.c) see
 * every answer, and the request's done callback runs last. Every path of a
 * request ends here, whichever file decided it.
 */
#include "sup_front_int.h"

#include <stdio.h>
#include <string.h>

/* The answer a shadow endpoint gives instead of a refusal: admitted, flagged,
 * naming the scope that would have fired. Nothing was charged for the refusal,
 * and no slot or lease is reported because none was taken. */
static void
shadow_admit(const struct proto_check_reply *refused, struct proto_check_reply *out)
{
    memset(out, 0, sizeof(*out));
    out->status = PROTO_ADMITTED;
    out->scope = refused->scope;
    out->flags = (uint16_t)((refused->flags & PROTO_F_DEGRADED) | PROTO_F_SHADOW_REFUSED);
    out->limit = refused->limit;
    out->period_ms = refused->period_ms;
    out->reset_ms = refused->reset_ms;
    out->remaining = 0;
    out->retry_after_ms = 0;
}

void
front_reply(sup_front *f, struct sup_front_req *r, const struct proto_check_reply *reply)
{
    struct proto_check_reply shadowed;

    front_obs_reply(f, r, reply);
    if (reply->status == PROTO_REFUSED && r->shadow) {
        f->stats.shadow_refused++;
        shadow_admit(reply, &shadowed);
        reply = &shadowed;
    }
    switch (reply->status) {
    case PROTO_ADMITTED:
        f->stats.admitted++;
        if (reply->flags & PROTO_F_DEGRADED)
            f->stats.degraded++;
        break;
    case PROTO_REFUSED:
        f->stats.refused++;
        if (reply->scope < sizeof(f->stats.refused_by_scope) / sizeof(f->stats.refused_by_scope[0]))
            f->stats.refused_by_scope[reply->scope]++;
        break;
    case PROTO_UNAUTHORIZED:
        f->stats.unauthorized++;
        break;
    case PROTO_BAD_REQUEST:
        f->stats.bad_request++;
        break;
    case PROTO_UNAVAILABLE:
        f->stats.unavailable++;
        break;
    default:
        f->stats.internal++;
        break;
    }
    r->child = NULL;
    r->stage = SUP_FRONT_IDLE;
    r->owner = NULL;
    r->done(r, reply);
}

void
front_reply_status(sup_front *f, struct sup_front_req *r, uint8_t status, int64_t retry_after_ms,
                   const char *detail)
{
    struct proto_check_reply reply;

    memset(&reply, 0, sizeof(reply));
    reply.status = status;
    reply.retry_after_ms = retry_after_ms;
    reply.limit = -1;
    reply.remaining = -1;
    snprintf(reply.detail, sizeof(reply.detail), "%s", detail != NULL ? detail : "");
    front_reply(f, r, &reply);
}

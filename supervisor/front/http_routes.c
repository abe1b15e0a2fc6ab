/*
 * The HTTP face of tallyd (front_http.h). /v1/check reads the bearer token,
 * the endpoint (X-Tally-Endpoint or ?endpoint=) and the cost, asks the front,
 * and writes the answer of §6: 200 with RateLimit-Policy and RateLimit (IETF
 * httpapi-ratelimit-headers draft), 429 (or 403 on X-Tally-Deny-Status: 403)
 * with Retry-After in whole seconds rounded up and the same RateLimit fields
 * (r=0, t= the retry time), 401, 400, 503. A shadow
 * endpoint's would-be refusal is a 200 with X-Tally-Shadow: refused. Request slots
 * come from a pool sized with the connection cap, so nothing is allocated per
 * request; the token is never copied out of the parser's buffer.
 */
#include "front_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tenant_count.h"

struct http_req {
    struct sup_front_req r; /* first: the front hands it back */
    struct sup_http *h;
    struct proto_http_response *sync_resp; /* set while the handler runs */
    proto_http_deferred *d;
    bool head;
    bool deny_403;
    bool busy;
    bool answered;         /* answered while the handler was still running */
    struct http_req *next; /* free list, or busy list */
    struct http_req *prev;
};

struct sup_http {
    sup_front *front;
    proto_http_server *srv;
    sup_sock *sock;
    struct http_req *pool;
    struct http_req *free;
    struct http_req *busy;
    uint64_t status_count[6]; /* 200, 429/403, 401, 400, 503, 500 */
};

struct sup_http *
sup_http_new(sup_front *front, uint32_t max_connections)
{
    struct sup_http *h = tally_calloc(1, sizeof(*h));
    uint32_t i;

    if (h == NULL)
        return NULL;
    h->front = front;
    h->pool = tally_calloc(max_connections, sizeof(*h->pool));
    if (h->pool == NULL) {
        tally_free(h);
        return NULL;
    }
    for (i = 0; i < max_connections; i++) {
        h->pool[i].h = h;
        h->pool[i].next = h->free;
        h->free = &h->pool[i];
    }
    return h;
}

void
sup_http_free(struct sup_http *h)
{
    if (h == NULL)
        return;
    tally_free(h->pool);
    tally_free(h);
}

void
sup_http_set_sources(struct sup_http *h, proto_http_server *srv, sup_sock *sock)
{
    h->srv = srv;
    h->sock = sock;
}

static struct http_req *
slot_take(struct sup_http *h)
{
    struct http_req *q = h->free;

    if (q == NULL)
        return NULL;
    h->free = q->next;
    q->busy = true;
    q->d = NULL;
    q->prev = NULL;
    q->next = h->busy;
    if (h->busy != NULL)
        h->busy->prev = q;
    h->busy = q;
    return q;
}

static void
slot_put(struct sup_http *h, struct http_req *q)
{
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        h->busy = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    q->busy = false;
    q->d = NULL;
    q->sync_resp = NULL;
    q->next = h->free;
    h->free = q;
}

static const char *
scope_name(uint8_t scope)
{
    return tenant_scope_name((enum tenant_scope)scope);
}

/* RateLimit-Policy and RateLimit for the window reported in `r` (none when it
 * has no window): r= is what the reply knows is left, never more than truly
 * remains (0 when unknown, and on a refusal), t= `reset_s`. The values are
 * written without printf: this runs for every admission. */
static void
write_ratelimit(struct proto_http_response *resp, const struct proto_check_reply *r,
                int64_t remaining, int64_t reset_s)
{
    char v[PROTO_RATELIMIT_VALUE_MAX];
    const char *name = scope_name(r->scope);

    if (r->limit <= 0 || r->period_ms <= 0)
        return;
    /* A refusal (or a shadow one) names the scope that fired in r->scope; its
     * fields describe the same window as an admission's, under the same name. */
    if ((r->status != PROTO_ADMITTED || (r->flags & PROTO_F_SHADOW_REFUSED)) &&
        r->scope != TENANT_SCOPE_CALLER)
        name = scope_name(TENANT_SCOPE_ENDPOINT_LINK);
    if (proto_ratelimit_policy(v, sizeof(v), name, r->limit, r->period_ms / 1000) > 0)
        proto_http_response_header(resp, "RateLimit-Policy", v);
    if (proto_ratelimit_item(v, sizeof(v), name, remaining > 0 ? remaining : 0, reset_s) > 0)
        proto_http_response_header(resp, "RateLimit", v);
}

/* Writes the answer of a check into resp. */
static void
write_check(struct sup_http *h, struct http_req *q, struct proto_http_response *resp,
            const struct proto_check_reply *r)
{
    char v[160];
    int64_t secs;

    switch (r->status) {
    case PROTO_ADMITTED:
        h->status_count[0]++;
        resp->status = 200;
        write_ratelimit(resp, r, r->remaining, (r->reset_ms + 999) / 1000);
        if (r->slot_id != 0) {
            snprintf(v, sizeof(v), "%lld", (long long)r->slot_id);
            proto_http_response_header(resp, "X-Tally-Lease", v);
        }
        if (r->flags & PROTO_F_DEGRADED)
            proto_http_response_header(resp, "X-Tally-Degraded", "1");
        if (r->flags & PROTO_F_SHADOW_REFUSED) {
            /* a shadow endpoint: this would have been refused by `scope` */
            proto_http_response_header(resp, "X-Tally-Shadow", "refused");
            proto_http_response_header(resp, "X-Tally-Shadow-Scope", scope_name(r->scope));
        }
        if (!q->head) {
            static const char body[] = "{\"result\":\"admitted\"}";
            proto_http_response_write(resp, body, sizeof(body) - 1);
        }
        return;
    case PROTO_REFUSED:
        h->status_count[1]++;
        resp->status = q->deny_403 ? 403 : 429;
        secs = r->flags & PROTO_F_NEVER ? -1 : (r->retry_after_ms + 999) / 1000;
        /* t= when a retry can succeed; a cost over the limit never can: then the window's end */
        write_ratelimit(resp, r, 0, secs >= 0 ? (secs > 0 ? secs : 1) : (r->reset_ms + 999) / 1000);
        if (secs >= 0) {
            snprintf(v, sizeof(v), "%lld", (long long)(secs > 0 ? secs : 1));
            proto_http_response_header(resp, "Retry-After", v);
        }
        proto_http_response_printf(
            resp, "{\"error\":\"rate_limited\",\"scope\":\"%s\",\"retry_after\":%s}",
            scope_name(r->scope), secs >= 0 ? v : "null");
        return;
    case PROTO_UNAUTHORIZED:
        h->status_count[2]++;
        proto_http_response_error(resp, 401, "unauthorized", NULL);
        return;
    case PROTO_BAD_REQUEST:
        h->status_count[3]++;
        proto_http_response_error(resp, 400, "bad_request", r->detail);
        return;
    case PROTO_UNAVAILABLE:
        h->status_count[4]++;
        snprintf(v, sizeof(v), "%lld",
                 (long long)((r->retry_after_ms + 999) / 1000 > 0 ? (r->retry_after_ms + 999) / 1000
                                                                  : 1));
        proto_http_response_header(resp, "Retry-After", v);
        proto_http_response_error(resp, 503, "unavailable", r->detail);
        return;
    default:
        h->status_count[5]++;
        proto_http_response_error(resp, 500, "internal", r->detail);
        return;
    }
}

static void
on_done(struct sup_front_req *r, const struct proto_check_reply *reply)
{
    struct http_req *q = (struct http_req *)r;
    struct sup_http *h = q->h;

    if (q->sync_resp != NULL) {
        write_check(h, q, q->sync_resp, reply);
        q->answered = true;
        return; /* the handler puts the slot back */
    }
    if (q->d != NULL) {
        write_check(h, q, proto_http_deferred_response(q->d), reply);
        proto_http_deferred_finish(q->d);
    }
    slot_put(h, q);
}

/* "Bearer TOKEN" (scheme without case), or NULL. Points into the parser's buffer. */
static const char *
bearer(const struct proto_http_request *req)
{
    const struct proto_http_str *a = &req->headers[PROTO_HTTP_H_AUTHORIZATION];
    const char *p;

    if (a->ptr == NULL || a->len < 8 || strncasecmp(a->ptr, "bearer ", 7) != 0)
        return NULL;
    p = a->ptr + 7;
    while (*p == ' ')
        p++;
    return *p != '\0' ? p : NULL;
}

static bool
endpoint_of(const struct proto_http_request *req, char *out, size_t cap)
{
    const struct proto_http_str *e = &req->headers[PROTO_HTTP_H_ENDPOINT];
    struct proto_http_str q;

    if (e->ptr != NULL && e->len < cap) {
        memcpy(out, e->ptr, e->len + 1);
        return true;
    }
    if (proto_http_query_get(req, "endpoint", &q) == TALLY_OK && q.len < cap) {
        memcpy(out, q.ptr, q.len);
        out[q.len] = '\0';
        return true;
    }
    return false;
}

static void
handle_check(struct sup_http *h, const struct proto_http_request *req,
             struct proto_http_response *resp)
{
    const struct proto_http_str *cost_h = &req->headers[PROTO_HTTP_H_COST];
    const struct proto_http_str *deny = &req->headers[PROTO_HTTP_H_DENY_STATUS];
    char endpoint[TENANT_NAME_MAX + 1];
    const char *token = bearer(req);
    const char *callers[PROTO_HTTP_H_CALLERS];
    size_t lens[PROTO_HTTP_H_CALLERS];
    size_t n_callers = 0;
    bool by_caller;
    struct http_req *q;
    int64_t cost = 0;

    /* X-Tally-Caller values in order; the slots fill in order, so the first absent
     * one ends them. */
    while (n_callers < PROTO_HTTP_H_CALLERS &&
           req->headers[PROTO_HTTP_H_CALLER + n_callers].ptr != NULL) {
        callers[n_callers] = req->headers[PROTO_HTTP_H_CALLER + n_callers].ptr;
        lens[n_callers] = req->headers[PROTO_HTTP_H_CALLER + n_callers].len;
        n_callers++;
    }
    if (!endpoint_of(req, endpoint, sizeof(endpoint))) {
        if (token == NULL && n_callers == 0) {
            h->status_count[2]++;
            proto_http_response_error(resp, 401, "unauthorized", NULL);
            return;
        }
        h->status_count[3]++;
        proto_http_response_error(resp, 400, "bad_request", "missing endpoint");
        return;
    }
    /* An endpoint keyed by caller never looks at the token to key it. */
    by_caller = sup_front_endpoint_key(h->front, endpoint) == TENANT_KEY_CALLER;
    if (token == NULL && !by_caller) {
        h->status_count[2]++;
        proto_http_response_error(resp, 401, "unauthorized", NULL);
        return;
    }
    if (cost_h->ptr != NULL && tenant_cost_parse(cost_h->ptr, &cost) != TALLY_OK) {
        h->status_count[3]++;
        proto_http_response_error(resp, 400, "bad_request", "bad cost: 1 to 2^32");
        return;
    }
    q = slot_take(h);
    if (q == NULL) {
        h->status_count[4]++;
        proto_http_response_header(resp, "Retry-After", "1");
        proto_http_response_error(resp, 503, "unavailable", "too many requests in flight");
        return;
    }
    q->r.done = on_done;
    q->r.data = q;
    q->head = req->method == PROTO_HTTP_HEAD;
    q->deny_403 = deny->ptr != NULL && strcmp(deny->ptr, "403") == 0;
    q->sync_resp = resp;
    q->answered = false;
    if (by_caller)
        sup_front_check_callers(h->front, &q->r, token, endpoint, callers, lens, n_callers, cost);
    else
        sup_front_check(h->front, &q->r, token, endpoint, cost);
    if (q->answered) {
        /* answered while we were in there */
        slot_put(h, q);
        return;
    }
    q->sync_resp = NULL;
    q->d = proto_http_defer(resp);
    if (q->d == NULL) { /* cannot wait: decide without the supervisor */
        sup_front_cancel(h->front, &q->r);
        slot_put(h, q);
        proto_http_response_header(resp, "Retry-After", "1");
        proto_http_response_error(resp, 503, "unavailable", "cannot wait");
    }
}

static void
handle_release(struct sup_http *h, const struct proto_http_request *req,
               struct proto_http_response *resp)
{
    const struct proto_http_str *lease = &req->headers[PROTO_HTTP_H_LEASE];
    const char *token = bearer(req);
    int64_t id = 0;
    int st;

    if (token == NULL) {
        proto_http_response_error(resp, 401, "unauthorized", NULL);
        return;
    }
    if (lease->ptr == NULL || tenant_cost_parse(lease->ptr, &id) != TALLY_OK) {
        proto_http_response_error(resp, 400, "bad_request", "missing or bad X-Tally-Lease");
        return;
    }
    st = sup_front_release(h->front, token, id);
    if (st == PROTO_UNAUTHORIZED)
        proto_http_response_error(resp, 401, "unauthorized", NULL);
    else if (st == PROTO_ADMITTED)
        resp->status = 204;
    else
        proto_http_response_error(resp, 400, "bad_request", "unknown lease");
}

void
sup_http_handle(struct sup_http *h, const struct proto_http_request *req,
                struct proto_http_response *resp)
{
    static const char ok[] = "{\"status\":\"ok\"}";
    static const char readonly[] =
        "{\"status\":\"unhealthy\",\"detail\":\"data dir not writable\"}";
    static const char failing[] =
        "{\"status\":\"unhealthy\",\"detail\":\"supervisors failing to start\"}";

    switch (req->route_id) {
    case ROUTE_HEALTHZ:
        switch (sup_front_health(h->front)) {
        case SUP_FRONT_DATA_UNWRITABLE:
            resp->status = 503;
            proto_http_response_write(resp, readonly, sizeof(readonly) - 1);
            return;
        case SUP_FRONT_SUPERVISORS_FAILING:
            resp->status = 503;
            proto_http_response_write(resp, failing, sizeof(failing) - 1);
            return;
        default:
            resp->status = 200;
            proto_http_response_write(resp, ok, sizeof(ok) - 1);
            return;
        }
    case ROUTE_CHECK:
        handle_check(h, req, resp);
        return;
    case ROUTE_RELEASE:
        handle_release(h, req, resp);
        return;
    case ROUTE_METRICS:
        sup_metrics_write(h->front, h->srv, h->sock, resp);
        return;
    default:
        proto_http_response_error(resp, 404, "not_found", NULL);
        return;
    }
}

void
sup_http_cancel(struct sup_http *h, proto_http_deferred *d)
{
    struct http_req *q;

    for (q = h->busy; q != NULL; q = q->next) {
        if (q->d == d) {
            sup_front_cancel(h->front, &q->r);
            slot_put(h, q);
            return;
        }
    }
}

/*
 * tallyd's HTTP routes (docs/DESIGN.md §9): forward-auth /v1/check, /v1/release,
 * /healthz and /metrics, answered from the sup_front decision service. A check
 * that must wait for a lease is answered later through a deferred answer.
 */
#ifndef FRONT_HTTP_H
#define FRONT_HTTP_H

#include "proto_http.h"
#include "sup_front_service.h"
#include "sup_sock.h"

enum sup_http_route { ROUTE_HEALTHZ = 1, ROUTE_CHECK, ROUTE_RELEASE, ROUTE_METRICS };

struct sup_http;

/** Sets up the request pool (one slot per possible connection). */
struct sup_http *sup_http_new(sup_front *front, uint32_t max_connections);
void sup_http_free(struct sup_http *h);
/** Where /metrics reads the transport counters (may be NULL). */
void sup_http_set_sources(struct sup_http *h, proto_http_server *srv, sup_sock *sock);
void sup_http_handle(struct sup_http *h, const struct proto_http_request *req,
                     struct proto_http_response *resp);
void sup_http_cancel(struct sup_http *h, proto_http_deferred *d);
/** GET /metrics (metrics.c): the Prometheus text page of the front and, when
 *  not NULL, of the HTTP server and the socket. */
void sup_metrics_write(sup_front *front, proto_http_server *srv, sup_sock *sock,
                       struct proto_http_response *resp);

#endif

/*
 * tallyd's HTTP routes (DESIGN.md §6): forward-auth /v1/check, /v1/release,
 * /healthz and /metrics, answered from the sup_front decision service. A check
 * that must wait for a lease is answered later through a deferred answer.
 */
#ifndef TALLYD_HTTP_H
#define TALLYD_HTTP_H

#include "proto_http.h"
#include "sup_front.h"
#include "sup_sock.h"

enum tallyd_route { ROUTE_HEALTHZ = 1, ROUTE_CHECK, ROUTE_RELEASE, ROUTE_METRICS };

struct tallyd_http;

/** Sets up the request pool (one slot per possible connection). */
struct tallyd_http *tallyd_http_new(sup_front *front, uint32_t max_connections);
void tallyd_http_free(struct tallyd_http *h);
/** Where /metrics reads the transport counters (may be NULL). */
void tallyd_http_set_sources(struct tallyd_http *h, proto_http_server *srv, sup_sock *sock);
void tallyd_http_handle(struct tallyd_http *h, const struct proto_http_request *req,
                        struct proto_http_response *resp);
void tallyd_http_cancel(struct tallyd_http *h, proto_http_deferred *d);
/** GET /metrics (tallyd_metrics.c): the Prometheus text page of the front and, when
 *  not NULL, of the HTTP server and the socket. */
void tallyd_metrics_write(sup_front *front, proto_http_server *srv, sup_sock *sock,
                          struct proto_http_response *resp);

#endif

/*
 * The paced clients of test_netns_cluster_delay: each checks one token on one host's socket
 * every SEND_EVERY ms until its end, and counts what it got, admissions by the window they
 * were decided in (exact whatever the latency: the answer's reset_ms), with each check's
 * latency.
 */
#ifndef NETNS_DELAY_CLIENT_H
#define NETNS_DELAY_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "netns_util.h"

#define PERIOD_MS  60000 /* the limit's window */
#define SEND_EVERY 120   /* ms between two checks of one client: 1,500 a minute in all */
#define WINDOWS    6     /* a 3-minute run touches 4 windows; room for a slow start */

struct client {
    struct netns_host *h;
    const char *token;
    int64_t w0;       /* the first window id of the run */
    int64_t end_mono; /* ms */
    int admitted[WINDOWS];
    int admitted_all, refused, unavailable, degraded, other, errors, misplaced;
    int64_t *lat_us;
    size_t n, cap;
};

/* A pthread body: c's checks until c->end_mono, a broken connection opened again. No cmocka
 * call: the main thread checks the counts. */
void *client_run(void *arg);

#endif /* NETNS_DELAY_CLIENT_H */

/*
 * The served tallyd that test_serve_metrics and test_serve_events share: plan `pro`,
 * endpoints `search` (3/365d), `open` (fail-open with a degraded limit) and `closed`
 * (fail-closed), tenant `acme` with one link (token).
 */
#ifndef SERVE_OBS_ENV_H
#define SERVE_OBS_ENV_H

#include "serve_util.h"

#define KEEP_SHORT "--keep-lease-ms=5000" /* the shortest kept lease tallyd allows */

struct env {
    struct serve_env s;
    char token[64];
};

/* cmocka fixtures */
int setup(void **state);
int teardown(void **state);
/* GET /metrics, 200 */
void get_metrics(const struct env *e, struct serve_http *m);

#endif /* SERVE_OBS_ENV_H */

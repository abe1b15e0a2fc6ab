/*
 * Supervisor starts ahead of a first request. The thread-pool job that opens a child's file
 * finds out whether the file exists; when it does not (a tenant's first request on that
 * endpoint), the lease the request needs will need the tenant's supervisor too. The job posts
 * the tenant here (a uv_async and a short queue under a mutex), and the loop starts the
 * supervisor at once when there is room, so its start overlaps the file's creation instead of
 * following it. Best effort: a full queue, no room or a backoff leave it to the first frame.
 */
#include "sup_front_int.h"

#include <stdio.h>
#include <string.h>

void
front_prestart_post(sup_front *f, const char *tenant)
{
    pthread_mutex_lock(&f->prestart_mu);
    if (f->n_prestart < FRONT_PRESTART_MAX)
        snprintf(f->prestart_q[f->n_prestart++], sizeof(f->prestart_q[0]), "%s", tenant);
    pthread_mutex_unlock(&f->prestart_mu);
    (void)uv_async_send(&f->prestart);
}

static void
on_prestart(uv_async_t *h)
{
    sup_front *f = h->data;
    char q[FRONT_PRESTART_MAX][sizeof(f->prestart_q[0])];
    uint32_t i, n;

    pthread_mutex_lock(&f->prestart_mu);
    n = f->n_prestart;
    memcpy(q, f->prestart_q, n * sizeof(q[0]));
    f->n_prestart = 0;
    pthread_mutex_unlock(&f->prestart_mu);
    for (i = 0; i < n && !f->closing && !front_lease_remote(f); i++)
        sup_manager_prestart(f->mgr, q[i]); /* in a cluster, only the leader's start here */
}

void
front_prestart_init(sup_front *f)
{
    pthread_mutex_init(&f->prestart_mu, NULL);
    uv_async_init(f->loop, &f->prestart, on_prestart);
    f->prestart.data = f;
}

void
front_prestart_close(sup_front *f, uv_close_cb cb)
{
    uv_close((uv_handle_t *)&f->prestart, cb);
    pthread_mutex_destroy(&f->prestart_mu);
}

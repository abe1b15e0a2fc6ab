/*
 * The paced clients of test_netns_cluster_delay (netns_delay_client.h).
 */
#include "netns_delay_client.h"

#include <stdlib.h>
#include <time.h>

#include "tally.h"
#include "test_support.h"

static int64_t
mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
note_latency(struct client *c, int64_t us)
{
    if (c->n == c->cap) {
        size_t cap = c->cap == 0 ? 4096 : c->cap * 2;
        int64_t *p = realloc(c->lat_us, cap * sizeof(*p));

        if (p == NULL) {
            c->errors++;
            return;
        }
        c->lat_us = p;
        c->cap = cap;
    }
    c->lat_us[c->n++] = us;
}

/* The window an admission was decided in. The reply's reset_ms is the decision's wall clock
 * to the end of its window, and the decision came before the answer arrived (`now`), so
 * now + reset_ms lies in [end, end + the answer's latency): the end, hence the window, is
 * exact whatever the latency below a period. */
static void
count_admitted(struct client *c, const struct tally_result *r, int64_t now)
{
    int64_t w;

    c->admitted_all++;
    if (r->degraded)
        c->degraded++;
    if (r->period_ms != PERIOD_MS || r->reset_ms <= 0 || r->reset_ms > PERIOD_MS) {
        c->misplaced++;
        return;
    }
    w = (now + r->reset_ms) / PERIOD_MS - 1;
    if (w < c->w0 || w >= c->w0 + WINDOWS) {
        c->misplaced++;
        return;
    }
    c->admitted[w - c->w0]++;
}

static void
count(struct client *c, const struct tally_result *r, int64_t now)
{
    switch (r->status) {
    case TALLY_ADMITTED:
        count_admitted(c, r, now);
        break;
    case TALLY_REFUSED:
        c->refused++;
        break;
    case TALLY_UNAVAILABLE:
        c->unavailable++;
        break;
    default:
        c->other++;
        break;
    }
}

/* One check every SEND_EVERY ms on one connection to the host's socket (reached from the
 * root namespace) until end_mono; a broken connection is opened again. No cmocka call here:
 * the main thread checks the counts. */
void *
client_run(void *arg)
{
    struct client *c = arg;
    tally_client *tc = NULL;
    int64_t next = test_now_ms();

    while (test_now_ms() < c->end_mono) {
        struct tally_result r;
        int64_t t0, now = test_now_ms();
        int rc;

        if (now < next)
            netns_sleep_ms(next - now);
        next = (now > next ? now : next) + SEND_EVERY;
        if (tc == NULL && tally_client_open(c->h->d.socket, 5000, &tc) != TALLY_OK) {
            c->errors++;
            tc = NULL;
            continue;
        }
        t0 = mono_us();
        rc = tally_check(tc, c->token, "api", 0, &r);
        if (rc != TALLY_OK) {
            c->errors++;
            tally_client_close(tc);
            tc = NULL;
            continue;
        }
        note_latency(c, mono_us() - t0);
        count(c, &r, test_wall_ms());
    }
    tally_client_close(tc);
    return NULL;
}

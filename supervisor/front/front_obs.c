/*
 * The front's view of itself (front_obs.h): latency histograms with fixed
 * buckets, lease round trips from a request's first send to its answer,
 * matched by (child, incarnation, seq) in a fixed table, and
 * the service mode of each child counter, read off the answers it gives: a
 * degraded admission means degraded mode, a 503 by the endpoint's policy (the
 * supervisor out of reach or too slow) means unavailable mode, and an
 * ordinary admission means normal again once the supervisor has answered
 * since the mode changed (an admission from a lease held before says nothing).
 * Each change is one log line and one count; nothing is logged per request.
 */
#include "front_obs.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sup_front_int.h"
#include "tally_log.h"

const uint64_t sup_front_hist_bounds_ns[SUP_FRONT_HIST_BOUNDS] = {
    10000,    25000,    50000,    100000,    250000,    500000,    1000000,   2500000,   5000000,
    10000000, 25000000, 50000000, 100000000, 150000000, 200000000, 250000000, 500000000, 1000000000,
};

void
sup_front_hist_observe(struct sup_front_hist *h, uint64_t ns)
{
    size_t i = 0;

    while (i < SUP_FRONT_HIST_BOUNDS && ns > sup_front_hist_bounds_ns[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum_ns += ns;
}

static struct front_obs_rtt *
rtt_slot(sup_front *f, const struct front_child *fc, uint64_t seq)
{
    uintptr_t k = (uintptr_t)fc >> 4;

    k ^= (uintptr_t)(seq * 0x9e3779b97f4a7c15ull);
    return &f->obs.rtt[k % FRONT_OBS_RTT_SLOTS];
}

void
front_obs_lease_sent(sup_front *f, struct front_child *fc, uint64_t incarnation, uint64_t seq)
{
    struct front_obs_rtt *s = rtt_slot(f, fc, seq);

    /* A round trip runs from a request's first send to its answer: the child retransmits
     * after 20, 40, 80 ms ..., and a clock restarted at each retransmission would read a wait
     * of 345 ms as 45. A child's first sends come in seq order, so a seq above the highest
     * sent by its incarnation is a first send and takes the slot; a lower one is a
     * retransmission and leaves the slot as it is: it holds the first send's time, or, when
     * another request took the slot meanwhile, this request goes unmeasured (never measured
     * short). */
    if (incarnation != fc->obs_incarnation) {
        fc->obs_incarnation = incarnation;
        fc->obs_seq_hi = 0;
    }
    if (seq <= fc->obs_seq_hi)
        return;
    fc->obs_seq_hi = seq;
    s->child = fc;
    s->incarnation = incarnation;
    s->seq = seq;
    s->sent_ns = uv_hrtime();
}

void
front_obs_lease_answered(sup_front *f, const struct front_child *fc, uint64_t incarnation,
                         uint64_t seq)
{
    struct front_obs_rtt *s = rtt_slot(f, fc, seq);

    if (s->child != fc || s->incarnation != incarnation || s->seq != seq || s->sent_ns == 0)
        return; /* a duplicate answer, or its slot was reused */
    sup_front_hist_observe(&f->stats.lease_rtt, uv_hrtime() - s->sent_ns);
    s->child = NULL;
    s->sent_ns = 0;
}

static const char *const mode_names[] = {"normal", "degraded", "unavailable"};

static void
set_mode(sup_front *f, struct front_child *fc, enum front_mode to)
{
    enum front_mode from = (enum front_mode)fc->mode;
    struct tally_log l;
    static const char *const events[] = {"endpoint_recovered", "endpoint_degraded",
                                         "endpoint_unavailable"};

    if (from == to)
        return;
    if (from == FRONT_MODE_NORMAL)
        fc->mode_since_ms = front_now().mono_ms;
    fc->mode = (uint8_t)to;
    f->stats.mode_changes[to]++;
    if (from == FRONT_MODE_DEGRADED)
        f->stats.endpoints_degraded--;
    if (from == FRONT_MODE_UNAVAILABLE)
        f->stats.endpoints_unavailable--;
    if (to == FRONT_MODE_DEGRADED)
        f->stats.endpoints_degraded++;
    if (to == FRONT_MODE_UNAVAILABLE)
        f->stats.endpoints_unavailable++;
    if (tally_log_begin(&l, to == FRONT_MODE_NORMAL ? TALLY_LOG_INFO : TALLY_LOG_WARN,
                        events[to])) {
        tally_log_str(&l, "tenant", fc->tenant);
        tally_log_str(&l, "endpoint", fc->endpoint);
        tally_log_str(&l, "from", mode_names[from]);
        tally_log_str(&l, "to", mode_names[to]);
        if (to == FRONT_MODE_DEGRADED)
            tally_log_str(&l, "policy", "open: admitting under the degraded limit");
        else if (to == FRONT_MODE_UNAVAILABLE)
            tally_log_str(&l, "policy", "closed: answering 503");
        tally_log_end(&l);
    }
}

void
front_obs_reply(sup_front *f, struct sup_front_req *r, const struct proto_check_reply *reply)
{
    struct front_child *fc = r->owner;

    if (r->start_ns != 0)
        sup_front_hist_observe(&f->stats.decision, front_now_ns() - r->start_ns);
    if (fc == NULL || fc->child == NULL || f->closing)
        return;
    switch (reply->status) {
    case PROTO_ADMITTED:
        if (reply->flags & PROTO_F_DEGRADED)
            set_mode(f, fc, FRONT_MODE_DEGRADED);
        else if (fc->mode == FRONT_MODE_NORMAL ||
                 sup_child_last_reply_ms(fc->child) > fc->mode_since_ms)
            set_mode(f, fc, FRONT_MODE_NORMAL);
        /* else admitted from a lease held before the outage: no sign yet that the
         * supervisor is back, so no "recovered" line (and no flapping). */
        return;
    case PROTO_UNAVAILABLE:
        /* Only an outage changes the mode (the policy answered for a supervisor out of
         * reach or too slow); a full table or a shutdown does not. */
        if (r->outage || !sup_child_reachable(fc->child, front_now()))
            set_mode(f, fc, FRONT_MODE_UNAVAILABLE);
        return;
    default:
        return; /* a refusal says nothing about the authority */
    }
}

/* A supervisor start that failed this long ago no longer makes /healthz fail: a
 * tenant nobody asks for again should not keep the whole service unhealthy. */
#define HEALTH_START_FAIL_MS 30000
/* The data dir is probed at most this often, however often /healthz is asked. */
#define HEALTH_PROBE_MS 1000

enum sup_front_health
sup_front_health(sup_front *f)
{
    struct sup_front_stats fs;
    uint64_t now = uv_now(f->loop);

    if (f->health_probe_ms == 0 || now - f->health_probe_ms >= HEALTH_PROBE_MS) {
        f->health_probe_ms = now == 0 ? 1 : now;
        f->data_unwritable = access(f->data, W_OK) != 0;
    }
    if (f->data_unwritable)
        return SUP_FRONT_DATA_UNWRITABLE;
    sup_front_stats(f, &fs);
    if (fs.sup.failing > 0 && now - fs.sup.start_failed_ms < HEALTH_START_FAIL_MS)
        return SUP_FRONT_SUPERVISORS_FAILING;
    return SUP_FRONT_HEALTHY;
}

void
front_obs_reload(const store_snapshot *old_snap, const store_snapshot *snap, bool forced)
{
    struct tally_log l;
    size_t old_eps = 0, eps = 0;

    /* The first load is part of the start line; a RELOAD that finds nothing new
     * (the poll got there first) is not a change. */
    if (old_snap == NULL || store_snapshot_version(old_snap) == store_snapshot_version(snap) ||
        !tally_log_begin(&l, TALLY_LOG_INFO, "reload"))
        return;
    (void)store_snapshot_endpoints(old_snap, &old_eps);
    (void)store_snapshot_endpoints(snap, &eps);
    tally_log_str(&l, "trigger", forced ? "notify" : "poll");
    tally_log_int(&l, "links", (int64_t)store_snapshot_link_count(snap));
    tally_log_int(&l, "links_before", (int64_t)store_snapshot_link_count(old_snap));
    tally_log_int(&l, "policies", (int64_t)eps);
    tally_log_int(&l, "policies_before", (int64_t)old_eps);
    tally_log_int(&l, "data_version", store_snapshot_version(snap));
    tally_log_end(&l);
}

void
sup_front_stats_reply(sup_front *f, const char *tenant, struct proto_stats_reply *out)
{
    struct sup_front_stats fs;
    struct sup_time now = front_now();
    uint32_t i;

    sup_front_stats(f, &fs);
    memset(out, 0, sizeof(*out));
    out->checks = fs.checks;
    out->admitted = fs.admitted;
    out->refused = fs.refused;
    out->unauthorized = fs.unauthorized;
    out->bad_request = fs.bad_request;
    out->unavailable = fs.unavailable;
    out->internal = fs.internal;
    out->degraded = fs.degraded;
    out->shadow_refused = fs.shadow_refused;
    out->reloads = fs.reloads;
    out->sup_starts = fs.sup.starts;
    out->sup_restarts = fs.sup.restarts;
    out->sup_idle_exits = fs.sup.exits;
    out->sup_crashes = fs.sup.crashes;
    out->sup_live = fs.sup.live;
    out->children = fs.children;
    out->links_live = fs.live_links;
    if (tenant[0] == '\0')
        return;
    if (store_snapshot_tenant(f->snap, tenant) == NULL) {
        out->tenant_status = PROTO_STATS_UNKNOWN;
        return;
    }
    out->tenant_status = PROTO_STATS_TENANT;
    out->sup_up = sup_manager_is_up(f->mgr, tenant);
    out->sup_pid = (uint32_t)sup_manager_pid(f->mgr, tenant);
    for (i = 0; i < f->n_children; i++) {
        struct front_child *fc = f->children[i];
        struct proto_stats_endpoint *e;
        struct sup_child_stats cs;

        if (strcmp(fc->tenant, tenant) != 0 || fc->child == NULL)
            continue;
        if (out->n_endpoints == PROTO_STATS_ENDPOINTS_MAX) {
            out->more = 1;
            break;
        }
        e = &out->ep[out->n_endpoints++];
        sup_child_stats(fc->child, now, &cs);
        snprintf(e->name, sizeof(e->name), "%s", fc->endpoint);
        e->mode = fc->mode;
        e->reachable = cs.reachable;
        e->links = cs.links;
        e->leases = cs.live_leases;
        e->admitted = cs.admits + cs.degraded;
        e->refused = cs.refused;
        e->degraded = cs.degraded;
        e->unavailable = cs.unavailable;
    }
}

void
sup_front_stats(const sup_front *f, struct sup_front_stats *out)
{
    *out = f->stats;
    out->children = f->n_children;
    out->children_open = f->n_files;
    sup_manager_stats(f->mgr, &out->sup);
}

/* A child's file cannot be opened (corrupt, newer schema, no space): its
 * requests get 503 and every one tries again, so it heals when the file is
 * fixed; the log says so once a minute, naming the tenant and the file. */
void
front_log_open_failed(sup_front *f, const char *tenant, const char *endpoint, int rc,
                      const char *detail)
{
    char key[sizeof(f->open_failed)];
    int64_t now = front_now().mono_ms;
    struct tally_log l;

    snprintf(key, sizeof(key), "%s/%s", tenant, endpoint);
    if (strcmp(key, f->open_failed) == 0 && now - f->open_failed_mono_ms < 60000)
        return;
    snprintf(f->open_failed, sizeof(f->open_failed), "%s", key);
    f->open_failed_mono_ms = now;
    if (!tally_log_begin(&l, TALLY_LOG_ERROR, "child_open_failed"))
        return;
    tally_log_str(&l, "tenant", tenant);
    tally_log_str(&l, "endpoint", endpoint);
    tally_log_str(&l, "error", tally_strerror(rc));
    tally_log_str(&l, "detail", detail);
    tally_log_end(&l);
}

/*
 * Lease links: the leader's tallyd runs the supervisors of every tenant, for every member.
 * A follower keeps one channel to the leader on the leader's cluster port (hello
 * CLUSTER_HELLO_LEASE) and sends its children's lease frames over it; the leader answers on
 * the same channel. Leadership decides everything: a follower dials whoever its log says
 * leads (again on every change, and every RECONCILE_MS while it has no link); a member that
 * does not lead refuses lease links and drops those it had when it stops leading, so a
 * deposed leader's supervisors hear from nobody.
 *
 * On the link, after the hello, every message is one of
 *   'F' | tenant length (1) | tenant | one lease frame     a child's frame, or its answer
 *   'D' | tenant length (1) | tenant                       leader: tenant's supervisor went away
 *   'T' | wall µs (8) | known (1) | skew ms (8)            follower: a probe of the leader's clock,
 *                                                          with its last measurement
 *   'U' | the probe's wall µs (8) | leader's wall µs (8)   leader: the answer
 * Clocks: a follower probes every CLOCK_PROBE_MS. Its skew (its wall clock minus the leader's)
 * is taken at the middle of the round trip, timed on the monotonic clock, so it is off by at
 * most half the round trip: of the last CLOCK_SAMPLES, the shortest round trip's. Windows are
 * decided by the leader's clock alone (leases are relative time), so a skew costs no exactness; it
 * is reported (status, a warning past CLOCK_SKEW_WARN_MS) because a leader change moves every
 * window boundary by it.
 */
#include "cluster_node_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto_lease.h"
#include "tally_log.h"
#include "tenant.h"

/* The supervisors' BATCH ops are the LEDGER records' (proto_lease.h, cluster_node_int.h). */
_Static_assert(LEDGER_APPEND == PROTO_JOURNAL_APPEND && LEDGER_BEGIN == PROTO_JOURNAL_BEGIN &&
                   LEDGER_CHUNK == PROTO_JOURNAL_CHUNK && LEDGER_END == PROTO_JOURNAL_END,
               "journal ops");

#define LEASE_FRAME        'F'
#define LEASE_DOWN         'D'
#define LEASE_CLOCK        'T'
#define LEASE_CLOCK_ANSWER 'U'
#define LEASE_MSG_MAX      (2 + TENANT_NAME_MAX + 65536)
#define CLOCK_PROBE_LEN    18
#define LEASE_SLOT_NONE    ((size_t)-1)
#define CLOCK_ANSWER_LEN   17

static int64_t
wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A member's skew is measured: logged once when it reaches CLOCK_SKEW_WARN_MS, once more when it
 * falls back under half that. */
static void
clock_note(uint64_t member, uint64_t leader, bool *known, bool *warned, int64_t *skew_ms, int64_t v)
{
    struct tally_log l;
    int64_t mag = v < 0 ? -v : v;

    *known = true;
    *skew_ms = v;
    if (*warned ? mag >= CLOCK_SKEW_WARN_MS / 2 : mag < CLOCK_SKEW_WARN_MS)
        return;
    *warned = !*warned;
    if (tally_log_begin(&l, *warned ? TALLY_LOG_WARN : TALLY_LOG_INFO,
                        *warned ? "cluster_clock_skew" : "cluster_clock_skew_ok")) {
        tally_log_int(&l, "member", (int64_t)member);
        tally_log_int(&l, "leader", (int64_t)leader);
        tally_log_int(&l, "skew_ms", v);
        tally_log_end(&l);
    }
}

static void
tell_role(cluster_node *n)
{
    bool leading = n->lg != NULL && !n->closing && cluster_log_leading(n->lg);
    bool link = !leading && n->lease_up;

    if (n->lease_cbs.on_role == NULL ||
        (n->role_known && n->role_leading == leading && n->role_link == link))
        return;
    n->role_known = true;
    n->role_leading = leading;
    n->role_link = link;
    n->lease_cbs.on_role(n->lease_cbs.ctx, leading, link);
}

/* ---- a follower's link to the leader ---- */

/* A probe of the leader's clock, when one is due; it carries the last measurement. */
static void
clock_probe(cluster_node *n)
{
    uint8_t msg[CLOCK_PROBE_LEN];
    uint64_t now = uv_now(n->loop);

    if (!n->lease_up || now < n->clock_self.next_ms)
        return;
    n->clock_self.next_ms = now + CLOCK_PROBE_MS;
    n->clock_self.sent_hr = uv_hrtime();
    n->clock_self.sent_wall_us = wall_us();
    msg[0] = LEASE_CLOCK;
    cluster__put_u64(msg + 1, (uint64_t)n->clock_self.sent_wall_us);
    msg[9] = n->clock_self.known;
    cluster__put_u64(msg + 10, (uint64_t)n->clock_self.skew_ms);
    for (int i = 0; i < LEASE_LANES; i++) { /* on one lane: its answer comes back on it */
        if (n->lease_out_ready[i]) {
            if (cluster_conn_send(n->lease_out[i], msg, sizeof(msg)) != TALLY_OK)
                n->clock_self.sent_hr = 0;
            return;
        }
    }
}

static int
lane_of(const cluster_node *n, const cluster_conn *c)
{
    for (int i = 0; i < LEASE_LANES; i++) {
        if (n->lease_out[i] == c)
            return i;
    }
    return -1;
}

/* The leader's answer to the probe in flight (any other is stale and ignored). */
static void
clock_answer(cluster_node *n, const uint8_t *msg, size_t len)
{
    int64_t rtt_us, leader_us;
    unsigned best;

    if (len != CLOCK_ANSWER_LEN || n->clock_self.sent_hr == 0 ||
        cluster__get_u64(msg + 1) != (uint64_t)n->clock_self.sent_wall_us)
        return;
    rtt_us = (int64_t)((uv_hrtime() - n->clock_self.sent_hr) / 1000);
    leader_us = (int64_t)cluster__get_u64(msg + 9);
    n->clock_self.sent_hr = 0;
    /* One leg slowed (a retransmission) moves the middle of the round trip by up to half of
     * it: of the last few samples, the one with the shortest round trip is the most exact. */
    n->clock_self.sample[n->clock_self.at].rtt_us = rtt_us > 0 ? rtt_us : 1;
    n->clock_self.sample[n->clock_self.at].skew_us =
        n->clock_self.sent_wall_us + rtt_us / 2 - leader_us;
    n->clock_self.at = (n->clock_self.at + 1) % CLOCK_SAMPLES;
    best = 0;
    for (unsigned k = 1; k < CLOCK_SAMPLES; k++) {
        if (n->clock_self.sample[k].rtt_us > 0 &&
            (n->clock_self.sample[best].rtt_us == 0 ||
             n->clock_self.sample[k].rtt_us < n->clock_self.sample[best].rtt_us))
            best = k;
    }
    clock_note(n->st.self, n->lease_out_to, &n->clock_self.known, &n->clock_self.warned,
               &n->clock_self.skew_ms, n->clock_self.sample[best].skew_us / 1000);
}

static void
on_out_ready(cluster_conn *c, void *data)
{
    cluster_node *n = data;
    uint8_t hello = CLUSTER_HELLO_LEASE;
    int lane = lane_of(n, c);

    if (lane < 0 || cluster_conn_send(c, &hello, 1) != TALLY_OK) {
        cluster_conn_close(c);
        return;
    }
    n->lease_out_ready[lane] = true;
    if (n->lease_up)
        return; /* another lane to the same leader was up already */
    n->lease_up = true;
    memset(&n->clock_self, 0, sizeof(n->clock_self)); /* measured against this leader */
    cluster__log_member("cluster_lease_link_up", n->lease_out_to, NULL, NULL);
    tell_role(n);
    clock_probe(n);
}

/* A message: its tenant (NUL-terminated into t) and what follows it. */
static int
lease_parse(const uint8_t *msg, size_t len, char t[TENANT_NAME_MAX + 1], const uint8_t **rest,
            size_t *rest_len)
{
    if (len < 2 || msg[1] == 0 || msg[1] > TENANT_NAME_MAX || len < 2 + (size_t)msg[1])
        return TALLY_EPROTO;
    memcpy(t, msg + 2, msg[1]);
    t[msg[1]] = '\0';
    if (!tenant_name_valid(t))
        return TALLY_EPROTO;
    *rest = msg + 2 + msg[1];
    *rest_len = len - 2 - msg[1];
    return TALLY_OK;
}

static void
on_out_msg(cluster_conn *c, const uint8_t *msg, size_t len, void *data)
{
    cluster_node *n = data;
    char tenant[TENANT_NAME_MAX + 1];
    const uint8_t *rest;
    size_t rest_len;

    if (len > 0 && msg[0] == LEASE_CLOCK_ANSWER) {
        clock_answer(n, msg, len);
        return;
    }
    if (lease_parse(msg, len, tenant, &rest, &rest_len) != TALLY_OK ||
        (msg[0] == LEASE_DOWN && rest_len != 0) ||
        (msg[0] != LEASE_DOWN && msg[0] != LEASE_FRAME)) {
        cluster_conn_close(c);
        return;
    }
    if (n->lease_cbs.on_frame == NULL || n->closing)
        return;
    if (msg[0] == LEASE_FRAME)
        n->lease_cbs.on_frame(n->lease_cbs.ctx, 0, tenant, rest, rest_len);
    else
        n->lease_cbs.on_down(n->lease_cbs.ctx, tenant);
}

bool
cluster__lease_open_any(const cluster_node *n)
{
    for (int i = 0; i < LEASE_LANES; i++) {
        if (n->lease_out[i] != NULL)
            return true;
    }
    return false;
}

/* A lane closed: the link is down once no lane is ready (the others are dialed again). */
static void
on_out_close(cluster_conn *c, int rc, void *data)
{
    cluster_node *n = data;
    int lane = lane_of(n, c);
    bool any = false;

    if (lane >= 0) {
        n->lease_out[lane] = NULL;
        n->lease_out_ready[lane] = false;
    }
    for (int i = 0; i < LEASE_LANES; i++)
        any |= n->lease_out_ready[i];
    if (!cluster__lease_open_any(n))
        n->lease_out_to = 0;
    if (n->closing) {
        cluster__node_maybe_free(n);
        return;
    }
    if (any || !n->lease_up)
        return;
    n->lease_up = false;
    cluster__log_member("cluster_lease_link_down", n->lease_out_to, NULL, tally_strerror(rc));
    if (n->lease_cbs.on_down != NULL)
        n->lease_cbs.on_down(n->lease_cbs.ctx, NULL);
    tell_role(n);
}

static const struct cluster_conn_cbs out_cbs = {on_out_ready, on_out_msg, on_out_close, NULL};

/* Dials every lane not open to the leader. */
static void
dial_leader(cluster_node *n, uint64_t leader)
{
    const struct cluster_member *m = cluster_state_member(&n->st, leader);
    struct cluster_conn_opts o;
    struct sockaddr_storage sa;

    if (m == NULL || cluster_addr_parse(m->address, &sa) != TALLY_OK)
        return; /* not known here yet: the next tick */
    memset(&o, 0, sizeof(o));
    o.self = &n->key;
    o.handshake_ms = 2000;
    o.cbs = &out_cbs;
    o.data = n;
    for (int i = 0; i < LEASE_LANES; i++) {
        if (n->lease_out[i] == NULL && cluster_conn_dial(n->loop, (const struct sockaddr *)&sa,
                                                         m->pk, &o, &n->lease_out[i]) == TALLY_OK)
            n->lease_out_to = leader;
    }
}

void
cluster__lease_tick(cluster_node *n)
{
    bool leading;
    uint64_t leader;

    if (n->closing || n->lg == NULL)
        return;
    leading = cluster_log_leading(n->lg);
    leader = cluster_log_leader(n->lg);
    for (int i = 0; i < LEASE_LANES; i++) {
        if (n->lease_out[i] != NULL && (leading || leader != n->lease_out_to))
            cluster_conn_close(n->lease_out[i]); /* the last on_close tells the front */
    }
    if (!leading) {
        for (size_t i = 0; i < CLUSTER_MEMBERS_MAX * LEASE_LANES; i++) {
            if (n->lease_in[i].token != 0)
                cluster_log_lease_close(n->lg, n->lease_in[i].token);
        }
        for (size_t i = 0; i < CLUSTER_MEMBERS_MAX; i++)
            n->clock_of[i].known = false; /* measured against this leader only */
    }
    /* A lane missing: dialed again, to the leader the others are open to (or, none open, to
     * the leader now). */
    if (!leading && leader != 0 && leader != n->st.self &&
        (!cluster__lease_open_any(n) || leader == n->lease_out_to))
        dial_leader(n, leader);
    tell_role(n);
    clock_probe(n);
}

bool
cluster__lease_close(cluster_node *n)
{
    for (int i = 0; i < LEASE_LANES; i++) {
        if (n->lease_out[i] != NULL)
            cluster_conn_close(n->lease_out[i]);
    }
    return !cluster__lease_open_any(n);
}

/* ---- the leader's side: links from the members ---- */

int
cluster__on_lease_open(void *ctx, uint64_t token, uint64_t member)
{
    cluster_node *n = ctx;

    if (n->closing || !cluster_log_leading(n->lg))
        return TALLY_EUNAVAIL; /* it dials the leader it learns of next */
    /* A member keeps LEASE_LANES links at most: one more means one is stale (its process went
     * away, its connection not noticed yet): the oldest goes. */
    {
        size_t count = 0, oldest = 0;

        for (size_t i = 0; i < CLUSTER_MEMBERS_MAX * LEASE_LANES; i++) {
            if (n->lease_in[i].token == 0 || n->lease_in[i].member != member)
                continue;
            if (count++ == 0 || n->lease_in[i].opened < n->lease_in[oldest].opened)
                oldest = i;
        }
        if (count >= LEASE_LANES)
            cluster_log_lease_close(n->lg, n->lease_in[oldest].token);
    }
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX; i++) {
        if (n->clock_of[i].member == member)
            n->clock_of[i].known = false; /* maybe a new process, a new clock: measured again */
    }
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX * LEASE_LANES; i++) {
        if (n->lease_in[i].token == 0) {
            n->lease_in[i].token = token;
            n->lease_in[i].member = member;
            n->lease_in[i].opened = ++n->lease_opened;
            return TALLY_OK;
        }
    }
    return TALLY_EUNAVAIL;
}

static size_t
lease_slot(const cluster_node *n, uint64_t token)
{
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX * LEASE_LANES; i++) {
        if (n->lease_in[i].token == token)
            return i;
    }
    return LEASE_SLOT_NONE;
}

/* Leader: a member's probe, answered with this clock; the measurement it carries is kept. */
static int
clock_report(cluster_node *n, size_t link, const uint8_t *msg, size_t len)
{
    uint8_t out[CLOCK_ANSWER_LEN];
    uint64_t member = n->lease_in[link].member;
    size_t k, free_k = CLUSTER_MEMBERS_MAX;

    if (len != CLOCK_PROBE_LEN || msg[9] > 1)
        return TALLY_EPROTO;
    out[0] = LEASE_CLOCK_ANSWER;
    memcpy(out + 1, msg + 1, 8);
    cluster__put_u64(out + 9, (uint64_t)wall_us());
    (void)cluster_log_lease_send(n->lg, n->lease_in[link].token, out, sizeof(out));
    if (msg[9] == 0)
        return TALLY_OK;
    for (k = 0; k < CLUSTER_MEMBERS_MAX && n->clock_of[k].member != member; k++) {
        if (free_k == CLUSTER_MEMBERS_MAX && n->clock_of[k].member == 0)
            free_k = k;
    }
    if (k == CLUSTER_MEMBERS_MAX) {
        if (free_k == CLUSTER_MEMBERS_MAX)
            return TALLY_OK; /* more members than slots: not reported */
        k = free_k;
        memset(&n->clock_of[k], 0, sizeof(n->clock_of[k]));
        n->clock_of[k].member = member;
    }
    clock_note(member, n->st.self, &n->clock_of[k].known, &n->clock_of[k].warned,
               &n->clock_of[k].skew_ms, (int64_t)cluster__get_u64(msg + 10));
    return TALLY_OK;
}

void
cluster__on_lease_msg(void *ctx, uint64_t token, const uint8_t *msg, size_t len)
{
    cluster_node *n = ctx;
    size_t i = lease_slot(n, token);
    char tenant[TENANT_NAME_MAX + 1];
    const uint8_t *rest;
    size_t rest_len;

    if (i == LEASE_SLOT_NONE)
        return;
    if (msg[0] == LEASE_CLOCK) {
        if (clock_report(n, i, msg, len) != TALLY_OK)
            cluster_log_lease_close(n->lg, token);
        return;
    }
    if (msg[0] != LEASE_FRAME || lease_parse(msg, len, tenant, &rest, &rest_len) != TALLY_OK) {
        cluster_log_lease_close(n->lg, token);
        return;
    }
    if (n->lease_cbs.on_frame != NULL && !n->closing && cluster_log_leading(n->lg))
        n->lease_cbs.on_frame(n->lease_cbs.ctx, n->lease_in[i].member, tenant, rest, rest_len);
}

void
cluster__on_lease_close(void *ctx, uint64_t token)
{
    cluster_node *n = ctx;
    size_t i = lease_slot(n, token);

    if (i != LEASE_SLOT_NONE)
        memset(&n->lease_in[i], 0, sizeof(n->lease_in[i]));
}

/* ---- the front's side ---- */

void
cluster_node_set_lease(cluster_node *n, const struct cluster_lease_cbs *cbs)
{
    n->lease_cbs = *cbs;
    n->role_known = false;
    cluster__lease_tick(n);
}

uint64_t
cluster_node_self(const cluster_node *n)
{
    return n->st.self;
}

static int
lease_put(uint8_t kind, const char *tenant, const uint8_t *frame, size_t len, uint8_t *out,
          size_t *out_len)
{
    size_t tl = strlen(tenant);

    if (tl == 0 || tl > TENANT_NAME_MAX || 2 + tl + len > LEASE_MSG_MAX)
        return TALLY_EINVAL;
    out[0] = kind;
    out[1] = (uint8_t)tl;
    memcpy(out + 2, tenant, tl);
    if (len > 0)
        memcpy(out + 2 + tl, frame, len);
    *out_len = 2 + tl + len;
    return TALLY_OK;
}

int
cluster_node_lease_send(cluster_node *n, uint64_t member, const char *tenant, const uint8_t *frame,
                        size_t len)
{
    static uint8_t b[LEASE_MSG_MAX]; /* loop thread only */
    size_t bl = 0;
    size_t i;
    bool sent = false;

    if (n->closing || lease_put(LEASE_FRAME, tenant, frame, len, b, &bl) != TALLY_OK)
        return TALLY_EUNAVAIL;
    /* On every lane: the first copy to arrive counts, the others are dropped as resends. */
    if (member == 0) {
        for (i = 0; i < LEASE_LANES; i++) {
            if (n->lease_out_ready[i] && cluster_conn_send(n->lease_out[i], b, bl) == TALLY_OK)
                sent = true;
        }
        return sent ? TALLY_OK : TALLY_EUNAVAIL;
    }
    for (i = 0; i < CLUSTER_MEMBERS_MAX * LEASE_LANES; i++) {
        if (n->lease_in[i].token != 0 && n->lease_in[i].member == member &&
            cluster_log_lease_send(n->lg, n->lease_in[i].token, b, bl) == TALLY_OK)
            sent = true;
    }
    return sent ? TALLY_OK : TALLY_EUNAVAIL;
}

void
cluster_node_lease_down(cluster_node *n, const char *tenant)
{
    uint8_t b[2 + TENANT_NAME_MAX];
    size_t bl = 0;

    if (n->closing || lease_put(LEASE_DOWN, tenant, NULL, 0, b, &bl) != TALLY_OK)
        return;
    for (size_t i = 0; i < CLUSTER_MEMBERS_MAX * LEASE_LANES; i++) {
        if (n->lease_in[i].token != 0)
            (void)cluster_log_lease_send(n->lg, n->lease_in[i].token, b, bl);
    }
}

/* ---- the leader's supervisors' journals, on the log ---- */

#define LEDGER_REC     'J' /* a LEDGER record: 'J' | op | tenant length | tenant | body */
#define LEDGER_BARRIER 'N' /* 'J' 'N': nothing, applied after everything before it */

/* A supervisor's barrier: once applied, this member's copy of the tenant's journal holds every
 * record committed before it, unless the copy broke (a record it could not take: it lacks the
 * records from there on until a snapshot or a restart heals it). A supervisor started from
 * that copy would grant again what they granted, so it hears no (READY failed) and exits;
 * the tenant waits for a healed copy or another leader. */
struct barrier {
    cluster_node *n;
    cluster_log_done_fn done;
    void *req_data;
    char tenant[TENANT_NAME_MAX + 1];
};

static void
on_barrier(void *data, int rc)
{
    struct barrier *br = data;

    if (rc == TALLY_OK)
        rc = cluster__ledger_ready(br->n, br->tenant);
    br->done(br->req_data, rc);
    tally_free(br);
}

int
cluster_node_ledger_append(cluster_node *n, const char *tenant, uint8_t op, const uint8_t *body,
                           size_t len, cluster_log_done_fn done, void *req_data)
{
    static uint8_t b[3 + TENANT_NAME_MAX + 65536]; /* loop thread only */
    size_t tl = tenant != NULL ? strlen(tenant) : 0;

    if (n->closing || n->lg == NULL)
        return TALLY_EUNAVAIL;
    b[0] = RECORD_LEDGER; /* 'J' | op | tenant length | tenant | body */
    if (op == 0) {
        struct barrier *br;
        int rc;

        b[1] = LEDGER_NOOP; /* nothing, applied after everything before it */
        if (tl == 0 || tl > TENANT_NAME_MAX)
            return cluster_log_append(n->lg, b, 2, done, req_data);
        br = tally_malloc(sizeof(*br));
        if (br == NULL)
            return TALLY_ENOMEM;
        br->n = n;
        br->done = done;
        br->req_data = req_data;
        memcpy(br->tenant, tenant, tl + 1);
        rc = cluster_log_append(n->lg, b, 2, on_barrier, br);
        if (rc != TALLY_OK)
            tally_free(br);
        return rc;
    }
    if (tl == 0 || tl > TENANT_NAME_MAX || len > sizeof(b) - 3 - tl)
        return TALLY_EINVAL;
    b[1] = op;
    b[2] = (uint8_t)tl;
    memcpy(b + 3, tenant, tl);
    if (len > 0)
        memcpy(b + 3 + tl, body, len);
    return cluster_log_append(n->lg, b, 3 + tl + len, done, req_data);
}

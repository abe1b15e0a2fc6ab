/*
 * GET /metrics: tallyd's counters in the Prometheus text format (version
 * 0.0.4). Every family has # HELP and # TYPE; labels take values from fixed
 * sets (results, scopes, events, modes, buckets), never from tokens, links or
 * tenants, so the page has the same lines whatever the traffic. Histograms
 * come from fixed bucket arrays (sup_front_hist) made cumulative here.
 */
#include "front_http.h"

#include <stdio.h>
#include <string.h>

static void
family(struct proto_http_response *resp, const char *name, const char *type, const char *help)
{
    proto_http_response_printf(resp, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
counter(struct proto_http_response *resp, const char *name, const char *help, uint64_t v)
{
    family(resp, name, "counter", help);
    proto_http_response_printf(resp, "%s %llu\n", name, (unsigned long long)v);
}

static void
gauge(struct proto_http_response *resp, const char *name, const char *help, uint64_t v)
{
    family(resp, name, "gauge", help);
    proto_http_response_printf(resp, "%s %llu\n", name, (unsigned long long)v);
}

/* Nanoseconds as decimal seconds without trailing zeros: 50000 -> "0.00005". */
static void
seconds(char *out, size_t cap, uint64_t ns)
{
    char frac[16];
    int n;

    n = snprintf(frac, sizeof(frac), "%09llu", (unsigned long long)(ns % 1000000000u));
    while (n > 0 && frac[n - 1] == '0')
        frac[--n] = '\0';
    snprintf(out, cap, "%llu%s%s", (unsigned long long)(ns / 1000000000u), n > 0 ? "." : "", frac);
}

static void
histogram(struct proto_http_response *resp, const char *name, const char *help,
          const struct sup_front_hist *h)
{
    char le[32];
    uint64_t cum = 0;
    size_t i;

    family(resp, name, "histogram", help);
    for (i = 0; i < SUP_FRONT_HIST_BOUNDS; i++) {
        cum += h->bucket[i];
        seconds(le, sizeof(le), sup_front_hist_bounds_ns[i]);
        proto_http_response_printf(resp, "%s_bucket{le=\"%s\"} %llu\n", name, le,
                                   (unsigned long long)cum);
    }
    cum += h->bucket[SUP_FRONT_HIST_BOUNDS];
    proto_http_response_printf(resp, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                               (unsigned long long)cum);
    seconds(le, sizeof(le), h->sum_ns);
    proto_http_response_printf(resp, "%s_sum %s\n%s_count %llu\n", name, le, name,
                               (unsigned long long)h->count);
}

static void
decisions(struct proto_http_response *resp, const struct sup_front_stats *fs)
{
    static const char *const results[] = {"admitted",    "refused",     "unauthorized",
                                          "bad_request", "unavailable", "internal"};
    static const char *const scopes[] = {"none",     "plan",        "link",  "endpoint",
                                         "endpoint", "concurrency", "caller"};
    static const char *const modes[] = {"normal", "degraded", "unavailable"};
    static const char *const wait_for[SUP_FRONT_WAIT_KINDS] = {"file", "grant", "mark", "slot"};
    const uint64_t by_result[6] = {fs->admitted,    fs->refused,     fs->unauthorized,
                                   fs->bad_request, fs->unavailable, fs->internal};
    size_t i;

    family(resp, "tally_decisions_total", "counter",
           "Answers to checks by result (shadow refusals count as admitted).");
    for (i = 0; i < 6; i++)
        proto_http_response_printf(resp, "tally_decisions_total{result=\"%s\"} %llu\n", results[i],
                                   (unsigned long long)by_result[i]);
    family(resp, "tally_refusals_total", "counter", "Refusals by the scope that fired.");
    for (i = 1; i < 7; i++) {
        uint64_t v = fs->refused_by_scope[i];
        if (i == 4)
            continue; /* the endpoint's two budgets are one scope */
        if (i == 3)
            v += fs->refused_by_scope[4];
        proto_http_response_printf(resp, "tally_refusals_total{scope=\"%s\"} %llu\n", scopes[i],
                                   (unsigned long long)v);
    }
    counter(resp, "tally_shadow_refusals_total",
            "Refusals admitted because their endpoint is in shadow mode.", fs->shadow_refused);
    counter(resp, "tally_degraded_total",
            "Admissions under the degraded local limit (supervisor unreachable).", fs->degraded);
    family(resp, "tally_endpoint_mode_changes_total", "counter",
           "Child counters entering a service mode.");
    for (i = 0; i < 3; i++)
        proto_http_response_printf(resp, "tally_endpoint_mode_changes_total{to=\"%s\"} %llu\n",
                                   modes[i], (unsigned long long)fs->mode_changes[i]);
    family(resp, "tally_endpoints_mode", "gauge",
           "Child counters now degraded (fail-open) or unavailable (fail-closed).");
    proto_http_response_printf(resp,
                               "tally_endpoints_mode{mode=\"degraded\"} %u\n"
                               "tally_endpoints_mode{mode=\"unavailable\"} %u\n",
                               fs->endpoints_degraded, fs->endpoints_unavailable);
    counter(resp, "tally_waits_total", "Requests that waited for a lease or a slot.", fs->waits);
    family(resp, "tally_wait_timeouts_total", "counter",
           "Waits that ran out (--wait-ms, or the cold start's deadline), by what they waited "
           "for; each is then decided by its endpoint's --on-unavailable.");
    for (i = 0; i < SUP_FRONT_WAIT_KINDS; i++)
        proto_http_response_printf(resp, "tally_wait_timeouts_total{for=\"%s\"} %llu\n",
                                   wait_for[i], (unsigned long long)fs->wait_timeouts[i]);
    histogram(resp, "tally_decision_seconds", "Time from a check's arrival to its answer.",
              &fs->decision);
}

/* Endpoints keyed by caller: no label ever carries a caller (only results and events). */
static void
callers(struct proto_http_response *resp, const struct sup_front_stats *fs)
{
    family(resp, "tally_caller_decisions_total", "counter", "Caller-keyed checks by result.");
    proto_http_response_printf(
        resp,
        "tally_caller_decisions_total{result=\"admitted\"} %llu\n"
        "tally_caller_decisions_total{result=\"refused\"} %llu\n"
        "tally_caller_decisions_total{result=\"unavailable\"} %llu\n"
        "tally_caller_decisions_total{result=\"bad_request\"} %llu\n"
        "tally_caller_decisions_total{result=\"degraded\"} %llu\n",
        (unsigned long long)fs->callers.admitted, (unsigned long long)fs->callers.refused,
        (unsigned long long)fs->callers.unavailable, (unsigned long long)fs->callers.bad_request,
        (unsigned long long)fs->callers.degraded);
    family(resp, "tally_caller_events_total", "counter",
           "Sketch decisions, charges taken back, authority starts and crashes.");
    proto_http_response_printf(resp,
                               "tally_caller_events_total{event=\"sketch\"} %llu\n"
                               "tally_caller_events_total{event=\"cancel\"} %llu\n"
                               "tally_caller_events_total{event=\"start\"} %llu\n"
                               "tally_caller_events_total{event=\"crash\"} %llu\n",
                               (unsigned long long)fs->callers.sketched,
                               (unsigned long long)fs->callers.cancels,
                               (unsigned long long)fs->callers.authority_starts,
                               (unsigned long long)fs->callers.authority_crashes);
    gauge(resp, "tally_caller_entries", "Exact caller entries held.", fs->callers.entries);
    gauge(resp, "tally_caller_table_bytes", "Memory of the caller tables.",
          fs->callers.table_bytes);
    gauge(resp, "tally_caller_authorities_live", "Caller authorities running.",
          fs->callers.authorities_live);
}

static void
leases(struct proto_http_response *resp, const struct sup_front_stats *fs)
{
    counter(resp, "tally_lease_messages_total", "Lease messages sent to supervisors.",
            fs->lease_messages);
    counter(resp, "tally_lease_send_failures_total",
            "Lease messages that could not be sent (supervisor down or in restart backoff); "
            "they are sent again.",
            fs->lease_send_failures);
    counter(resp, "tally_lease_pump_deferrals_total",
            "Lease pumps that reached their round limit with work left, resumed on the next "
            "loop turn.",
            fs->pump_deferrals);
    histogram(resp, "tally_lease_rtt_seconds",
              "Lease round trips: a request's first send to a supervisor until its answer, "
              "retransmissions included.",
              &fs->lease_rtt);
    family(resp, "tally_supervisor_events_total", "counter", "Supervisor processes by event.");
    proto_http_response_printf(
        resp,
        "tally_supervisor_events_total{event=\"start\"} %llu\n"
        "tally_supervisor_events_total{event=\"restart\"} %llu\n"
        "tally_supervisor_events_total{event=\"idle_exit\"} %llu\n"
        "tally_supervisor_events_total{event=\"crash\"} %llu\n"
        "tally_supervisor_events_total{event=\"spare_exit\"} %llu\n",
        (unsigned long long)fs->sup.starts, (unsigned long long)fs->sup.restarts,
        (unsigned long long)fs->sup.exits, (unsigned long long)fs->sup.crashes,
        (unsigned long long)fs->sup.spare_exits);
    gauge(resp, "tally_supervisors_live", "Supervisor processes running.", fs->sup.live);
    gauge(resp, "tally_child_counters", "Child counters (tenant, endpoint) loaded.", fs->children);
    gauge(resp, "tally_child_counters_open",
          "Child counters with their file open (about 2 descriptors each).", fs->children_open);
    family(resp, "tally_child_files_total", "counter", "Child counter files by event.");
    proto_http_response_printf(
        resp,
        "tally_child_files_total{event=\"open\"} %llu\n"
        "tally_child_files_total{event=\"close\"} %llu\n"
        "tally_child_files_total{event=\"sleep\"} %llu\n"
        "tally_child_files_total{event=\"open_failed\"} %llu\n",
        (unsigned long long)fs->child_opens, (unsigned long long)fs->child_closes,
        (unsigned long long)fs->child_sleeps, (unsigned long long)fs->child_open_failures);
    gauge(resp, "tally_links_live", "Links in the loaded configuration.", fs->live_links);
    counter(resp, "tally_config_reloads_total", "Configuration reloads.", fs->reloads);
    counter(resp, "tally_lease_recalls_total",
            "Child counters that gave up their leases because a limit on them changed.",
            fs->recalls);
    counter(resp, "tally_leases_parked_total",
            "Kept leases an idle child counter left in its file for its next open.",
            fs->leases_parked);
    counter(resp, "tally_leases_warmed_total",
            "Leases asked ahead for a tenant's other links while its supervisor started for one.",
            fs->leases_warmed);
    counter(resp, "tally_first_turns_total",
            "New tenants whose first leases tallyd granted before their supervisor started.",
            fs->first_turns);
    counter(resp, "tally_first_turns_not_made_total",
            "New tenants' first turns left to their supervisor (its lock held, a ledger found, "
            "a storage error).",
            fs->first_turns_not_made);
}

static void
transports(struct proto_http_response *resp, proto_http_server *srv, sup_sock *sock)
{
    struct proto_http_stats hs;
    struct sup_sock_stats ss;
    size_t i;

    memset(&hs, 0, sizeof(hs));
    memset(&ss, 0, sizeof(ss));
    if (srv != NULL) {
        proto_http_stats(srv, &hs);
        counter(resp, "tally_http_requests_total", "HTTP requests answered.", hs.requests);
        gauge(resp, "tally_http_connections", "Open HTTP connections.", hs.connections_active);
        family(resp, "tally_http_rejected_total", "counter", "HTTP requests refused by reason.");
        for (i = 0; i < PROTO_HTTP_REJECT_COUNT; i++)
            proto_http_response_printf(resp, "tally_http_rejected_total{reason=\"%s\"} %llu\n",
                                       proto_http_reject_name((enum proto_http_reject)i),
                                       (unsigned long long)hs.rejected[i]);
    }
    if (sock != NULL) {
        sup_sock_stats(sock, &ss);
        counter(resp, "tally_socket_requests_total", "Binary protocol requests.", ss.requests);
        gauge(resp, "tally_socket_connections", "Open binary protocol connections.", ss.active);
        counter(resp, "tally_socket_protocol_errors_total",
                "Binary protocol connections closed for a malformed frame.", ss.protocol_errors);
    }
    /* --max-connections: refused at the cap (answered 503 / ERROR, or closed at once). */
    family(resp, "tally_connections_refused_total", "counter",
           "Connections refused at --max-connections, by listener.");
    proto_http_response_printf(resp,
                               "tally_connections_refused_total{listener=\"http\"} %llu\n"
                               "tally_connections_refused_total{listener=\"socket\"} %llu\n",
                               (unsigned long long)hs.rejected[PROTO_HTTP_REJECT_CONN_LIMIT],
                               (unsigned long long)ss.refused);
}

void
sup_metrics_write(sup_front *front, proto_http_server *srv, sup_sock *sock,
                  struct proto_http_response *resp)
{
    struct sup_front_stats fs;

    sup_front_stats(front, &fs);
    resp->content_type = "text/plain; version=0.0.4";
    decisions(resp, &fs);
    leases(resp, &fs);
    callers(resp, &fs);
    transports(resp, srv, sock);
    resp->status = 200;
}

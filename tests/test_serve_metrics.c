/*
 * /metrics of the real tallyd. The page is parsed line by line as Prometheus text (0.0.4):
 * every sample belongs to a family declared by # HELP and # TYPE, names and labels are well
 * formed, histogram buckets are cumulative with +Inf equal to _count, and counts match the
 * traffic sent. No label carries a token or a link id. A quiet link keeps its lease while its
 * budgets are plentiful. A lease round trip runs from its request's first send, through the
 * child's retransmissions, to its answer (a supervisor stopped for 420 ms while a request
 * waits). The event log is test_serve_events'.
 */
#define _GNU_SOURCE /* memmem */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "serve_obs_env.h"
#include "tally.h"

/* ---- a small Prometheus text parser ---- */

struct family {
    char name[96];
    char type[16];
    bool help;
};

struct page {
    struct family fam[64];
    int n_fam;
    int samples;
    /* the histogram being read */
    char hist[96];
    double last_le, last_cum;
    int buckets;
    double inf;
    bool saw_inf;
};

static bool
metric_name(const char *s, size_t len)
{
    size_t i;

    if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
        return false;
    for (i = 1; i < len; i++) {
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':'))
            return false;
    }
    return true;
}

static struct family *
family_of(struct page *p, const char *sample)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    int i;

    for (i = 0; i < p->n_fam; i++) {
        size_t n = strlen(p->fam[i].name);
        size_t k;
        if (strncmp(sample, p->fam[i].name, n) != 0)
            continue;
        if (sample[n] == '\0')
            return &p->fam[i];
        for (k = 0; k < 3 && strcmp(p->fam[i].type, "histogram") == 0; k++) {
            if (strcmp(sample + n, suffixes[k]) == 0)
                return &p->fam[i];
        }
    }
    return NULL;
}

/* `k="v",k2="v2"`: well formed, values without tokens or link ids; the value of
 * label `want` into out when present. */
static void
parse_labels(const char *s, size_t len, const char *want, char *out, size_t cap)
{
    size_t i = 0;

    out[0] = '\0';
    while (i < len) {
        size_t k = i, v;
        while (i < len && s[i] != '=')
            i++;
        assert_true(metric_name(s + k, i - k));
        assert_true(i + 1 < len && s[i + 1] == '"');
        v = i + 2;
        i = v;
        while (i < len && s[i] != '"') {
            assert_true(s[i] != '\\' && s[i] != '\n');
            i++;
        }
        assert_true(i < len);
        assert_null(memmem(s + v, i - v, "tly_", 4));
        assert_null(memmem(s + v, i - v, "lnk_", 4));
        if (strlen(want) == (size_t)(v - 2 - k) && strncmp(s + k, want, v - 2 - k) == 0)
            snprintf(out, cap, "%.*s", (int)(i - v), s + v);
        i++;
        if (i < len) {
            assert_int_equal(s[i], ',');
            i++;
        }
    }
}

static void
parse_sample(struct page *p, const char *line)
{
    const char *brace = strchr(line, '{');
    const char *sp = strrchr(line, ' ');
    char name[96], le[32];
    struct family *f;
    double v;
    char *end;

    assert_non_null(sp);
    if (brace != NULL && brace < sp) {
        const char *close = strchr(brace, '}');
        assert_non_null(close);
        assert_true(close + 1 == sp);
        snprintf(name, sizeof(name), "%.*s", (int)(brace - line), line);
        parse_labels(brace + 1, (size_t)(close - brace - 1), "le", le, sizeof(le));
    } else {
        snprintf(name, sizeof(name), "%.*s", (int)(sp - line), line);
        le[0] = '\0';
    }
    assert_true(metric_name(name, strlen(name)));
    v = strtod(sp + 1, &end);
    assert_true(*end == '\0' && end != sp + 1);
    assert_true(v >= 0);
    f = family_of(p, name);
    if (f == NULL)
        fail_msg("sample %s has no # TYPE", name);
    assert_true(f->help);
    p->samples++;
    if (strcmp(f->type, "histogram") != 0)
        return;
    if (strstr(name, "_bucket") != NULL) {
        double bound;
        assert_true(le[0] != '\0');
        if (strcmp(p->hist, f->name) != 0) {
            snprintf(p->hist, sizeof(p->hist), "%s", f->name);
            p->last_le = -1;
            p->last_cum = 0;
            p->buckets = 0;
            p->saw_inf = false;
        }
        assert_false(p->saw_inf);
        bound = strcmp(le, "+Inf") == 0 ? 1e300 : strtod(le, NULL);
        assert_true(bound > p->last_le); /* ascending bounds */
        assert_true(v >= p->last_cum);   /* cumulative */
        p->last_le = bound;
        p->last_cum = v;
        p->buckets++;
        if (bound == 1e300) {
            p->saw_inf = true;
            p->inf = v;
        }
    } else if (strstr(name, "_count") != NULL) {
        assert_string_equal(p->hist, f->name);
        assert_true(p->saw_inf);
        assert_true(p->inf == v); /* +Inf == _count */
    }
}

static void
parse_page(struct page *p, char *body)
{
    char *line = body;

    memset(p, 0, sizeof(*p));
    while (line != NULL && *line != '\0') {
        char *nl = strchr(line, '\n');
        assert_non_null(nl); /* every line ends with a newline */
        *nl = '\0';
        if (strncmp(line, "# HELP ", 7) == 0) {
            char *sp = strchr(line + 7, ' ');
            assert_non_null(sp);
            assert_true(sp[1] != '\0');
            assert_true(p->n_fam < 64);
            snprintf(p->fam[p->n_fam].name, sizeof(p->fam[0].name), "%.*s", (int)(sp - line - 7),
                     line + 7);
            assert_true(metric_name(p->fam[p->n_fam].name, strlen(p->fam[p->n_fam].name)));
            p->fam[p->n_fam].help = true;
            p->n_fam++;
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            struct family *f = &p->fam[p->n_fam - 1];
            size_t n = strlen(f->name);
            assert_true(p->n_fam > 0);
            assert_memory_equal(line + 7, f->name, n); /* right after its HELP */
            assert_int_equal(line[7 + n], ' ');
            snprintf(f->type, sizeof(f->type), "%s", line + 8 + n);
            assert_true(strcmp(f->type, "counter") == 0 || strcmp(f->type, "gauge") == 0 ||
                        strcmp(f->type, "histogram") == 0);
        } else {
            assert_true(line[0] != '#' && line[0] != '\0');
            parse_sample(p, line);
        }
        line = nl + 1;
    }
}

static void
test_metrics_page_is_valid_and_counts(void **state)
{
    struct env *e = *state;
    struct serve_http r, m;
    struct page p;
    char copy[sizeof(m.body)];
    int i;

    serve_start(&e->s, NULL, NULL);
    for (i = 0; i < 5; i++) {
        serve_check(&e->s, e->token, "search", &r);
        assert_int_equal(r.status, i < 3 ? 200 : 429);
    }
    serve_check(&e->s, "tly_not_a_real_token_at_all_xxxxxxxxxx", "search", &r);
    assert_int_equal(r.status, 401);
    serve_check(&e->s, e->token, "nosuch", &r);
    assert_int_equal(r.status, 400);
    get_metrics(e, &m);
    assert_non_null(strstr(m.head, "Content-Type: text/plain; version=0.0.4"));
    memcpy(copy, m.body, sizeof(copy));
    parse_page(&p, copy);
    assert_true(p.samples > 40);
    assert_null(strstr(m.body, e->token));
    assert_true(serve_metric(m.body, "tally_decisions_total{result=\"admitted\"}") == 3);
    assert_true(serve_metric(m.body, "tally_decisions_total{result=\"refused\"}") == 2);
    assert_true(serve_metric(m.body, "tally_decisions_total{result=\"unauthorized\"}") == 1);
    assert_true(serve_metric(m.body, "tally_decisions_total{result=\"bad_request\"}") == 1);
    assert_true(serve_metric(m.body, "tally_refusals_total{scope=\"endpoint\"}") == 2);
    assert_true(serve_metric(m.body, "tally_decision_seconds_count") == 7);
    assert_true(serve_metric(m.body, "tally_decision_seconds_bucket{le=\"+Inf\"}") == 7);
    assert_true(serve_metric(m.body, "tally_lease_rtt_seconds_count") >= 1);
    assert_true(serve_metric(m.body, "tally_lease_messages_total") >=
                serve_metric(m.body, "tally_lease_rtt_seconds_count"));
    /* a healthy supervisor takes every lease message; nothing was left for a later turn */
    assert_true(serve_metric(m.body, "tally_lease_send_failures_total") == 0);
    assert_true(serve_metric(m.body, "tally_lease_pump_deferrals_total") == 0);
    assert_true(serve_metric(m.body, "tally_supervisors_live") == 1);
    assert_true(serve_metric(m.body, "tally_supervisor_events_total{event=\"start\"}") == 1);
    assert_true(serve_metric(m.body, "tally_links_live") == 1);
    assert_true(serve_metric(m.body, "tally_child_counters") == 1);
    assert_true(serve_metric(m.body, "tally_shadow_refusals_total") == 0);
    serve_stop(&e->s);
}

/* A quiet link keeps its small lease while the budget is plentiful (KEEP): its next request,
 * 1.5 s later (past the 1 s idle return), is decided with no lease round trip. On a scarce
 * budget (search: 3 per link) the lease goes back after 1 s and the next request waits. */
static void
test_quiet_link_keeps_its_lease_while_plenty(void **state)
{
    struct env *e = *state;
    struct serve_http r, m;
    double w0, w1;

    serve_start(&e->s, NULL, NULL);
    serve_check(&e->s, e->token, "open", &r);
    assert_int_equal(r.status, 200);
    get_metrics(e, &m);
    w0 = serve_metric(m.body, "tally_waits_total");
    assert_true(w0 >= 1); /* the first request waited for the first grant */
    serve_sleep_ms(1500);
    serve_check(&e->s, e->token, "open", &r);
    assert_int_equal(r.status, 200);
    get_metrics(e, &m);
    assert_true(serve_metric(m.body, "tally_waits_total") == w0);

    serve_check(&e->s, e->token, "search", &r);
    assert_int_equal(r.status, 200);
    get_metrics(e, &m);
    w1 = serve_metric(m.body, "tally_waits_total");
    assert_true(w1 > w0);
    serve_sleep_ms(1500);
    serve_check(&e->s, e->token, "search", &r);
    assert_int_equal(r.status, 200);
    get_metrics(e, &m);
    assert_true(serve_metric(m.body, "tally_waits_total") > w1);
    serve_stop(&e->s);
}

/* Round trips above 0.25 s in tally_lease_rtt_seconds so far. */
static double
rtt_over_quarter(const struct env *e)
{
    struct serve_http m;

    get_metrics(e, &m);
    return serve_metric(m.body, "tally_lease_rtt_seconds_count") -
           serve_metric(m.body, "tally_lease_rtt_seconds_bucket{le=\"0.25\"}");
}

/* tally_lease_rtt_seconds runs from a request's first send to its answer, whatever the child's
 * retransmissions meanwhile. The supervisor is stopped for 420 ms while a request waits for a
 * grant (search: 3 per link, the second request asks again); the child sends its ACQUIRE and
 * again after 20, 60, 140 and 300 ms. The round trip recorded is about 420 ms, above the
 * 0.25 s bucket; timed from the last retransmission it would read about 120 ms. */
static void
test_lease_rtt_counts_from_the_first_send(void **state)
{
    struct env *e = *state;
    struct serve_http r;
    pid_t pids[4], waker;
    double over;
    int64_t t0;

    serve_start(&e->s, "--wait-ms=2000", NULL);
    serve_check(&e->s, e->token, "search", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(test_supervisor_pids(e->s.data, "acme", pids, 4), 1);
    serve_sleep_ms(1500); /* the first lease has gone back (1 s idle): the next request asks */
    over = rtt_over_quarter(e);
    kill(pids[0], SIGSTOP);
    waker = fork();
    assert_true(waker >= 0);
    if (waker == 0) {
        serve_sleep_ms(420);
        kill(pids[0], SIGCONT);
        _exit(0);
    }
    t0 = serve_now_ms();
    serve_check(&e->s, e->token, "search", &r);
    assert_int_equal(waitpid(waker, NULL, 0), waker);
    print_message("the check waited %lld ms for its grant\n", (long long)(serve_now_ms() - t0));
    assert_int_equal(r.status, 200);
    assert_true(serve_now_ms() - t0 >= 400);
    assert_true(rtt_over_quarter(e) >= over + 1);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_page_is_valid_and_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quiet_link_keeps_its_lease_while_plenty, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lease_rtt_counts_from_the_first_send, setup, teardown),
    };

    return cmocka_run_group_tests_name("serve_metrics", tests, NULL, NULL);
}

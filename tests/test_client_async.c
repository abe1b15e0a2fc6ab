/*
 * libtally's asynchronous pipelined client against the real tallyd: 1,000
 * checks pipelined on one connection over a limit of 100 admit exactly 100 and
 * run every callback exactly once; the window and the local queue bound what a
 * handle accepts (TALLY_ETOOBIG beyond); a server killed with requests in flight
 * fails every pending callback with TALLY_EUNAVAIL, a handle closed with
 * requests in flight fails them with TALLY_ECANCELED (ASan checks that nothing
 * leaks); bad arguments are refused before anything is queued; every
 * allocation of open fails cleanly and none happens after it; the same
 * pipelining over TCP (tallyd --tcp, "tcp:HOST:PORT"). The caller's
 * event loop here is plain poll(2), as the header documents it.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tally.h"
#include "test_alloc.h"
#include "test_daemon.h"
#include "test_support.h"

#define N_CHECKS   1000
#define LIMIT      100
#define N_TENANTS  6
#define GUARD_MS   20000
#define POLL_SLICE 100

static struct test_out o;

struct env {
    char root[256];
    char data[300];
    char token[N_TENANTS][64]; /* one tenant each, so the tests share no budget */
    struct test_daemon d;
};

/* What the callbacks saw, per request. */
struct seen {
    int calls[N_CHECKS];
    int rc[N_CHECKS];
    enum tally_status status[N_CHECKS];
    int answered_at[N_CHECKS]; /* order in which the callbacks ran */
    int admitted, refused, errors, answered;
};

struct req {
    struct seen *s;
    int i;
};

static int
setup(void **state)
{
    static struct env e;
    char name[16];
    int i;

    test_tmpdir(e.root, sizeof(e.root));
    snprintf(e.data, sizeof(e.data), "%s/data", e.root);
    assert_int_equal(test_tally(e.data, &o, "init", NULL), 0);
    assert_int_equal(test_tally(e.data, &o, "plan", "set", "small", "--limit", "100/365d", NULL),
                     0);
    assert_int_equal(
        test_tally(e.data, &o, "endpoint", "set", "api", "--limit", "10000/365d", NULL), 0);
    for (i = 0; i < N_TENANTS; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        assert_int_equal(test_tally(e.data, &o, "tenant", "add", name, "--plan", "small", NULL), 0);
        assert_int_equal(test_tally(e.data, &o, "link", "create", name, NULL), 0);
        snprintf(e.token[i], sizeof(e.token[i]), "%.36s", o.out);
    }
    *state = &e;
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    test_rmtree(e->root);
    return 0;
}

/* Each test runs its own daemon (two of them kill it). */
static int
start(void **state)
{
    struct env *e = *state;

    assert_int_equal(test_daemon_start(&e->d, e->data, "--wait-ms=3000", NULL), 0);
    return 0;
}

/* The daemon with --tcp 127.0.0.1:0 too, when this tallyd has the option. */
static int
start_tcp(void **state)
{
    struct env *e = *state;

    assert_int_equal(
        test_daemon_start(&e->d, e->data, "--wait-ms=3000", "--tcp", "127.0.0.1:0", NULL), 0);
    return 0;
}

static int
stop(void **state)
{
    struct env *e = *state;

    if (e->d.pid > 0) {
        kill(e->d.pid, SIGCONT);
        assert_int_equal(test_daemon_stop(&e->d), 0);
    }
    return 0;
}

static void
on_answer(void *user, int rc, const struct tally_result *r)
{
    struct req *q = user;
    struct seen *s = q->s;

    assert_non_null(r);
    s->calls[q->i]++;
    s->rc[q->i] = rc;
    s->answered_at[q->i] = s->answered++;
    if (rc != TALLY_OK) {
        s->errors++;
        return;
    }
    s->status[q->i] = r->status;
    if (r->status == TALLY_ADMITTED)
        s->admitted++;
    else if (r->status == TALLY_REFUSED)
        s->refused++;
}

/* The caller's loop: poll the handle's socket, process, until nothing is pending. */
static int
drive(tally_async *a)
{
    int waited = 0;
    int rc = 0;

    while (tally_async_pending(a) > 0 && waited < GUARD_MS) {
        struct pollfd p = {tally_async_fd(a), POLLIN, 0};
        if (tally_async_wants_write(a))
            p.events |= POLLOUT;
        if (poll(&p, 1, POLL_SLICE) == 0)
            waited += POLL_SLICE;
        rc = tally_async_process(a);
        if (rc < 0)
            return rc;
    }
    assert_true(waited < GUARD_MS);
    return rc;
}

/* drive() that must end with every answer in; says why otherwise. */
static void
drive_ok(struct env *e, tally_async *a)
{
    int rc = drive(a);
    size_t len = 0;
    char *log;

    if (rc >= 0)
        return;
    log = test_read_file(e->d.log, &len);
    fprintf(stderr, "tallyd log:\n%s\n", log != NULL ? log : "(none)");
    free(log);
    fail_msg("drive: %s", tally_err_name(rc));
}

static void
queue_all(tally_async *a, const char *token, struct seen *s, struct req *reqs, int n)
{
    int i;

    for (i = 0; i < n; i++) {
        reqs[i].s = s;
        reqs[i].i = i;
        assert_int_equal(tally_async_check(a, token, "api", 0, on_answer, &reqs[i]), TALLY_OK);
    }
    assert_int_equal(tally_async_pending(a), (unsigned)n);
}

static void
test_async_pipelined_admits_exactly_the_limit(void **state)
{
    struct env *e = *state;
    static struct seen s;
    static struct req reqs[N_CHECKS];
    tally_async *a = NULL;
    int i;

    memset(&s, 0, sizeof(s));
    assert_int_equal(tally_async_open(e->d.socket, 5000, N_CHECKS, &a), TALLY_OK);
    queue_all(a, e->token[0], &s, reqs, N_CHECKS);
    assert_true(tally_async_wants_write(a));
    drive_ok(e, a);
    for (i = 0; i < N_CHECKS; i++) {
        assert_int_equal(s.calls[i], 1);
        assert_int_equal(s.rc[i], TALLY_OK);
    }
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.admitted, LIMIT);
    assert_int_equal(s.refused, N_CHECKS - LIMIT);
    assert_false(tally_async_wants_write(a));
    tally_async_close(a);
    for (i = 0; i < N_CHECKS; i++)
        assert_int_equal(s.calls[i], 1); /* close ran nothing twice */
}

/* Three kinds of request interleaved, answered from different places (unknown
 * tokens and endpoints from memory at once, the rest after the tenant's lease):
 * each callback must get the answer to its own request. */
static void
test_async_answers_matched_by_request_id(void **state)
{
    struct env *e = *state;
    static struct seen s;
    static struct req reqs[N_CHECKS];
    tally_async *a = NULL;
    int n = 600;
    int overtaken;
    int i;

    memset(&s, 0, sizeof(s));
    assert_int_equal(tally_async_open(e->d.socket, 5000, N_CHECKS, &a), TALLY_OK);
    for (i = 0; i < n; i++) {
        const char *token = i % 3 == 1 ? "tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" : e->token[5];
        const char *endpoint = i % 3 == 2 ? "nope" : "api";
        reqs[i].s = &s;
        reqs[i].i = i;
        assert_int_equal(tally_async_check(a, token, endpoint, 0, on_answer, &reqs[i]), TALLY_OK);
    }
    drive_ok(e, a);
    for (i = 0; i < n; i++) {
        assert_int_equal(s.calls[i], 1);
        assert_int_equal(s.rc[i], TALLY_OK);
        if (i % 3 == 0)
            assert_true(s.status[i] == TALLY_ADMITTED || s.status[i] == TALLY_REFUSED);
        else if (i % 3 == 1)
            assert_int_equal(s.status[i], TALLY_UNAUTHORIZED);
        else
            assert_int_equal(s.status[i], TALLY_BAD_REQUEST);
    }
    assert_int_equal(s.admitted, LIMIT);
    assert_int_equal(s.refused, n / 3 - LIMIT);
    for (i = 1, overtaken = 0; i < n; i++)
        overtaken += s.answered_at[i] < s.answered_at[i - 1];
    print_message("answers out of request order: %d of %d\n", overtaken, n);
    tally_async_close(a);
}

static void
test_async_window_and_queue_bound_the_handle(void **state)
{
    struct env *e = *state;
    static struct seen s;
    static struct req reqs[N_CHECKS];
    struct req extra = {&s, 0};
    tally_async *a = NULL;
    int n = 128 + 4;
    int i;

    memset(&s, 0, sizeof(s));
    assert_int_equal(tally_async_open(e->d.socket, 5000, 4, &a), TALLY_OK);
    queue_all(a, e->token[1], &s, reqs, n);
    assert_int_equal(tally_async_check(a, e->token[1], "api", 0, on_answer, &extra), TALLY_ETOOBIG);
    drive_ok(e, a);
    for (i = 0; i < n; i++)
        assert_int_equal(s.calls[i], 1);
    assert_int_equal(s.admitted + s.refused, n);
    assert_int_equal(s.admitted, LIMIT);
    /* room again: a request queued from here is answered too */
    assert_int_equal(tally_async_check(a, e->token[1], "api", 0, on_answer, &reqs[n]), TALLY_OK);
    reqs[n].s = &s;
    reqs[n].i = n;
    drive_ok(e, a);
    assert_int_equal(s.calls[n], 1);
    assert_int_equal(s.status[n], TALLY_REFUSED);
    tally_async_close(a);
}

static void
test_async_server_killed_fails_every_pending(void **state)
{
    struct env *e = *state;
    static struct seen s;
    static struct req reqs[N_CHECKS];
    struct req late = {&s, 0};
    tally_async *a = NULL;
    int n = 300;
    int i;

    memset(&s, 0, sizeof(s));
    assert_int_equal(tally_async_open(e->d.socket, 5000, 0, &a), TALLY_OK);
    /* Stopped, the daemon reads nothing: the window fills and the rest stays queued. */
    assert_int_equal(kill(e->d.pid, SIGSTOP), 0);
    queue_all(a, e->token[2], &s, reqs, n);
    assert_int_equal(tally_async_flush(a), TALLY_OK);
    test_daemon_kill9(&e->d);
    assert_int_equal(drive(a), TALLY_EUNAVAIL);
    for (i = 0; i < n; i++) {
        assert_int_equal(s.calls[i], 1);
        assert_int_equal(s.rc[i], TALLY_EUNAVAIL);
    }
    assert_int_equal(tally_async_pending(a), 0);
    /* the handle stays failed */
    assert_int_equal(tally_async_check(a, e->token[2], "api", 0, on_answer, &late), TALLY_EUNAVAIL);
    assert_int_equal(tally_async_process(a), TALLY_EUNAVAIL);
    tally_async_close(a);
    assert_int_equal(s.errors, n); /* close ran nothing twice */
    assert_true(test_wait_supervisors(e->data, "t2", 0, 10000));
}

static void
test_async_close_cancels_pending(void **state)
{
    struct env *e = *state;
    static struct seen s;
    static struct req reqs[N_CHECKS];
    tally_async *a = NULL;
    int n = 200;
    int i;

    memset(&s, 0, sizeof(s));
    assert_int_equal(tally_async_open(e->d.socket, 5000, 0, &a), TALLY_OK);
    assert_int_equal(kill(e->d.pid, SIGSTOP), 0);
    queue_all(a, e->token[3], &s, reqs, n);
    assert_int_equal(tally_async_flush(a), TALLY_OK);
    tally_async_close(a);
    for (i = 0; i < n; i++) {
        assert_int_equal(s.calls[i], 1);
        assert_int_equal(s.rc[i], TALLY_ECANCELED);
    }
    assert_int_equal(kill(e->d.pid, SIGCONT), 0);
    /* the daemon answers a closed connection's requests into the void and goes on */
    assert_int_equal(tally_async_open(e->d.socket, 5000, 0, &a), TALLY_OK);
    memset(&s, 0, sizeof(s));
    queue_all(a, e->token[3], &s, reqs, 1);
    drive_ok(e, a);
    assert_int_equal(s.rc[0], TALLY_OK);
    assert_int_equal(s.calls[0], 1);
    tally_async_close(a);
}

static void
test_async_bad_arguments_queue_nothing(void **state)
{
    struct env *e = *state;
    static struct seen s;
    struct req q = {&s, 0};
    char long_name[100];
    tally_async *a = NULL;

    memset(&s, 0, sizeof(s));
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(tally_async_open(e->d.socket, 5000, 0, &a), TALLY_OK);
    assert_int_equal(tally_async_check(a, e->token[0], long_name, 0, on_answer, &q), TALLY_EINVAL);
    assert_int_equal(tally_async_check(a, e->token[0], "api", -1, on_answer, &q), TALLY_EINVAL);
    assert_int_equal(tally_async_check(a, e->token[0], "api", 0, NULL, &q), TALLY_EINVAL);
    assert_int_equal(tally_async_pending(a), 0);
    assert_false(tally_async_wants_write(a));
    /* a bad token and an unknown endpoint are answers, not errors */
    assert_int_equal(tally_async_check(a, "tly_nope", "api", 0, on_answer, &q), TALLY_OK);
    drive_ok(e, a);
    assert_int_equal(s.status[0], TALLY_UNAUTHORIZED);
    assert_int_equal(tally_async_check(a, e->token[0], "nope", 0, on_answer, &q), TALLY_OK);
    drive_ok(e, a);
    assert_int_equal(s.status[0], TALLY_BAD_REQUEST);
    assert_int_equal(s.calls[0], 2);
    tally_async_close(a);
    assert_int_equal(tally_async_open("/nonexistent/tally.sock", 1000, 0, &a), TALLY_EUNAVAIL);
    assert_null(a);
    assert_int_equal(tally_async_open(e->d.socket, 1000, 65537, &a), TALLY_EINVAL);
    assert_null(a);
}

/* Every allocation of open failed in turn: TALLY_ENOMEM, nothing leaked (ASan);
 * after open, requests and answers allocate nothing. */
static void
test_async_allocates_only_at_open(void **state)
{
    struct env *e = *state;
    static struct seen s;
    static struct req reqs[N_CHECKS];
    tally_async *a = NULL;
    uint64_t before;
    int k;
    int rc = TALLY_ENOMEM;

    for (k = 1; k < 20 && rc == TALLY_ENOMEM; k++) {
        tally_alloc_fail_at((uint64_t)k);
        rc = tally_async_open(e->d.socket, 5000, 0, &a);
        tally_alloc_fail_at(0);
        if (rc == TALLY_ENOMEM)
            assert_null(a);
    }
    assert_int_equal(rc, TALLY_OK);
    assert_true(k > 3); /* handle, queue, the handshake's client: each failed once */
    memset(&s, 0, sizeof(s));
    before = tally_alloc_count();
    queue_all(a, e->token[0], &s, reqs, 300);
    drive_ok(e, a);
    assert_int_equal(s.admitted + s.refused, 300);
    assert_true(tally_alloc_count() == before);
    tally_async_close(a);
}

/* "tcp:127.0.0.1:PORT" from the "tcp" field of the daemon's start line. */
static bool
tcp_address(const struct env *e, char *out, size_t cap)
{
    size_t len = 0;
    char *log = test_read_file(e->d.log, &len);
    const char *p = log != NULL ? strstr(log, "\"tcp\":\"") : NULL;
    bool ok = p != NULL;

    if (ok)
        snprintf(out, cap, "tcp:%.*s", (int)strcspn(p + 7, "\""), p + 7);
    free(log);
    return ok;
}

static void
test_async_over_tcp(void **state)
{
    struct env *e = *state;
    static struct seen s;
    static struct req reqs[N_CHECKS];
    char where[64];
    tally_async *a = NULL;
    int n = 300;
    int i;

    memset(&s, 0, sizeof(s));
    /* the start line may come just after the socket answers */
    for (i = 0; i < 500 && !tcp_address(e, where, sizeof(where)); i++)
        poll(NULL, 0, 10);
    if (!tcp_address(e, where, sizeof(where)))
        fail_msg("no \"tcp\" field in the start line of %s", e->d.log);
    assert_int_equal(tally_async_open(where, 5000, 0, &a), TALLY_OK);
    queue_all(a, e->token[4], &s, reqs, n);
    drive_ok(e, a);
    for (i = 0; i < n; i++)
        assert_int_equal(s.calls[i], 1);
    assert_int_equal(s.admitted, LIMIT);
    assert_int_equal(s.refused, n - LIMIT);
    tally_async_close(a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_async_pipelined_admits_exactly_the_limit, start, stop),
        cmocka_unit_test_setup_teardown(test_async_answers_matched_by_request_id, start, stop),
        cmocka_unit_test_setup_teardown(test_async_window_and_queue_bound_the_handle, start, stop),
        cmocka_unit_test_setup_teardown(test_async_server_killed_fails_every_pending, start, stop),
        cmocka_unit_test_setup_teardown(test_async_close_cancels_pending, start, stop),
        cmocka_unit_test_setup_teardown(test_async_bad_arguments_queue_nothing, start, stop),
        cmocka_unit_test_setup_teardown(test_async_allocates_only_at_open, start, stop),
        cmocka_unit_test_setup_teardown(test_async_over_tcp, start_tcp, stop),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("client_async", tests, setup, teardown);
}

/*
 * Corrupted SQLite files (docs/FAILURE-MODES.md §1). With tallyd stopped, a
 * tenant's journal (ledger.db), or separately one of its child counter files
 * (endpoints/E.db), is overwritten with garbage; tallyd starts again. The
 * tenant's requests get 503 within the deadline plus a margin, one log line
 * names the tenant and the file, the other tenant is served as before, the
 * supervisor is restarted with a growing backoff (no crash loop) and the
 * garbage is left as it was: nothing is recreated over it, so no second
 * allowance can appear.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fail_util.h"
#include "serve_util.h"

#define WAIT_MS   200
#define MARGIN_MS 800 /* sanitizer builds on a shared 2-core machine */
#define GARBAGE   16384

struct env {
    struct serve_env s;
    char token_bad[64];
    char token_good[64];
    struct fail_load bad, good;
    unsigned char garbage[GARBAGE];
};

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    uint64_t seed = 42;

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    serve_tally_ok(&e->s, NULL, 0, "plan", "set", "pro", "--limit", "1000000/365d", NULL);
    serve_tally_ok(&e->s, NULL, 0, "endpoint", "set", "closed", "--limit", "1000000/365d",
                   "--on-unavailable", "closed", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "bad", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, NULL, 0, "tenant", "add", "good", "--plan", "pro", NULL);
    serve_tally_ok(&e->s, e->token_bad, sizeof(e->token_bad), "link", "create", "bad", NULL);
    serve_tally_ok(&e->s, e->token_good, sizeof(e->token_good), "link", "create", "good", NULL);
    for (size_t i = 0; i < sizeof(e->garbage); i += 8) {
        uint64_t r = test_rand(&seed);
        memcpy(e->garbage + i, &r, 8);
    }
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    fail_load_stop(&e->bad);
    fail_load_stop(&e->good);
    fail_keep_log(e->s.d.log);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

/* Both tenants' files exist (one admitted check each), then tallyd stops cleanly. They were
 * served before (a ledger each): their supervisors answer, and take back the leases at the
 * stop, so nothing is left in the children's files to admit from afterwards. */
static void
create_files(struct env *e)
{
    struct serve_http r;

    serve_ledger_make(&e->s, "bad");
    serve_ledger_make(&e->s, "good");
    serve_start(&e->s, NULL, NULL);
    serve_check(&e->s, e->token_bad, "closed", &r);
    assert_int_equal(r.status, 200);
    serve_check(&e->s, e->token_good, "closed", &r);
    assert_int_equal(r.status, 200);
    serve_stop(&e->s);
}

static void
overwrite(struct env *e, const char *rel)
{
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/%s-wal", e->s.data, rel);
    (void)unlink(path);
    snprintf(path, sizeof(path), "%s/%s-shm", e->s.data, rel);
    (void)unlink(path);
    snprintf(path, sizeof(path), "%s/%s", e->s.data, rel);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, e->garbage, sizeof(e->garbage)), (ssize_t)sizeof(e->garbage));
    close(fd);
}

static void
still_garbage(struct env *e, const char *rel)
{
    char path[512];
    size_t len = 0;
    char *got;

    snprintf(path, sizeof(path), "%s/%s", e->s.data, rel);
    got = test_read_file(path, &len);
    assert_non_null(got);
    assert_int_equal(len, sizeof(e->garbage));
    assert_memory_equal(got, e->garbage, sizeof(e->garbage));
    free(got);
}

/* Steady load on both tenants for `ms`; the first second of `bad` is its cold
 * start (the first supervisor is given up to 5 s until it crashes). */
static void
run_both(struct env *e, int ms, struct fail_counts *bad, struct fail_counts *good)
{
    struct fail_counts first;
    char wait[32];

    snprintf(wait, sizeof(wait), "--wait-ms=%d", WAIT_MS);
    serve_start(&e->s, wait, NULL);
    fail_load_start(&e->bad, e->s.d.socket, e->token_bad, "closed", 10);
    fail_load_start(&e->good, e->s.d.socket, e->token_good, "closed", 10);
    serve_sleep_ms(1500);
    first = fail_load_take(&e->bad);
    fail_counts_print("bad start", &first);
    serve_sleep_ms(ms - 1500);
    *bad = fail_load_take(&e->bad);
    *good = fail_load_take(&e->good);
    fail_load_stop(&e->bad);
    fail_load_stop(&e->good);
    fail_counts_print("bad", bad);
    fail_counts_print("good", good);
    /* the first answers too: 503, never admitted, never an internal error */
    assert_int_equal(first.admitted + first.degraded + first.other + first.errors, 0);
    assert_true(first.max_ms <= 5000 + MARGIN_MS);
    assert_int_equal(bad->admitted + bad->degraded + bad->refused + bad->other + bad->errors, 0);
    assert_true(bad->unavailable > 10);
    assert_true(bad->max_ms <= WAIT_MS + MARGIN_MS);
    assert_true(good->admitted > 10);
    assert_int_equal(good->unavailable + good->refused + good->other + good->errors, 0);
    assert_true(good->max_ms <= WAIT_MS + MARGIN_MS);
}

static void
test_corrupt_journal_is_named_and_refused(void **state)
{
    struct env *e = *state;
    struct fail_counts bad, good;
    char *log, *p;
    int exits, line;

    create_files(e);
    overwrite(e, "tenants/bad/ledger.db");
    run_both(e, 6000, &bad, &good);
    exits = serve_log_count(&e->s, "\"event\":\"supervisor_exit\",\"tenant\":\"bad\"");
    line = serve_log_count(&e->s, "\"event\":\"supervisor_open_failed\",\"tenant\":\"bad\"");
    printf("# supervisor_exit of bad in 6 s: %d; supervisor_open_failed lines: %d\n", exits, line);
    assert_true(line >= 1);
    assert_true(serve_log_count(&e->s, "tenants/bad/ledger.db") >= 1);
    /* backoff 10 ms doubling to 2 s: about 10 starts in 6 s, not thousands */
    assert_true(exits >= 3 && exits <= 14);
    log = serve_log(&e->s);
    assert_non_null(strstr(log, "\"restart_in_ms\":320")); /* the backoff grows */
    p = strstr(log, "\"event\":\"supervisor_open_failed\",\"tenant\":\"bad\"");
    assert_non_null(p);
    printf("# %.*s\n", (int)(strchr(p, '\n') - p), p);
    free(log);
    /* good: one start per run of tallyd, never a restart */
    assert_int_equal(serve_log_count(&e->s, "\"supervisor_start\",\"tenant\":\"good\""), 2);
    assert_int_equal(serve_log_count(&e->s, "\"supervisor_restart\",\"tenant\":\"good\""), 0);
    /* bad's retransmits that meet its restart backoff (2 s by now, longer than the child's
     * 1 s retransmit interval) are not sent: counted as such, not as lease messages */
    for (int64_t t0 = serve_now_ms();; serve_sleep_ms(200)) {
        struct serve_http m;
        serve_http_get(e->s.http_port, "/metrics", NULL, &m);
        assert_int_equal(m.status, 200);
        if (serve_metric(m.body, "tally_lease_send_failures_total") >= 1)
            break;
        if (serve_now_ms() - t0 > 10000)
            fail_msg("no lease send failure counted in 10 s of a 2 s restart backoff");
    }
    serve_stop(&e->s);
    still_garbage(e, "tenants/bad/ledger.db");
}

static void
test_corrupt_child_file_is_named_and_refused(void **state)
{
    struct env *e = *state;
    struct fail_counts bad, good;
    char *log, *p;

    create_files(e);
    overwrite(e, "tenants/bad/endpoints/closed.db");
    run_both(e, 4000, &bad, &good);
    /* one line for the outage (one a minute), naming the tenant and the file */
    assert_int_equal(serve_log_count(&e->s, "\"event\":\"child_open_failed\",\"tenant\":\"bad\","
                                            "\"endpoint\":\"closed\""),
                     1);
    log = serve_log(&e->s);
    p = strstr(log, "\"event\":\"child_open_failed\"");
    assert_non_null(p);
    printf("# %.*s\n", (int)(strchr(p, '\n') - p), p);
    assert_non_null(strstr(p, "tenants/bad/endpoints/closed.db"));
    free(log);
    serve_stop(&e->s);
    still_garbage(e, "tenants/bad/endpoints/closed.db");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_corrupt_journal_is_named_and_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_child_file_is_named_and_refused, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("fail_corrupt", tests, NULL, NULL);
}

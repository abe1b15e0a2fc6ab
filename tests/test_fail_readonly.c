/*
 * A read-only data dir (docs/FAILURE-MODES.md §1). The test makes one tenant's
 * folder read-only with a bind mount over itself (mount --bind D D, then
 * mount -o remount,bind,ro D) while tenants a and b of the same data dir are
 * under steady load. A read-only mount refuses new opens for writing; files
 * already open keep writing (Linux checks the mount at open), so the test
 * then kills a's supervisor: every restart of it meets the read-only folder
 * (its lock file and journal cannot be opened for writing). Meanwhile a's
 * endpoints follow their policies (open: leases, then degraded; closed:
 * leases, then 503), every answer arrives within the deadline plus a margin,
 * b is served as before, the log has a line per transition and restart, not
 * per request. After the remount read-write a heals by itself, and every
 * SQLite file passes PRAGMA integrity_check. A file system the kernel turns
 * read-only after an error (ext4 errors=remount-ro, on a loop device, the
 * error triggered through sysfs) fails writes to open files too: a follows
 * its policies the same way, b is untouched, and after the operator's repair
 * (stop, fsck, mount, start) every file is intact and a is served again. A
 * tallyd started on a data dir that is read-only as a whole cannot keep
 * state: it refuses to start with one line naming the dir. /healthz says so
 * (503) while the data dir is read-only under a running tallyd, and while a
 * tenant's supervisor cannot start (its lock held by another process), and
 * is 200 again once each is repaired.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fail_util.h"
#include "serve_util.h"

#define KEEP_SHORT "--keep-lease-ms=5000"

#define WAIT_MS    200
#define MARGIN_MS  800 /* sanitizer builds on a shared 2-core machine */
#define DEGRADED_N 150
#define PHASE_MS   250

struct env {
    struct serve_env s;
    char ro_dir[256];   /* the bind mount, when made */
    char ext4_dir[256]; /* the ext4 mount, when made */
    char token_a[64];
    char token_b[64];
    struct fail_load a_open, a_closed, b;
};

/* mount --bind dir dir && mount -o remount,bind,ro dir */
static void
bind_ro(struct env *e, const char *dir)
{
    if (mount(dir, dir, NULL, MS_BIND, NULL) != 0)
        fail_msg("cannot bind-mount %s over itself: %s (the failure suites need root)", dir,
                 strerror(errno));
    snprintf(e->ro_dir, sizeof(e->ro_dir), "%s", dir);
    if (mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0)
        fail_msg("cannot remount the bind mount %s read-only: %s", dir, strerror(errno));
}

/* mount -o remount,bind,rw dir, then the bind mount goes (lazily when busy) */
static void
unbind(struct env *e)
{
    if (e->ro_dir[0] == '\0')
        return;
    (void)mount(NULL, e->ro_dir, NULL, MS_REMOUNT | MS_BIND, NULL);
    if (umount2(e->ro_dir, 0) != 0 && errno == EBUSY)
        (void)umount2(e->ro_dir, MNT_DETACH);
    e->ro_dir[0] = '\0';
}

/* Runs a system tool; fails the test with its output unless it exits 0 (or 1
 * when `one_ok`: e2fsck's "errors corrected"). */
static void
tool(bool one_ok, const char *a0, const char *a1, const char *a2, const char *a3, const char *a4)
{
    struct test_out *o = calloc(1, sizeof(*o));
    char *argv[] = {(char *)a0, (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    int rc;

    assert_non_null(o);
    rc = test_run(argv, NULL, o);
    if (rc != 0 && !(one_ok && rc == 1))
        fail_msg("%s %s %s %s: exit %d: %s%s (the failure suites need root, mount and "
                 "e2fsprogs)",
                 a0, a1 != NULL ? a1 : "", a2 != NULL ? a2 : "", a3 != NULL ? a3 : "", rc, o->out,
                 o->err);
    free(o);
}

/* The loop device under `dir`, from /proc/self/mountinfo ("loop0"). */
static void
loop_name(const char *dir, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[1024];

    out[0] = '\0';
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        char mnt[512], src[256];
        const char *dash = strstr(line, " - ");
        if (sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1 || dash == NULL ||
            strcmp(mnt, dir) != 0 || sscanf(dash, " - %*s %255s", src) != 1)
            continue;
        if (strncmp(src, "/dev/", 5) == 0 && snprintf(out, cap, "%s", src + 5) >= (int)cap)
            fail_msg("device name %s too long", src);
    }
    fclose(f);
    if (out[0] == '\0')
        fail_msg("no loop device mounted on %s", dir);
}

/* Waits (up to 5 s) until the loop device `loop` ("loop0") has let go of its file: an unmount
 * frees it asynchronously, and a mount of the same image meanwhile may find it still bound. */
static void
loop_wait_free(const char *loop)
{
    char path[128];
    struct stat sb;

    snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", loop);
    for (int i = 0; i < 500 && stat(path, &sb) == 0; i++)
        serve_sleep_ms(10);
    if (stat(path, &sb) == 0)
        fail_msg("%s still bound 5 s after its unmount", loop);
}

static void
ext4_mount(struct env *e, const char *img, const char *dir)
{
    char path[512];

    tool(false, "/usr/bin/mount", "-o", "loop,errors=remount-ro", img, dir);
    snprintf(e->ext4_dir, sizeof(e->ext4_dir), "%s", dir);
    assert_int_equal(chmod(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/lost+found", dir);
    (void)rmdir(path);
}

static void
ext4_umount(struct env *e)
{
    if (e->ext4_dir[0] == '\0')
        return;
    if (umount2(e->ext4_dir, 0) != 0 && errno == EBUSY)
        (void)umount2(e->ext4_dir, MNT_DETACH);
    e->ext4_dir[0] = '\0';
}

static int
setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    *state = e;
    serve_env_init(&e->s);
    fail_two_tenants(&e->s, DEGRADED_N, e->token_a, sizeof(e->token_a), e->token_b,
                     sizeof(e->token_b));
    return 0;
}

static int
teardown(void **state)
{
    struct env *e = *state;

    fail_load_stop(&e->a_open);
    fail_load_stop(&e->a_closed);
    fail_load_stop(&e->b);
    unbind(e); /* first: a failed test must not leave a mount behind */
    if (e->s.d.pid > 0)
        test_daemon_kill9(&e->s.d);
    (void)test_wait_supervisors(e->s.data, "a", 0, 5000);
    (void)test_wait_supervisors(e->s.data, "b", 0, 5000);
    ext4_umount(e);
    fail_keep_log(e->s.d.log);
    serve_env_release(&e->s);
    free(e);
    return 0;
}

static int64_t
total(const struct fail_counts *c)
{
    return c->admitted + c->degraded + c->refused + c->unavailable + c->other + c->errors;
}

/* Lines of tallyd's log, its own and its supervisors'. */
static int
log_lines(const struct env *e)
{
    char *log = serve_log(&e->s);
    int n = 0;

    for (const char *p = log; *p != '\0'; p++)
        n += *p == '\n';
    free(log);
    return n;
}

/* A line per transition and a few per restart of the supervisor (its backoff
 * reaches 2 s), never one per request. */
static void
quiet_log(const struct env *e, int lines)
{
    int restarts = serve_log_count(&e->s, "\"supervisor_restart\"");

    if (lines > 3 * restarts + 12)
        fail_msg("%d log lines for %d supervisor restarts", lines, restarts);
}

static void
take3(struct env *e, struct fail_counts *ao, struct fail_counts *ac, struct fail_counts *b)
{
    struct fail_counts c;

    c = fail_load_take(&e->a_open);
    fail_counts_add(ao, &c);
    c = fail_load_take(&e->a_closed);
    fail_counts_add(ac, &c);
    c = fail_load_take(&e->b);
    fail_counts_add(b, &c);
}

/* While a's files are read-only: drives the loads until it shows in a's answers (at least 4 s,
 * 10 degraded and 10 unavailable), then checks the phase (every answer within the deadline;
 * open never 503 and at most DEGRADED_N degraded; closed never degraded; b untouched and
 * served). `what` names the phase in the output; returns its length in ms. */
static int64_t
ro_phase(struct env *e, const char *what, struct fail_counts *ao, struct fail_counts *ac,
         struct fail_counts *b)
{
    char l_ao[64], l_ac[64], l_b[64], c_ao[64], c_ac[64];
    int64_t t0 = serve_now_ms(), ms;

    snprintf(l_ao, sizeof(l_ao), "a open %s", what);
    snprintf(l_ac, sizeof(l_ac), "a closed %s", what);
    snprintf(l_b, sizeof(l_b), "b while a %s", what);
    snprintf(c_ao, sizeof(c_ao), "a open while %s", what);
    snprintf(c_ac, sizeof(c_ac), "a closed while %s", what);
    memset(ao, 0, sizeof(*ao));
    memset(ac, 0, sizeof(*ac));
    memset(b, 0, sizeof(*b));
    while (serve_now_ms() - t0 < 4000 || ao->degraded < 10 || ac->unavailable < 10) {
        take3(e, ao, ac, b);
        assert_int_equal(kill(e->s.d.pid, 0), 0); /* tallyd alive */
        if (serve_now_ms() - t0 > 30000) {
            fail_counts_print(l_ao, ao);
            fail_counts_print(l_ac, ac);
            fail_msg("%s: not in a's answers within 30 s", what);
        }
        serve_sleep_ms(PHASE_MS);
    }
    ms = serve_now_ms() - t0;
    fail_counts_print(l_ao, ao);
    fail_counts_print(l_ac, ac);
    fail_counts_print(l_b, b);
    fail_counts_clean(c_ao, ao, WAIT_MS + MARGIN_MS);
    fail_counts_clean(c_ac, ac, WAIT_MS + MARGIN_MS);
    fail_counts_clean(l_b, b, WAIT_MS + MARGIN_MS);
    assert_int_equal(ao->unavailable, 0); /* open: never 503 */
    assert_true(ao->degraded <= DEGRADED_N);
    assert_int_equal(ac->degraded, 0);                              /* closed: never degraded */
    assert_int_equal(b->degraded + b->unavailable + b->refused, 0); /* b untouched */
    assert_true(b->admitted > 100);
    return ms;
}

/* Until one phase where every load was admitted from leases only (a cold
 * start on a loaded machine may degrade a first answer or two). */
static void
steady(struct env *e)
{
    int64_t t0 = serve_now_ms();

    for (;;) {
        struct fail_counts ao = {0}, ac = {0}, b = {0};
        serve_sleep_ms(PHASE_MS);
        take3(e, &ao, &ac, &b);
        if (ao.admitted > 0 && ac.admitted > 0 && b.admitted > 0 &&
            total(&ao) + total(&ac) + total(&b) == ao.admitted + ac.admitted + b.admitted)
            return;
        if (serve_now_ms() - t0 > 30000)
            fail_msg("no steady service within 30 s");
    }
}

static void
test_readonly_tenant_follows_policy_and_heals(void **state)
{
    struct env *e = *state;
    struct fail_counts ao = {0}, ac = {0}, b = {0};
    char wait[32], dir[256];
    pid_t sup[16];
    int64_t t0, ro_ms, heal_ms;
    int n, lines0, lines, degraded0;
    char *log;

    snprintf(wait, sizeof(wait), "--wait-ms=%d", WAIT_MS);
    /* Served before (a ledger each): a's supervisor, killed below, runs from the start. */
    serve_ledger_make(&e->s, "a");
    serve_ledger_make(&e->s, "b");
    /* Leases that run out within seconds: what follows them is under test. */
    serve_start(&e->s, wait, KEEP_SHORT);
    fail_load_start(&e->a_open, e->s.d.socket, e->token_a, "open", 5);
    fail_load_start(&e->a_closed, e->s.d.socket, e->token_a, "closed", 5);
    fail_load_start(&e->b, e->s.d.socket, e->token_b, "closed", 5);
    t0 = serve_now_ms();
    while (ao.admitted < 50 || ac.admitted < 50 || b.admitted < 50) {
        take3(e, &ao, &ac, &b);
        if (serve_now_ms() - t0 > 30000)
            fail_msg("no steady service before the folder goes read-only");
        serve_sleep_ms(PHASE_MS);
    }
    fail_counts_print("a open warm", &ao);
    fail_counts_print("a closed warm", &ac);
    fail_counts_print("b warm", &b);
    steady(e);

    /* read-only: a's supervisor must open its files again, and cannot */
    snprintf(dir, sizeof(dir), "%s/tenants/a", e->s.data);
    bind_ro(e, dir);
    lines0 = log_lines(e);
    degraded0 = serve_log_count(&e->s, "\"endpoint_degraded\"");
    n = test_supervisor_pids(e->s.data, "a", sup, 16);
    assert_int_equal(n, 1);
    assert_int_equal(kill(sup[0], SIGKILL), 0);
    ro_ms = ro_phase(e, "ro", &ao, &ac, &b);
    lines = log_lines(e) - lines0;
    printf("# read-only for %lld ms: %lld requests of a, %d log lines (supervisor_refused %d, "
           "supervisor_restart %d, endpoint_degraded %d, endpoint_unavailable %d)\n",
           (long long)ro_ms, (long long)(total(&ao) + total(&ac)), lines,
           serve_log_count(&e->s, "\"supervisor_refused\""),
           serve_log_count(&e->s, "\"supervisor_restart\""),
           serve_log_count(&e->s, "\"endpoint_degraded\""),
           serve_log_count(&e->s, "\"endpoint_unavailable\""));
    quiet_log(e, lines);
    assert_int_equal(serve_log_count(&e->s, "\"endpoint_degraded\"") - degraded0, 1);

    /* read-write again: a heals by itself (the next restart, backoff at most 2 s) */
    unbind(e);
    memset(&ao, 0, sizeof(ao));
    memset(&ac, 0, sizeof(ac));
    memset(&b, 0, sizeof(b));
    t0 = serve_now_ms();
    for (;;) {
        struct fail_counts co = fail_load_take(&e->a_open), cc = fail_load_take(&e->a_closed);
        struct fail_counts cb = fail_load_take(&e->b);
        fail_counts_add(&ao, &co);
        fail_counts_add(&ac, &cc);
        fail_counts_add(&b, &cb);
        if (co.admitted > 0 && co.degraded == 0 && cc.admitted > 0 && cc.unavailable == 0)
            break;
        if (serve_now_ms() - t0 > 10000) {
            fail_counts_print("a open heal", &ao);
            fail_counts_print("a closed heal", &ac);
            fail_msg("a did not heal within 10 s of the remount read-write");
        }
        serve_sleep_ms(PHASE_MS);
    }
    heal_ms = serve_now_ms() - t0;
    fail_counts_print("a open heal", &ao);
    fail_counts_print("a closed heal", &ac);
    fail_counts_clean("a open healing", &ao, WAIT_MS + MARGIN_MS);
    fail_counts_clean("a closed healing", &ac, WAIT_MS + MARGIN_MS);
    fail_counts_clean("b while a heals", &b, WAIT_MS + MARGIN_MS);
    printf("# healed %lld ms after the remount read-write\n", (long long)heal_ms);
    fail_load_stop(&e->a_open);
    fail_load_stop(&e->a_closed);
    fail_load_stop(&e->b);
    serve_stop(&e->s);
    assert_true(test_wait_supervisors(e->s.data, "a", 0, 5000));
    assert_true(test_wait_supervisors(e->s.data, "b", 0, 5000));
    log = serve_log(&e->s);
    assert_null(strstr(log, "AddressSanitizer"));
    assert_null(strstr(log, "runtime error"));
    free(log);
    /* tally.db, two journals, three child files */
    assert_true(fail_integrity_check(e->s.data) >= 6);
}

static void
test_fs_turned_readonly_follows_policy(void **state)
{
    struct env *e = *state;
    struct fail_counts ao = {0}, ac = {0}, b = {0};
    char wait[32], dir[256], img[256], loop[64], sysfs[256];
    int64_t t0;
    int lines0, lines, status;
    FILE *f;

    /* tenant a's folder is an ext4 file system that turns read-only on error */
    snprintf(img, sizeof(img), "%s/a.ext4", e->s.root);
    f = fopen(img, "w");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), 32 << 20), 0);
    fclose(f);
    tool(false, "/usr/sbin/mkfs.ext4", "-q", "-F", img, NULL);
    snprintf(dir, sizeof(dir), "%s/tenants", e->s.data);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(dir, sizeof(dir), "%s/tenants/a", e->s.data);
    assert_int_equal(mkdir(dir, 0700), 0);
    ext4_mount(e, img, dir);
    loop_name(dir, loop, sizeof(loop));

    snprintf(wait, sizeof(wait), "--wait-ms=%d", WAIT_MS);
    /* Served before (a ledger each): a's supervisor, killed below, runs from the start. */
    serve_ledger_make(&e->s, "a");
    serve_ledger_make(&e->s, "b");
    /* Leases that run out within seconds: what follows them is under test. */
    serve_start(&e->s, wait, KEEP_SHORT);
    fail_load_start(&e->a_open, e->s.d.socket, e->token_a, "open", 5);
    fail_load_start(&e->a_closed, e->s.d.socket, e->token_a, "closed", 5);
    fail_load_start(&e->b, e->s.d.socket, e->token_b, "closed", 5);
    t0 = serve_now_ms();
    while (ao.admitted < 50 || ac.admitted < 50 || b.admitted < 50) {
        take3(e, &ao, &ac, &b);
        if (serve_now_ms() - t0 > 30000)
            fail_msg("no steady service before the file system turns read-only");
        serve_sleep_ms(PHASE_MS);
    }
    steady(e);

    /* the kernel's answer to a file system error: read-only for every file */
    snprintf(sysfs, sizeof(sysfs), "/sys/fs/ext4/%s/trigger_fs_error", loop);
    f = fopen(sysfs, "w");
    if (f == NULL) {
        fail_msg("cannot open %s: %s", sysfs, strerror(errno));
    } else {
        fputs("1\n", f);
        fclose(f);
    }
    lines0 = log_lines(e);
    (void)ro_phase(e, "ro fs", &ao, &ac, &b);
    lines = log_lines(e) - lines0;
    printf("# %d log lines for %lld requests of a (journal_commit_failed %d, child_write_failed "
           "%d, supervisor_refused %d, endpoint_degraded %d)\n",
           lines, (long long)(total(&ao) + total(&ac)),
           serve_log_count(&e->s, "\"journal_commit_failed\""),
           serve_log_count(&e->s, "\"child_write_failed\""),
           serve_log_count(&e->s, "\"supervisor_refused\""),
           serve_log_count(&e->s, "\"endpoint_degraded\""));
    quiet_log(e, lines);

    /* the operator's repair: stop, fsck, mount again, start; then a is served */
    fail_load_stop(&e->a_open);
    fail_load_stop(&e->a_closed);
    fail_load_stop(&e->b);
    status = test_daemon_stop(&e->s.d);
    printf("# tallyd stopped with status %d\n", status);
    assert_true(test_wait_supervisors(e->s.data, "a", 0, 5000));
    assert_true(test_wait_supervisors(e->s.data, "b", 0, 5000));
    assert_int_equal(umount2(dir, 0), 0);
    e->ext4_dir[0] = '\0';
    loop_wait_free(loop);
    tool(true, "/usr/sbin/e2fsck", "-f", "-y", img, NULL);
    ext4_mount(e, img, dir);
    /* tally.db, two journals, three child files */
    assert_true(fail_integrity_check(e->s.data) >= 6);
    /* Leases that run out within seconds: what follows them is under test. */
    serve_start(&e->s, wait, KEEP_SHORT);
    memset(&ao, 0, sizeof(ao));
    fail_load_start(&e->a_open, e->s.d.socket, e->token_a, "open", 5);
    t0 = serve_now_ms();
    while (ao.admitted < 20) {
        struct fail_counts c = fail_load_take(&e->a_open);
        fail_counts_add(&ao, &c);
        if (serve_now_ms() - t0 > 30000)
            fail_msg("a not served after the repair");
        serve_sleep_ms(PHASE_MS);
    }
    fail_load_stop(&e->a_open);
    fail_counts_print("a open repaired", &ao);
    serve_stop(&e->s);
}

static void
test_readonly_data_dir_refuses_to_start(void **state)
{
    struct env *e = *state;
    struct test_out *o = calloc(1, sizeof(*o));
    char bin[512];
    char *argv[] = {bin, "--data", e->s.data, "--http", "127.0.0.1:0", NULL};
    char *nl;

    assert_non_null(o);
    test_bin("tallyd", bin, sizeof(bin));
    bind_ro(e, e->s.data);
    assert_int_not_equal(test_run(argv, NULL, o), 0);
    printf("# exit %d: %s", o->code, o->err);
    assert_int_equal(o->code, 1);
    /* one line, naming the data dir and why */
    nl = strchr(o->err, '\n');
    assert_non_null(nl);
    assert_string_equal(nl + 1, "");
    assert_non_null(strstr(o->err, e->s.data));
    assert_non_null(strstr(o->err, "read-only"));
    unbind(e);
    /* nothing was left behind: no socket, no lock, no tenant folder */
    assert_int_equal(fail_count_files(e->s.data), 2); /* secret.key, tally.db */
    /* and on the same dir read-write it starts */
    serve_start(&e->s, NULL, NULL);
    serve_stop(&e->s);
    free(o);
}

/* GET /healthz until it answers `status` with `body` (the data dir is probed at
 * most once a second), at most 5 s. */
static void
healthz_becomes(const struct env *e, int status, const char *body)
{
    struct serve_http r;
    int64_t t0 = serve_now_ms();

    for (;;) {
        serve_http_get(e->s.http_port, "/healthz", NULL, &r);
        if (r.status == status && strcmp(r.body, body) == 0)
            return;
        if (serve_now_ms() - t0 > 5000)
            fail_msg("/healthz: %d %s, want %d %s", r.status, r.body, status, body);
        serve_sleep_ms(100);
    }
}

static void
test_healthz_reports_readonly_data_and_failing_supervisors(void **state)
{
    static const char ok[] = "{\"status\":\"ok\"}";
    struct env *e = *state;
    struct serve_http r;
    char dir[300], lock[400];
    int fd;

    serve_start(&e->s, NULL, NULL);
    serve_http_get(e->s.http_port, "/healthz", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, ok);
    /* the whole data dir read-only under the running tallyd */
    bind_ro(e, e->s.data);
    healthz_becomes(e, 503, "{\"status\":\"unhealthy\",\"detail\":\"data dir not writable\"}");
    unbind(e);
    healthz_becomes(e, 200, ok);
    /* tenant a's supervisor lock held here: every start of it is refused */
    snprintf(dir, sizeof(dir), "%s/tenants", e->s.data);
    (void)mkdir(dir, 0700);
    snprintf(dir, sizeof(dir), "%s/tenants/a", e->s.data);
    (void)mkdir(dir, 0700);
    snprintf(lock, sizeof(lock), "%s/supervisor.lock", dir);
    fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    serve_check(&e->s, e->token_a, "closed", &r);
    assert_int_equal(r.status, 503);
    healthz_becomes(e, 503,
                    "{\"status\":\"unhealthy\",\"detail\":\"supervisors failing to start\"}");
    close(fd);
    /* the next start (after its backoff) takes the lock and answers */
    for (int64_t t0 = serve_now_ms();; serve_sleep_ms(100)) {
        serve_check(&e->s, e->token_a, "closed", &r);
        if (r.status == 200)
            break;
        if (serve_now_ms() - t0 > 10000)
            fail_msg("a is not served again within 10 s of the lock's release: %d", r.status);
    }
    healthz_becomes(e, 200, ok);
    serve_stop(&e->s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_readonly_tenant_follows_policy_and_heals, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fs_turned_readonly_follows_policy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readonly_data_dir_refuses_to_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_healthz_reports_readonly_data_and_failing_supervisors,
                                        setup, teardown),
    };

    return cmocka_run_group_tests_name("fail_readonly", tests, NULL, NULL);
}

/*
 * Secrets (README "Security"): the deployment key lives on pages that are
 * read-only and left out of core dumps; tallyd and tally make themselves
 * non-dumpable unless TALLY_DUMPABLE=1; every file and directory tallyd
 * creates is private whatever the umask, the socket is 0660 at most and
 * refused in a directory others can write; no token reaches a file or a log,
 * and none stays in tallyd's memory once its request was answered.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "badinput_env.h"
#include "store.h"
#include "test_support.h"

static struct test_out o;

/* The VmFlags line of the mapping of /proc/self/smaps that holds `p`. */
static void
vm_flags_of(const void *p, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool inside = false;

    assert_non_null(f);
    out[0] = '\0';
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;

        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0)
            if (snprintf(out, cap, "%s", line + 8) >= (int)cap)
                out[cap - 1] = '\0'; /* a longer line is cut: the flags come first */
    }
    fclose(f);
}

static void
test_key_pages_are_read_only_and_not_dumped(void **state)
{
    char root[128], data[200], flags[256];
    unsigned char *key = NULL;
    int status;
    pid_t pid;

    (void)state;
    test_tmpdir(root, sizeof(root));
    snprintf(data, sizeof(data), "%s/data", root);
    assert_int_equal(store_datadir_init(data), TALLY_OK);
    assert_int_equal(store_key_load(data, &key), TALLY_OK);
    vm_flags_of(key, flags, sizeof(flags));
    print_message("key mapping VmFlags:%s", flags);
    assert_non_null(strstr(flags, " dd")); /* MADV_DONTDUMP */
    assert_null(strstr(flags, " wr"));     /* read-only */
    pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not cmocka's handler: die of it */
        key[0] ^= 1;              /* must fault */
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    /* SIGSEGV, or ASan's report of it and exit 1: never a silent write. */
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    store_key_free(key);
    test_rmtree(root);
}

static int
dumpable_after(const char *env)
{
    int status;
    pid_t pid = fork();

    if (pid == 0) {
        if (env != NULL)
            setenv("TALLY_DUMPABLE", env, 1);
        else
            unsetenv("TALLY_DUMPABLE");
        bool kept = false;
        if (store_process_private(&kept) != TALLY_OK || kept != (env != NULL && env[0] == '1'))
            _exit(100);
        _exit(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void
test_processes_are_not_dumpable_unless_asked(void **state)
{
    (void)state;
    assert_int_equal(dumpable_after(NULL), 0);
    assert_int_equal(dumpable_after("0"), 0);
    assert_int_equal(dumpable_after("1"), 1);
}

/* tallyd says when it stays dumpable (TALLY_DUMPABLE=1): one warn event,
 * process_dumpable, from the daemon and from each supervisor; none otherwise. */
static void
test_dumpable_daemon_says_so(void **state)
{
    struct test_daemon d;
    char root[128], data[200];
    char *log;
    size_t len = 0;

    (void)state;
    test_tmpdir(root, sizeof(root));
    snprintf(data, sizeof(data), "%s/data", root);
    assert_int_equal(test_tally(data, &o, "init", NULL), 0);
    assert_int_equal(test_daemon_start(&d, data, NULL), 0);
    assert_int_equal(test_daemon_stop(&d), 0);
    log = test_read_file(d.log, &len);
    assert_non_null(log);
    assert_null(strstr(log, "process_dumpable"));
    free(log);
    unlink(d.log);
    setenv("TALLY_DUMPABLE", "1", 1);
    assert_int_equal(test_daemon_start(&d, data, NULL), 0);
    unsetenv("TALLY_DUMPABLE");
    assert_int_equal(test_daemon_stop(&d), 0);
    log = test_read_file(d.log, &len);
    assert_non_null(log);
    assert_non_null(strstr(log, "\"level\":\"warn\",\"event\":\"process_dumpable\",\"reason\":"
                                "\"TALLY_DUMPABLE=1\""));
    free(log);
    unlink(d.log);
    test_rmtree(root);
}

/* Every entry under dir: directories 0700, files 0600 (or stricter), the
 * socket 0660 at most. */
static void
check_private(const char *dir, int *files)
{
    DIR *d = opendir(dir);
    struct dirent *ent;
    struct stat sb;

    assert_non_null(d);
    assert_int_equal(stat(dir, &sb), 0);
    assert_int_equal(sb.st_mode & 077, 0);
    while ((ent = readdir(d)) != NULL) {
        char path[1024];

        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name);
        assert_int_equal(lstat(path, &sb), 0);
        if (S_ISDIR(sb.st_mode)) {
            check_private(path, files);
            continue;
        }
        (*files)++;
        if (S_ISSOCK(sb.st_mode)) {
            assert_int_equal(sb.st_mode & 0117, 0); /* at most rw-rw---- */
            continue;
        }
        if ((sb.st_mode & 077) != 0)
            fail_msg("%s has mode %o", path, (unsigned)(sb.st_mode & 0777));
    }
    closedir(d);
}

/* The bytes of `needle` anywhere in the readable memory of process `pid`
 * (mappings up to 1 GiB: the sanitizers' shadow reservations are skipped).
 * Returns how many times; prints where. */
static int
memory_count(pid_t pid, const char *needle, bool show)
{
    char path[64], line[512];
    size_t n = strlen(needle);
    char *buf = malloc(1 << 20);
    FILE *maps;
    int mem, hits = 0;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    maps = fopen(path, "r");
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    mem = open(path, O_RDONLY);
    assert_non_null(maps);
    assert_true(mem >= 0);
    while (fgets(line, sizeof(line), maps) != NULL) {
        unsigned long lo, hi, at;
        char perms[8];

        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' ||
            hi - lo > (1ul << 30) || strstr(line, "[vvar]") != NULL)
            continue;
        for (at = lo; at < hi; at += (1 << 20) - n) {
            size_t want = hi - at < (1ul << 20) ? hi - at : (1ul << 20);
            ssize_t got = pread(mem, buf, want, (off_t)at);
            char *p = buf;

            if (got <= 0)
                break;
            while ((p = memmem(p, (size_t)got - (size_t)(p - buf), needle, n)) != NULL) {
                if (show)
                    print_message("found at %#lx in %s", at + (unsigned long)(p - buf), line);
                hits++;
                p++;
            }
            if ((size_t)got < want || at + want >= hi)
                break;
        }
    }
    close(mem);
    fclose(maps);
    free(buf);
    return hits;
}

static void
test_daemon_files_tokens_and_memory(void **state)
{
    struct bi_env e;
    struct bi_http r;
    char log_token[64], req[512];
    uint8_t frame[PROTO_CLIENT_MSG_MAX];
    struct proto_check m;
    struct proto_frame f;
    int http_fd, sock_fd;
    size_t len = 0;
    char *log;
    int files = 0;
    mode_t old = umask(0); /* tallyd must not rely on the caller's umask */

    (void)state;
    bi_env_up(&e);
    umask(old);
    /* Traffic on both faces: HTTP (keep-alive, then closed) and the socket. */
    bi_http_check(&e, e.token, "search", NULL, &r);
    assert_int_equal(r.status, 200);
    bi_http_check(&e, e.token, "export", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(bi_check(&e, e.token, "wide", 1), PROTO_ADMITTED);
    assert_int_equal(bi_check(&e, e.token2, "wide", 1), PROTO_ADMITTED);
    assert_int_equal(test_tally(e.data, &o, "check", e.token, "wide", NULL), 0);
    /* Files: private, the socket at most 0660. */
    check_private(e.data, &files);
    assert_true(files >= 6); /* key, db, socket, lock, ledger, endpoint files */
    /* No token in a file or in the log. */
    assert_false(test_dir_contains(e.data, e.token));
    assert_false(test_dir_contains(e.data, e.token2));
    log = test_read_file(e.d.log, &len);
    assert_non_null(log);
    if (snprintf(log_token, sizeof(log_token), "%s", e.token + 4) >= (int)sizeof(log_token))
        fail_msg("token longer than expected"); /* without the prefix */
    assert_null(strstr(log, log_token));
    free(log);
    /* No token left in tallyd's memory once its requests were answered, even
     * on connections still open: HTTP keep-alive and the binary socket. */
    http_fd = bi_tcp_connect(&e);
    snprintf(req, sizeof(req),
             "GET /v1/check HTTP/1.1\r\nAuthorization: Bearer %s\r\nX-Tally-Endpoint: wide\r\n\r\n",
             e.token);
    bi_send(http_fd, req, strlen(req));
    assert_true(bi_http_read(http_fd, &r));
    assert_int_equal(r.status, 200);
    sock_fd = bi_unix_connect(&e);
    bi_hello(sock_fd);
    memset(&m, 0, sizeof(m));
    snprintf(m.token, sizeof(m.token), "%s", e.token2);
    snprintf(m.endpoint, sizeof(m.endpoint), "wide");
    {
        size_t len_ = proto_check_encode(frame, 3, &m);

        bi_send(sock_fd, frame, len_);
    }
    assert_true(bi_frame(sock_fd, frame, &f));
    assert_int_equal(f.type, PROTO_C_CHECK_REPLY);
    usleep(200000);
    assert_true(memory_count(e.d.pid, e.data, false) > 0); /* the scan does see tallyd's memory */
    assert_int_equal(memory_count(e.d.pid, e.token + 4, true), 0);
    assert_int_equal(memory_count(e.d.pid, e.token2 + 4, true), 0);
    close(http_fd);
    close(sock_fd);
    bi_env_down(&e);
}

static void
test_socket_dir_writable_by_others_is_refused(void **state)
{
    char root[128], data[200], open_dir[200], sock[256], bin[512];
    char *argv[10];

    (void)state;
    test_tmpdir(root, sizeof(root));
    snprintf(data, sizeof(data), "%s/data", root);
    snprintf(open_dir, sizeof(open_dir), "%s/open", root);
    snprintf(sock, sizeof(sock), "%s/tally.sock", open_dir);
    assert_int_equal(test_tally(data, &o, "init", NULL), 0);
    assert_int_equal(mkdir(open_dir, 0700), 0);
    assert_int_equal(chmod(open_dir, 01777), 0); /* like /tmp */
    test_bin("tallyd", bin, sizeof(bin));
    argv[0] = bin;
    argv[1] = "--data";
    argv[2] = data;
    argv[3] = "--socket";
    argv[4] = sock;
    argv[5] = "--http";
    argv[6] = "127.0.0.1:0";
    argv[7] = NULL;
    assert_int_equal(test_run(argv, NULL, &o), 78);
    assert_non_null(strstr(o.err, "is writable by others: put the socket in a private one"));
    assert_int_not_equal(access(sock, F_OK), 0);
    test_rmtree(root);
}

int
main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_pages_are_read_only_and_not_dumped),
        cmocka_unit_test(test_processes_are_not_dumpable_unless_asked),
        cmocka_unit_test(test_dumpable_daemon_says_so),
        cmocka_unit_test(test_daemon_files_tokens_and_memory),
        cmocka_unit_test(test_socket_dir_writable_by_others_is_refused),
    };

    signal(SIGPIPE, SIG_IGN);
    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests_name("secret_hygiene", tests, NULL, NULL);
}

/*
 * The installed artifacts, used as a user would: `cmake --install` of this
 * build into a temp DESTDIR; libtally.so.0 (SONAME, exactly tally.h's symbols
 * exported), tally.h, tally.pc; examples/c built by its Makefile with
 * `pkg-config --cflags --libs tally` (PKG_CONFIG_PATH and PKG_CONFIG_SYSROOT_DIR
 * into the DESTDIR); the installed tally and tallyd making a data dir and
 * serving it; the example run against it with LD_LIBRARY_PATH into the DESTDIR
 * (blocking, then 10 pipelined checks on a plan of 5); find_package(tally)
 * with tally::client builds it too (found at run time through its RPATH). And
 * examples/systemd/tallyd.service, pointed at the installed tallyd, passes
 * `systemd-analyze verify` silently.
 */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "examples_env.h"
#include "test_support.h"

#define LIMIT 5

static struct test_out o;

struct fx {
    struct examples_env e;
    char dest[300];
    char prefix[600], bindir[600], libdir[600], incdir[600], pcdir[700];
};

static int
setup(void **state)
{
    static struct fx f;
    char *cmake[] = {TALLY_CMAKE, "--install", TALLY_BIN_DIR, NULL};

    memset(&f, 0, sizeof(f));
    test_tmpdir(f.dest, sizeof(f.dest));
    snprintf(f.prefix, sizeof(f.prefix), "%s%s", f.dest, TALLY_INSTALL_PREFIX);
    snprintf(f.bindir, sizeof(f.bindir), "%s%s", f.dest, TALLY_INSTALL_BINDIR);
    snprintf(f.libdir, sizeof(f.libdir), "%s%s", f.dest, TALLY_INSTALL_LIBDIR);
    snprintf(f.incdir, sizeof(f.incdir), "%s%s", f.dest, TALLY_INSTALL_INCLUDEDIR);
    snprintf(f.pcdir, sizeof(f.pcdir), "%s/pkgconfig", f.libdir);
    setenv("DESTDIR", f.dest, 1);
    if (test_run(cmake, NULL, &o) != 0)
        fail_msg("cmake --install: %d\n%s\n%s", o.code, o.out, o.err);
    unsetenv("DESTDIR");
    /* From here on, tally and tallyd are the installed ones. */
    setenv("TALLY_BIN", f.bindir, 1);
    *state = &f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;

    examples_env_release(&f->e);
    test_rmtree(f->dest);
    return 0;
}

static void
assert_exists(const char *dir, const char *name)
{
    char path[800];
    struct stat sb;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (stat(path, &sb) != 0)
        fail_msg("not installed: %s", path);
}

static void
test_install_lays_out_files(void **state)
{
    struct fx *f = *state;

    assert_exists(f->bindir, "tallyd");
    assert_exists(f->bindir, "tally");
    assert_exists(f->libdir, "libtally.so.0");
    assert_exists(f->libdir, "libtally.so");
    assert_exists(f->libdir, "cmake/tally/tally-targets.cmake");
    assert_exists(f->libdir, "cmake/tally/tally-config.cmake");
    assert_exists(f->incdir, "tally.h");
    assert_exists(f->incdir, "tally_common.h");
    assert_exists(f->pcdir, "tally.pc");
}

static void
test_install_library_exports_only_the_api(void **state)
{
    struct fx *f = *state;
    char lib[700];
    char *objdump[] = {"/usr/bin/objdump", "-p", lib, NULL};
    char *nm[] = {"/usr/bin/nm", "-D", "--defined-only", "--format=posix", lib, NULL};
    static const char want[] =
        "TALLY_0 TALLY_0.2 tally_async_check tally_async_close "
        "tally_async_fd tally_async_flush tally_async_open "
        "tally_async_pending tally_async_process tally_async_wants_write "
        "tally_check tally_check_callers tally_client_close tally_client_open tally_err_name "
        "tally_release tally_reload tally_status_name tally_strerror ";
    char got[1024] = "";
    char *line;
    char *save = NULL;

    snprintf(lib, sizeof(lib), "%s/libtally.so.0", f->libdir);
    assert_int_equal(test_run(objdump, NULL, &o), 0);
    assert_non_null(strstr(o.out, "SONAME               libtally.so.0\n"));
    assert_null(strstr(o.out, "NEEDED               libuv"));
    assert_null(strstr(o.out, "NEEDED               libsodium"));
    assert_int_equal(test_run(nm, NULL, &o), 0);
    /* posix format, sorted by name: "NAME@@VERSION TYPE VALUE SIZE" */
    for (line = strtok_r(o.out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        size_t n = strcspn(line, "@ ");
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%.*s ", (int)n, line);
    }
    assert_string_equal(got, want);
}

/* Runs `sh -c cmd`, failing the test with its output unless it exits 0. */
static void
sh(const char *cmd)
{
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};

    if (test_run(argv, NULL, &o) != 0)
        fail_msg("%s: exit %d\n%s\n%s", cmd, o.code, o.out, o.err);
}

static void
test_install_example_builds_with_pkg_config_and_runs(void **state)
{
    struct fx *f = *state;
    char exe[400], cmd[2048];
    char *ldd[] = {"/usr/bin/ldd", exe, NULL};
    char *run[] = {exe, NULL, NULL, "api", "10", NULL};
    char want[1400];

    setenv("PKG_CONFIG_PATH", f->pcdir, 1);
    setenv("PKG_CONFIG_SYSROOT_DIR", f->dest, 1);
    sh("pkg-config --exists --print-errors tally");
    sh("pkg-config --cflags --libs tally");
    snprintf(want, sizeof(want), "-I%s -L%s -ltally", f->incdir, f->libdir);
    assert_non_null(strstr(o.out, want));
    snprintf(exe, sizeof(exe), "%s/tally_example", f->dest);
    /* examples/c/Makefile as a user runs it (its build dir is the DESTDIR here) */
    snprintf(cmd, sizeof(cmd),
             "make -s -C %s -f %s/examples/c/Makefile VPATH=%s/examples/c CC=%s "
             "CFLAGS='-std=c17 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -Werror %s' "
             "tally_example",
             f->dest, TALLY_SOURCE_DIR, TALLY_SOURCE_DIR, TALLY_CC, TALLY_SANITIZE_FLAGS);
    sh(cmd);
    unsetenv("PKG_CONFIG_SYSROOT_DIR");
    unsetenv("PKG_CONFIG_PATH");

    /* the installed tallyd, made ready by the installed tally */
    setenv("LD_LIBRARY_PATH", f->libdir, 1);
    examples_env_init(&f->e, LIMIT);
    assert_int_equal(test_run(ldd, NULL, &o), 0);
    snprintf(want, sizeof(want), "libtally.so.0 => %s/libtally.so.0", f->libdir);
    assert_non_null(strstr(o.out, want));
    run[1] = f->e.d.socket;
    run[2] = f->e.token;
    if (test_run(run, NULL, &o) != 0)
        fail_msg("tally_example: exit %d\n%s\n%s", o.code, o.out, o.err);
    assert_non_null(strstr(o.out, "blocking 1: admitted scope="));
    assert_non_null(strstr(o.out, "async total: admitted=4 refused=6 other=0 errors=0\n"));
    /* a bad token is an answer, not a failure */
    run[2] = "tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    run[4] = "0";
    assert_int_equal(test_run(run, NULL, &o), 0);
    assert_non_null(strstr(o.out, "blocking 1: unauthorized"));
    /* no daemon there: the example says so and fails */
    run[1] = "/nonexistent/tally.sock";
    assert_int_equal(test_run(run, NULL, &o), 1);
    assert_non_null(strstr(o.err, "unavailable"));
    unsetenv("LD_LIBRARY_PATH");
}

static void
test_install_find_package_builds_the_example(void **state)
{
    struct fx *f = *state;
    char dir[400], list[450], cmd[2600];
    FILE *out;

    snprintf(dir, sizeof(dir), "%s/fp", f->dest);
    mkdir(dir, 0700);
    snprintf(list, sizeof(list), "%s/CMakeLists.txt", dir);
    out = fopen(list, "w");
    assert_non_null(out);
    fprintf(out,
            "cmake_minimum_required(VERSION 3.25)\nproject(fp C)\n"
            "find_package(tally REQUIRED)\n"
            "add_executable(ex %s/examples/c/tally_example.c)\n"
            "target_link_libraries(ex PRIVATE tally::client)\n",
            TALLY_SOURCE_DIR);
    fclose(out);
    snprintf(cmd, sizeof(cmd),
             "%s -S %s -B %s/b -DCMAKE_PREFIX_PATH=%s -DCMAKE_C_COMPILER=%s "
             "-DCMAKE_C_FLAGS='%s' >/dev/null && %s --build %s/b >/dev/null && ldd %s/b/ex",
             TALLY_CMAKE, dir, dir, f->prefix, TALLY_CC, TALLY_SANITIZE_FLAGS, TALLY_CMAKE, dir,
             dir);
    sh(cmd);
    snprintf(cmd, sizeof(cmd), "libtally.so.0 => %s/libtally.so.0", f->libdir);
    assert_non_null(strstr(o.out, cmd));
}

/* examples/DIR/tallyd.service, pointed at the installed tallyd, verifies silently. */
static void
unit_verifies(struct fx *f, const char *dir)
{
    char unit_dir[400], unit[450], src[512];
    char *verify[] = {"/usr/bin/systemd-analyze", "verify", unit, NULL};

    snprintf(unit_dir, sizeof(unit_dir), "%s/unit-%s", f->dest, dir);
    mkdir(unit_dir, 0700);
    snprintf(unit, sizeof(unit), "%s/tallyd.service", unit_dir);
    snprintf(src, sizeof(src), "%s/examples/%s/tallyd.service", TALLY_SOURCE_DIR, dir);
    examples_fill_template(src, unit, "BINDIR", f->bindir, NULL);
    if (access(verify[0], X_OK) != 0)
        fail_msg("systemd-analyze is missing (Debian package systemd)");
    test_run(verify, NULL, &o);
    if (o.code != 0 || o.out[0] != '\0' || o.err[0] != '\0')
        fail_msg("systemd-analyze verify: exit %d\n%s\n%s", o.code, o.out, o.err);
}

static void
test_install_systemd_unit_verifies(void **state)
{
    unit_verifies(*state, "systemd");
}

static void
test_install_cluster_unit_verifies(void **state)
{
    unit_verifies(*state, "cluster");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_install_lays_out_files),
        cmocka_unit_test(test_install_library_exports_only_the_api),
        cmocka_unit_test(test_install_example_builds_with_pkg_config_and_runs),
        cmocka_unit_test(test_install_find_package_builds_the_example),
        cmocka_unit_test(test_install_systemd_unit_verifies),
        cmocka_unit_test(test_install_cluster_unit_verifies),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("examples_install", tests, setup, teardown);
}

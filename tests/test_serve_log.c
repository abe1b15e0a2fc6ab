/*
 * tally_log: the JSON line writer of tallyd's events. Table-driven escaping,
 * the exact shape of a line at a fixed time, level filtering, a line cut at a
 * field boundary when too long (still valid, marked truncated), and lines
 * written whole to a pipe.
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
#include <string.h>
#include <unistd.h>

#include "tally_common.h"
#include "tally_log.h"

struct esc_case {
    const char *in;
    size_t len;
    const char *out;
};

static void
test_escape_table(void **state)
{
    static const struct esc_case cases[] = {
        {"plain", 5, "plain"},
        {"a\"b", 3, "a\\\"b"},
        {"back\\slash", 10, "back\\\\slash"},
        {"l1\nl2\r\t", 7, "l1\\nl2\\r\\t"},
        {"\x01\x1f\x7f", 3, "\\u0001\\u001f\\u007f"},
        {"nul\0x", 5, "nul\\u0000x"},
        {"/data/d\xc3\xa9j\xc3\xa0", 12, "/data/d\xc3\xa9j\xc3\xa0"}, /* UTF-8 passes through */
        {"", 0, ""},
    };
    char out[64];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bool cut = true;
        size_t n = tally_log_escape(out, sizeof(out), cases[i].in, cases[i].len, &cut);
        assert_string_equal(out, cases[i].out);
        assert_int_equal(n, strlen(cases[i].out));
        assert_false(cut);
    }
}

static void
test_escape_never_cuts_inside_an_escape(void **state)
{
    char out[8];
    bool cut = false;
    size_t n;

    (void)state;
    /* "ab" + \u0001 needs 8 bytes: only "ab" fits with the NUL. */
    n = tally_log_escape(out, sizeof(out), "ab\x01z", 4, &cut);
    assert_true(cut);
    assert_string_equal(out, "ab");
    assert_int_equal(n, 2);
    n = tally_log_escape(out, sizeof(out), "abcd\"ef", 7, &cut);
    assert_true(cut);
    assert_string_equal(out, "abcd\\\"e");
    assert_int_equal(n, 7);
}

static void
test_line_shape(void **state)
{
    struct tally_log l;
    const char *line;

    (void)state;
    /* 2026-11-29T17:40:01.123Z */
    tally_log_begin_at(&l, TALLY_LOG_WARN, "supervisor_exit", 1795974001123LL);
    tally_log_str(&l, "tenant", "acme");
    tally_log_int(&l, "status", -9);
    tally_log_bool(&l, "restart", true);
    tally_log_str(&l, "detail", "say \"hi\"\n");
    tally_log_str(&l, "none", NULL);
    line = tally_log_finish(&l);
    assert_string_equal(line, "{\"ts\":\"2026-11-29T17:40:01.123Z\",\"level\":\"warn\","
                              "\"event\":\"supervisor_exit\",\"tenant\":\"acme\",\"status\":-9,"
                              "\"restart\":true,\"detail\":\"say \\\"hi\\\"\\n\",\"none\":null}\n");
}

static void
test_time_format(void **state)
{
    char ts[40];

    (void)state;
    tally_log_time(ts, sizeof(ts), 0);
    assert_string_equal(ts, "1970-01-01T00:00:00.000Z");
    tally_log_time(ts, sizeof(ts), 951782400007LL); /* a leap day */
    assert_string_equal(ts, "2000-02-29T00:00:00.007Z");
}

static void
test_long_field_is_dropped_whole(void **state)
{
    struct tally_log l;
    char big[TALLY_LOG_LINE_MAX];
    const char *line;

    (void)state;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    tally_log_begin_at(&l, TALLY_LOG_INFO, "start", 0);
    tally_log_str(&l, "a", "kept");
    tally_log_str(&l, "big", big);
    tally_log_int(&l, "after", 7);
    line = tally_log_finish(&l);
    assert_true(strlen(line) < TALLY_LOG_LINE_MAX);
    assert_non_null(strstr(line, "\"a\":\"kept\""));
    assert_null(strstr(line, "\"big\""));
    assert_non_null(strstr(line, "\"after\":7,\"truncated\":true}\n"));
}

static void
test_levels_and_fd(void **state)
{
    struct tally_log l;
    enum tally_log_level lv;
    char buf[4096];
    int fds[2];
    ssize_t n;

    (void)state;
    assert_int_equal(tally_log_level_parse("warn", &lv), TALLY_OK);
    assert_int_equal(lv, TALLY_LOG_WARN);
    assert_int_equal(tally_log_level_parse("debug", &lv), TALLY_OK);
    assert_int_equal(tally_log_level_parse("verbose", &lv), TALLY_EINVAL);
    assert_int_equal(tally_log_level_parse("", &lv), TALLY_EINVAL);
    assert_int_equal(pipe(fds), 0);
    tally_log_set_fd(fds[1]);
    tally_log_set_level(TALLY_LOG_WARN);
    assert_false(tally_log_begin(&l, TALLY_LOG_INFO, "reload")); /* filtered */
    assert_true(tally_log_begin(&l, TALLY_LOG_ERROR, "reload_failed"));
    tally_log_str(&l, "error", "storage busy");
    tally_log_end(&l);
    tally_log_set_level(TALLY_LOG_INFO);
    assert_true(tally_log_begin(&l, TALLY_LOG_INFO, "reload"));
    tally_log_end(&l);
    tally_log_set_fd(2);
    close(fds[1]);
    n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    /* exactly two whole lines, in order, the filtered one absent */
    assert_memory_equal(buf, "{\"ts\":\"", 7);
    assert_non_null(strstr(buf, "\"level\":\"error\",\"event\":\"reload_failed\","
                                "\"error\":\"storage busy\"}\n{\"ts\":\""));
    assert_non_null(strstr(buf, "\"level\":\"info\",\"event\":\"reload\"}\n"));
    assert_int_equal(buf[n - 1], '\n');
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_table),
        cmocka_unit_test(test_escape_never_cuts_inside_an_escape),
        cmocka_unit_test(test_line_shape),
        cmocka_unit_test(test_time_format),
        cmocka_unit_test(test_long_field_is_dropped_whole),
        cmocka_unit_test(test_levels_and_fd),
    };

    return cmocka_run_group_tests_name("serve_log", tests, NULL, NULL);
}

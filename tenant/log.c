/*
 * Structured JSON log lines (tally_log.h). A line lives in a fixed buffer; a
 * field that does not fit is dropped whole (the line stays valid JSON and says
 * "truncated":true), and the finished line goes out with one write(2) so that
 * tallyd and its supervisors, sharing one stderr, never interleave inside a
 * line.
 */
#include "tally_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tally_common.h"

/* Room kept for ,"truncated":true}\n and the NUL. */
#define TAIL_RESERVE 24

static enum tally_log_level log_level = TALLY_LOG_INFO;
static int log_fd = 2;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void
tally_log_set_level(enum tally_log_level level)
{
    log_level = level;
}

enum tally_log_level
tally_log_get_level(void)
{
    return log_level;
}

void
tally_log_set_fd(int fd)
{
    log_fd = fd;
}

int
tally_log_level_parse(const char *s, enum tally_log_level *out)
{
    size_t i;

    for (i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (s != NULL && strcmp(s, level_names[i]) == 0) {
            *out = (enum tally_log_level)i;
            return TALLY_OK;
        }
    }
    return TALLY_EINVAL;
}

const char *
tally_log_level_name(enum tally_log_level level)
{
    return (unsigned)level < 4 ? level_names[level] : "info";
}

void
tally_log_time(char *out, size_t cap, int64_t wall_ms)
{
    time_t secs = (time_t)(wall_ms / 1000);
    struct tm tm;
    size_t n;

    if (wall_ms < 0)
        secs = 0;
    gmtime_r(&secs, &tm);
    n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03dZ", (int)(wall_ms < 0 ? 0 : wall_ms % 1000));
}

size_t
tally_log_escape(char *out, size_t cap, const char *s, size_t len, bool *cut)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    size_t i;

    *cut = false;
    if (cap == 0)
        return 0;
    for (i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[7];
        size_t n = 0;

        if (ch == '"' || ch == '\\') {
            esc[n++] = '\\';
            esc[n++] = (char)ch;
        } else if (ch == '\n') {
            esc[n++] = '\\';
            esc[n++] = 'n';
        } else if (ch == '\r') {
            esc[n++] = '\\';
            esc[n++] = 'r';
        } else if (ch == '\t') {
            esc[n++] = '\\';
            esc[n++] = 't';
        } else if (ch < 0x20 || ch == 0x7f) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[ch >> 4];
            esc[5] = hex[ch & 15];
            n = 6;
        } else {
            esc[n++] = (char)ch;
        }
        if (o + n >= cap) {
            *cut = true;
            break;
        }
        memcpy(out + o, esc, n);
        o += n;
    }
    out[o] = '\0';
    return o;
}

void
tally_log_begin_at(struct tally_log *l, enum tally_log_level level, const char *event,
                   int64_t wall_ms)
{
    char ts[40];
    int n;

    /* `l` is the caller's uninitialized stack: every field is written here first. */
    l->len = 0;
    l->truncated = false;
    l->buf[0] = '\0';
    tally_log_time(ts, sizeof(ts), wall_ms);
    n = snprintf(l->buf, sizeof(l->buf), "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":\"%s\"", ts,
                 tally_log_level_name(level), event);
    l->len = n > 0 && (size_t)n < sizeof(l->buf) - TAIL_RESERVE ? (size_t)n : 0;
}

bool
tally_log_begin(struct tally_log *l, enum tally_log_level level, const char *event)
{
    struct timespec ts;

    if (level < log_level)
        return false;
    clock_gettime(CLOCK_REALTIME, &ts);
    tally_log_begin_at(l, level, event, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    return true;
}

/* Appends `,"key":` then the raw value `v` (already JSON) if the whole field fits. */
static void
append_field(struct tally_log *l, const char *key, const char *v, size_t vlen)
{
    size_t klen = strlen(key);
    size_t need = 4 + klen + vlen; /* , " key " : value */

    if (l->len == 0 || l->len + need >= sizeof(l->buf) - TAIL_RESERVE) {
        l->truncated = true;
        return;
    }
    l->buf[l->len++] = ',';
    l->buf[l->len++] = '"';
    memcpy(l->buf + l->len, key, klen);
    l->len += klen;
    l->buf[l->len++] = '"';
    l->buf[l->len++] = ':';
    memcpy(l->buf + l->len, v, vlen);
    l->len += vlen;
    l->buf[l->len] = '\0';
}

void
tally_log_str(struct tally_log *l, const char *key, const char *value)
{
    char v[TALLY_LOG_LINE_MAX];
    bool cut = false;
    size_t n;

    if (value == NULL) {
        append_field(l, key, "null", 4);
        return;
    }
    v[0] = '"';
    n = tally_log_escape(v + 1, sizeof(v) - 2, value, strlen(value), &cut);
    v[n + 1] = '"';
    if (cut)
        l->truncated = true;
    append_field(l, key, v, n + 2);
}

void
tally_log_int(struct tally_log *l, const char *key, int64_t value)
{
    char v[32];
    int n = snprintf(v, sizeof(v), "%lld", (long long)value);

    append_field(l, key, v, (size_t)n);
}

void
tally_log_bool(struct tally_log *l, const char *key, bool value)
{
    append_field(l, key, value ? "true" : "false", value ? 4 : 5);
}

const char *
tally_log_finish(struct tally_log *l)
{
    int n;

    if (l->len == 0) { /* the head itself did not fit: cannot happen with constant events */
        snprintf(l->buf, sizeof(l->buf), "{\"truncated\":true}\n");
        l->len = strlen(l->buf);
        return l->buf;
    }
    n = snprintf(l->buf + l->len, sizeof(l->buf) - l->len, "%s}\n",
                 l->truncated ? ",\"truncated\":true" : "");
    l->len += (size_t)n;
    return l->buf;
}

const char *
tally_log_end(struct tally_log *l)
{
    const char *line = tally_log_finish(l);
    size_t off = 0;

    while (off < l->len) {
        ssize_t w = write(log_fd, line + off, l->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* nowhere to log to: never fail the caller for it */
        off += (size_t)w;
    }
    return line;
}

int
tally_fail(const char *prog, int code, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", prog, line);
    return code;
}

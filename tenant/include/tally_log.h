/*
 * tally_log: one structured JSON line per event worth a line (a daemon start, a
 * reload, a supervisor that exits, an endpoint that enters degraded mode),
 * never one per request. A line is built into a fixed buffer on the stack and
 * written with one write(2), so lines of concurrent processes sharing stderr
 * never interleave:
 *
 *     struct tally_log l;
 *     if (tally_log_begin(&l, TALLY_LOG_INFO, "supervisor_exit")) {
 *         tally_log_str(&l, "tenant", tenant);
 *         tally_log_int(&l, "status", status);
 *         tally_log_end(&l);
 *     }
 *
 * gives {"ts":"2026-11-29T17:40:01.123Z","level":"info","event":"supervisor_exit",
 * "tenant":"acme","status":0}. `ts` is RFC 3339 UTC with milliseconds. Strings are
 * JSON-escaped; a line longer than TALLY_LOG_LINE_MAX is cut at a field boundary and
 * marked "truncated":true. Never pass a token: log the link id, or at most the
 * first 8 hex digits of its keyed hash.
 *
 * Header-wide rules: strings are borrowed for the call; no allocation. The level
 * and the output descriptor are process-wide, set once at start (not thread-safe
 * to change); writing a line is safe from any thread.
 */
#ifndef TALLY_LOG_H
#define TALLY_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TALLY_LOG_LINE_MAX 2048

enum tally_log_level {
    TALLY_LOG_DEBUG = 0,
    TALLY_LOG_INFO = 1,
    TALLY_LOG_WARN = 2,
    TALLY_LOG_ERROR = 3,
};

/** A line being built: caller-allocated (the stack), filled by the calls below. */
struct tally_log {
    char buf[TALLY_LOG_LINE_MAX];
    size_t len;
    bool truncated;
};

/** Lines below `level` are dropped (default TALLY_LOG_INFO). */
void tally_log_set_level(enum tally_log_level level);
enum tally_log_level tally_log_get_level(void);
/** Where lines go (default 2, stderr). */
void tally_log_set_fd(int fd);
/** "debug", "info", "warn", "error" into *out. TALLY_OK or TALLY_EINVAL. */
int tally_log_level_parse(const char *s, enum tally_log_level *out /* OUT */);
const char *tally_log_level_name(enum tally_log_level level);

/** Starts a line at the current time; false (and nothing to do) when `level` is
 *  filtered out. `event` is a constant identifier (not escaped). */
bool tally_log_begin(struct tally_log *l, enum tally_log_level level, const char *event);
/** Like tally_log_begin with an explicit time (tests): wall clock in ms since the epoch. */
void tally_log_begin_at(struct tally_log *l, enum tally_log_level level, const char *event,
                        int64_t wall_ms);
/** Appends "key":"value" (value escaped; NULL is written as null). */
void tally_log_str(struct tally_log *l, const char *key, const char *value);
void tally_log_int(struct tally_log *l, const char *key, int64_t value);
void tally_log_bool(struct tally_log *l, const char *key, bool value);
/** Closes the line ("}\n") and writes it; returns the line (valid until l is reused). */
const char *tally_log_end(struct tally_log *l);
/** Closes the line without writing it (tests). */
const char *tally_log_finish(struct tally_log *l);

/** JSON string escaping of s[0..len) into out (cap bytes, NUL-terminated, never cut
 *  inside an escape). Returns the length written; *cut set when out was too small. */
/** Prints "PROG: MESSAGE" as one plain line on stderr (usage and start-up errors, for a
 *  person, not the JSON log) and returns code. */
int tally_fail(const char *prog, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
size_t tally_log_escape(char *out, size_t cap, const char *s, size_t len, bool *cut /* OUT */);
/** RFC 3339 UTC with milliseconds ("2026-11-29T17:40:01.123Z") into out (>= 25 bytes). */
void tally_log_time(char *out, size_t cap, int64_t wall_ms);

#endif /* TALLY_LOG_H */

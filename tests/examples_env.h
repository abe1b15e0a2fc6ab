/*
 * What the example suites share: a data dir with one tenant on a plan with a
 * small limit and one link, the real tallyd serving it (its HTTP port read from
 * its start log line), example templates filled in, the real third-party
 * servers (nginx, caddy) run as children and always stopped, and curl run as a
 * client would run it.
 *
 * Header-wide rules: functions fail the running cmocka test on error, so call
 * them from tests (or their setup) only. Children are recorded in the env and
 * stopped by examples_env_release(), even after a failed assertion.
 */
#ifndef EXAMPLES_ENV_H
#define EXAMPLES_ENV_H

#include <stdbool.h>
#include <sys/types.h>

#include "test_daemon.h"

#define EXAMPLES_CHILDREN_MAX 4

struct examples_env {
    char root[256]; /* temp dir, removed by release */
    char data[300]; /* tallyd's data dir */
    char token[64]; /* a live link of tenant "acme" */
    int http_port;  /* tallyd's HTTP port */
    int limit;      /* plan limit per 365 days */
    struct test_daemon d;
    pid_t children[EXAMPLES_CHILDREN_MAX];
    char logs[EXAMPLES_CHILDREN_MAX][320];
    int n_children;
};

/** What curl saw. */
struct examples_answer {
    int status;
    char retry_after[32]; /* "" when absent */
    char ratelimit[128];  /* the RateLimit field, "" when absent */
    char body[512];
};

/** Makes a data dir with plan "small" (`limit` per 365 days), endpoint "api",
 *  tenant "acme" and one link, then starts tallyd on it (HTTP on 127.0.0.1:0). */
void examples_env_init(struct examples_env *e, int limit);
/** Stops every child (SIGTERM, then SIGKILL after 5 s), stops tallyd, removes root. */
void examples_env_release(struct examples_env *e);

/** Copies template `src` to `dst`, replacing each "@KEY@" of the NULL-terminated
 *  (key, value) pairs; fails the test if a placeholder is left. */
void examples_fill_template(const char *src, const char *dst, ...);
/** Starts argv (NULL-terminated) with `envp` (NULL: inherit) as a child whose
 *  stdout and stderr go to root/<name>.log; recorded for release. */
pid_t examples_spawn(struct examples_env *e, const char *name, char *const argv[],
                     char *const envp[]);
/** Waits until 127.0.0.1:port accepts, or fails the test (printing the child logs). */
void examples_wait_port(struct examples_env *e, int port, int timeout_ms);
/** GET http://127.0.0.1:port/path with curl, `token` as the bearer ("" sends none). */
void examples_curl(int port, const char *path, const char *token, struct examples_answer *out);
/** examples_curl() from source address `from` (a loopback address such as 127.0.0.2;
 *  NULL: the default) with one more request header `header` ("Name: value"; NULL: none). */
void examples_curl_from(int port, const char *path, const char *token, const char *from,
                        const char *header, struct examples_answer *out);
/** Prints the logs of every child and of tallyd on stderr (on failure). */
void examples_dump_logs(const struct examples_env *e);

#endif /* EXAMPLES_ENV_H */

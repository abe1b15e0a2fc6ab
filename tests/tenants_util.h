/*
 * What the many-tenant suites share (test_e2e_tenants.c, test_e2e_newcomers.c): a data dir
 * with tenants and endpoints made in bulk through the store, a small HTTP client usable
 * from any thread (no cmocka inside), tallyd's descriptors and metrics.
 */
#ifndef TENANTS_UTIL_H
#define TENANTS_UTIL_H

#include <stdint.h>
#include <sys/types.h>

#include "serve_util.h"

#define TOKEN_BUF 64

struct env {
    struct serve_env s;
    char token[TOKEN_BUF];
};

/* cmocka fixtures: a data dir with plan, endpoints and one tenant (e->token). */
int setup(void **state);
int teardown(void **state);
/* n tenants PREFIX0.. on the plan, one link each (tokens[i]), in one transaction. */
void add_tenants(const char *data, const char *prefix, int n, char (*tokens)[TOKEN_BUF]);
/* n endpoints PREFIX000.. with the policy of endpoint `like`. */
void add_endpoints(const char *data, const char *like, const char *prefix, int n);
int64_t now_us(void);
/* One /v1/check: sent (the connection's fd), read (the HTTP status, or -1), or both. */
int check_send(int port, const char *token, const char *endpoint);
int check_read(int fd);
int check(int port, const char *token, const char *endpoint);
/* pid's open descriptors; *matching: those whose target contains needle. */
int fd_count(pid_t pid, const char *needle, int *matching);
double metric(const struct env *e, const char *series);

#endif /* TENANTS_UTIL_H */

/*
 * What the suites of the members' ledger copies share (test_cluster_ledger.c,
 * test_cluster_ledger_snap.c): two data dirs made per test, a node with nothing but its data
 * dir, LEDGER records made and applied as the log hands them over, and the copies read back
 * as a supervisor reads its journal. Functions fail the running cmocka test.
 */
#ifndef CLUSTER_LEDGER_UTIL_H
#define CLUSTER_LEDGER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node_ledger_int.h"
#include "store_record.h"

#define RECS_MAX 600 /* records a tenant of the model holds at most */

struct rec {
    size_t len;
    uint8_t b[STORE_RECORD_MAX];
};

struct recs_list {
    size_t n;
    struct rec r[RECS_MAX];
};

extern char dir[128], dir2[128]; /* this test's two data dirs */
extern uint64_t seed;            /* the suite's seed (TALLY_SEED replays a run) */

int group_setup(void **state);
int setup(void **state);
int teardown(void **state);
cluster_node *node_new(const char *data);
void node_free(cluster_node *n);
size_t ledger(uint8_t *out, char op, const char *tenant, const struct rec *r, size_t n);
void apply(cluster_node *n, uint64_t count, char op, const char *tenant, const struct rec *r,
           size_t nr);
struct rec text(const char *s);
void ledger_path(const char *data, const char *tenant, char *path, size_t cap);
int collect(void *ctx, const uint8_t *rec, size_t len);
void read_copy(const char *data, const char *tenant, struct recs_list *journal,
               struct recs_list *staged, bool *known, uint64_t *at);
void assert_recs(const struct recs_list *got, const struct rec *want, size_t n);
struct recs_list *list_new(void);
bool exists(const char *data, const char *tenant);
int enc_list(void *ctx, size_t i, uint8_t *buf, size_t cap, size_t *len);

#endif /* CLUSTER_LEDGER_UTIL_H */

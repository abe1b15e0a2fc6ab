/*
 * Change commands in a cluster data dir (the verbs of is_change() in tally_main.c). Their
 * transaction runs against tally.db as on a single host, checks included, but is captured
 * instead of committed (store_config_capture): at its commit the changeset goes to the
 * leader as this host (ADMIN CONFIG over the cluster port, as `tally cluster leave` asks),
 * which answers with the record's index once a majority has it. The command then waits
 * until this host's tally.db holds the record (its tallyd applies it) and asks every other
 * member to confirm the same, and returns. A leader nobody can reach changes nothing: the
 * command says so and exits 3. tally.db of a cluster member never changes but by the log.
 */
#include "cluster_node.h"
#include "proto_client.h"
#include "proto_cluster.h"
#include "tally.h"
#include "tally_cli.h"

#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#define ADMIN_TIMEOUT_MS 10000 /* the leader's answer: committed, or its majority lost */
#define APPLY_WAIT_MS    5000  /* this host's tallyd applies the record */
#define CONFIRM_MS       3000  /* every other member, all together */
#define POLL_MS          20

/* The failure of the last change sent (one command per process). */
static struct {
    const char *data;
    int code;
    char why[400];
} run;

static int fail(int rc, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int
fail(int rc, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(run.why, sizeof(run.why), fmt, ap);
    va_end(ap);
    run.code = code;
    return rc;
}

const char *
cli_cluster_why(int *code)
{
    *code = run.code;
    return run.why[0] != '\0' ? run.why : NULL;
}

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The leader this host's tallyd knows (0: none, or no tallyd). */
static uint64_t
leader_hint(void)
{
    uint8_t msg[PROTO_CLIENT_MSG_MAX];
    char path[STORE_PATH_MAX];
    tally_client *client = NULL;
    struct proto_cluster_status s;
    struct proto_frame f;
    uint32_t id;
    int rc;

    snprintf(path, sizeof(path), "%s/tally.sock", run.data);
    if (tally_client_open(path, 2000, &client) != TALLY_OK)
        return 0;
    id = proto_client_next_id(client);
    rc = proto_client_request(client, msg, proto_cluster_encode(msg, id), id, &f);
    if (rc == TALLY_OK && proto_cluster_reply_decode(&f, &s) != TALLY_OK)
        rc = TALLY_EPROTO;
    tally_client_close(client);
    return rc == TALLY_OK && s.in_cluster ? s.leader : 0;
}

static bool
tallyd_runs(void)
{
    char path[STORE_PATH_MAX];
    tally_client *client = NULL;

    snprintf(path, sizeof(path), "%s/tally.sock", run.data);
    if (tally_client_open(path, 2000, &client) != TALLY_OK)
        return false;
    tally_client_close(client);
    return true;
}

#define LEADER_WAIT_MS 5000 /* a leader elected meanwhile is found */

/* To the leader: the one this host's tallyd names first, then every member in turn (one that
 * does not lead says so). *index once committed. */
static int
send_to_leader(const struct cluster_state *st, const struct cluster_hostkey *key,
               const uint8_t *changes, size_t len, uint64_t *index)
{
    const struct cluster_member *order[CLUSTER_MEMBERS_MAX + 1];
    uint64_t hint = leader_hint();
    char message[256];
    size_t n = 0;

    if (cluster_state_member(st, hint) != NULL)
        order[n++] = cluster_state_member(st, hint);
    for (size_t i = 0; i < st->n; i++)
        if (st->members[i].id != hint)
            order[n++] = &st->members[i];
    /* An election takes about one election timeout: every member is asked again for a few
     * seconds before the cluster is said to have no leader. */
    for (int64_t until = cli_now_ms() + LEADER_WAIT_MS;;) {
        for (size_t i = 0; i < n; i++) {
            int rc = cluster_admin_config(order[i], key, changes, len, ADMIN_TIMEOUT_MS, index,
                                          message, sizeof(message));
            if (rc == TALLY_OK)
                return TALLY_OK;
            if (rc == TALLY_EUNAUTH)
                return fail(rc, EXIT_FAIL, "refused by the leader at %s: %s; nothing changed",
                            order[i]->address, message);
            if (rc == TALLY_EUNAVAIL && message[0] != '\0') /* it took it, or cannot now */
                return fail(rc, EXIT_UNAVAIL, "the leader at %s: %s", order[i]->address, message);
            if (rc == TALLY_ENOMEM || rc == TALLY_ETOOBIG)
                return fail(rc, EXIT_IOERR, "cannot send the change: %s", tally_strerror(rc));
            /* not the leader, or no answer there: the next member */
        }
        if (cli_now_ms() >= until)
            break;
        {
            struct timespec ts = {0, 250 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return fail(TALLY_EUNAVAIL, EXIT_UNAVAIL,
                "no leader reachable (%zu members asked): a change needs a majority of the "
                "cluster's voters; nothing changed",
                n);
}

/* This host's tally.db holds record `index` (its tallyd applied it). */
static void
wait_here(store_db *db, uint64_t index)
{
    int64_t until = mono_ms() + APPLY_WAIT_MS;
    uint64_t applied = 0;

    if (!tallyd_runs()) {
        fprintf(stderr,
                "tally: committed as change %llu; this host's tallyd is not running: it applies "
                "the change when it starts\n",
                (unsigned long long)index);
        return;
    }
    while (store_config_applied(db, &applied) == TALLY_OK && applied < index && mono_ms() < until)
        nanosleep(&(struct timespec){0, POLL_MS * 1000000L}, NULL);
    if (applied < index)
        fprintf(stderr,
                "tally: warning: committed as change %llu, but this host's tallyd has not "
                "applied it within %d s (see its log)\n",
                (unsigned long long)index, APPLY_WAIT_MS / 1000);
}

/* Every other member confirms it holds record `index`; the ones that do not are named. */
static void
confirm_members(const struct cluster_state *st, const struct cluster_hostkey *key, uint64_t index)
{
    int64_t until = mono_ms() + CONFIRM_MS;

    for (size_t i = 0; i < st->n; i++) {
        const struct cluster_member *m = &st->members[i];
        int64_t left = until - mono_ms();

        if (m->id == st->self)
            continue;
        if (left > 0 && cluster_admin_config_wait(m, key, index, (uint32_t)left) == TALLY_OK)
            continue;
        fprintf(stderr,
                "tally: member %llu (%s) has not confirmed change %llu: it applies it once it "
                "is back and has caught up\n",
                (unsigned long long)m->id, m->address, (unsigned long long)index);
    }
}

/* store_config_commit_fn: the change through the log, in force here and on the members that
 * answer before this returns. */
static int
send_change(void *ctx, store_db *db, const uint8_t *changes, size_t len)
{
    struct cluster_hostkey key;
    struct cluster_state st;
    uint64_t index = 0;
    int rc;

    (void)ctx;
    if (len > CLUSTER_CONFIG_MAX)
        return fail(TALLY_ETOOBIG, EXIT_FAIL,
                    "the change is %zu bytes, more than the %u (about 512 KiB) one change of a "
                    "cluster may have: make it in smaller steps; nothing changed",
                    len, (unsigned)CLUSTER_CONFIG_MAX);
    rc = cluster_state_load(run.data, &key, &st);
    if (rc != TALLY_OK)
        return fail(rc, EXIT_CONFIG, "cannot read the cluster files of %s: %s; nothing changed",
                    run.data, tally_strerror(rc));
    /* The cluster port is TCP: a peer that closes first is an error to report. A member that
     * is down is said once below, not in the channel's info lines as tallyd logs it. */
    signal(SIGPIPE, SIG_IGN);
    tally_log_set_level(TALLY_LOG_WARN);
    rc = send_to_leader(&st, &key, changes, len, &index);
    if (rc == TALLY_OK) {
        wait_here(db, index);
        confirm_members(&st, &key, index);
    }
    cluster_hostkey_wipe(&key);
    return rc;
}

int
cli_cluster_capture(const struct cli *c, store_db *db)
{
    int rc;

    if (!cluster_state_exists(c->data))
        return EXIT_OK;
    run.data = c->data;
    rc = store_config_capture(db, send_change, NULL);
    return rc == TALLY_OK ? EXIT_OK : cli_fail(EXIT_IOERR, "%s", tally_strerror(rc));
}

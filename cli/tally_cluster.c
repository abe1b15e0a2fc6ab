/*
 * `tally cluster init --listen HOST:PORT` and `tally cluster status`: making
 * this data dir the first member of a new cluster (its host key, its member
 * list, the replicated log's first configuration; cluster/state.c and
 * cluster/log.c), and asking the running tallyd how it sees its cluster
 * (CLUSTER over its Unix socket, proto/PROTOCOL.md).
 */
#include "cluster_node.h"
#include "proto_client.h"
#include "proto_cluster.h"
#include "tally.h"
#include "tally_cli.h"
#include "tenant_config.h"

#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STATUS_TIMEOUT_MS 5000

static const char cluster_usage[] =
    "usage: tally cluster init --listen HOST:PORT\n"
    "       tally cluster invite [--ttl DURATION]\n"
    "       tally cluster join CODE --listen HOST:PORT [--role voter|front]\n"
    "       tally cluster status [--socket PATH]\n"
    "       tally cluster leave [MEMBER] [--socket PATH]";

#define JOIN_TIMEOUT_MS 10000

/* An address other hosts can dial: a port, and not the unspecified address. */
static int
check_listen(const char *v)
{
    struct sockaddr_storage ss;

    if (cluster_addr_parse(v, &ss) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "invalid --listen '%s': use HOST:PORT (IPv4, or [IPv6]:PORT)",
                        v);
    if (strncmp(v, "0.0.0.0:", 8) == 0 || strncmp(v, "[::]:", 5) == 0)
        return cli_fail(EXIT_USAGE,
                        "--listen %s: give the address other hosts reach this one at, not a "
                        "wildcard",
                        v);
    return EXIT_OK;
}

static int
cluster_init(struct cli *c)
{
    const char *listen = NULL;
    struct cluster_hostkey key;
    struct cluster_state st;
    char raft[512], path[512], fp[2 * CLUSTER_KEY_BYTES + 1];
    int rc, code;

    for (int i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--listen", &missing);
        if (v != NULL)
            listen = v;
        else
            return cli_fail(EXIT_USAGE, "%s", missing ? "--listen needs a value" : cluster_usage);
    }
    if (listen == NULL)
        return cli_fail(EXIT_USAGE, "%s", cluster_usage);
    code = check_listen(listen);
    if (code != EXIT_OK)
        return code;
    if (store_datadir_check(c->data) != TALLY_OK)
        return cli_fail(EXIT_CONFIG,
                        "data directory %s is not initialised: run 'tally init --data %s'", c->data,
                        c->data);
    if (cluster_state_exists(c->data))
        return cli_fail(EXIT_FAIL, "%s is in a cluster already (tally cluster status)", c->data);
    memset(&st, 0, sizeof(st));
    cluster_hostkey_generate(&key);
    st.self = 1;
    st.n = 1;
    st.members[0].id = 1;
    snprintf(st.members[0].address, sizeof(st.members[0].address), "%s", listen);
    memcpy(st.members[0].pk, key.pk, CLUSTER_KEY_BYTES);
    st.roles[0] = CLUSTER_ROLE_VOTER;
    rc = cluster_state_create(c->data, &key, &st);
    if (rc == TALLY_OK && cluster_path(c->data, "raft", raft, sizeof(raft)) == TALLY_OK)
        rc = cluster_log_bootstrap(raft, &key, &st.members[0]);
    cluster_hostkey_wipe(&key);
    if (rc != TALLY_OK) {
        /* Not in a cluster after all: the member list goes (its presence is the flag). */
        if (cluster_path(c->data, "members", path, sizeof(path)) == TALLY_OK)
            unlink(path);
        return cli_fail(EXIT_IOERR, "cannot create the cluster in %s: %s", c->data,
                        tally_strerror(rc));
    }
    cluster_key_hex(st.members[0].pk, fp);
    fp[16] = '\0';
    printf("cluster created: member 1 at %s, key %s\n"
           "tallyd serves it on %s (a running tallyd within a second)\n",
           listen, fp, listen);
    return EXIT_OK;
}

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
cluster_invite(struct cli *c)
{
    struct cluster_hostkey key;
    struct cluster_state st;
    struct cluster_invite inv;
    const struct cluster_member *self;
    int64_t ttl_ms = 3600 * 1000;
    char code[256];
    int rc;

    for (int i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--ttl", &missing);
        if (v == NULL)
            return cli_fail(EXIT_USAGE, "%s", missing ? "--ttl needs a value" : cluster_usage);
        if (tenant_duration_parse(v, &ttl_ms) != TALLY_OK || ttl_ms < 1000 ||
            ttl_ms > 7LL * 24 * 3600 * 1000)
            return cli_fail(EXIT_USAGE, "invalid --ttl '%s': 1s to 7d (90s, 15m, 12h)", v);
    }
    rc = cluster_state_load(c->data, &key, &st);
    cluster_hostkey_wipe(&key);
    if (rc == TALLY_ENOTFOUND)
        return cli_fail(EXIT_FAIL, "%s is not in a cluster (tally cluster init)", c->data);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_CONFIG, "cannot read the cluster files of %s: %s", c->data,
                        tally_strerror(rc));
    self = cluster_state_member(&st, st.self);
    memset(&inv, 0, sizeof(inv));
    snprintf(inv.address, sizeof(inv.address), "%s", self->address);
    memcpy(inv.pk, self->pk, CLUSTER_KEY_BYTES);
    randombytes_buf(inv.secret, sizeof(inv.secret));
    rc = cluster_invite_add(c->data, inv.secret, now_ms(), now_ms() + ttl_ms);
    if (rc == TALLY_OK)
        cluster_invite_code(&inv, code, sizeof(code));
    sodium_memzero(&inv, sizeof(inv));
    if (rc != TALLY_OK)
        return cli_fail(EXIT_IOERR, "cannot write the invite: %s", tally_strerror(rc));
    printf("%s\n", code);
    fprintf(stderr,
            "tally: one host may join with this code within %lld s: "
            "tally cluster join CODE --listen HOST:PORT (while this host leads)\n",
            (long long)(ttl_ms / 1000));
    sodium_memzero(code, sizeof(code));
    return EXIT_OK;
}

static int
cluster_join_cmd(struct cli *c)
{
    const char *code = NULL, *listen = NULL;
    enum cluster_role role = CLUSTER_ROLE_VOTER;
    struct cluster_invite inv;
    struct cluster_hostkey key;
    struct cluster_join_result *res;
    int rc, exit_code;

    for (int i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v;

        if ((v = tenant_opt_value(c->argc, c->argv, &i, "--listen", &missing)) != NULL) {
            listen = v;
        } else if (!missing &&
                   (v = tenant_opt_value(c->argc, c->argv, &i, "--role", &missing)) != NULL) {
            if (cluster_role_parse(v, &role) != TALLY_OK)
                return cli_fail(EXIT_USAGE, "invalid --role '%s': voter or front", v);
        } else if (!missing && c->argv[i][0] != '-' && code == NULL) {
            code = c->argv[i];
        } else {
            return cli_fail(EXIT_USAGE, "%s", missing ? "an option needs a value" : cluster_usage);
        }
    }
    if (code == NULL || listen == NULL)
        return cli_fail(EXIT_USAGE, "%s", cluster_usage);
    if (cluster_invite_parse(code, &inv) != TALLY_OK)
        return cli_fail(EXIT_USAGE, "invalid join code: copy it whole from `tally cluster invite`");
    exit_code = check_listen(listen);
    if (exit_code != EXIT_OK)
        return exit_code;
    if (store_datadir_check(c->data) == TALLY_OK || cluster_state_exists(c->data))
        return cli_fail(EXIT_FAIL, "%s is initialised already: a host joins with an empty data dir",
                        c->data);
    res = calloc(1, sizeof(*res));
    if (res == NULL)
        return cli_fail(EXIT_IOERR, "out of memory");
    cluster_hostkey_generate(&key);
    rc = cluster_join(&inv, &key, listen, role, JOIN_TIMEOUT_MS, res);
    sodium_memzero(&inv, sizeof(inv));
    if (rc == TALLY_EUNAUTH)
        exit_code = cli_fail(EXIT_FAIL, "join refused: %s",
                             res->message[0] != '\0' ? res->message : "the key was not let in");
    else if (rc != TALLY_OK)
        exit_code = cli_fail(EXIT_UNAVAIL, "no answer to the join: %s", tally_strerror(rc));
    else if ((rc = store_datadir_init_key(c->data, res->deployment_key)) != TALLY_OK ||
             (rc = store_config_install(c->data, res->config, res->config_len,
                                        res->config_index)) != TALLY_OK ||
             (rc = cluster_state_create(c->data, &key, &res->st)) != TALLY_OK)
        exit_code = cli_fail(EXIT_IOERR,
                             "joined as member %llu, but cannot write %s: %s (tally cluster leave "
                             "%llu on a member, then join again)",
                             (unsigned long long)res->id, c->data, tally_strerror(rc),
                             (unsigned long long)res->id);
    else {
        printf("joined the cluster as member %llu (%s), %zu members\n"
               "configuration copied from the leader (%zu KiB, change %llu)\n"
               "start tallyd to serve it on %s\n",
               (unsigned long long)res->id, cluster_role_name(role), res->st.n,
               res->config_len / 1024, (unsigned long long)res->config_index, listen);
        exit_code = EXIT_OK;
    }
    cluster_hostkey_wipe(&key);
    cluster_join_result_release(res);
    sodium_memzero(res, sizeof(*res));
    free(res);
    return exit_code;
}

static const char *
log_role(uint8_t r)
{
    static const char *const names[] = {"voter", "standby", "spare", "-"};

    return names[r < 4 ? r : 3];
}

static void
print_status(const struct proto_cluster_status *s)
{
    printf("member %llu (this host)  leader %s%llu  term %llu\n", (unsigned long long)s->self,
           s->leader == 0 ? "none " : "", (unsigned long long)s->leader,
           (unsigned long long)s->term);
    printf("log    commit %llu  applied %llu  last %llu\n", (unsigned long long)s->commit_index,
           (unsigned long long)s->applied_index, (unsigned long long)s->last_index);
    printf("%-4s %-24s %-6s %-8s %-17s %-10s %s\n", "id", "address", "role", "in log", "key",
           "clock", "replicated");
    for (unsigned i = 0; i < s->n; i++) {
        const struct proto_cluster_member *m = &s->m[i];
        char fp[2 * CLUSTER_KEY_BYTES + 1], rep[64], clock[24];

        cluster_key_hex(m->pk, fp);
        fp[16] = '\0';
        if (m->progress_known)
            snprintf(rep, sizeof(rep), "%llu (lag %llu)", (unsigned long long)m->match_index,
                     (unsigned long long)(s->last_index > m->match_index
                                              ? s->last_index - m->match_index
                                              : 0));
        else
            snprintf(rep, sizeof(rep), "-");
        if (m->clock_known)
            snprintf(clock, sizeof(clock), "%+lld ms", (long long)m->clock_skew_ms);
        else
            snprintf(clock, sizeof(clock), "-");
        printf("%-4llu %-24s %-6s %-8s %-17s %-10s %s%s\n", (unsigned long long)m->id, m->address,
               m->role == 1 ? "front" : "voter", log_role(m->log_role), fp, clock, rep,
               m->id == s->leader ? "  leader" : "");
    }
}

/* CLUSTER over the local tallyd's socket (sock: NULL for DATA/tally.sock). */
static int
fetch_status(struct cli *c, const char *sock, struct proto_cluster_status *s)
{
    uint8_t msg[PROTO_CLIENT_MSG_MAX];
    char path[512];
    tally_client *client = NULL;
    struct proto_frame f;
    uint32_t id;
    int rc;

    if (sock != NULL)
        snprintf(path, sizeof(path), "%s", sock);
    else
        snprintf(path, sizeof(path), "%s/tally.sock", c->data);
    rc = tally_client_open(path, STATUS_TIMEOUT_MS, &client);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_UNAVAIL, "tallyd is not running (no answer on %s)", path);
    id = proto_client_next_id(client);
    rc = proto_client_request(client, msg, proto_cluster_encode(msg, id), id, &f);
    if (rc == TALLY_OK && proto_cluster_reply_decode(&f, s) != TALLY_OK)
        rc = TALLY_EPROTO;
    tally_client_close(client);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_UNAVAIL, "tallyd did not answer CLUSTER: %s", tally_strerror(rc));
    if (!s->in_cluster)
        return cli_fail(EXIT_FAIL, "this host is not in a cluster (tally cluster init)");
    return EXIT_OK;
}

static int
cluster_leave(struct cli *c)
{
    const char *sock = NULL;
    unsigned long long id = 0;
    struct proto_cluster_status s;
    struct cluster_hostkey key;
    struct cluster_state st;
    const struct cluster_member *leader;
    char message[256];
    int rc, code;

    for (int i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--socket", &missing);
        char *end = NULL;
        if (v != NULL) {
            sock = v;
        } else if (!missing && c->argv[i][0] != '-' && id == 0) {
            id = strtoull(c->argv[i], &end, 10);
            if (*end != '\0' || id == 0)
                return cli_fail(EXIT_USAGE,
                                "invalid member '%s': a member id (tally cluster "
                                "status)",
                                c->argv[i]);
        } else {
            return cli_fail(EXIT_USAGE, "%s", missing ? "--socket needs a value" : cluster_usage);
        }
    }
    rc = cluster_state_load(c->data, &key, &st);
    if (rc == TALLY_ENOTFOUND)
        return cli_fail(EXIT_FAIL, "%s is not in a cluster", c->data);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_CONFIG, "cannot read the cluster files of %s: %s", c->data,
                        tally_strerror(rc));
    if (id == 0)
        id = st.self;
    code = fetch_status(c, sock, &s);
    if (code != EXIT_OK) {
        cluster_hostkey_wipe(&key);
        return code;
    }
    leader = cluster_state_member(&st, s.leader);
    if (leader == NULL) {
        cluster_hostkey_wipe(&key);
        return cli_fail(EXIT_UNAVAIL, "no leader known now: a majority is needed to remove a "
                                      "member");
    }
    rc = cluster_admin_leave(leader, &key, id, 10000, message, sizeof(message));
    cluster_hostkey_wipe(&key);
    if (rc == TALLY_EUNAUTH)
        return cli_fail(EXIT_FAIL, "refused: %s", message);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_UNAVAIL, "the leader at %s did not answer: %s", leader->address,
                        tally_strerror(rc));
    printf("member %llu removed from the cluster%s\n", id,
           id == st.self ? ": this host is no longer a member (stop tallyd; to use it again, "
                           "remove DATA/cluster and join anew)"
                         : "");
    return EXIT_OK;
}

static int
cluster_status(struct cli *c)
{
    struct proto_cluster_status s;
    const char *sock = NULL;
    int code;

    for (int i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--socket", &missing);
        if (v != NULL)
            sock = v;
        else
            return cli_fail(EXIT_USAGE, "%s", missing ? "--socket needs a value" : cluster_usage);
    }
    code = fetch_status(c, sock, &s);
    if (code == EXIT_OK)
        print_status(&s);
    return code;
}

int
cli_cluster(struct cli *c)
{
    struct cli sub = *c;

    /* join and leave talk to another host over TCP: a peer that closes first is an error
     * to report, not a reason to die of SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (c->argc < 1)
        return cli_fail(EXIT_USAGE, "%s", cluster_usage);
    sub.argc = c->argc - 1;
    sub.argv = c->argv + 1;
    if (strcmp(c->argv[0], "init") == 0)
        return cluster_init(&sub);
    if (strcmp(c->argv[0], "status") == 0)
        return cluster_status(&sub);
    if (strcmp(c->argv[0], "invite") == 0)
        return cluster_invite(&sub);
    if (strcmp(c->argv[0], "join") == 0)
        return cluster_join_cmd(&sub);
    if (strcmp(c->argv[0], "leave") == 0)
        return cluster_leave(&sub);
    return cli_fail(EXIT_USAGE, "%s", cluster_usage);
}

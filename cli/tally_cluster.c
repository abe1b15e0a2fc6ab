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

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATUS_TIMEOUT_MS 5000

static const char cluster_usage[] = "usage: tally cluster init --listen HOST:PORT\n"
                                    "       tally cluster status [--socket PATH]";

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
           "restart tallyd to serve it on %s\n",
           listen, fp, listen);
    return EXIT_OK;
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
    printf("%-4s %-24s %-6s %-8s %-17s %s\n", "id", "address", "role", "in log", "key",
           "replicated");
    for (unsigned i = 0; i < s->n; i++) {
        const struct proto_cluster_member *m = &s->m[i];
        char fp[2 * CLUSTER_KEY_BYTES + 1], rep[64];

        cluster_key_hex(m->pk, fp);
        fp[16] = '\0';
        if (m->progress_known)
            snprintf(rep, sizeof(rep), "%llu (lag %llu)", (unsigned long long)m->match_index,
                     (unsigned long long)(s->last_index > m->match_index
                                              ? s->last_index - m->match_index
                                              : 0));
        else
            snprintf(rep, sizeof(rep), "-");
        printf("%-4llu %-24s %-6s %-8s %-17s %s%s\n", (unsigned long long)m->id, m->address,
               m->role == 1 ? "front" : "voter", log_role(m->log_role), fp, rep,
               m->id == s->leader ? "  leader" : "");
    }
}

static int
cluster_status(struct cli *c)
{
    struct proto_cluster_status s;
    uint8_t msg[PROTO_CLIENT_MSG_MAX];
    char path[512];
    const char *sock = NULL;
    tally_client *client = NULL;
    struct proto_frame f;
    uint32_t id;
    int rc;

    for (int i = 0; i < c->argc; i++) {
        bool missing = false;
        const char *v = tenant_opt_value(c->argc, c->argv, &i, "--socket", &missing);
        if (v != NULL)
            sock = v;
        else
            return cli_fail(EXIT_USAGE, "%s", missing ? "--socket needs a value" : cluster_usage);
    }
    if (sock != NULL)
        snprintf(path, sizeof(path), "%s", sock);
    else
        snprintf(path, sizeof(path), "%s/tally.sock", c->data);
    rc = tally_client_open(path, STATUS_TIMEOUT_MS, &client);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_UNAVAIL, "tallyd is not running (no answer on %s)", path);
    id = proto_client_next_id(client);
    rc = proto_client_request(client, msg, proto_cluster_encode(msg, id), id, &f);
    if (rc == TALLY_OK && proto_cluster_reply_decode(&f, &s) != TALLY_OK)
        rc = TALLY_EPROTO;
    tally_client_close(client);
    if (rc != TALLY_OK)
        return cli_fail(EXIT_UNAVAIL, "tallyd did not answer CLUSTER: %s", tally_strerror(rc));
    if (!s.in_cluster)
        return cli_fail(EXIT_FAIL, "this host is not in a cluster (tally cluster init)");
    print_status(&s);
    return EXIT_OK;
}

int
cli_cluster(struct cli *c)
{
    struct cli sub = *c;

    if (c->argc < 1)
        return cli_fail(EXIT_USAGE, "%s", cluster_usage);
    sub.argc = c->argc - 1;
    sub.argv = c->argv + 1;
    if (strcmp(c->argv[0], "init") == 0)
        return cluster_init(&sub);
    if (strcmp(c->argv[0], "status") == 0)
        return cluster_status(&sub);
    return cli_fail(EXIT_USAGE, "%s", cluster_usage);
}

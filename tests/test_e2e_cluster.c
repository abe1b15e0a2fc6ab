/*
 * Cluster mode through the real binaries. `tally cluster init --listen` makes
 * a data dir the first member of a cluster (its host key private, its member
 * list, the log's first configuration) and refuses to do it twice or with an
 * address nobody can dial; tallyd then serves the log on that port and
 * `tally cluster status` shows this host as the leader of a one-voter cluster
 * with nothing to replicate; after kill -9 and a restart it leads again from
 * its log on disk; a host key others can read stops tallyd with exit 78; the port
 * refuses a connection that does not complete the channel's handshake.
 * Three hosts (three data dirs and tallyds on 127.0.0.1): `tally cluster
 * invite` on the first, `tally cluster join` with an empty data dir on the
 * others; every member lists all three as voters with the log replicated; a
 * used code is refused; kill -9 of the leader's tallyd: the two others elect
 * another within the election bound, and the old leader comes back as a
 * follower of the same log.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_daemon.h"
#include "test_support.h"

struct fx {
    char dir[128];
    char data[200];
    char listen[64];
};

static int
setup(void **state)
{
    static struct fx f;
    struct test_out o;

    test_tmpdir(f.dir, sizeof(f.dir));
    snprintf(f.data, sizeof(f.data), "%s/a", f.dir);
    snprintf(f.listen, sizeof(f.listen), "127.0.0.1:%d", test_free_port());
    assert_int_equal(test_tally(f.data, &o, "init", NULL), 0);
    *state = &f;
    return 0;
}

static void kill_hosts(void);

static int
teardown(void **state)
{
    struct fx *f = *state;

    kill_hosts();
    test_rmtree(f->dir);
    return 0;
}

/* `tally cluster status` until its output holds `want` (10 s at most). */
static void
status_until(const char *data, const char *want, struct test_out *o)
{
    for (int i = 0; i < 200; i++) {
        test_tally(data, o, "cluster", "status", NULL);
        if (o->code == 0 && strstr(o->out, want) != NULL)
            return;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    fail_msg("cluster status never showed '%s': exit %d\n%s%s", want, o->code, o->out, o->err);
}

static void
test_cluster_init_makes_a_one_voter_cluster(void **state)
{
    struct fx *f = *state;
    struct test_daemon d;
    struct test_out o;
    char path[300];
    struct stat sb;

    /* No tallyd yet: status says so (exit 3). */
    assert_int_equal(test_tally(f->data, &o, "cluster", "init", "--listen", f->listen, NULL), 0);
    assert_non_null(strstr(o.out, "member 1 at"));
    snprintf(path, sizeof(path), "%s/cluster/host.key", f->data);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 077, 0);
    assert_true(test_dir_private(f->data));
    assert_int_equal(test_tally(f->data, &o, "cluster", "status", NULL), 3);

    /* Twice: refused, nothing changed. */
    assert_int_equal(test_tally(f->data, &o, "cluster", "init", "--listen", "127.0.0.1:1", NULL),
                     1);
    assert_non_null(strstr(o.err, "in a cluster already"));

    assert_int_equal(test_daemon_start(&d, f->data, "--election-timeout-ms", "300", NULL), 0);
    status_until(f->data, "leader 1 ", &o);
    assert_non_null(strstr(o.out, "member 1 (this host)"));
    assert_non_null(strstr(o.out, f->listen));
    assert_non_null(strstr(o.out, "voter  voter"));
    assert_non_null(strstr(o.out, "(lag 0)"));

    /* kill -9 and back: its log is on disk, it leads again. */
    test_daemon_kill9(&d);
    assert_int_equal(test_daemon_start(&d, f->data, "--election-timeout-ms", "300", NULL), 0);
    status_until(f->data, "leader 1 ", &o);
    assert_non_null(strstr(o.out, "commit 1"));
    assert_int_equal(test_daemon_stop(&d), 0);
}

static void
test_cluster_init_bad_input_changes_nothing(void **state)
{
    struct fx *f = *state;
    struct test_out o;
    char path[300];

    assert_int_equal(test_tally(f->data, &o, "cluster", "init", NULL), 64);
    assert_int_equal(test_tally(f->data, &o, "cluster", "init", "--listen", "nowhere", NULL), 64);
    assert_int_equal(
        test_tally(f->data, &o, "cluster", "init", "--listen", "127.0.0.1:99999", NULL), 64);
    assert_int_equal(test_tally(f->data, &o, "cluster", "init", "--listen", "0.0.0.0:7400", NULL),
                     64);
    assert_non_null(strstr(o.err, "not a wildcard"));
    assert_int_equal(test_tally(f->data, &o, "cluster", "frobnicate", NULL), 64);
    snprintf(path, sizeof(path), "%s/cluster", f->data);
    assert_int_not_equal(access(path, F_OK), 0);
    /* A data dir that was never initialised. */
    snprintf(path, sizeof(path), "%s/none", f->dir);
    assert_int_equal(test_tally(path, &o, "cluster", "init", "--listen", f->listen, NULL), 78);
}

/* A single host says so; `tally cluster init` next to a running tallyd is served without a
 * restart. */
static void
test_cluster_status_of_a_single_host(void **state)
{
    struct fx *f = *state;
    struct test_daemon d;
    struct test_out o;

    assert_int_equal(test_daemon_start(&d, f->data, "--election-timeout-ms", "300", NULL), 0);
    assert_int_equal(test_tally(f->data, &o, "cluster", "status", NULL), 1);
    assert_non_null(strstr(o.err, "not in a cluster"));
    assert_int_equal(test_tally(f->data, &o, "cluster", "init", "--listen", f->listen, NULL), 0);
    status_until(f->data, "leader 1 ", &o);
    assert_int_equal(test_daemon_stop(&d), 0);
}

static void
test_cluster_host_key_readable_by_others_stops_tallyd(void **state)
{
    struct fx *f = *state;
    struct test_out o;
    char path[300], tallyd[256], sock[300];

    assert_int_equal(test_tally(f->data, &o, "cluster", "init", "--listen", f->listen, NULL), 0);
    snprintf(path, sizeof(path), "%s/cluster/host.key", f->data);
    assert_int_equal(chmod(path, 0644), 0);
    test_bin("tallyd", tallyd, sizeof(tallyd));
    snprintf(sock, sizeof(sock), "%s/tally.sock", f->data);
    {
        char *argv[] = {tallyd, "--data", f->data, "--http", "127.0.0.1:0", NULL};
        assert_int_equal(test_run(argv, NULL, &o), 78);
    }
    assert_non_null(strstr(o.err, "host.key is readable by others"));
    assert_int_not_equal(access(sock, F_OK), 0); /* it never answered */
}

/* The cluster port speaks only the channel: bytes of anything else are dropped with the
 * connection, unanswered. */
static void
test_cluster_port_answers_nothing_in_the_clear(void **state)
{
    struct fx *f = *state;
    struct test_daemon d;
    struct test_out o;
    struct sockaddr_in a;
    char buf[256];
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                       "................................................................";
    int fd;
    ssize_t n, total = 0;
    char *log;
    size_t log_len = 0;

    assert_int_equal(test_tally(f->data, &o, "cluster", "init", "--listen", f->listen, NULL), 0);
    assert_int_equal(test_daemon_start(&d, f->data, NULL), 0);
    status_until(f->data, "leader 1 ", &o);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)atoi(strchr(f->listen, ':') + 1));
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, http, strlen(http)), (ssize_t)strlen(http));
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        total += n;
    assert_int_equal(total, 0); /* closed, unanswered */
    close(fd);
    assert_int_equal(test_daemon_stop(&d), 0);
    log = test_read_file(d.log, &log_len);
    assert_non_null(log);
    assert_non_null(strstr(log, "\"event\":\"cluster_peer_lost\""));
    assert_non_null(strstr(log, "protocol error"));
    free(log);
}

/* ---- three hosts ---- */

struct host {
    char data[200];
    char listen[64];
    struct test_daemon d;
};

static struct host hosts[4]; /* killed by teardown, whatever failed */

static void
kill_hosts(void)
{
    for (int i = 0; i < 4; i++)
        if (hosts[i].d.pid > 0)
            test_daemon_kill9(&hosts[i].d);
    memset(hosts, 0, sizeof(hosts));
}

static void
start_host(struct host *h)
{
    assert_int_equal(test_daemon_start(&h->d, h->data, "--election-timeout-ms", "300", NULL), 0);
}

/* hosts[0..n) get data dirs DIR/PREFIXi and free ports; the first is made a one-voter
 * cluster, its tallyd started and leading. */
static void
first_host(const char *dir, const char *prefix, int n)
{
    struct test_out o;

    for (int i = 0; i < n; i++) {
        snprintf(hosts[i].data, sizeof(hosts[i].data), "%s/%s%d", dir, prefix, i + 1);
        snprintf(hosts[i].listen, sizeof(hosts[i].listen), "127.0.0.1:%d", test_free_port());
    }
    assert_int_equal(test_tally(hosts[0].data, &o, "init", NULL), 0);
    assert_int_equal(
        test_tally(hosts[0].data, &o, "cluster", "init", "--listen", hosts[0].listen, NULL), 0);
    start_host(&hosts[0]);
    status_until(hosts[0].data, "leader 1 ", &o);
}

/* Joins h to inviter's cluster; the code it used into code[256]. */
static void
join_host(struct host *inviter, struct host *h, const char *role, char *code)
{
    struct test_out o;

    assert_int_equal(test_tally(inviter->data, &o, "cluster", "invite", NULL), 0);
    snprintf(code, 256, "%.200s", o.out);
    code[strcspn(code, "\n")] = '\0';
    assert_int_equal(test_tally(h->data, &o, "cluster", "join", code, "--listen", h->listen,
                                "--role", role, NULL),
                     0);
    assert_non_null(strstr(o.out, "joined the cluster as member"));
}

static void
test_cluster_three_hosts_join_and_survive_their_leader(void **state)
{
    struct fx *f = *state;
    struct host *h = hosts;
    struct test_out o;
    char code[256], want[64];
    unsigned long long leader = 0, again = 0;
    uint64_t t0;
    int li = -1;

    first_host(f->dir, "h", 4);
    join_host(&h[0], &h[1], "voter", code);
    start_host(&h[1]);
    join_host(&h[0], &h[2], "voter", code);
    start_host(&h[2]);
    /* Every member: three voters in the log, all caught up (the leader knows). */
    status_until(h[0].data, "(lag 0)", &o);
    for (int i = 0; i < 3; i++) {
        status_until(h[i].data, "leader 1 ", &o);
        for (int k = 0; k < 3; k++)
            status_until(h[i].data, h[k].listen, &o); /* the MEMBER records applied there */
    }
    for (int tries = 0; tries < 200; tries++) {
        test_tally(h[0].data, &o, "cluster", "status", NULL);
        if (strstr(o.out, "voter  voter") != NULL && strstr(o.out, "spare") == NULL &&
            strstr(o.out, "  -  ") == NULL) {
            int n = 0;
            for (const char *p = o.out; (p = strstr(p, "(lag 0)")) != NULL; p++)
                n++;
            if (n == 3)
                break;
        }
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    {
        int n = 0;
        for (const char *p = o.out; (p = strstr(p, "voter  voter")) != NULL; p++)
            n++;
        if (n != 3)
            fail_msg("not three voters:\n%s", o.out);
    }
    /* The data dirs of the joined hosts hold the cluster's deployment key. */
    {
        char ka[300], kb[300];
        size_t la = 0, lb = 0;
        char *a, *b;
        snprintf(ka, sizeof(ka), "%s/secret.key", h[0].data);
        snprintf(kb, sizeof(kb), "%s/secret.key", h[2].data);
        a = test_read_file(ka, &la);
        b = test_read_file(kb, &lb);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
        free(a);
        free(b);
    }

    /* A code serves once: the third host's, again from a fourth. */
    assert_int_equal(
        test_tally(h[3].data, &o, "cluster", "join", code, "--listen", h[3].listen, NULL), 1);
    assert_non_null(strstr(o.err, "used or expired"));
    assert_int_not_equal(access(h[3].data, F_OK), 0); /* nothing written */
    /* ... and while another invite is outstanding (the stranger may say JOIN), its JOIN is
     * refused by name. */
    assert_int_equal(test_tally(h[0].data, &o, "cluster", "invite", NULL), 0);
    assert_int_equal(
        test_tally(h[3].data, &o, "cluster", "join", code, "--listen", h[3].listen, NULL), 1);
    assert_non_null(strstr(o.err, "join refused: unknown, used or expired invite"));
    assert_int_not_equal(access(h[3].data, F_OK), 0);
    assert_int_equal(
        test_tally(h[3].data, &o, "cluster", "join", "tlyj1-AAAA", "--listen", "127.0.0.1:1", NULL),
        64);

    /* kill -9 of the leader's tallyd: the others elect another within the bound. */
    leader = test_cluster_leader(h[0].data);
    assert_true(leader >= 1 && leader <= 4);
    li = (int)leader - 1;
    test_daemon_kill9(&h[li].d);
    t0 = (uint64_t)time(NULL);
    for (;;) {
        unsigned long long a = 0, b = 0;
        int i1 = (li + 1) % 3, i2 = (li + 2) % 3;
        if (li == 3) {
            i1 = 0;
            i2 = 1;
        }
        a = test_cluster_leader(h[i1].data);
        b = test_cluster_leader(h[i2].data);
        if (a != 0 && a == b && a != leader) {
            again = a;
            break;
        }
        if ((uint64_t)time(NULL) - t0 > 5)
            fail_msg("no new leader 5 s after kill -9 of member %llu", leader);
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    /* The old leader comes back as a follower of the new one. */
    start_host(&h[li]);
    snprintf(want, sizeof(want), "leader %llu ", again);
    status_until(h[li].data, want, &o);

    /* tally cluster leave, from a follower: the other follower is removed everywhere. */
    {
        int lead = (int)((again - 1) % 3);            /* again is 1..3 (the hosts that run) */
        int f1 = (lead + 1) % 3, f2 = (lead + 2) % 3; /* the two followers */
        char id[16], *log;
        size_t log_len = 0;

        assert_true(again >= 1 && again <= 3);
        snprintf(id, sizeof(id), "%d", f2 + 1);
        assert_int_equal(test_tally(h[f1].data, &o, "cluster", "leave", id, NULL), 0);
        assert_non_null(strstr(o.out, "removed from the cluster"));
        for (int tries = 0; tries < 200; tries++) {
            test_tally(h[lead].data, &o, "cluster", "status", NULL);
            if (strstr(o.out, h[f2].listen) == NULL)
                break;
            nanosleep(&(struct timespec){0, 50000000}, NULL);
        }
        assert_null(strstr(o.out, h[f2].listen));
        status_until(h[f1].data, "(this host)", &o);
        for (int tries = 0; tries < 200 && strstr(o.out, h[f2].listen) != NULL; tries++) {
            nanosleep(&(struct timespec){0, 50000000}, NULL);
            test_tally(h[f1].data, &o, "cluster", "status", NULL);
        }
        assert_null(strstr(o.out, h[f2].listen));
        /* The member that left was told. */
        for (int tries = 0; tries < 100; tries++) {
            log = test_read_file(h[f2].d.log, &log_len);
            if (log != NULL && strstr(log, "\"event\":\"cluster_left\"") != NULL)
                break;
            free(log);
            log = NULL;
            nanosleep(&(struct timespec){0, 50000000}, NULL);
        }
        assert_non_null(log);
        free(log);
        /* The leader cannot be removed while it leads; nor can a member that is not. */
        snprintf(id, sizeof(id), "%d", lead + 1);
        assert_int_equal(test_tally(h[f1].data, &o, "cluster", "leave", id, NULL), 1);
        assert_non_null(strstr(o.err, "leads"));
        assert_int_equal(test_tally(h[f1].data, &o, "cluster", "leave", "99", NULL), 1);
        assert_non_null(strstr(o.err, "no member 99"));
    }
    for (int i = 0; i < 4; i++)
        if (h[i].d.pid > 0)
            test_daemon_stop(&h[i].d);
}

/* --role front: a member that replicates the log but never votes (a standby in the log). */
static void
test_cluster_front_member_does_not_vote(void **state)
{
    struct fx *f = *state;
    struct host *h = hosts;
    struct test_out o;
    char code[256];

    first_host(f->dir, "f", 2);
    join_host(&h[0], &h[1], "front", code);
    start_host(&h[1]);
    /* On the leader, member 2's row: a front, a standby in the log, caught up. */
    for (int tries = 0;; tries++) {
        const char *row;
        test_tally(h[0].data, &o, "cluster", "status", NULL);
        row = strstr(o.out, h[1].listen);
        if (row != NULL) {
            const char *eol = strchr(row, '\n');
            size_t n = eol != NULL ? (size_t)(eol - row) : strlen(row);
            char line[256];
            snprintf(line, sizeof(line), "%.*s", (int)n, row);
            if (strstr(line, "front  standby") != NULL && strstr(line, "(lag 0)") != NULL)
                break;
        }
        if (tries > 200)
            fail_msg("member 2 never showed as a caught-up front:\n%s", o.out);
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    status_until(h[1].data, "leader 1 ", &o);
    /* It does not vote: with it gone, the one voter still leads. */
    test_daemon_kill9(&h[1].d);
    nanosleep(&(struct timespec){1, 0}, NULL);
    status_until(h[0].data, "leader 1 ", &o);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cluster_init_makes_a_one_voter_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cluster_init_bad_input_changes_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cluster_status_of_a_single_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_host_key_readable_by_others_stops_tallyd,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_port_answers_nothing_in_the_clear, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cluster_three_hosts_join_and_survive_their_leader,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_front_member_does_not_vote, setup, teardown),
    };

    return cmocka_run_group_tests_name("e2e_cluster", tests, NULL, NULL);
}

/*
 * The replicated log (cluster/log.c) with three members on one loop, each with
 * its own libraft files and port on 127.0.0.1, every raft connection over host
 * channels. A leader is elected; batches appended on it are committed and
 * applied on every member in the same order (equal digests); when the leader
 * is closed the other two elect another within the election bound and go on;
 * the old member, opened again on its files, catches up to the same digest;
 * an append on a follower is refused; a member whose key the others do not
 * hold is never let in; a member that was away while the leader's log moved
 * past it is restored from a snapshot (a small one and a 24 MiB one). Every test ends with
 * uv_loop_close() == 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_log.h"
#include "cluster_log_int.h"
#include "test_support.h"

#define N           3
#define ELECTION_MS 300

struct node {
    cluster_log *lg;
    uint64_t applied;
    uint64_t digest;
    uint64_t leader;
    unsigned snapshots, restores;
    bool closed;
    char dir[256];
};

struct fixture {
    uv_loop_t loop;
    struct node nodes[N];
    struct cluster_hostkey keys[N];
    struct cluster_member members[N];
    char root[128];
    size_t done_ok, done_err;
    unsigned snapshot_every; /* 0: the log's default */
    size_t snapshot_pad;     /* bytes of filler in each snapshot (a large state) */
    unsigned election_ms;    /* 0: ELECTION_MS */
};

static struct fixture fx;

static uint64_t
fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void
on_apply(void *data, uint64_t n, const uint8_t *batch, size_t len)
{
    struct node *nd = data;
    uint8_t l8[8];

    if (n != nd->applied + 1)
        fail_msg("batch %llu applied after %llu", (unsigned long long)n,
                 (unsigned long long)nd->applied);
    nd->applied = n;
    for (int i = 0; i < 8; i++)
        l8[i] = (uint8_t)(len >> (8 * i));
    nd->digest = fnv(fnv(nd->digest, l8, 8), batch, len);
}

static void
on_leader(void *data, uint64_t leader, bool self)
{
    struct node *nd = data;

    (void)self;
    nd->leader = leader;
}

/* The state: the digest of every batch applied and their count. */
static int
on_snapshot(void *data, uint8_t **buf, size_t *len)
{
    struct node *nd = data;

    *buf = tally_malloc(16 + fx.snapshot_pad);
    if (*buf == NULL)
        return TALLY_ENOMEM;
    memcpy(*buf, &nd->digest, 8);
    memcpy(*buf + 8, &nd->applied, 8);
    for (size_t i = 0; i < fx.snapshot_pad; i++) /* a pattern the restore checks */
        (*buf)[16 + i] = (uint8_t)(i * 7 + (i >> 13));
    *len = 16 + fx.snapshot_pad;
    nd->snapshots++;
    return TALLY_OK;
}

static int
on_restore(void *data, const uint8_t *buf, size_t len)
{
    struct node *nd = data;

    if (len != 16 + fx.snapshot_pad)
        return TALLY_EPROTO;
    for (size_t i = 0; i < fx.snapshot_pad; i++)
        if (buf[16 + i] != (uint8_t)(i * 7 + (i >> 13)))
            return TALLY_EPROTO;
    memcpy(&nd->digest, buf, 8);
    memcpy(&nd->applied, buf + 8, 8);
    nd->restores++;
    return TALLY_OK;
}

static const struct cluster_log_cbs cbs = {on_apply, on_leader, on_snapshot, on_restore};

static void
on_done(void *req_data, int rc)
{
    (void)req_data;
    if (rc == TALLY_OK)
        fx.done_ok++;
    else
        fx.done_err++;
}

static void
on_closed(void *data)
{
    struct node *nd = data;

    nd->closed = true;
    nd->lg = NULL;
}

/* On a timeout, what libraft holds on each member (its state, the leader's view of each
 * follower), for the failure's message. */
static void
dump_members(void)
{
    for (int i = 0; i < N; i++) {
        struct raft *r;
        if (fx.nodes[i].lg == NULL || fx.nodes[i].closed)
            continue;
        r = &fx.nodes[i].lg->raft;
        printf("# member %d: state %d term %llu leader %llu last_stored %llu commit %llu "
               "snapshot %llu put %s pending %llu restores %u\n",
               i + 1, (int)r->state, (unsigned long long)r->current_term,
               (unsigned long long)fx.nodes[i].leader, (unsigned long long)r->last_stored,
               (unsigned long long)r->commit_index, (unsigned long long)r->log.snapshot.last_index,
               r->snapshot.put.data != NULL ? "busy" : "idle",
               (unsigned long long)r->snapshot.pending.term, fx.nodes[i].restores);
        if (r->state != RAFT_LEADER)
            continue;
        for (unsigned k = 0; k < r->configuration.n; k++) {
            const struct raft_progress *pr = &r->leader_state.progress[k];
            printf("#   follower %llu: progress %d next %llu match %llu snapshot %llu "
                   "snapshot sent %llu ms ago, recent recv %d\n",
                   (unsigned long long)r->configuration.servers[k].id, (int)pr->state,
                   (unsigned long long)pr->next_index, (unsigned long long)pr->match_index,
                   (unsigned long long)pr->snapshot_index,
                   (unsigned long long)(r->io->time(r->io) - pr->snapshot_last_send),
                   (int)pr->recent_recv);
        }
    }
}

#define RUN_UNTIL(cond, secs)                                                                      \
    do {                                                                                           \
        uint64_t t0_ = uv_hrtime();                                                                \
        while (!(cond)) {                                                                          \
            uv_run(&fx.loop, UV_RUN_ONCE);                                                         \
            if (uv_hrtime() - t0_ > (uint64_t)(secs)*1000000000ull) {                              \
                dump_members();                                                                    \
                fail_msg("timed out after %d s waiting for %s", (int)(secs), #cond);               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static int
free_port(void)
{
    struct sockaddr_in a;
    uv_tcp_t t;
    int len = sizeof(a), port;

    assert_int_equal(uv_tcp_init(&fx.loop, &t), 0);
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    assert_int_equal(uv_tcp_bind(&t, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_tcp_getsockname(&t, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&fx.loop, UV_RUN_NOWAIT);
    return port;
}

static void
open_node_as(int i, const struct cluster_hostkey *key, bool bootstrap)
{
    struct cluster_log_opts o;

    memset(&o, 0, sizeof(o));
    o.loop = &fx.loop;
    o.dir = fx.nodes[i].dir;
    o.id = fx.members[i].id;
    o.self = key;
    o.members = fx.members;
    o.n_members = N;
    o.bootstrap = bootstrap;
    o.election_ms = fx.election_ms > 0 ? fx.election_ms : ELECTION_MS;
    o.handshake_ms = 1000;
    o.cbs = &cbs;
    o.data = &fx.nodes[i];
    o.snapshot_every = fx.snapshot_every;
    fx.nodes[i].applied = 0;
    fx.nodes[i].digest = 14695981039346656037ull;
    fx.nodes[i].leader = 0;
    fx.nodes[i].closed = false;
    assert_int_equal(cluster_log_open(&o, &fx.nodes[i].lg), TALLY_OK);
}

static void
open_node(int i, const struct cluster_hostkey *key)
{
    open_node_as(i, key, true);
}

static void
close_node(int i)
{
    cluster_log_close(fx.nodes[i].lg, on_closed, &fx.nodes[i]);
    RUN_UNTIL(fx.nodes[i].closed, 10);
}

static int
setup(void **state)
{
    (void)state;
    memset(&fx, 0, sizeof(fx));
    assert_int_equal(uv_loop_init(&fx.loop), 0);
    snprintf(fx.root, sizeof(fx.root), "/tmp/tally-cluster-log-XXXXXX");
    assert_non_null(mkdtemp(fx.root));
    for (int i = 0; i < N; i++) {
        cluster_hostkey_generate(&fx.keys[i]);
        fx.members[i].id = (uint64_t)i + 1;
        snprintf(fx.members[i].address, sizeof(fx.members[i].address), "127.0.0.1:%d", free_port());
        memcpy(fx.members[i].pk, fx.keys[i].pk, CLUSTER_KEY_BYTES);
        snprintf(fx.nodes[i].dir, sizeof(fx.nodes[i].dir), "%s/n%d", fx.root, i + 1);
        assert_int_equal(mkdir(fx.nodes[i].dir, 0700), 0);
    }
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (fx.nodes[i].lg != NULL)
            close_node(i);
    assert_int_equal(uv_run(&fx.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx.loop), 0);
    test_rmtree(fx.root);
    return 0;
}

/* The member all open members name as leader, once they agree (0 before). */
static uint64_t
agreed_leader(void)
{
    uint64_t l = 0;

    for (int i = 0; i < N; i++) {
        if (fx.nodes[i].lg == NULL)
            continue;
        if (fx.nodes[i].leader == 0 || (l != 0 && fx.nodes[i].leader != l))
            return 0;
        l = fx.nodes[i].leader;
    }
    return l;
}

static void
append_batches(int leader_i, int from, int n)
{
    uint8_t b[3000];

    for (int k = from; k < from + n; k++) {
        size_t len = (size_t)(k * 37 % 2900);
        for (size_t j = 0; j < len; j++)
            b[j] = (uint8_t)(k + j * 3);
        assert_int_equal(cluster_log_append(fx.nodes[leader_i].lg, b, len, on_done, NULL),
                         TALLY_OK);
    }
}

/* Every raft stream between the leader and its followers got its second connection, and
 * copies crossed on them: each one either taken first or dropped as a duplicate (the equal
 * digests say nothing was taken twice or missed). */
static void
check_twins(void)
{
    struct cluster_transport_stats st;
    uint64_t twins = 0, copies = 0, taken = 0;

    for (int i = 0; i < N; i++) {
        cluster_transport_stats(&fx.nodes[i].lg->transport, &st);
        twins += st.twins;
        copies += st.by_twin + st.duplicates;
        taken += st.by_primary + st.by_twin;
    }
    print_message("raft streams: %llu twins, %llu messages taken, %llu copies\n",
                  (unsigned long long)twins, (unsigned long long)taken, (unsigned long long)copies);
    assert_true(twins >= 2 * (N - 1)); /* the leader to each follower and back */
    assert_true(copies > 0);
}

static void
test_log_replicates_and_survives_its_leader(void **state)
{
    uint64_t leader, t0;
    int li, fi;
    double failover_ms;

    (void)state;
    for (int i = 0; i < N; i++)
        open_node(i, &fx.keys[i]);
    RUN_UNTIL((leader = agreed_leader()) != 0, 10);
    li = (int)leader - 1;
    fi = (li + 1) % N;
    /* A follower takes no append. */
    assert_int_equal(cluster_log_append(fx.nodes[fi].lg, (const uint8_t *)"x", 1, on_done, NULL),
                     TALLY_EUNAVAIL);
    append_batches(li, 0, 100);
    RUN_UNTIL(fx.done_ok == 100 && fx.nodes[0].applied == 100 && fx.nodes[1].applied == 100 &&
                  fx.nodes[2].applied == 100,
              20);
    assert_int_equal(fx.done_err, 0);
    assert_true(fx.nodes[0].digest == fx.nodes[1].digest);
    assert_true(fx.nodes[1].digest == fx.nodes[2].digest);
    check_twins();

    /* The leader goes: the two others elect one of themselves and go on. */
    close_node(li);
    t0 = uv_hrtime();
    RUN_UNTIL((leader = agreed_leader()) != 0 && leader != (uint64_t)li + 1, 10);
    failover_ms = (double)(uv_hrtime() - t0) / 1e6;
    print_message("failover: a new leader after %.0f ms (election timeout %d ms)\n", failover_ms,
                  ELECTION_MS);
    assert_true(failover_ms < 10.0 * ELECTION_MS);
    li = (int)leader - 1;
    append_batches(li, 100, 50);
    RUN_UNTIL(fx.done_ok == 150, 20);
    for (int i = 0; i < N; i++)
        if (fx.nodes[i].lg != NULL)
            RUN_UNTIL(fx.nodes[i].applied == 150, 20);

    /* The old member comes back on its files and catches up to the same log. */
    for (int i = 0; i < N; i++) {
        if (fx.nodes[i].lg != NULL)
            continue;
        open_node(i, &fx.keys[i]);
        RUN_UNTIL(fx.nodes[i].applied == 150, 20);
        assert_true(fx.nodes[i].digest == fx.nodes[li].digest);
    }
    assert_true(fx.nodes[0].digest == fx.nodes[1].digest);
    assert_true(fx.nodes[1].digest == fx.nodes[2].digest);
}

/* Member 3 runs with a key the others do not hold: its connections are refused, it never
 * applies anything, and the two others still make a majority. */
static void
test_log_member_with_another_key_is_kept_out(void **state)
{
    struct cluster_hostkey stranger;
    uint64_t leader;

    (void)state;
    cluster_hostkey_generate(&stranger);
    open_node(0, &fx.keys[0]);
    open_node(1, &fx.keys[1]);
    open_node(2, &stranger);
    RUN_UNTIL((leader = fx.nodes[0].leader) != 0 && leader == fx.nodes[1].leader, 10);
    assert_true(leader == 1 || leader == 2);
    append_batches((int)leader - 1, 0, 20);
    RUN_UNTIL(fx.done_ok == 20 && fx.nodes[0].applied == 20 && fx.nodes[1].applied == 20, 20);
    /* Give the third time to catch up, if it could. */
    {
        uint64_t t0 = uv_hrtime();
        while (uv_hrtime() - t0 < 3ull * ELECTION_MS * 1000000ull)
            uv_run(&fx.loop, UV_RUN_ONCE);
    }
    assert_int_equal(fx.nodes[2].applied, 0);
    assert_true(fx.nodes[2].leader != 3);
}

static uint64_t
first_index(int i)
{
    struct cluster_log_status st;

    cluster_log_status(fx.nodes[i].lg, &st);
    return st.first_index;
}

/* Runs the loop until member i restored a snapshot; on a timeout, the leader's view of it at
 * each change (state, snapshot sends), for the failure's message. */
static void
wait_restore(int i, int secs)
{
    char trail[4096];
    size_t used = 0;
    int last_state = -1;
    uint64_t last_send = 0, t0 = uv_hrtime();

    trail[0] = '\0';
    while (fx.nodes[i].restores == 0) {
        uint64_t l = agreed_leader();
        uv_run(&fx.loop, UV_RUN_ONCE);
        if (l != 0 && fx.nodes[l - 1].lg != NULL) {
            struct raft *r = &fx.nodes[l - 1].lg->raft;
            unsigned k = 0;
            while (k < r->configuration.n && r->configuration.servers[k].id != fx.members[i].id)
                k++;
            if (r->state == RAFT_LEADER && k < r->configuration.n) {
                const struct raft_progress *pr = &r->leader_state.progress[k];
                if ((int)pr->state != last_state || pr->snapshot_last_send != last_send) {
                    last_state = (int)pr->state;
                    last_send = pr->snapshot_last_send;
                    if (used < sizeof(trail) - 80)
                        used +=
                            (size_t)snprintf(trail + used, sizeof(trail) - used, " %llums:%d/%llu",
                                             (unsigned long long)((uv_hrtime() - t0) / 1000000),
                                             last_state, (unsigned long long)pr->next_index);
                }
            }
        }
        if (uv_hrtime() - t0 > (uint64_t)secs * 1000000000ull) {
            dump_members();
            fail_msg("timed out after %d s waiting for member %d's restore; the leader's "
                     "progress for it (ms:state/next):%s",
                     secs, i + 1, trail);
        }
    }
    print_message("member %d restored a snapshot after %llu ms\n", i + 1,
                  (unsigned long long)((uv_hrtime() - t0) / 1000000));
}

static void
on_transferred(struct raft_transfer *req)
{
    (void)req;
}

/* Snapshots every 64 batches: a member closed while 300 batches go by comes back (on its
 * own files) to a leader whose log no longer holds the entries after its last: it gets the
 * snapshot (InstallSnapshot over the channel), then the entries after it, and ends with the
 * same digest and count. libraft keeps the messages a member's absence left unsent, entries
 * included, and sends them when it is back: so the leader hands over to the third member,
 * which never sent the absent one anything, and is closed and opened again (its queue gone).
 * (A member whose files were lost rejoins under a new id, as a new member: cluster join.) */
static void
test_log_member_behind_gets_a_snapshot(void **state)
{
    struct raft_transfer tr;
    uint64_t leader;
    int li, away, third;

    (void)state;
    fx.snapshot_every = 64;
    for (int i = 0; i < N; i++)
        open_node(i, &fx.keys[i]);
    RUN_UNTIL((leader = agreed_leader()) != 0, 10);
    li = (int)leader - 1;
    away = (li + 1) % N;
    third = (li + 2) % N;
    append_batches(li, 0, 20);
    RUN_UNTIL(fx.done_ok == 20 && fx.nodes[away].applied == 20, 20);
    close_node(away);
    append_batches(li, 20, 300); /* committed by the two */
    RUN_UNTIL(fx.done_ok == 320 && fx.nodes[third].applied == 320, 20);
    /* The third's snapshot holds the entries after the away member's last (index 21: the
     * first configuration, then 20 batches), which are gone from its log. */
    RUN_UNTIL(first_index(third) > 22, 10);
    memset(&tr, 0, sizeof(tr));
    assert_int_equal(
        raft_transfer(&fx.nodes[li].lg->raft, &tr, fx.members[third].id, on_transferred), 0);
    RUN_UNTIL(agreed_leader() == fx.members[third].id, 10);
    close_node(li);
    open_node_as(li, &fx.keys[li], false);
    RUN_UNTIL(agreed_leader() == fx.members[third].id, 10);
    li = third;
    open_node_as(away, &fx.keys[away], false);
    wait_restore(away, 60);
    assert_int_equal(fx.nodes[away].applied, cluster_log_applied(fx.nodes[away].lg));
    RUN_UNTIL((leader = agreed_leader()) != 0, 10); /* a long transfer may have moved it */
    li = (int)leader - 1;
    append_batches(li, 320, 10); /* and it goes on from there */
    RUN_UNTIL(cluster_log_applied(fx.nodes[away].lg) == 330 &&
                  cluster_log_applied(fx.nodes[li].lg) == 330,
              40);
    assert_true(fx.nodes[away].digest == fx.nodes[li].digest);
}

/* The same with a 24 MiB state, three times the 8 MiB a channel queues for a peer: it crosses
 * in 64 KiB messages, whole (its every byte checked by the restore). */
static void
test_log_large_snapshot_crosses(void **state)
{
    fx.snapshot_pad = 24u << 20;
    fx.election_ms = 1000; /* three members share this loop: a long transfer holds it */
    test_log_member_behind_gets_a_snapshot(state);
}

static int
group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    return sodium_init() < 0 ? -1 : 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_log_replicates_and_survives_its_leader, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_log_member_with_another_key_is_kept_out, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_log_member_behind_gets_a_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_large_snapshot_crosses, setup, teardown),
    };

    if (getenv("TALLY_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TALLY_TEST_FILTER"));
    return cmocka_run_group_tests_name("cluster_log", tests, group_setup, NULL);
}

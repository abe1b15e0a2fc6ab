/*
 * A host's cluster files (cluster/state.c) and the codes and records of
 * membership (cluster/join.c, cluster/node.c): what is written reads back;
 * every line of a members file altered or cut makes it corrupt rather than
 * half read; a host key others can read is refused; an invite serves once and
 * not after its expiry; join codes and MEMBER records round-trip and reject
 * bad bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_node.h"
#include "test_support.h"

static char dir[128];

static void
two_members(struct cluster_hostkey *key, struct cluster_state *st)
{
    struct cluster_hostkey other;

    memset(st, 0, sizeof(*st));
    cluster_hostkey_generate(key);
    cluster_hostkey_generate(&other);
    st->self = 2;
    st->n = 2;
    st->members[0].id = 1;
    snprintf(st->members[0].address, sizeof(st->members[0].address), "10.0.0.1:7400");
    memcpy(st->members[0].pk, other.pk, 32);
    st->roles[0] = CLUSTER_ROLE_VOTER;
    st->members[1].id = 2;
    snprintf(st->members[1].address, sizeof(st->members[1].address), "[fd00::2]:7400");
    memcpy(st->members[1].pk, key->pk, 32);
    st->roles[1] = CLUSTER_ROLE_FRONT;
}

static int
setup(void **state)
{
    (void)state;
    test_tmpdir(dir, sizeof(dir));
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    test_rmtree(dir);
    return 0;
}

static void
test_state_round_trip_and_refusals(void **state)
{
    struct cluster_hostkey key, back_key;
    struct cluster_state st, back;
    char path[256];

    (void)state;
    two_members(&key, &st);
    assert_false(cluster_state_exists(dir));
    assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_ENOTFOUND);
    assert_int_equal(cluster_state_create(dir, &key, &st), TALLY_OK);
    assert_true(cluster_state_exists(dir));
    assert_int_equal(cluster_state_create(dir, &key, &st), TALLY_EEXIST);
    assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_OK);
    assert_memory_equal(&back_key, &key, sizeof(key));
    assert_int_equal(back.self, 2);
    assert_int_equal(back.n, 2);
    assert_string_equal(back.members[1].address, "[fd00::2]:7400");
    assert_int_equal(back.roles[1], CLUSTER_ROLE_FRONT);
    assert_memory_equal(back.members[0].pk, st.members[0].pk, 32);
    assert_true(test_dir_private(dir));

    snprintf(path, sizeof(path), "%s/cluster/host.key", dir);
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_EKEYMODE);
    assert_int_equal(chmod(path, 0600), 0);

    /* A key that is not the one this host is listed with. */
    {
        struct cluster_state wrong = st;
        wrong.self = 1;
        assert_int_equal(cluster_state_save(dir, &wrong), TALLY_OK);
        assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_ECORRUPT);
        assert_int_equal(cluster_state_save(dir, &st), TALLY_OK);
        assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_OK);
    }
}

/* Ids of members who left are never given again: "next" survives a save and a load, a file
 * without it (or with one below its members) reads as the highest id + 1. */
static void
test_state_next_id(void **state)
{
    struct cluster_hostkey key, back_key;
    struct cluster_state st, back;
    char path[256];
    FILE *f;

    (void)state;
    two_members(&key, &st);
    assert_int_equal(cluster_state_create(dir, &key, &st), TALLY_OK);
    assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_OK);
    assert_int_equal(back.next_id, 3);
    assert_true(cluster_state_note_id(&st, 7)); /* member 7 joined, then left */
    assert_false(cluster_state_note_id(&st, 4));
    assert_int_equal(st.next_id, 8);
    assert_int_equal(cluster_state_save(dir, &st), TALLY_OK);
    assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_OK);
    assert_int_equal(back.next_id, 8);
    assert_int_equal(back.n, 2);
    /* Written by hand: no "next" line, then one below the members, then two. */
    snprintf(path, sizeof(path), "%s/cluster/members", dir);
    for (int k = 0; k < 3; k++) {
        char hex1[65], hex2[65];
        cluster_key_hex(st.members[0].pk, hex1);
        cluster_key_hex(st.members[1].pk, hex2);
        f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f,
                "tally-cluster 1\nself 2\nmember 1 10.0.0.1:7400 voter %s\n%s"
                "member 2 [fd00::2]:7400 front %s\n%s",
                hex1, k == 1 ? "next 2\n" : "", hex2, k == 2 ? "next 5\nnext 6\n" : "");
        fclose(f);
        if (k < 2) {
            assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_OK);
            assert_int_equal(back.next_id, 3);
        } else {
            assert_int_equal(cluster_state_load(dir, &back_key, &back), TALLY_ECORRUPT);
        }
    }
}

/* Each byte of the members file replaced in turn by a space, a digit or a newline: the load
 * either fails as corrupt or reads exactly what a writer could have written (never a key
 * or address that was not there). Each cut of the file likewise. */
static void
test_state_members_file_altered_or_cut(void **state)
{
    struct cluster_hostkey key, back_key;
    struct cluster_state st, back;
    char path[256], *orig;
    size_t len = 0;
    static const char subst[] = {' ', '7', '\n', 'x'};

    (void)state;
    two_members(&key, &st);
    assert_int_equal(cluster_state_create(dir, &key, &st), TALLY_OK);
    snprintf(path, sizeof(path), "%s/cluster/members", dir);
    orig = test_read_file(path, &len);
    assert_non_null(orig);
    for (size_t i = 0; i <= len; i++) {
        for (size_t k = 0; k < (i < len ? sizeof(subst) : 1); k++) {
            char *b = malloc(len + 1);
            FILE *f;
            int rc;

            memcpy(b, orig, len);
            if (i < len)
                b[i] = subst[k];
            f = fopen(path, "w");
            assert_non_null(f);
            assert_int_equal(fwrite(b, 1, i < len ? len : len / 2, f), i < len ? len : len / 2);
            fclose(f);
            rc = cluster_state_load(dir, &back_key, &back);
            if (rc == TALLY_OK) {
                /* Still a well-formed file: self is listed with this host's key. */
                const struct cluster_member *me = cluster_state_member(&back, back.self);
                assert_non_null(me);
                assert_memory_equal(me->pk, key.pk, 32);
            } else {
                assert_int_equal(rc, TALLY_ECORRUPT);
            }
            free(b);
        }
    }
    free(orig);
}

static void
test_invites_serve_once_and_expire(void **state)
{
    struct cluster_hostkey key;
    struct cluster_state st;
    uint8_t a[32], b[32], c[32];

    (void)state;
    two_members(&key, &st);
    assert_int_equal(cluster_state_create(dir, &key, &st), TALLY_OK);
    randombytes_buf(a, sizeof(a));
    randombytes_buf(b, sizeof(b));
    randombytes_buf(c, sizeof(c));
    assert_false(cluster_invites_pending(dir, 1000));
    assert_int_equal(cluster_invite_add(dir, a, 1000, 5000), TALLY_OK);
    assert_int_equal(cluster_invite_add(dir, b, 1000, 2000), TALLY_OK);
    assert_true(cluster_invites_pending(dir, 1500));
    assert_int_equal(cluster_invite_take(dir, c, 1500), TALLY_ENOTFOUND); /* never made */
    assert_int_equal(cluster_invite_take(dir, b, 2500), TALLY_ENOTFOUND); /* expired */
    assert_int_equal(cluster_invite_take(dir, a, 2500), TALLY_OK);
    assert_int_equal(cluster_invite_take(dir, a, 2500), TALLY_ENOTFOUND); /* used */
    assert_false(cluster_invites_pending(dir, 2500));
}

/* `tally cluster invite` (another process) adding invites while tallyd takes one: the one
 * taken never comes back (the file is changed under a lock). */
static void
test_invite_taken_never_comes_back(void **state)
{
    struct cluster_hostkey key;
    struct cluster_state st;

    (void)state;
    two_members(&key, &st);
    assert_int_equal(cluster_state_create(dir, &key, &st), TALLY_OK);
    for (int round = 0; round < 40; round++) {
        int64_t now = 1000 + 100 * round; /* each round's invites expire before the next */
        uint8_t x[32];
        pid_t child;
        int status = 0;

        randombytes_buf(x, sizeof(x));
        assert_int_equal(cluster_invite_add(dir, x, now, now + 50), TALLY_OK);
        child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            for (int i = 0; i < 20; i++) {
                uint8_t y[32];
                randombytes_buf(y, sizeof(y));
                if (cluster_invite_add(dir, y, now, now + 50) != TALLY_OK)
                    _exit(1);
            }
            _exit(0);
        }
        assert_int_equal(cluster_invite_take(dir, x, now), TALLY_OK);
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (cluster_invite_take(dir, x, now) != TALLY_ENOTFOUND)
            fail_msg("round %d: an invite taken came back", round);
    }
}

static void
test_codes_and_records_round_trip(void **state)
{
    struct cluster_invite inv, back;
    struct cluster_member m, mb;
    enum cluster_role role;
    uint8_t rec[128];
    size_t len, used = 0;
    char code[256];

    (void)state;
    memset(&inv, 0, sizeof(inv));
    snprintf(inv.address, sizeof(inv.address), "192.168.1.20:7400");
    randombytes_buf(inv.pk, sizeof(inv.pk));
    randombytes_buf(inv.secret, sizeof(inv.secret));
    cluster_invite_code(&inv, code, sizeof(code));
    assert_int_equal(strncmp(code, "tlyj1-", 6), 0);
    assert_int_equal(cluster_invite_parse(code, &back), TALLY_OK);
    assert_memory_equal(&back, &inv, sizeof(inv));
    assert_int_equal(cluster_invite_parse("tlyj1-", &back), TALLY_EINVAL);
    assert_int_equal(cluster_invite_parse("tlyj2-AAAA", &back), TALLY_EINVAL);
    assert_int_equal(cluster_invite_parse(NULL, &back), TALLY_EINVAL);
    code[strlen(code) - 3] = '\0'; /* cut */
    assert_int_equal(cluster_invite_parse(code, &back), TALLY_EINVAL);

    memset(&m, 0, sizeof(m));
    m.id = 7;
    snprintf(m.address, sizeof(m.address), "[::1]:9");
    randombytes_buf(m.pk, sizeof(m.pk));
    len = cluster_member_encode(rec, &m, CLUSTER_ROLE_FRONT);
    assert_int_equal(cluster_member_decode(rec, len, &mb, &role, &used), TALLY_OK);
    assert_int_equal(used, len);
    assert_int_equal(mb.id, 7);
    assert_string_equal(mb.address, "[::1]:9");
    assert_int_equal(role, CLUSTER_ROLE_FRONT);
    for (size_t k = 0; k < len; k++) /* every truncation */
        assert_int_equal(cluster_member_decode(rec, k, &mb, &role, &used), TALLY_EPROTO);
    rec[8] = 2; /* a role that does not exist */
    assert_int_equal(cluster_member_decode(rec, len, &mb, &role, &used), TALLY_EPROTO);

    /* Found by fuzz_member: bytes that are not base64 in the middle of a code were taken;
     * now a code must print back to itself. */
    {
        char path[512], *in;
        size_t n = 0;

        snprintf(path, sizeof(path), "%s/fuzz/corpus/member/regress-noncanonical-code",
                 TALLY_SOURCE_DIR);
        in = test_read_file(path, &n);
        assert_non_null(in);
        assert_true(n > 1);
        in[n] = '\0'; /* test_read_file leaves room for it */
        assert_int_equal(cluster_invite_parse(in + 1, &back), TALLY_EINVAL);
        free(in);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_state_round_trip_and_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_next_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_members_file_altered_or_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invites_serve_once_and_expire, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invite_taken_never_comes_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_codes_and_records_round_trip, setup, teardown),
    };

    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests_name("cluster_state", tests, NULL, NULL);
}

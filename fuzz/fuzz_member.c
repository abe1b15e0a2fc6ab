/*
 * libFuzzer target: the bytes of membership (cluster/join.c, cluster/node.c).
 * The first byte picks what the rest is:
 *   0: a join code as typed (`tally cluster join CODE`): what parses prints back
 *      to the same code and parses to the same invite;
 *   1: a MEMBER record (also carried by join answers): what decodes encodes back
 *      to the same bytes.
 */
#include <sodium.h>
#include <string.h>

#include "cluster_node.h"
#include "fuzz_util.h"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (sodium_init() < 0)
        abort();
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0) {
        char code[512], again[512];
        struct cluster_invite inv, back;
        size_t n = size - 1 < sizeof(code) - 1 ? size - 1 : sizeof(code) - 1;

        memcpy(code, data + 1, n);
        code[n] = '\0';
        if (cluster_invite_parse(code, &inv) != TALLY_OK)
            return 0;
        cluster_invite_code(&inv, again, sizeof(again));
        FUZZ_CHECK(strcmp(again, code) == 0);
        FUZZ_CHECK(cluster_invite_parse(again, &back) == TALLY_OK);
        FUZZ_CHECK(memcmp(&back, &inv, sizeof(inv)) == 0);
    } else {
        struct cluster_member m;
        enum cluster_role role;
        size_t used = 0;
        uint8_t out[10 + CLUSTER_ADDR_MAX + CLUSTER_KEY_BYTES];

        if (cluster_member_decode(data + 1, size - 1, &m, &role, &used) != TALLY_OK)
            return 0;
        FUZZ_CHECK(used <= size - 1);
        FUZZ_CHECK(cluster_member_encode(out, &m, role) == used);
        FUZZ_CHECK(memcmp(out, data + 1, used) == 0);
    }
    return 0;
}

/*
 * A child counter's exact use counters (store_use.h): each lease with a row gets a slot in
 * DATA/lease-use.map, found again after a restart on the same boot by a hash of
 * (tenant, endpoint, link, lease), so a resumed lease continues from its exact use.
 */
#include "sup_front_int.h"

#include <sodium.h>
#include <string.h>

#include "tally_log.h"

static void
put_le64(crypto_generichash_state *st, int64_t v)
{
    uint8_t b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)v >> (8 * i));
    crypto_generichash_update(st, b, sizeof(b));
}

/* A lease's name in the use file: tenant, endpoint, link, lease id and what the grant fixed
 * (n, TTL, the instant it was asked for on this boot's monotonic clock), hashed (BLAKE2b-128).
 * Lease ids restart with a tenant made anew; the rest keeps two leases apart. */
static void
use_key(const struct front_child *fc, const struct sup_child_lease_rec *rec,
        uint8_t key[STORE_USE_KEY])
{
    crypto_generichash_state st;

    crypto_generichash_init(&st, NULL, 0, STORE_USE_KEY);
    crypto_generichash_update(&st, (const uint8_t *)fc->tenant, strlen(fc->tenant) + 1);
    crypto_generichash_update(&st, (const uint8_t *)fc->endpoint, strlen(fc->endpoint) + 1);
    crypto_generichash_update(&st, (const uint8_t *)rec->link, strlen(rec->link) + 1);
    put_le64(&st, (int64_t)rec->lease_id);
    put_le64(&st, rec->n);
    put_le64(&st, rec->ttl_ms);
    put_le64(&st, rec->sent_mono_ms);
    crypto_generichash_final(&st, key, STORE_USE_KEY);
}

static int64_t *
use_bind(void *ctx, const struct sup_child_lease_rec *rec, int64_t *used)
{
    struct front_child *fc = ctx;
    uint8_t key[STORE_USE_KEY];

    use_key(fc, rec, key);
    return store_use_bind(fc->f->use, key, rec->lease_id, rec->deadline_mono_ms, used);
}

static void
use_unbind(void *ctx, int64_t *counter)
{
    struct front_child *fc = ctx;

    store_use_unbind(fc->f->use, counter);
}

bool
front_use_counters(struct front_child *fc, struct sup_child_counters *out)
{
    out->bind = use_bind;
    out->unbind = use_unbind;
    out->ctx = fc;
    return fc->f->use != NULL;
}

/* The normal outcomes go in tallyd's start line (sup_front_use_state); the others, which
 * cost resumed leases their exact count, get a line of their own. */
void
front_use_open(sup_front *f)
{
    static const char *const state[] = {
        [STORE_USE_RESUMED] = "resumed",
        [STORE_USE_CREATED] = "created",
        [STORE_USE_OTHER_BOOT] = "reset: written before the machine restarted",
        [STORE_USE_CORRUPT] = "reset: not a lease use file of this format",
    };
    uint8_t boot[STORE_USE_BOOT_ID];
    enum store_use_start how = STORE_USE_CREATED;
    struct tally_log l;
    int rc = store_use_boot_id(boot);

    if (rc == TALLY_OK)
        rc = store_use_open(f->data, boot, 0, front_now().mono_ms, &f->use, &how);
    f->use_state = rc == TALLY_OK ? state[how] : "unavailable";
    if (rc == TALLY_OK && how != STORE_USE_OTHER_BOOT && how != STORE_USE_CORRUPT)
        return;
    /* Safe either way: a lease resumed after a crash starts from its durable mark. */
    if (tally_log_begin(&l, rc != TALLY_OK ? TALLY_LOG_ERROR : TALLY_LOG_WARN,
                        rc != TALLY_OK ? "lease_use_unavailable" : "lease_use_reset")) {
        tally_log_str(&l, "file", STORE_USE_FILE);
        tally_log_str(&l, "error", rc != TALLY_OK ? tally_strerror(rc) : state[how]);
        tally_log_str(&l, "detail", "leases resumed after a crash start from their marks");
        tally_log_end(&l);
    }
}

const char *
sup_front_use_state(const sup_front *f, int64_t *kept)
{
    struct store_use_stats st;

    store_use_stats(f->use, &st);
    *kept = st.orphans;
    return f->use_state != NULL ? f->use_state : "unavailable";
}

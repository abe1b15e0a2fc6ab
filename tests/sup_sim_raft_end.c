/*
 * The end of a raft schedule (sup_sim_raft.c): when the log has caught up and settled, and the
 * final checks: every live member's copy is the same records in the same order (the others' a
 * prefix of the committed log), no reply was released for a batch the final log does not hold,
 * and the final log becomes the journal sim_check_end replays against the live ledger.
 */
#include "sup_sim_raft_int.h"

#include <stdlib.h>
#include <string.h>

bool
sr_log_caught_up(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    return w->sup != NULL && sr_in_flight(s) == 0;
}

bool
sr_log_settled(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    if (w->sup == NULL || sr_in_flight(s) != 0 || s->nheld > s->hhead)
        return false;
    for (unsigned i = 0; i < s->n; i++) {
        if (sr_live(s, i) && s->m[i].copy.n != s->ncl)
            return false;
    }
    return true;
}

static void
mark_batch(struct sim_raft *s, const uint8_t *body, bool *in)
{
    uint64_t id = get_u64(body);

    if (id == 0 || id > s->nbatch)
        sim_fail(s->w, "the final log holds an unknown batch %llu", (unsigned long long)id);
    in[id - 1] = true;
}

void
sr_log_end(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;
    const struct copy *c = &s->m[s->host].copy;
    bool *in = calloc(s->nbatch + 1, sizeof(*in));

    assert_non_null(in);
    /* Every live member's copy is the same records in the same order; the others' a prefix. */
    for (unsigned i = 0; i < s->n; i++) {
        const struct copy *o = &s->m[i].copy;

        if (sr_live(s, i) && (o->n != c->n || o->digest != c->digest || o->len != c->len ||
                              memcmp(o->b, c->b, c->len) != 0))
            sim_fail(w,
                     "member %u's copy (%llu batches, digest %016llx) differs from member "
                     "%d's (%llu, %016llx)",
                     i, (unsigned long long)o->n, (unsigned long long)o->digest, s->host,
                     (unsigned long long)c->n, (unsigned long long)c->digest);
        if (o->n > s->ncl || o->digest != sr_committed_digest(s, o->n))
            sim_fail(w, "member %u's copy is not a prefix of the committed log", i);
    }
    /* No reply left for a batch the final log does not hold. */
    for (size_t at = 0; at < c->len; at += COPY_HEAD + get_u32(c->b + at))
        mark_batch(s, c->b + at + COPY_HEAD, in);
    for (uint64_t id = 1; id <= s->nbatch; id++) {
        if (sr_batch_of(s, id)->released && !in[id - 1])
            sim_fail(w, "replies of batch %llu left; the final log does not hold it",
                     (unsigned long long)id);
    }
    free(in);
    sr_journal_from_copy(s, c); /* sim_check_end replays the final log against the live ledger */
}

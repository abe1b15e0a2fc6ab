/*
 * Concurrency slots (docs/DESIGN.md §3): a slot is a lease on one of K places, held
 * until released or until its TTL (30 s by default) passes. The table is a caller-owned array
 * scanned linearly (K is small); expiry is lazy, judged from the high-water clock at each call,
 * so an expired slot counts as free at once and is cleared by the next acquire. Release is
 * idempotent: an unknown, released or expired id changes nothing. A refusal waits until enough
 * held slots expire to bring the count under K.
 */
#include "count_int.h"

#include <string.h>

int
tenant_slot_table_init(struct tenant_slot_table *t, struct tenant_slot *v, int64_t capacity)
{
    if (t == NULL || v == NULL || capacity < 1 || capacity > TENANT_CONCURRENCY_MAX)
        return TALLY_EINVAL;
    memset(v, 0, (size_t)capacity * sizeof(*v));
    t->next_id = 0;
    t->last_now_ms = 0;
    t->capacity = capacity;
    t->v = v;
    return TALLY_OK;
}

static int
slot_check_table(const struct tenant_slot_table *t)
{
    if (t == NULL || t->v == NULL || t->capacity < 1 || t->capacity > TENANT_CONCURRENCY_MAX ||
        t->next_id < 0)
        return TALLY_EINVAL;
    return tenant__count_check_high_water(t->last_now_ms);
}

static bool
slot_held(const struct tenant_slot *s, int64_t eval_ms)
{
    return s->id != 0 && s->expires_ms > eval_ms;
}

/* Held slots at eval_ms, and the earliest expiry among them (eval_ms when none). */
static int64_t
slot_count(const struct tenant_slot_table *t, int64_t eval_ms, int64_t *earliest_ms /* OUT */)
{
    int64_t held = 0;

    *earliest_ms = INT64_MAX;
    for (int64_t i = 0; i < t->capacity; i++) {
        if (!slot_held(&t->v[i], eval_ms))
            continue;
        held++;
        if (t->v[i].expires_ms < *earliest_ms)
            *earliest_ms = t->v[i].expires_ms;
    }
    if (held == 0)
        *earliest_ms = eval_ms;
    return held;
}

/*
 * First instant at which at most `limit - 1` slots are still held, given `held` > limit - 1:
 * the expiry by which `held - limit + 1` slots have gone. Usually that is the earliest expiry;
 * only a lowered limit needs more than one pass.
 */
static int64_t
slot_free_at(const struct tenant_slot_table *t, int64_t eval_ms, int64_t held, int64_t limit,
             int64_t earliest_ms)
{
    int64_t need = held - limit + 1, at_ms = earliest_ms;

    for (;;) {
        int64_t gone = 0, next_ms = INT64_MAX;

        for (int64_t i = 0; i < t->capacity; i++) {
            const struct tenant_slot *s = &t->v[i];

            if (!slot_held(s, eval_ms))
                continue;
            if (s->expires_ms <= at_ms)
                gone++;
            else if (s->expires_ms < next_ms)
                next_ms = s->expires_ms;
        }
        if (gone >= need || next_ms == INT64_MAX)
            return at_ms;
        at_ms = next_ms;
    }
}

int64_t
tenant_slot_held(const struct tenant_slot_table *t, int64_t now_ms)
{
    int64_t earliest_ms;

    if (slot_check_table(t) != TALLY_OK || tenant__count_check_now(now_ms) != TALLY_OK)
        return -1;
    return slot_count(t, tenant__count_eval_ms(now_ms, t->last_now_ms), &earliest_ms);
}

int
tenant_slot_check(const struct tenant_slot_table *t, int64_t limit, int64_t now_ms,
                  struct tenant_verdict *out)
{
    struct tenant_bound *b;
    int64_t eval_ms, held, earliest_ms;
    int rc = slot_check_table(t);

    if (rc == TALLY_OK)
        rc = tenant__count_check_now(now_ms);
    if (rc == TALLY_OK && (out == NULL || limit < 1 || limit > t->capacity))
        rc = TALLY_EINVAL;
    if (rc != TALLY_OK)
        return rc;

    eval_ms = tenant__count_eval_ms(now_ms, t->last_now_ms);
    held = slot_count(t, eval_ms, &earliest_ms);
    out->count = 1;
    out->eval_ms = eval_ms;
    b = &out->v[0];
    b->limit = limit;
    b->period_ms = 0;
    b->reset_ms = earliest_ms;
    if (held < limit) {
        b->remaining = limit - held - 1;
        b->retry_after_ms = 0;
    } else {
        b->remaining = 0;
        b->retry_after_ms = slot_free_at(t, eval_ms, held, limit, earliest_ms) - now_ms;
    }
    tenant__count_verdict_finish(out);
    return TALLY_OK;
}

int
tenant_slot_charge(struct tenant_slot_table *t, int64_t now_ms, int64_t ttl_ms, int64_t *slot_id)
{
    struct tenant_slot *free_slot = NULL;
    int64_t eval_ms;
    int rc = slot_check_table(t);

    if (rc == TALLY_OK)
        rc = tenant__count_check_now(now_ms);
    if (rc == TALLY_OK && (slot_id == NULL || ttl_ms < 0))
        rc = TALLY_EINVAL;
    if (rc == TALLY_OK && (ttl_ms > TENANT__SPAN_MAX_MS || t->next_id == INT64_MAX))
        rc = TALLY_EOVERFLOW;
    if (rc != TALLY_OK)
        return rc;

    eval_ms = tenant__count_eval_ms(now_ms, t->last_now_ms);
    for (int64_t i = 0; i < t->capacity && free_slot == NULL; i++) {
        if (!slot_held(&t->v[i], eval_ms))
            free_slot = &t->v[i];
    }
    if (free_slot == NULL)
        return TALLY_EOVERFLOW;
    /* Clear every expired slot so the table holds only live ones between calls. */
    for (int64_t i = 0; i < t->capacity; i++) {
        if (t->v[i].id != 0 && !slot_held(&t->v[i], eval_ms))
            t->v[i] = (struct tenant_slot){0, 0};
    }
    free_slot->id = ++t->next_id;
    free_slot->expires_ms = eval_ms + (ttl_ms == 0 ? TENANT_SLOT_TTL_MS_DEFAULT : ttl_ms);
    t->last_now_ms = eval_ms;
    *slot_id = free_slot->id;
    return TALLY_OK;
}

int
tenant_slot_acquire(struct tenant_slot_table *t, int64_t limit, int64_t now_ms, int64_t ttl_ms,
                    int64_t *slot_id, struct tenant_verdict *out)
{
    int rc;

    if (slot_id == NULL || ttl_ms < 0)
        return TALLY_EINVAL;
    *slot_id = 0;
    /* What the charge would refuse is refused before the check can say "admitted". */
    if (ttl_ms > TENANT__SPAN_MAX_MS || (t != NULL && t->next_id == INT64_MAX))
        return TALLY_EOVERFLOW;
    rc = tenant_slot_check(t, limit, now_ms, out);
    if (rc == TALLY_OK && out->admitted)
        rc = tenant_slot_charge(t, now_ms, ttl_ms, slot_id);
    return rc;
}

bool
tenant_slot_release(struct tenant_slot_table *t, int64_t slot_id, int64_t now_ms)
{
    int64_t eval_ms;

    if (slot_check_table(t) != TALLY_OK || tenant__count_check_now(now_ms) != TALLY_OK ||
        slot_id < 1)
        return false;
    eval_ms = tenant__count_eval_ms(now_ms, t->last_now_ms);
    for (int64_t i = 0; i < t->capacity; i++) {
        if (t->v[i].id != slot_id)
            continue;
        /* An expired slot was already free: releasing it changes nothing. */
        if (!slot_held(&t->v[i], eval_ms))
            return false;
        t->v[i] = (struct tenant_slot){0, 0};
        return true;
    }
    return false;
}

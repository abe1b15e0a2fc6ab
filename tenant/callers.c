/*
 * The caller table of one endpoint (tenant_callers.h). Exact entries live in a
 * dense array indexed by an open-addressing table of uint32 (linear probing,
 * load at most one half), both grown by doubling up to the ceiling. Keys are
 * keyed hashes, uniform already, so their first bytes are the probe start.
 *
 * Past the ceiling (after expired entries were reclaimed) a count-min sketch
 * counts: each of its rows holds one budget state per cell, a caller charges
 * its cell in every row, and a row's state is never below the caller's true
 * state (other callers only add to it), so a caller admitted by any one row is
 * within its limit. A caller that later gets an exact entry starts from its
 * sketch cell, never from zero: moving between the two never forgets a count.
 */
#include "tenant_callers.h"

#include <sodium.h>
#include <string.h>

struct tenant_callers {
    struct tenant_callers_entry *entries;
    uint32_t *index; /* 0 empty, else entry + 1 */
    uint64_t n;      /* entries used */
    uint64_t cap;    /* entries allocated */
    uint64_t nslots; /* index size, a power of two >= 2 * cap */
    uint64_t max;
    union tenant_callers_state *sketch; /* DEPTH * WIDTH, NULL until the ceiling is reached */
    int64_t hwm_ms;                     /* clock high-water mark */
    int64_t next_sweep_ms;
    uint64_t reclaimed;
    uint64_t sketched;
};

int
tenant_caller_parse(const char *s, size_t len, const char **why)
{
    size_t i = 0;

    *why = NULL;
    while (i < len && s[i] != ':') {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
            *why = "caller kind: [a-z0-9_-], then ':'";
            return TALLY_EINVAL;
        }
        i++;
    }
    if (i == 0 || i > TENANT_CALLER_KIND_MAX || i == len) {
        *why = i == len ? "caller: KIND:VALUE" : "caller kind: 1 to 16 characters";
        return TALLY_EINVAL;
    }
    if (len - i - 1 == 0 || len - i - 1 > TENANT_CALLER_VALUE_MAX) {
        *why = "caller value: 1 to 256 bytes";
        return TALLY_EINVAL;
    }
    for (i++; i < len; i++) {
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) {
            *why = "caller value: printable ASCII only";
            return TALLY_EINVAL;
        }
        /* Two fields folded into one ("ip:a, ip:b", as an intermediary may join them)
         * must not pass as one caller of the client's choosing. */
        if (s[i] == ',') {
            *why = "caller value: no ',' (one caller per X-Tally-Caller)";
            return TALLY_EINVAL;
        }
    }
    return TALLY_OK;
}

int
tenant_caller_hash(const unsigned char key[TENANT_KEY_BYTES], const char *s, size_t len,
                   unsigned char out[TENANT_CALLER_KEY_BYTES])
{
    static const char domain[] = "tally caller"; /* never the input of a token hash */
    crypto_generichash_state st;

    if (len == 0 || len > TENANT_CALLER_TEXT_MAX)
        return TALLY_EINVAL;
    crypto_generichash_init(&st, key, TENANT_KEY_BYTES, TENANT_CALLER_KEY_BYTES);
    crypto_generichash_update(&st, (const unsigned char *)domain, sizeof(domain));
    crypto_generichash_update(&st, (const unsigned char *)s, len);
    crypto_generichash_final(&st, out, TENANT_CALLER_KEY_BYTES);
    sodium_memzero(&st, sizeof(st));
    return TALLY_OK;
}

int
tenant_callers_open(int64_t max_entries, tenant_callers **out)
{
    tenant_callers *t;

    *out = NULL;
    if (max_entries < 1 || max_entries > TENANT_MAX_CALLERS_MAX)
        return TALLY_EINVAL;
    t = tally_calloc(1, sizeof(*t));
    if (t == NULL)
        return TALLY_ENOMEM;
    t->max = (uint64_t)max_entries;
    *out = t;
    return TALLY_OK;
}

void
tenant_callers_close(tenant_callers *t)
{
    if (t == NULL)
        return;
    tally_free(t->entries);
    tally_free(t->index);
    tally_free(t->sketch);
    tally_free(t);
}

int
tenant_callers_set_max(tenant_callers *t, int64_t max_entries)
{
    if (max_entries < 1 || max_entries > TENANT_MAX_CALLERS_MAX)
        return TALLY_EINVAL;
    t->max = (uint64_t)max_entries;
    return TALLY_OK;
}

static uint64_t
key_word(const unsigned char *key, unsigned at)
{
    uint64_t w = 0;

    for (unsigned i = 0; i < 4; i++)
        w = (w << 8) | key[at + i];
    return w;
}

static uint64_t
probe_start(const tenant_callers *t, const unsigned char *key)
{
    return ((key_word(key, 0) << 32) | key_word(key, 4)) & (t->nslots - 1);
}

static int64_t
find(const tenant_callers *t, const unsigned char *key)
{
    uint64_t i;

    if (t->nslots == 0)
        return -1;
    for (i = probe_start(t, key);; i = (i + 1) & (t->nslots - 1)) {
        uint32_t v = t->index[i];
        if (v == 0)
            return -1;
        if (memcmp(t->entries[v - 1].key, key, TENANT_CALLER_KEY_BYTES) == 0)
            return (int64_t)v - 1;
    }
}

static void
index_put(tenant_callers *t, uint64_t entry)
{
    uint64_t i = probe_start(t, t->entries[entry].key);

    while (t->index[i] != 0)
        i = (i + 1) & (t->nslots - 1);
    t->index[i] = (uint32_t)(entry + 1);
}

static void
index_rebuild(tenant_callers *t)
{
    memset(t->index, 0, t->nslots * sizeof(*t->index));
    for (uint64_t e = 0; e < t->n; e++)
        index_put(t, e);
}

/* Room for one more entry: grows toward the ceiling. TALLY_ETOOBIG at the ceiling. */
static int
make_room(tenant_callers *t)
{
    uint64_t cap;
    uint64_t nslots;
    void *e;
    uint32_t *idx;

    if (t->n >= t->max)
        return TALLY_ETOOBIG;
    if (t->n < t->cap)
        return TALLY_OK;
    cap = t->cap == 0 ? 64 : t->cap * 2;
    if (cap > t->max)
        cap = t->max;
    for (nslots = 128; nslots < 2 * cap; nslots *= 2)
        ;
    e = tally_realloc(t->entries, cap * sizeof(*t->entries));
    if (e == NULL)
        return TALLY_ENOMEM;
    t->entries = e;
    t->cap = cap;
    if (nslots != t->nslots) {
        idx = tally_calloc(nslots, sizeof(*idx));
        if (idx == NULL)
            return TALLY_ENOMEM;
        tally_free(t->index);
        t->index = idx;
        t->nslots = nslots;
        index_rebuild(t);
    }
    return TALLY_OK;
}

/* Drops the entries that are whole again at now_ms. */
static void
reclaim(tenant_callers *t, int64_t now_ms)
{
    uint64_t kept = 0;

    for (uint64_t e = 0; e < t->n; e++) {
        if (t->entries[e].expires_ms > now_ms)
            t->entries[kept++] = t->entries[e];
    }
    t->reclaimed += t->n - kept;
    if (kept != t->n) {
        t->n = kept;
        index_rebuild(t);
    }
}

static uint32_t
cell_of(const unsigned char *key, unsigned row)
{
    return (uint32_t)(row * TENANT_CALLERS_SKETCH_WIDTH +
                      key_word(key, 4 * row) % TENANT_CALLERS_SKETCH_WIDTH);
}

static union tenant_callers_state *
sketch_cell(tenant_callers *t, const unsigned char *key, unsigned row)
{
    return &t->sketch[cell_of(key, row)];
}

void
tenant_callers_sketch_cells(const unsigned char key[TENANT_CALLER_KEY_BYTES],
                            uint32_t out[TENANT_CALLERS_SKETCH_DEPTH])
{
    for (unsigned r = 0; r < TENANT_CALLERS_SKETCH_DEPTH; r++)
        out[r] = cell_of(key, r);
}

static int
state_check(enum tenant_algorithm alg, const struct tenant_limits *ls,
            const union tenant_callers_state *st, int64_t now_ms, int64_t cost,
            struct tenant_verdict *v)
{
    return alg == TENANT_ALG_GCRA ? tenant_gcra_check(ls, NULL, &st->gcra, now_ms, cost, v)
                                  : tenant_window_check(ls, &st->window, now_ms, cost, v);
}

static int
state_charge(enum tenant_algorithm alg, const struct tenant_limits *ls,
             union tenant_callers_state *st, int64_t now_ms, int64_t cost)
{
    return alg == TENANT_ALG_GCRA ? tenant_gcra_charge(ls, NULL, &st->gcra, now_ms, cost)
                                  : tenant_window_charge(ls, &st->window, now_ms, cost);
}

/* The instant a state is whole again: every window ended, every TAT passed. */
static int64_t
state_expiry(enum tenant_algorithm alg, const union tenant_callers_state *st)
{
    int64_t end = 0;

    for (unsigned i = 0; i < TENANT_MAX_WINDOWS; i++) {
        int64_t e;
        if (alg == TENANT_ALG_GCRA) {
            if (st->gcra.period_ms[i] == 0)
                continue;
            e = st->gcra.tat_ms[i] + 1;
        } else {
            if (st->window.period_ms[i] == 0)
                continue;
            e = tenant_window_end_ms(st->window.window_id[i], st->window.period_ms[i]);
        }
        if (e > end)
            end = e;
    }
    return end;
}

/* Where one caller of a request is counted, and what its check said. */
struct one {
    int64_t entry;                  /* exact entry, or -1 */
    bool sketch;                    /* counted in the sketch */
    union tenant_callers_state tmp; /* a new entry's state before it is inserted */
    struct tenant_verdict v;
};

static int
sketch_need(tenant_callers *t)
{
    if (t->sketch != NULL)
        return TALLY_OK;
    t->sketch = tally_calloc((size_t)TENANT_CALLERS_SKETCH_DEPTH * TENANT_CALLERS_SKETCH_WIDTH,
                             sizeof(*t->sketch));
    return t->sketch != NULL ? TALLY_OK : TALLY_ENOMEM;
}

/* Checks one caller where it is counted; a sketch caller admits when any row does
 * (each row over-counts it), and reports its least wait otherwise. */
static int
check_one(tenant_callers *t, enum tenant_algorithm alg, const struct tenant_limits *ls,
          const unsigned char *key, int64_t now_ms, int64_t cost, struct one *o)
{
    int rc;

    o->entry = find(t, key);
    o->sketch = false;
    if (o->entry >= 0)
        return state_check(alg, ls, &t->entries[o->entry].st, now_ms, cost, &o->v);
    if (t->n >= t->max && now_ms >= t->next_sweep_ms) {
        reclaim(t, now_ms);
        t->next_sweep_ms = now_ms + TENANT_CALLERS_SWEEP_MS;
    }
    if (t->n < t->max && t->sketch == NULL) {
        memset(&o->tmp, 0, sizeof(o->tmp));
        return state_check(alg, ls, &o->tmp, now_ms, cost, &o->v);
    }
    rc = sketch_need(t);
    if (rc != TALLY_OK)
        return rc;
    if (t->n < t->max) { /* an entry will be made: from its sketch count */
        o->tmp = *sketch_cell(t, key, 0);
        return state_check(alg, ls, &o->tmp, now_ms, cost, &o->v);
    }
    o->sketch = true;
    for (unsigned r = 0; r < TENANT_CALLERS_SKETCH_DEPTH; r++) {
        struct tenant_verdict v;
        rc = state_check(alg, ls, sketch_cell(t, key, r), now_ms, cost, &v);
        if (rc != TALLY_OK)
            return rc;
        if (r == 0 || v.admitted ||
            (!o->v.admitted && !v.never && (o->v.never || v.retry_after_ms < o->v.retry_after_ms)))
            o->v = v;
        if (v.admitted)
            break;
    }
    return TALLY_OK;
}

static int
charge_one(tenant_callers *t, enum tenant_algorithm alg, const struct tenant_limits *ls,
           const unsigned char *key, int64_t now_ms, int64_t cost, struct one *o)
{
    int rc;

    if (o->entry >= 0) {
        struct tenant_callers_entry *e = &t->entries[o->entry];
        rc = state_charge(alg, ls, &e->st, now_ms, cost);
        if (rc == TALLY_OK)
            e->expires_ms = state_expiry(alg, &e->st);
        return rc;
    }
    if (!o->sketch) {
        rc = make_room(t);
        if (rc == TALLY_OK) {
            struct tenant_callers_entry *e = &t->entries[t->n];
            memcpy(e->key, key, TENANT_CALLER_KEY_BYTES);
            e->st = o->tmp;
            rc = state_charge(alg, ls, &e->st, now_ms, cost);
            if (rc != TALLY_OK)
                return rc;
            e->expires_ms = state_expiry(alg, &e->st);
            index_put(t, t->n++);
            return TALLY_OK;
        }
        /* no memory to grow: counted in the sketch instead (never forgotten) */
        if (sketch_need(t) != TALLY_OK)
            return TALLY_ENOMEM;
    }
    for (unsigned r = 0; r < TENANT_CALLERS_SKETCH_DEPTH; r++) {
        rc = state_charge(alg, ls, sketch_cell(t, key, r), now_ms, cost);
        if (rc != TALLY_OK)
            return rc;
    }
    return TALLY_OK;
}

typedef struct tenant_callers_undo_one undo_one;

static void
remember(const tenant_callers *t, const unsigned char *key, const struct one *o, undo_one *u)
{
    memcpy(u->key, key, TENANT_CALLER_KEY_BYTES);
    u->exact = !o->sketch;
    u->before = o->entry >= 0 ? t->entries[o->entry].st : o->tmp;
}

static void
remember_after(const tenant_callers *t, const unsigned char *key, undo_one *u)
{
    int64_t e = find(t, key);

    u->exact = u->exact && e >= 0;
    if (u->exact)
        u->after = t->entries[e].st;
}

void
tenant_callers_undo(tenant_callers *t, enum tenant_algorithm algorithm,
                    const struct tenant_callers_undo *undo)
{
    for (uint32_t i = 0; i < undo->n && i < TENANT_CALLERS_MAX; i++) {
        const undo_one *u = &undo->v[i];
        int64_t e = u->exact ? find(t, u->key) : -1;
        union tenant_callers_state *st;
        if (e < 0)
            continue;
        st = &t->entries[e].st;
        if (algorithm == TENANT_ALG_GCRA) {
            if (memcmp(&st->gcra, &u->after.gcra, sizeof(st->gcra)) == 0)
                st->gcra = u->before.gcra;
            continue;
        }
        for (unsigned k = 0; k < TENANT_MAX_WINDOWS; k++) {
            struct tenant_window_state *w = &st->window;
            if (w->period_ms[k] != 0 && w->period_ms[k] == u->after.window.period_ms[k] &&
                w->window_id[k] == u->after.window.window_id[k] && w->used[k] >= undo->cost)
                w->used[k] -= undo->cost;
        }
    }
}

/* Refused: the longest wait wins (never first). Admitted: the least remaining. */
static bool
reports_better(const struct tenant_verdict *a, const struct tenant_verdict *cur, bool admitted)
{
    const struct tenant_bound *ba = &a->v[a->bound];
    const struct tenant_bound *bc = &cur->v[cur->bound];

    if (!admitted)
        return !a->admitted && (cur->admitted || (a->never && !cur->never) ||
                                (!cur->never && a->retry_after_ms > cur->retry_after_ms));
    return ba->remaining < bc->remaining;
}

int
tenant_callers_decide(tenant_callers *t, enum tenant_algorithm algorithm,
                      const struct tenant_limits *ls,
                      const unsigned char (*keys)[TENANT_CALLER_KEY_BYTES], size_t n,
                      int64_t now_ms, int64_t cost, struct tenant_callers_decision *out,
                      struct tenant_callers_undo *undo)
{
    struct one one[TENANT_CALLERS_MAX];
    bool dup[TENANT_CALLERS_MAX] = {false};
    bool admitted = true;
    uint32_t best = 0;
    int rc = TALLY_OK;

    memset(out, 0, sizeof(*out));
    if (t == NULL || keys == NULL || n < 1 || n > TENANT_CALLERS_MAX || ls == NULL ||
        ls->count < 1 || now_ms < 0 || now_ms > TENANT_TIME_MAX_MS)
        return TALLY_EINVAL;
    if (cost < 1 || cost > TENANT_COST_MAX)
        return TALLY_ECOST;
    if (now_ms > t->hwm_ms)
        t->hwm_ms = now_ms;
    now_ms = t->hwm_ms;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i && !dup[i]; j++)
            dup[i] = memcmp(keys[i], keys[j], TENANT_CALLER_KEY_BYTES) == 0;
        if (dup[i])
            continue;
        rc = check_one(t, algorithm, ls, keys[i], now_ms, cost, &one[i]);
        if (rc != TALLY_OK)
            return rc;
        out->sketched |= one[i].sketch;
        admitted &= one[i].v.admitted;
    }
    for (size_t i = 1; i < n; i++) {
        if (!dup[i] && reports_better(&one[i].v, &one[best].v, admitted))
            best = (uint32_t)i;
    }
    if (undo != NULL)
        memset(undo, 0, sizeof(*undo));
    if (admitted) {
        for (size_t i = 0; i < n && rc == TALLY_OK; i++) {
            if (dup[i])
                continue;
            if (undo != NULL)
                remember(t, keys[i], &one[i], &undo->v[undo->n]);
            rc = charge_one(t, algorithm, ls, keys[i], now_ms, cost, &one[i]);
            if (undo != NULL)
                remember_after(t, keys[i], &undo->v[undo->n++]);
        }
        if (rc != TALLY_OK)
            return rc;
        if (undo != NULL)
            undo->cost = cost;
    }
    t->sketched += out->sketched ? 1 : 0;
    out->admitted = admitted;
    out->caller = best;
    out->never = one[best].v.never;
    out->retry_after_ms = admitted ? 0 : one[best].v.retry_after_ms;
    out->limit = one[best].v.v[one[best].v.bound].limit;
    out->period_ms = one[best].v.v[one[best].v.bound].period_ms;
    out->remaining = one[best].v.v[one[best].v.bound].remaining;
    out->reset_ms = one[best].v.v[one[best].v.bound].reset_ms;
    return TALLY_OK;
}

void
tenant_callers_stats(const tenant_callers *t, struct tenant_callers_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->entries = t->n;
    out->max = t->max;
    out->bytes = sizeof(*t) + t->cap * sizeof(*t->entries) + t->nslots * sizeof(*t->index);
    if (t->sketch != NULL)
        out->bytes += (uint64_t)TENANT_CALLERS_SKETCH_DEPTH * TENANT_CALLERS_SKETCH_WIDTH *
                      sizeof(*t->sketch);
    out->reclaimed = t->reclaimed;
    out->sketched = t->sketched;
    out->sketch = t->sketch != NULL;
}

const struct tenant_callers_entry *
tenant_callers_find(const tenant_callers *t, const unsigned char key[TENANT_CALLER_KEY_BYTES])
{
    int64_t e = find(t, key);

    return e >= 0 ? &t->entries[e] : NULL;
}

const union tenant_callers_state *
tenant_callers_sketch_get(const tenant_callers *t, uint32_t cell)
{
    return t->sketch != NULL && cell < TENANT_CALLERS_SKETCH_CELLS ? &t->sketch[cell] : NULL;
}

int
tenant_callers_sketch_restore(tenant_callers *t, uint32_t cell,
                              const union tenant_callers_state *st)
{
    int rc;

    if (cell >= TENANT_CALLERS_SKETCH_CELLS)
        return TALLY_EINVAL;
    rc = sketch_need(t);
    if (rc == TALLY_OK)
        t->sketch[cell] = *st;
    return rc;
}

int
tenant_callers_restore(tenant_callers *t, enum tenant_algorithm algorithm,
                       const struct tenant_callers_entry *e, int64_t now_ms)
{
    int64_t at;
    int rc;

    int64_t last = algorithm == TENANT_ALG_GCRA ? e->st.gcra.last_now_ms : e->st.window.last_now_ms;

    /* the clock's high-water mark survives a restart through the entries */
    if (last > t->hwm_ms)
        t->hwm_ms = last;
    if (e->expires_ms <= now_ms)
        return TALLY_OK;
    at = find(t, e->key);
    if (at >= 0) {
        t->entries[at] = *e;
        return TALLY_OK;
    }
    rc = make_room(t);
    if (rc != TALLY_OK)
        return rc;
    t->entries[t->n] = *e;
    index_put(t, t->n++);
    return TALLY_OK;
}

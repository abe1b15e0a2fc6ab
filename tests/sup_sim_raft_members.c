/*
 * The raft mode of the simulation (sup_sim_raft_int.h), its members: each member's copy of the
 * log (what it applied), the ground truth of what was committed (the first apply of an index
 * anywhere), libraft's FSM and the fixture's disk per member, the links between members, the
 * faults drawn, and who leads.
 */
#include "sup_sim_raft_int.h"

/* ---- small things ---- */

void
sr_grow(void **p, size_t *cap, size_t need, size_t size)
{
    size_t c = *cap > 0 ? *cap : 64;
    void *q;

    if (need <= *cap && *p != NULL)
        return; /* allocated even for nothing: memcpy takes no NULL */
    while (c < need)
        c *= 2;
    q = realloc(*p, c * size);
    assert_non_null(q);
    memset((char *)q + *cap * size, 0, (c - *cap) * size);
    *p = q;
    *cap = c;
}

static uint64_t
fnv(uint64_t h, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

bool
sr_chance(struct sim_world *w, int per_100k)
{
    return sim_range(w, 0, 99999) < per_100k;
}

struct raft *
sr_member_raft(struct sim_raft *s, unsigned i)
{
    return raft_fixture_get(&s->f, i);
}

/* Alive in the fixture and not stopped by libraft. */
bool
sr_live(struct sim_raft *s, unsigned i)
{
    return raft_fixture_alive(&s->f, i) && !s->m[i].broken;
}

struct batch *
sr_batch_of(struct sim_raft *s, uint64_t id)
{
    return &s->batches[id - 1];
}

/* The digest of a copy holding the first k committed commands. */
uint64_t
sr_committed_digest(const struct sim_raft *s, uint64_t k)
{
    return k == 0 ? FNV_BASIS : s->cl[k - 1].digest;
}

/* ---- the copies ---- */

static void
copy_append(struct copy *c, const uint8_t *body, size_t len)
{
    uint8_t head[COPY_HEAD];

    put_u32(head, (uint32_t)len);
    sr_grow((void **)&c->b, &c->cap, c->len + COPY_HEAD + len, 1);
    memcpy(c->b + c->len, head, COPY_HEAD);
    memcpy(c->b + c->len + COPY_HEAD, body, len);
    c->digest = fnv(c->digest, c->b + c->len, COPY_HEAD + len);
    c->len += COPY_HEAD + len;
    c->n++;
}

/* Calls fn for each record of a body; returns the number of records. */
static uint32_t
body_each(struct sim_raft *s, const uint8_t *body, size_t len,
          void (*fn)(struct sim_raft *s, const struct sup_record *rec, uint32_t k, void *arg),
          void *arg)
{
    uint32_t count = get_u32(body + 9);
    size_t at = BODY_HEAD;

    for (uint32_t k = 0; k < count; k++) {
        struct sup_record rec;
        size_t rl;

        if (at + 2 > len || at + 2 + (rl = (size_t)(body[at] << 8 | body[at + 1])) > len ||
            sup_record_decode(body + at + 2, rl, &rec) != TALLY_OK)
            sim_fail(s->w, "a committed batch does not decode (record %u)", k);
        fn(s, &rec, k, arg);
        at += 2 + rl;
    }
    return count;
}

static void
journal_push(struct sim_raft *s, const struct sup_record *rec, uint32_t k, void *arg)
{
    struct sim_world *w = s->w;

    (void)k;
    (void)arg;
    if (w->nj == w->capj) {
        w->capj *= 2;
        w->journal = realloc(w->journal, w->capj * sizeof(*w->journal));
        assert_non_null(w->journal);
    }
    w->journal[w->nj++] = *rec;
}

static void
stage_push(struct sim_raft *s, const struct sup_record *rec, uint32_t k, void *arg)
{
    struct stage *st = arg;

    (void)s;
    (void)k;
    sr_grow((void **)&st->v, &st->cap, st->n + 1, sizeof(*st->v));
    st->v[st->n++] = *rec;
}

/* A body's effect on w->journal and the staging area st (APPEND's records through fn). */
static void
journal_take(struct sim_raft *s, struct stage *st, const uint8_t *body, size_t len,
             void (*fn)(struct sim_raft *s, const struct sup_record *rec, uint32_t k, void *arg),
             void *arg)
{
    struct sim_world *w = s->w;

    switch (body[8]) {
    case OP_APPEND:
        (void)body_each(s, body, len, fn, arg);
        break;
    case OP_BEGIN:
        st->n = 0;
        break;
    case OP_CHUNK:
        (void)body_each(s, body, len, stage_push, st);
        break;
    case OP_END:
        w->nj = 0;
        for (size_t i = 0; i < st->n; i++)
            journal_push(s, &st->v[i], 0, NULL);
        st->n = 0;
        break;
    default:
        sim_fail(w, "a batch of operation %u", body[8]);
    }
}

/* w->journal := what a copy holds (the journal a supervisor replays). */
void
sr_journal_from_copy(struct sim_raft *s, const struct copy *c)
{
    s->w->nj = 0;
    s->scratch.n = 0;
    for (size_t at = 0; at < c->len;) {
        size_t len = get_u32(c->b + at);

        journal_take(s, &s->scratch, c->b + at + COPY_HEAD, len, journal_push, NULL);
        at += COPY_HEAD + len;
    }
}

/* ---- ground truth: a batch committed ---- */

static void
persisted(struct sim_raft *s, const struct sup_record *rec, uint32_t k, void *arg)
{
    const struct batch *b = arg;

    journal_push(s, rec, k, NULL);
    if (k >= b->nt)
        sim_fail(s->w, "a committed batch holds more records than were handed over");
    sim_on_persisted(s->w, rec, s->times[b->t_off + k]);
    if (s->w->p.verbose)
        fprintf(stderr, "t=%lld raft: rec %u %s/%llu/%llu lease %llu n %lld\n", (long long)s->w->t,
                rec->kind, rec->origin.child, (unsigned long long)rec->origin.incarnation,
                (unsigned long long)rec->origin.seq, (unsigned long long)rec->lease_id,
                (long long)rec->n);
}

/* Its requests were answered with a record: a retry must get the same reply (I7). The entries
 * shown to the checker while in flight leave w->pending, in order. */
static void
replied(struct sim_raft *s, struct batch *b)
{
    struct sim_world *w = s->w;

    for (size_t k = 0; k < b->np; k++)
        sim_map_get(w->replied, s->pend[b->p_off + k].k, true)->v[0] = s->pend[b->p_off + k].v[0];
    if (!b->visible)
        return;
    b->visible = false;
    if (b->np > s->visible || b->np > w->npending ||
        (b->np > 0 && memcmp(w->pending[0].k, s->pend[b->p_off].k, sizeof(w->pending[0].k)) != 0))
        sim_fail(w, "the reply cache shown in flight is out of order");
    memmove(w->pending, w->pending + b->np, (w->npending - b->np) * sizeof(*w->pending));
    w->npending -= b->np;
    s->visible -= b->np;
}

static void
commit(struct sim_raft *s, uint64_t index, uint64_t id, const uint8_t *body, size_t len,
       uint64_t digest)
{
    struct batch *b;

    if (id == 0 || id > s->nbatch)
        sim_fail(s->w, "raft index %llu committed an unknown batch %llu", (unsigned long long)index,
                 (unsigned long long)id);
    b = sr_batch_of(s, id);
    if (b->committed)
        sim_fail(s->w, "batch %llu committed twice (again at raft index %llu)",
                 (unsigned long long)id, (unsigned long long)index);
    sr_grow((void **)&s->cl, &s->capcl, s->ncl + 1, sizeof(*s->cl));
    s->cl[s->ncl++] = (struct committed){id, digest};
    sr_grow((void **)&s->at_index, &s->capindex, index + 1, sizeof(*s->at_index));
    s->at_index[index] = id;
    s->applied_hi = index;
    b->committed = true;
    s->rr->committed++;
    if (b->run != s->run || s->host < 0)
        s->rr->orphans++; /* its supervisor had gone: nothing of it was answered */
    journal_take(s, &s->stage, body, len, persisted, b);
    if (body[8] == OP_BEGIN)
        s->rr->replacements_begun++;
    if (body[8] == OP_END) {
        s->rr->replacements++;
        s->w->checked_nj = 0; /* the journal replaced: the cells are checked again */
    }
    replied(s, b);
}

/* ---- libraft's FSM, one per member ---- */

static int
fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    struct member *m = fsm->data;
    struct sim_raft *s = m->s;
    const uint8_t *p = buf->base;
    uint64_t index = raft_last_applied(sr_member_raft(s, m->i)) + 1; /* set after apply returns */
    size_t len;
    uint64_t id;

    *result = NULL;
    if (buf->len < FRAME_HEAD + BODY_HEAD || (len = get_u32(p)) > buf->len - FRAME_HEAD ||
        len < BODY_HEAD)
        sim_fail(s->w, "member %u: a malformed command", m->i);
    id = get_u64(p + FRAME_HEAD);
    copy_append(&m->copy, p + FRAME_HEAD, len);
    if (s->closing)
        return 0;
    if (index > s->applied_hi) {
        commit(s, index, id, p + FRAME_HEAD, len, m->copy.digest);
        return 0;
    }
    /* State machine safety: what every member applies at an index is what was committed. */
    if (index >= s->capindex || s->at_index[index] != id)
        sim_fail(s->w, "member %u applied batch %llu at raft index %llu, where %llu was committed",
                 m->i, (unsigned long long)id, (unsigned long long)index,
                 (unsigned long long)(index < s->capindex ? s->at_index[index] : 0));
    if (m->copy.n > s->ncl || m->copy.digest != sr_committed_digest(s, m->copy.n))
        sim_fail(s->w, "member %u: its copy of %llu batches is not the committed log's", m->i,
                 (unsigned long long)m->copy.n);
    return 0;
}

/* A snapshot is the copy: [bodies (8)][the copy's bytes]. */
static int
fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    struct member *m = fsm->data;
    struct raft_buffer *b = raft_malloc(sizeof(*b));
    uint8_t *p = raft_malloc(8 + m->copy.len);

    assert_non_null(b);
    assert_non_null(p);
    put_u64(p, m->copy.n);
    m->s->rr->snapshots++;
    if (m->copy.len > 0)
        memcpy(p + 8, m->copy.b, m->copy.len);
    b->base = p;
    b->len = 8 + m->copy.len;
    *bufs = b;
    *n_bufs = 1;
    return 0;
}

static int
fsm_snapshot_finalize(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    (void)fsm;
    for (unsigned i = 0; *bufs != NULL && i < *n_bufs; i++)
        raft_free((*bufs)[i].base);
    raft_free(*bufs);
    *bufs = NULL;
    *n_bufs = 0;
    return 0;
}

/* A member behind the leader's log takes its copy whole; it must be a committed prefix. No
 * schedule needs one (cluster_open keeps every entry in the log), but libraft's FSM has one. */
static int
fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    struct member *m = fsm->data;
    struct sim_raft *s = m->s;
    const uint8_t *p = buf->base;
    struct copy *c = &m->copy;

    if (buf->len < 8)
        sim_fail(s->w, "member %u: a snapshot of %zu bytes", m->i, buf->len);
    c->len = 0;
    sr_grow((void **)&c->b, &c->cap, buf->len - 8, 1);
    memcpy(c->b, p + 8, buf->len - 8);
    c->len = buf->len - 8;
    c->n = get_u64(p);
    c->digest = fnv(FNV_BASIS, c->b, c->len);
    raft_free(buf->base); /* the FSM's on success */
    if (s->closing)
        return 0;
    if (c->n > s->ncl || c->digest != sr_committed_digest(s, c->n))
        sim_fail(s->w,
                 "member %u restored a snapshot of %llu batches that is not the committed "
                 "log's",
                 m->i, (unsigned long long)c->n);
    return 0;
}

void
sr_fsm_setup(struct raft_fsm *fsm, void *data)
{
    /* Version 2 as cluster/log.c: synchronous snapshots, freed by snapshot_finalize. */
    memset(fsm, 0, sizeof(*fsm));
    fsm->version = 2;
    fsm->data = data;
    fsm->apply = fsm_apply;
    fsm->snapshot = fsm_snapshot;
    fsm->restore = fsm_restore;
    fsm->snapshot_finalize = fsm_snapshot_finalize;
}

/* ---- the fixture's disk ---- */

struct sim_raft *the_raft; /* libraft's calls to a raft_io carry no context of ours */

static struct member *
member_of(const struct raft_io *io)
{
    for (unsigned i = 0; i < the_raft->n; i++) {
        if (&the_raft->f.servers[i].io == io)
            return &the_raft->m[i];
    }
    fail_msg("a raft_io of no member");
    return NULL;
}

static void
disk_written(struct raft_io_append *req, int status)
{
    struct sim_raft *s = the_raft;

    for (size_t k = 0; k < s->nwrites; k++) {
        struct disk_write d = s->writes[k];

        if (d.req != req)
            continue;
        s->writes[k] = s->writes[--s->nwrites];
        if (status == 0)
            d.m->stored += d.n;
        d.cb(req, status);
        return;
    }
    fail_msg("a disk write of no member");
}

static int
disk_append(struct raft_io *io, struct raft_io_append *req, const struct raft_entry v[], unsigned n,
            raft_io_append_cb cb)
{
    struct sim_raft *s = the_raft;
    struct member *m = member_of(io);
    int rv = m->append(io, req, v, n, disk_written);

    if (rv == 0) {
        sr_grow((void **)&s->writes, &s->capwrites, s->nwrites + 1, sizeof(*s->writes));
        s->writes[s->nwrites++] = (struct disk_write){req, cb, m, n};
    }
    return rv;
}

/* libraft 0.15's fixture truncates its disk (an array of the entries written so far) by keeping
 * index - 1 of them, and reads past the array when entries up to there are still being
 * written: a follower that drops a deposed leader's entries while the fixture writes them. Its
 * truncate and append go through the raft_io: such a truncate is left out here (the fixture's disk
 * is never read back; a server's log in memory is libraft's, truncated all the same). */
static int
disk_truncate(struct raft_io *io, raft_index index)
{
    struct member *m = member_of(io);
    int rv;

    if (index - 1 > m->stored)
        return 0;
    rv = m->truncate(io, index);
    if (rv == 0)
        m->stored = index - 1;
    return rv;
}

void
sr_disk_wrap(struct sim_raft *s, unsigned i)
{
    struct raft_io *io = &s->f.servers[i].io;

    s->m[i].append = io->append;
    s->m[i].truncate = io->truncate;
    io->append = disk_append;
    io->truncate = disk_truncate;
}

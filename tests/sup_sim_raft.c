/*
 * The raft mode of the simulation (sup_sim_raft.h): a struct sim_log (sup_sim_int.h) on
 * libraft 0.15's raft_fixture. What the supervisor of cluster mode does (process_cluster.c,
 * docs/LEASE-PROTOCOL.md §5), here in one place:
 *   - a turn with records is one command, raft_apply'd on the member the supervisor runs on;
 *     the turn's replies and RECALLs are held until that apply's callback says committed and
 *     applied; a turn without records waits behind the newest batch in flight, or leaves now;
 *     a failed apply (raft_apply's own, or its callback's) ends the supervisor, unanswered;
 *   - the supervisor runs on the leader: the live member in the leader state of the highest
 *     term. When that changes, the supervisor ends; the new leader commits a barrier, then a
 *     supervisor is rebuilt from that member's copy (it must hold every committed batch) and
 *     writes its EPOCH. Without a leader the children's requests get no answer;
 *   - a compaction is BEGIN, the ledger's snapshot in CHUNKs and END, each a command: a member's
 *     copy keeps every command it applied, and its journal is what they leave (journal_take).
 * Ground truth: a command is committed when some member first applies its index (indexes are
 * applied in order everywhere); its records then become the world's durable journal
 * (sim_on_persisted), and every later apply of that index anywhere must be the same batch, every
 * copy a prefix of the committed log (digests), so the copies are checked as they grow.
 * Time: the fixture's clock runs in steps of its own (the next tick, disk write or delivery). A
 * server outside the members' configuration ticks every millisecond; stepping the fixture until
 * that tick at the world's t fires every event due at or before t and none after it (on equal times
 * the fixture fires the lowest server index first, requests before a later server's tick), so both
 * clocks read t whenever the world acts.
 * Links: a cut is raft_fixture_disconnect both ways; a deposed leader loses what its followers
 * send it (raft_fixture_depose would run the fixture's clock ahead of the world's by itself, up
 * to 3 s, and asserts every other server is a follower). A disk fault fails the leader's next
 * write (disk_fault_arm); a member libraft stops (RAFT_UNAVAILABLE) is killed for good.
 * libraft 0.15 runs as it is, but for a wrapper on its fixture's disk (disk_truncate); what it
 * mishandles is kept out of the schedules: a follower's failed send of an AppendEntries result
 * (disk_fault_arm) and logs shortened by snapshots (cluster_open).
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <limits.h>
#include <raft.h>
#include <raft/fixture.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sup_journal_codec.h"
#include "sup_sim_int.h"
#include "sup_sim_raft.h"

#define FRAME_HEAD  8  /* as cluster/log.c: the length (4 bytes), 4 zero bytes; padded to 8 */
#define BODY_HEAD   13 /* a batch: id (8 bytes), operation (1), record count (4), the records */
#define CHUNK_MAX   64 /* records in one CHUNK of a replacement */
#define COPY_HEAD   4  /* a copy: each applied body behind its length */
#define FNV_BASIS   1469598103934665603ULL
#define VISIBLE_MAX (SIM_BATCH_MAX / 4) /* in-flight reply-cache entries shown to the checker */
#define MEMBERS_MAX SIM_RAFT_VOTERS_MAX

enum { B_FLIGHT, B_DONE, B_FAILED };

/* What a batch does to the journal, as a LEDGER record of cluster mode: APPEND adds its records;
 * a replacement (compaction) is BEGIN (empties the staging area), CHUNKs (fill it) and END (the
 * staging area becomes the journal, at once: store/journal_copy.c). */
enum { OP_APPEND = 1, OP_BEGIN, OP_CHUNK, OP_END };

struct stage {
    struct sup_record *v;
    size_t n, cap;
};

/* One member's copy of the journal: every command body it applied, in order. */
struct copy {
    uint8_t *b;
    size_t len, cap;
    uint64_t n;      /* bodies */
    uint64_t digest; /* FNV-1a over b */
};

struct sim_raft;

struct member {
    struct raft_fsm fsm;
    struct sim_raft *s;
    unsigned i;
    struct copy copy;
    bool broken; /* libraft stopped it (an I/O error): killed for good */
    /* The fixture's disk (see disk_truncate): its append and truncate, and the entries it
     * holds once written. */
    int (*append)(struct raft_io *io, struct raft_io_append *req, const struct raft_entry v[],
                  unsigned n, raft_io_append_cb cb);
    int (*truncate)(struct raft_io *io, raft_index index);
    uint64_t stored;
    int64_t down_until; /* killed (frozen) until then; 0 while alive */
};

/* A turn handed to the log. */
struct batch {
    uint64_t run;     /* the supervisor run that made it */
    int state;        /* B_*: what its apply said */
    bool committed;   /* first applied somewhere */
    bool released;    /* a reply waiting for it left */
    bool visible;     /* its reply-cache entries are in w->pending (sup_sim_check.c) */
    size_t t_off, nt; /* when its records were handled, in s->times */
    size_t p_off, np; /* its reply-cache entries, in s->pend */
};

/* A write to the fixture's disk in progress. */
struct disk_write {
    struct raft_io_append *req;
    raft_io_append_cb cb;
    struct member *m;
    unsigned n;
};

struct apply_req {
    struct raft_apply req;
    struct sim_raft *s;
    uint64_t batch;
};

struct barrier_req {
    struct raft_barrier req;
    struct sim_raft *s;
};

/* A reply or RECALL of the supervisor, leaving once `batch` is committed (0: at once). */
struct held {
    uint64_t batch;
    int child;
    uint16_t len;
    uint8_t b[SIM_FRAME_MAX];
};

/* The committed log: the k-th command's batch and the digest of a copy holding k + 1. */
struct committed {
    uint64_t batch, digest;
};

struct sim_raft {
    struct sim_raft_params rp;
    struct sim_raft_result *rr;
    struct sim_world *w;
    struct sim_log log;
    struct raft_fixture f;
    struct raft_fsm clock_fsm;
    unsigned n, clock;
    struct member m[MEMBERS_MAX];
    bool phys[MEMBERS_MAX][MEMBERS_MAX]; /* i can send to j in the fixture */
    bool closing;                        /* raft_fixture_close: callbacks change nothing */

    /* faults */
    int side[MEMBERS_MAX]; /* while cut_until: members on different sides do not talk */
    int64_t cut_until;
    int deposed; /* -1, or the leader whose followers' messages are dropped */
    int64_t depose_until;
    bool disk_fault; /* the leader's next write fails */

    /* leadership, as the world sees it */
    int leader;
    uint64_t leader_term;
    bool ever_led;
    int64_t leaderless_since, unserved_since;
    uint64_t starts; /* supervisors started this schedule */

    /* the supervisor */
    uint64_t run;       /* the current (or last) run */
    int host;           /* the member it runs on; -1 when none */
    uint64_t host_term; /* the term it was started in */
    uint64_t run_last;  /* its newest batch, 0 none */
    bool failed;        /* one of its applies failed */
    bool check_owed;    /* the journal grew while its ledger held batches in flight */
    size_t visible;     /* w->pending[0..visible) belong to its batches in flight */
    struct barrier_req *barrier;
    bool barrier_ok;
    int barrier_host;
    uint64_t barrier_term;

    /* what was handed to the log (batch id k at batches[k - 1]) */
    struct batch *batches;
    size_t nbatch, capbatch;
    int64_t *times;
    size_t ntimes, captimes;
    struct sim_map_entry *pend;
    size_t npend, cappend;
    struct held *held;
    size_t hhead, nheld, capheld;
    uint8_t *body;
    size_t capbody;
    struct sup_record *snap; /* a replacement being handed over */
    size_t capsnap;
    struct disk_write *writes; /* the members' disk writes in progress */
    size_t nwrites, capwrites;

    /* what was committed */
    struct committed *cl;
    size_t ncl, capcl;
    uint64_t *at_index; /* raft index -> batch id (0: not a command) */
    size_t capindex;
    uint64_t applied_hi;  /* the highest raft index applied anywhere */
    struct stage stage;   /* the committed log's staging area */
    struct stage scratch; /* a copy's, while it is read */
};

/* ---- small things ---- */

static void
grow(void **p, size_t *cap, size_t need, size_t size)
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

static void
put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void
put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint32_t
get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t
get_u64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint64_t
fnv(uint64_t h, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static bool
chance(struct sim_world *w, int per_100k)
{
    return sim_range(w, 0, 99999) < per_100k;
}

static struct raft *
member_raft(struct sim_raft *s, unsigned i)
{
    return raft_fixture_get(&s->f, i);
}

/* Alive in the fixture and not stopped by libraft. */
static bool
live(struct sim_raft *s, unsigned i)
{
    return raft_fixture_alive(&s->f, i) && !s->m[i].broken;
}

static struct batch *
batch_of(struct sim_raft *s, uint64_t id)
{
    return &s->batches[id - 1];
}

/* The digest of a copy holding the first k committed commands. */
static uint64_t
committed_digest(const struct sim_raft *s, uint64_t k)
{
    return k == 0 ? FNV_BASIS : s->cl[k - 1].digest;
}

/* ---- the copies ---- */

static void
copy_append(struct copy *c, const uint8_t *body, size_t len)
{
    uint8_t head[COPY_HEAD];

    put_u32(head, (uint32_t)len);
    grow((void **)&c->b, &c->cap, c->len + COPY_HEAD + len, 1);
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
    grow((void **)&st->v, &st->cap, st->n + 1, sizeof(*st->v));
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
static void
journal_from_copy(struct sim_raft *s, const struct copy *c)
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
    b = batch_of(s, id);
    if (b->committed)
        sim_fail(s->w, "batch %llu committed twice (again at raft index %llu)",
                 (unsigned long long)id, (unsigned long long)index);
    grow((void **)&s->cl, &s->capcl, s->ncl + 1, sizeof(*s->cl));
    s->cl[s->ncl++] = (struct committed){id, digest};
    grow((void **)&s->at_index, &s->capindex, index + 1, sizeof(*s->at_index));
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
    uint64_t index = raft_last_applied(member_raft(s, m->i)) + 1; /* set after apply returns */
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
    if (m->copy.n > s->ncl || m->copy.digest != committed_digest(s, m->copy.n))
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
    grow((void **)&c->b, &c->cap, buf->len - 8, 1);
    memcpy(c->b, p + 8, buf->len - 8);
    c->len = buf->len - 8;
    c->n = get_u64(p);
    c->digest = fnv(FNV_BASIS, c->b, c->len);
    raft_free(buf->base); /* the FSM's on success */
    if (s->closing)
        return 0;
    if (c->n > s->ncl || c->digest != committed_digest(s, c->n))
        sim_fail(s->w,
                 "member %u restored a snapshot of %llu batches that is not the committed "
                 "log's",
                 m->i, (unsigned long long)c->n);
    return 0;
}

static void
fsm_setup(struct raft_fsm *fsm, void *data)
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

static struct sim_raft *the_raft; /* libraft's calls to a raft_io carry no context of ours */

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
        grow((void **)&s->writes, &s->capwrites, s->nwrites + 1, sizeof(*s->writes));
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

static void
disk_wrap(struct sim_raft *s, unsigned i)
{
    struct raft_io *io = &s->f.servers[i].io;

    s->m[i].append = io->append;
    s->m[i].truncate = io->truncate;
    io->append = disk_append;
    io->truncate = disk_truncate;
}

/* ---- the links ---- */

/* What i should be able to send j now. A dead member's links stay connected: the fixture
 * saturates them itself, and its kill and revive assert they are connected. */
static bool
link_wanted(const struct sim_raft *s, unsigned i, unsigned j)
{
    if (!raft_fixture_alive((struct raft_fixture *)&s->f, i) ||
        !raft_fixture_alive((struct raft_fixture *)&s->f, j))
        return true;
    if (s->cut_until > 0 && s->side[i] != s->side[j])
        return false;
    return !(s->deposed >= 0 && (int)j == s->deposed && (int)i != s->deposed);
}

static void
link_set(struct sim_raft *s, unsigned i, unsigned j, bool on)
{
    if (s->phys[i][j] == on)
        return;
    if (on)
        raft_fixture_reconnect(&s->f, i, j);
    else
        raft_fixture_disconnect(&s->f, i, j);
    s->phys[i][j] = on;
}

static void
links_apply(struct sim_raft *s)
{
    for (unsigned i = 0; i < s->n; i++) {
        for (unsigned j = 0; j < s->n; j++) {
            if (i != j)
                link_set(s, i, j, link_wanted(s, i, j));
        }
    }
}

static void
member_kill(struct sim_raft *s, unsigned i, int64_t until)
{
    for (unsigned j = 0; j < s->n; j++) {
        if (j != i) {
            link_set(s, i, j, true);
            link_set(s, j, i, true);
        }
    }
    raft_fixture_kill(&s->f, i);
    s->m[i].down_until = until;
    links_apply(s);
}

static void
member_revive(struct sim_raft *s, unsigned i)
{
    raft_fixture_revive(&s->f, i);
    s->m[i].down_until = 0;
    links_apply(s);
}

/* ---- faults ---- */

static int
pick(struct sim_raft *s, bool leader_ok)
{
    int alive[MEMBERS_MAX], n = 0;

    for (unsigned i = 0; i < s->n; i++) {
        if (live(s, i) && (leader_ok || (int)i != s->leader))
            alive[n++] = (int)i;
    }
    return n == 0 ? -1 : alive[sim_range(s->w, 0, n - 1)];
}

/* Cut a minority off: the leader (and, of five, a follower), or one or two followers. */
static void
cut(struct sim_raft *s, bool leader)
{
    struct sim_world *w = s->w;
    int first = leader ? s->leader : pick(s, false);
    int more = s->n == 5 && sim_range(w, 0, 1) ? pick(s, false) : -1;

    if (first < 0)
        return;
    memset(s->side, 0, sizeof(s->side));
    s->side[first] = 1;
    if (more >= 0)
        s->side[more] = 1;
    s->cut_until = w->t + sim_range(w, s->rp.election_ms / 2, 5 * (int64_t)s->rp.election_ms);
    if (leader)
        s->rr->leader_cuts++;
    else
        s->rr->follower_cuts++;
    links_apply(s);
    if (w->p.verbose)
        fprintf(stderr, "t=%lld raft: members %d %d cut off until %lld\n", (long long)w->t, first,
                more, (long long)s->cut_until);
}

/* The leader's disk fails its next write or two (raft_fixture_io_fault counts every I/O call:
 * writes, term and vote changes, sends), armed just before the supervisor's next raft_apply or
 * barrier. Only the leader's: a follower whose AppendEntries result fails to send has its entries
 * freed twice by libraft 0.15 (recv_append_entries.c, then recv.c). A leader that steps down
 * first spends the fault on its term change, and libraft stops it: it is gone for good, so
 * faults are armed only while a majority would remain. */
static void
disk_fault_arm(struct sim_raft *s, int member)
{
    unsigned broken = 0;

    for (unsigned i = 0; i < s->n; i++)
        broken += s->m[i].broken;
    if (!s->disk_fault || member < 0 || broken >= (s->n - 1) / 2)
        return;
    s->disk_fault = false;
    s->rr->disk_faults++;
    raft_fixture_io_fault(&s->f, (unsigned)member, 0, (int)sim_range(s->w, 1, 2));
}

static void
faults(struct sim_raft *s)
{
    struct sim_world *w = s->w;

    if (!w->p.faults)
        return;
    if (s->cut_until == 0 && s->leader >= 0 && chance(w, s->rp.leader_cut_per_100k))
        cut(s, true);
    if (s->cut_until == 0 && chance(w, s->rp.follower_cut_per_100k))
        cut(s, false);
    if (chance(w, s->rp.kill_per_100k)) {
        int i = pick(s, true);

        if (i >= 0) {
            member_kill(s, (unsigned)i, w->t + sim_range(w, 20, 8 * (int64_t)s->rp.election_ms));
            s->rr->kills++;
            if (w->p.verbose)
                fprintf(stderr, "t=%lld raft: member %d killed until %lld\n", (long long)w->t, i,
                        (long long)s->m[i].down_until);
        }
    }
    if (s->deposed < 0 && s->leader >= 0 && chance(w, s->rp.depose_per_100k)) {
        s->deposed = s->leader;
        s->depose_until = w->t + 3 * (int64_t)s->rp.election_ms;
        s->rr->deposes++;
        links_apply(s);
    }
    if (chance(w, s->rp.disk_fault_per_100k))
        s->disk_fault = true;
}

/* Cuts over, the deposed leader stepped down, killed members back; all at once when draining. */
static void
faults_end(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    bool drain = w->draining;

    if (s->cut_until > 0 && (drain || w->t >= s->cut_until))
        s->cut_until = 0;
    if (s->deposed >= 0 && (drain || w->t >= s->depose_until ||
                            raft_state(member_raft(s, (unsigned)s->deposed)) != RAFT_LEADER))
        s->deposed = -1;
    links_apply(s);
    for (unsigned i = 0; i < s->n; i++) {
        if (!s->m[i].broken && s->m[i].down_until > 0 && (drain || w->t >= s->m[i].down_until))
            member_revive(s, i);
    }
}

/* libraft stops a member on an I/O error it cannot take back (RAFT_UNAVAILABLE). */
static void
notice_broken(struct sim_raft *s)
{
    for (unsigned i = 0; i < s->n; i++) {
        if (s->m[i].broken || raft_state(member_raft(s, i)) != RAFT_UNAVAILABLE)
            continue;
        s->m[i].broken = true;
        s->rr->members_broken++;
        if (raft_fixture_alive(&s->f, i))
            member_kill(s, i, 0);
        if (s->w->p.verbose)
            fprintf(stderr, "t=%lld raft: member %u stopped by libraft\n", (long long)s->w->t, i);
    }
}

/* ---- the clock ---- */

/* Fires every event due at or before t: the clock server's tick at t comes last among them. */
static void
advance(struct sim_raft *s, int64_t t)
{
    if (t == 0)
        return;
    for (;;) {
        const struct raft_fixture_event *ev = raft_fixture_step(&s->f);

        if (ev->type == RAFT_FIXTURE_TICK && ev->server_index == s->clock &&
            (int64_t)raft_fixture_time(&s->f) >= t)
            break;
    }
    if ((int64_t)raft_fixture_time(&s->f) != t)
        sim_fail(s->w, "the fixture's clock reads %llu",
                 (unsigned long long)raft_fixture_time(&s->f));
}

/* ---- leadership ---- */

static void
redraw_timeouts(struct sim_raft *s)
{
    unsigned e = s->rp.election_ms;

    /* The fixture's io->random answers one value per server: drawn again at each change and
     * while nobody leads, so that not always the same member wins, and ties are broken. */
    for (unsigned i = 0; i < s->n; i++)
        raft_fixture_set_randomized_election_timeout(&s->f, i,
                                                     e + (unsigned)sim_range(s->w, 0, e - 1));
}

static void
find_leader(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    int best = -1;
    uint64_t term = 0;

    for (unsigned i = 0; i < s->n; i++) {
        struct raft *r = member_raft(s, i);

        if (live(s, i) && raft_state(r) == RAFT_LEADER && r->current_term > term) {
            best = (int)i;
            term = r->current_term;
        }
    }
    if (best < 0)
        redraw_timeouts(s); /* candidates whose timeouts match would split the votes forever */
    if (best == s->leader && term == s->leader_term)
        return;
    if (best >= 0) {
        s->rr->leader_changes += s->ever_led;
        if (s->ever_led && s->leader < 0 && w->t - s->leaderless_since > s->rr->leaderless_max_ms)
            s->rr->leaderless_max_ms = w->t - s->leaderless_since;
        s->ever_led = true;
        redraw_timeouts(s);
    } else {
        s->leaderless_since = w->t;
    }
    s->leader = best;
    s->leader_term = term;
    if (w->p.verbose)
        fprintf(stderr, "t=%lld raft: leader %d term %llu\n", (long long)w->t, best,
                (unsigned long long)term);
}

/* ---- the output gate ---- */

static void
hold(struct sim_raft *s, uint64_t batch, int child, const uint8_t *b, size_t len)
{
    struct held *h;

    if (batch == 0) {
        sim_net_push(s->w, false, child, b, len);
        s->rr->released++;
        return;
    }
    grow((void **)&s->held, &s->capheld, s->nheld + 1, sizeof(*s->held));
    h = &s->held[s->nheld++];
    h->batch = batch;
    h->child = child;
    h->len = (uint16_t)len;
    memcpy(h->b, b, len);
}

/* Replies leave in order once their batch is committed and applied on the supervisor's member:
 * its apply callback said so. */
static void
release(struct sim_raft *s)
{
    while (s->hhead < s->nheld) {
        const struct held *h = &s->held[s->hhead];
        struct batch *b = batch_of(s, h->batch);

        if (b->state != B_DONE)
            break;
        if (!b->committed)
            sim_fail(s->w, "the replies of batch %llu left before it was committed",
                     (unsigned long long)h->batch);
        b->released = true;
        sim_net_push(s->w, false, h->child, h->b, h->len);
        s->rr->released++;
        s->hhead++;
    }
    if (s->hhead == s->nheld)
        s->hhead = s->nheld = 0;
}

static void
on_applied(struct raft_apply *req, int status, void *result)
{
    struct apply_req *a = req->data;
    struct sim_raft *s = a->s;
    struct batch *b = batch_of(s, a->batch);

    (void)result;
    b->state = status == 0 ? B_DONE : B_FAILED;
    if (status != 0 && !s->closing) {
        s->rr->failed_applies++;
        if (b->run == s->run && s->host >= 0)
            s->failed = true; /* leadership lost before the commit was known: it ends */
    }
    free(a);
}

/* The newest batch of the running supervisor not yet known committed (0: none). */
static uint64_t
in_flight(struct sim_raft *s)
{
    return s->run_last != 0 && batch_of(s, s->run_last)->state == B_FLIGHT ? s->run_last : 0;
}

/* A body: [batch id][operation][count], then each record as [length (2)][bytes]. */
static size_t
encode_body(struct sim_raft *s, uint64_t id, uint8_t op, const struct sup_record *v, size_t n)
{
    size_t at = BODY_HEAD;

    grow((void **)&s->body, &s->capbody, BODY_HEAD + n * (2 + SUP_RECORD_ENCODED_MAX), 1);
    put_u64(s->body, id);
    s->body[8] = op;
    put_u32(s->body + 9, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        size_t rl = 0;

        if (sup_record_encode(&v[i], s->body + at + 2, SUP_RECORD_ENCODED_MAX, &rl) != TALLY_OK)
            sim_fail(s->w, "a record does not encode");
        s->body[at] = (uint8_t)(rl >> 8);
        s->body[at + 1] = (uint8_t)rl;
        at += 2 + rl;
    }
    return at;
}

static uint64_t
batch_add(struct sim_raft *s)
{
    struct batch *b;

    grow((void **)&s->batches, &s->capbatch, s->nbatch + 1, sizeof(*s->batches));
    b = &s->batches[s->nbatch++];
    memset(b, 0, sizeof(*b));
    b->run = s->run;
    b->state = B_FLIGHT;
    s->rr->batches++;
    return s->nbatch;
}

/* What the checker needs when the turn's batch commits: when each record was handled, and the
 * reply cache entries of the turn (w->pending past the ones shown for earlier batches). */
static uint64_t
batch_new(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    struct batch *b = batch_of(s, batch_add(s));
    size_t np = w->npending - s->visible;

    grow((void **)&s->times, &s->captimes, s->ntimes + w->nb, sizeof(*s->times));
    b->t_off = s->ntimes;
    b->nt = w->nb;
    memcpy(s->times + s->ntimes, w->batch_t, w->nb * sizeof(*s->times));
    s->ntimes += w->nb;
    grow((void **)&s->pend, &s->cappend, s->npend + np, sizeof(*s->pend));
    b->p_off = s->npend;
    b->np = np;
    memcpy(s->pend + s->npend, w->pending + s->visible, np * sizeof(*s->pend));
    s->npend += np;
    /* Shown to the checker while in flight (a duplicate then must change nothing and get the
     * same reply), as long as its table keeps room for the turns to come. */
    b->visible = w->npending <= VISIBLE_MAX;
    if (b->visible)
        s->visible = w->npending;
    else
        w->npending = s->visible;
    return s->nbatch;
}

static bool
submit(struct sim_raft *s, uint64_t id, uint8_t op, const struct sup_record *v, size_t n)
{
    size_t len = encode_body(s, id, op, v, n);
    struct raft_buffer buf;
    struct apply_req *a = calloc(1, sizeof(*a));
    int rv;

    assert_non_null(a);
    buf.len = (FRAME_HEAD + len + 7) / 8 * 8; /* libraft pads entries to 8 bytes */
    buf.base = raft_calloc(1, buf.len);
    assert_non_null(buf.base);
    put_u32(buf.base, (uint32_t)len);
    memcpy((uint8_t *)buf.base + FRAME_HEAD, s->body, len);
    a->s = s;
    a->batch = id;
    a->req.data = a;
    disk_fault_arm(s, s->host);
    rv = raft_apply(member_raft(s, (unsigned)s->host), &a->req, &buf, 1, on_applied);
    if (rv != 0) {
        raft_free(buf.base);
        free(a);
        batch_of(s, id)->state = B_FAILED;
        s->rr->failed_applies++;
        return false;
    }
    return true;
}

/* A snapshot of the ledger (its records rebuild the live state from nothing) must replay to it. */
static void
snapshot_check(struct sim_raft *s, size_t n)
{
    sup_ledger *again = NULL;

    assert_int_equal(sup_ledger_open(&s->w->lcfg, &again), TALLY_OK);
    for (size_t i = 0; i < n; i++) {
        if (sup_ledger_replay(again, &s->snap[i]) != TALLY_OK)
            sim_fail(s->w, "snapshot record %zu does not replay", i);
    }
    if (sup_ledger_digest(again) != sup_ledger_digest(s->w->sup))
        sim_fail(s->w, "a snapshot of %zu records replays to another state", n);
    sup_ledger_close(again);
}

/* A batch without replies of its own handed over: the supervisor's newest. */
static bool
hand_over(struct sim_raft *s, uint8_t op, const struct sup_record *v, size_t n)
{
    uint64_t id = batch_add(s);

    if (!submit(s, id, op, v, n))
        return false;
    s->run_last = id;
    return true;
}

/* Compaction on the log, as the supervisor of cluster mode does between turns: BEGIN, the
 * snapshot in CHUNKs, END, after everything it handed over before (process_journal.c). */
static void
replace(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    struct sup_records out = {NULL, 0, 0};
    size_t needed = 0, part = 0, fault_at;
    bool ok;

    assert_int_equal(sup_ledger_snapshot(w->sup, &out, &needed), TALLY_ETOOBIG);
    grow((void **)&s->snap, &s->capsnap, needed, sizeof(*s->snap));
    out = (struct sup_records){s->snap, 0, s->capsnap};
    assert_int_equal(sup_ledger_snapshot(w->sup, &out, &needed), TALLY_OK);
    snapshot_check(s, out.count);
    /* A disk fault due fails a CHUNK or the END: the replacement is cut short, its BEGIN (and
     * CHUNKs) may be committed, and every copy must still hold the journal it had. */
    fault_at = s->disk_fault ? (size_t)sim_range(w, 1, 1 + (int64_t)(out.count / CHUNK_MAX)) : 0;
    s->disk_fault = false;
    ok = hand_over(s, OP_BEGIN, NULL, 0);
    for (size_t at = 0, n; ok && at < out.count; at += n) {
        n = out.count - at < CHUNK_MAX ? out.count - at : CHUNK_MAX;
        s->disk_fault = ++part == fault_at;
        ok = hand_over(s, OP_CHUNK, s->snap + at, n);
    }
    s->disk_fault = ok && ++part == fault_at;
    if (!ok || !hand_over(s, OP_END, NULL, 0)) {
        sim_sup_crash(w, w->t); /* a refused append ends the supervisor */
        return;
    }
    if (w->p.verbose)
        fprintf(stderr, "t=%lld raft: the journal replaced by %zu records (to batch %llu)\n",
                (long long)w->t, out.count, (unsigned long long)s->run_last);
}

/* The checker reads the live ledger's cells once the journal grew (sim_check_step: I1 on every
 * cell, I8): they are the durable cells only while nothing is in flight. A batch lost with its
 * leadership may have moved a cell to the next window, or credited tokens, that the ledger rebuilt
 * from the log never sees; so the check waits for a turn that leaves nothing in flight. */
static void
defer_cell_check(struct sim_raft *s)
{
    struct sim_world *w = s->w;

    if (in_flight(s) != 0) {
        s->check_owed = s->check_owed || w->nj != w->checked_nj;
        w->checked_nj = w->nj;
    } else if (s->check_owed) {
        s->check_owed = false;
        w->checked_nj = (size_t)-1; /* now */
    }
}

static void
log_turn(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;
    struct proto_lease_msg m;
    uint64_t wait;

    s->w = w;
    release(s);
    wait = in_flight(s);
    if (w->nb > 0) {
        wait = batch_new(s);
        if (!submit(s, wait, OP_APPEND, w->batch, w->nb)) {
            sim_sup_crash(w, w->t); /* nothing of this turn leaves */
            return;
        }
        s->run_last = wait;
    }
    w->nb = 0;
    for (size_t i = 0; i < w->nrep; i++)
        hold(s, wait, w->replies[i].child, w->replies[i].b, w->replies[i].len);
    w->nrep = 0;
    while (sup_ledger_next_recall(w->sup, &m) == TALLY_OK) {
        uint8_t b[SIM_FRAME_MAX];
        size_t len;
        int i = sim_ep_index(w, m.origin.child);

        assert_true(i >= 0);
        sim_encode(&m, b, &len);
        hold(s, wait, i, b, len);
        w->r->recalls++;
    }
    if (!w->draining && sim_range(w, 0, 99999) < w->p.compact_per_100k)
        replace(s);
    defer_cell_check(s);
}

static void
log_crashed(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    /* Its held replies and the reply cache it showed go; its batches may still commit. */
    s->hhead = s->nheld = 0;
    s->visible = 0;
    for (uint64_t id = 1; id <= s->nbatch; id++)
        batch_of(s, id)->visible = false;
    s->host = -1;
    s->run_last = 0;
    s->failed = false;
    s->unserved_since = w->t;
}

/* ---- the supervisor on the leader ---- */

static void
on_barrier(struct raft_barrier *req, int status)
{
    struct barrier_req *b = req->data;
    struct sim_raft *s = b->s;

    if (s->barrier == b) {
        s->barrier = NULL;
        s->barrier_ok = status == 0;
    }
    free(b);
}

static void
barrier_start(struct sim_raft *s)
{
    struct barrier_req *b = calloc(1, sizeof(*b));

    assert_non_null(b);
    b->s = s;
    b->req.data = b;
    disk_fault_arm(s, s->leader);
    if (raft_barrier(member_raft(s, (unsigned)s->leader), &b->req, on_barrier) != 0) {
        free(b); /* a disk fault: again next step */
        return;
    }
    s->barrier = b;
    s->barrier_host = s->leader;
    s->barrier_term = s->leader_term;
}

/* The barrier is applied on the leader: its copy holds every batch committed before it. */
static void
supervisor_start(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    const struct copy *c = &s->m[s->leader].copy;

    s->barrier_ok = false;
    if (c->n != s->ncl || c->digest != committed_digest(s, s->ncl))
        sim_fail(w, "after its barrier, member %d holds %llu batches; %zu were committed",
                 s->leader, (unsigned long long)c->n, s->ncl);
    journal_from_copy(s, c);
    s->run++;
    s->host = s->leader;
    s->host_term = s->leader_term;
    s->run_last = 0;
    s->failed = false;
    w->checked_nj = 0; /* a new ledger: its cells are checked at the next step */
    sim_sup_start(w);
    s->rr->supervisor_starts++;
    if (s->starts++ > 0 && w->t - s->unserved_since > s->rr->unserved_max_ms)
        s->rr->unserved_max_ms = w->t - s->unserved_since;
    if (w->p.verbose)
        fprintf(stderr, "t=%lld raft: supervisor on member %d (term %llu), %zu records\n",
                (long long)w->t, s->host, (unsigned long long)s->host_term, w->nj);
}

static void
supervise(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    bool moved = s->leader != s->host || s->leader_term != s->host_term;

    if (w->sup != NULL && (s->failed || moved))
        sim_sup_crash(w, w->t); /* it stopped leading, or a commit failed: never answered */
    if (s->barrier != NULL && (s->leader != s->barrier_host || s->leader_term != s->barrier_term))
        s->barrier = NULL; /* its callback comes, and changes nothing */
    if (s->barrier_ok && (s->leader != s->barrier_host || s->leader_term != s->barrier_term))
        s->barrier_ok = false;
    if (w->sup != NULL || s->leader < 0 || w->t < w->sup_down_until)
        return;
    if (s->barrier_ok)
        supervisor_start(s);
    else if (s->barrier == NULL)
        barrier_start(s);
}

static void
log_step(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    s->w = w;
    advance(s, w->t);
    notice_broken(s);
    if (!w->draining)
        faults(s);
    else
        s->disk_fault = false;
    faults_end(s);
    find_leader(s);
    release(s);
    supervise(s);
}

/* ---- the end ---- */

static bool
log_caught_up(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    return w->sup != NULL && in_flight(s) == 0;
}

static bool
log_settled(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;

    if (w->sup == NULL || in_flight(s) != 0 || s->nheld > s->hhead)
        return false;
    for (unsigned i = 0; i < s->n; i++) {
        if (live(s, i) && s->m[i].copy.n != s->ncl)
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

static void
log_end(struct sim_world *w)
{
    struct sim_raft *s = w->log->ctx;
    const struct copy *c = &s->m[s->host].copy;
    bool *in = calloc(s->nbatch + 1, sizeof(*in));

    assert_non_null(in);
    /* Every live member's copy is the same records in the same order; the others' a prefix. */
    for (unsigned i = 0; i < s->n; i++) {
        const struct copy *o = &s->m[i].copy;

        if (live(s, i) && (o->n != c->n || o->digest != c->digest || o->len != c->len ||
                           memcmp(o->b, c->b, c->len) != 0))
            sim_fail(w,
                     "member %u's copy (%llu batches, digest %016llx) differs from member "
                     "%d's (%llu, %016llx)",
                     i, (unsigned long long)o->n, (unsigned long long)o->digest, s->host,
                     (unsigned long long)c->n, (unsigned long long)c->digest);
        if (o->n > s->ncl || o->digest != committed_digest(s, o->n))
            sim_fail(w, "member %u's copy is not a prefix of the committed log", i);
    }
    /* No reply left for a batch the final log does not hold. */
    for (size_t at = 0; at < c->len; at += COPY_HEAD + get_u32(c->b + at))
        mark_batch(s, c->b + at + COPY_HEAD, in);
    for (uint64_t id = 1; id <= s->nbatch; id++) {
        if (batch_of(s, id)->released && !in[id - 1])
            sim_fail(w, "replies of batch %llu left; the final log does not hold it",
                     (unsigned long long)id);
    }
    free(in);
    journal_from_copy(s, c); /* sim_check_end replays the final log against the live ledger */
}

/* ---- a schedule ---- */

/* The clock (advance): a server that ticks every millisecond, a standby in a configuration of its
 * own, so it takes no part in the members' elections. It never answers them either, so the
 * fixture finds no leader every server acknowledges: it then does not copy the leader's log at
 * every step for its Leader Append-Only check, which over a log never shortened would cost a
 * step its length (the members' state machine safety is checked here, at each apply). */
static void
clock_open(struct sim_raft *s)
{
    struct raft_configuration conf;
    struct raft *r;
    char address[16];

    fsm_setup(&s->clock_fsm, NULL); /* never applies a command */
    assert_int_equal(raft_fixture_grow(&s->f, &s->clock_fsm), 0);
    r = raft_fixture_get(&s->f, s->clock);
    raft_set_heartbeat_timeout(r, 1);
    snprintf(address, sizeof(address), "%u", s->clock + 1);
    raft_configuration_init(&conf);
    assert_int_equal(raft_configuration_add(&conf, s->clock + 1, address, RAFT_STANDBY), 0);
    assert_int_equal(raft_bootstrap(r, &conf), 0);
    raft_configuration_close(&conf);
}

static void
cluster_open(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    struct raft_configuration conf;
    unsigned e = s->rp.election_ms;

    assert_int_equal(raft_fixture_initialize(&s->f), 0);
    for (unsigned i = 0; i < s->n; i++) {
        s->m[i].s = s;
        s->m[i].i = i;
        s->m[i].copy.digest = FNV_BASIS;
        fsm_setup(&s->m[i].fsm, &s->m[i]);
        assert_int_equal(raft_fixture_grow(&s->f, &s->m[i].fsm), 0);
        disk_wrap(s, i);
    }
    clock_open(s);
    raft_configuration_init(&conf);
    for (unsigned i = 0; i < s->n; i++) {
        struct raft *r = member_raft(s, i);
        char address[16];

        snprintf(address, sizeof(address), "%u", i + 1);
        assert_int_equal(raft_configuration_add(&conf, i + 1, address, RAFT_VOTER), 0);
        /* As cluster/log.c, at the simulation's pace: heartbeats every tenth of the election
         * timeout, pre-vote, a snapshot not answered sent again after 20 election timeouts.
         * Snapshots are taken far more often than cluster mode's every 100,000 batches (which
         * no schedule reaches), but every entry stays in the log behind them: libraft 0.15
         * appends the entries a leader sends from index 1 after the last entry of a follower
         * whose log a snapshot shortened (replication.c, deleteConflictingEntries: an entry
         * below the log reads as missing), and its fixture's disk truncates from the wrong
         * place once a snapshot was installed. So no member ever needs one installed. */
        raft_set_election_timeout(r, e);
        raft_set_heartbeat_timeout(r, e / 10 > 0 ? e / 10 : 1);
        raft_set_pre_vote(r, true);
        raft_set_install_snapshot_timeout(r, 20 * e);
        raft_set_snapshot_threshold(r, s->rp.snapshot_every);
        raft_set_snapshot_trailing(r, UINT_MAX);
        raft_fixture_set_network_latency(&s->f, i, (unsigned)sim_range(w, 1, 4));
        raft_fixture_set_disk_latency(&s->f, i, (unsigned)sim_range(w, 1, 3));
        for (unsigned j = 0; j < s->n; j++)
            s->phys[i][j] = true;
    }
    for (unsigned i = 0; i < s->n; i++) {
        assert_int_equal(raft_bootstrap(member_raft(s, i), &conf), 0);
        s->m[i].stored = 1; /* the configuration, written by the bootstrap */
    }
    raft_configuration_close(&conf);
    redraw_timeouts(s);
    assert_int_equal(raft_fixture_start(&s->f), 0);
}

static void
cluster_close(struct sim_raft *s)
{
    s->closing = true; /* pending requests fail, appends in flight land: none of it counts */
    raft_fixture_close(&s->f);
    for (unsigned i = 0; i < s->n; i++)
        free(s->m[i].copy.b);
    free(s->batches);
    free(s->times);
    free(s->pend);
    free(s->held);
    free(s->body);
    free(s->cl);
    free(s->at_index);
    free(s->snap);
    free(s->writes);
    free(s->stage.v);
    free(s->scratch.v);
}

void
sim_raft_run(const struct sim_params *p, const struct sim_raft_params *rp, struct sim_result *r,
             struct sim_raft_result *rr)
{
    static struct sim_world setup_world;
    struct sim_raft *s;

    if (the_raft == NULL) /* libraft keeps pointers into it until the fixture closes */
        the_raft = calloc(1, sizeof(*the_raft));
    s = the_raft;
    assert_non_null(s);
    memset(s, 0, sizeof(*s));
    assert_true(rp->voters >= 1 && rp->voters <= MEMBERS_MAX && rp->election_ms >= 10);
    s->rp = *rp;
    s->rr = rr;
    s->n = rp->voters;
    s->clock = rp->voters;
    s->leader = s->host = s->deposed = s->barrier_host = -1;
    /* The cluster is drawn before the world exists, from a generator of its own seeded from the
     * schedule's; then from the world's, as its faults are. */
    memset(&setup_world, 0, sizeof(setup_world));
    setup_world.p = *p;
    setup_world.rng = p->seed ^ 0x7a3f7ULL;
    s->w = &setup_world;
    cluster_open(s);
    s->log =
        (struct sim_log){s, log_step, log_turn, log_crashed, log_caught_up, log_settled, log_end};
    sim_run_log(p, &s->log, r);
    cluster_close(s);
}

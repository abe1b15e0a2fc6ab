/*
 * Internals of the raft mode of the simulation (sup_sim_raft.h), shared by its three files:
 * sup_sim_raft_members.c (the members: their copies of the log, the ground truth of what was
 * committed, libraft's FSM and the fixture's disk per member), sup_sim_raft_faults.c (links,
 * faults, leadership) and sup_sim_raft.c (the supervisor on the leader: the output gate, barriers
 * and rebuilds, the end of a schedule).
 */
#ifndef SUP_SIM_RAFT_INT_H
#define SUP_SIM_RAFT_INT_H

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

/* Big-endian integers of the bodies and copies. */
static inline void
put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline void
put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static inline uint32_t
get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t
get_u64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* libraft's calls to a raft_io carry no context of ours: the one world of the process. */
extern struct sim_raft *the_raft;

/* sup_sim_raft_members.c */
bool sr_chance(struct sim_world *w, int per_100k);
void sr_grow(void **p, size_t *cap, size_t need, size_t size);
struct raft *sr_member_raft(struct sim_raft *s, unsigned i);
bool sr_live(struct sim_raft *s, unsigned i);
struct batch *sr_batch_of(struct sim_raft *s, uint64_t id);
uint64_t sr_committed_digest(const struct sim_raft *s, uint64_t k);
void sr_journal_from_copy(struct sim_raft *s, const struct copy *c);
void sr_fsm_setup(struct raft_fsm *fsm, void *data);
void sr_disk_wrap(struct sim_raft *s, unsigned i);

/* sup_sim_raft.c: the newest batch of the running supervisor not yet known committed (0:
 * none). */
uint64_t sr_in_flight(struct sim_raft *s);

/* sup_sim_raft_end.c: a struct sim_log's caught_up, settled and end. */
bool sr_log_caught_up(struct sim_world *w);
bool sr_log_settled(struct sim_world *w);
void sr_log_end(struct sim_world *w);

/* sup_sim_raft_faults.c */
void sr_disk_fault_arm(struct sim_raft *s, int member);
void sr_faults(struct sim_raft *s);
void sr_faults_end(struct sim_raft *s);
void sr_notice_broken(struct sim_raft *s);
void sr_advance(struct sim_raft *s, int64_t t);
void sr_redraw_timeouts(struct sim_raft *s);
void sr_find_leader(struct sim_raft *s);

#endif

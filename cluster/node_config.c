/*
 * The configuration (tally.db) on the log, in tallyd's node (cluster_config_int.h).
 *
 * A `tally` change command on any member sends its changeset to the leader (ADMIN CONFIG),
 * which appends a CONFIG record and answers with the record's index once it is committed.
 * Every member applies each committed CONFIG record to its own tally.db in log order
 * (store_config_apply: the same record on the same file gives the same file, and the file
 * notes the index, so a replay after a restart applies nothing twice). The records wait in
 * a queue; one job at a time on libuv's thread pool applies all the queue holds in one
 * transaction, so that tallyd's loop never waits on the file and a burst of records costs
 * one commit (one fsync). A member answers ADMIN CONFIG_WAIT once its file holds a record
 * and its front has read the file again (it looks every 250 ms, as for a change on a single
 * host's file): the command asks every member before it returns.
 *
 * A JOIN's copy of tally.db is a job of the same queue: it holds every record before the
 * new member's MEMBER record (and perhaps some after it), and says which.
 */
#include "cluster_config_int.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "store_config.h"
#include "tally_log.h"

#define REQUESTS_MAX 64   /* ADMIN CONFIG waiting for their commit (leader) */
#define WAITS_MAX    32   /* ADMIN CONFIG_WAIT waiting for an apply here */
#define RETRY_MS     1000 /* a batch the file refused (full, I/O, locked) is tried again */
/* tallyd's front looks for a new tally.db this often (RELOAD_CHECK_MS in
 * supervisor/front/front.c, a repeating timer on this same loop): a timer started after a
 * commit and due this much later fires after the front's next look, so a change is in force
 * here by then. A little more than the period. */
#define FRONT_RELOAD_MS 260

enum op_kind {
    OP_READ,  /* learn the file's applied index */
    OP_APPLY, /* a committed CONFIG record */
    OP_COPY,  /* a copy of the file for a JOIN */
};

struct op {
    struct op *next;
    enum op_kind kind;
    uint64_t index;                      /* OP_APPLY: the record's */
    struct store_config_outcome outcome; /* OP_APPLY: what it did */
    uint64_t token, member;              /* OP_COPY: the JOIN to answer, the id it gets */
    int rc;                              /* OP_COPY: the copy's result */
    uint8_t *copy;
    size_t copy_len;
    uint64_t copy_index;
    size_t len;
    uint8_t bytes[]; /* OP_APPLY: the changeset */
};

/* An ADMIN CONFIG on the leader, from its append until the append's callback. */
struct request {
    struct request *next;
    struct node_config *c;
    uint64_t token, id;
    bool answered;
};

struct node_config {
    cluster_node *n;
    uv_work_t work;
    uv_timer_t retry;
    uv_timer_t settle;       /* waits are answered once the front has read the change */
    uint64_t in_force_ms;    /* uv_now from which the last change applied is in force */
    struct op *head, **tail; /* waiting, in log order */
    struct op *batch;        /* the job's */
    store_db *db;            /* the jobs' connection: one job at a time uses it */
    int batch_rc;
    uint64_t batch_applied;
    char batch_err[256];
    uint64_t applied; /* the file's applied index after the last job */
    bool known, busy, retrying, closing;
    bool stalled; /* a record could not be queued: nothing more is applied (restart) */
    unsigned fails, closes;
    struct request *requests;
    unsigned n_requests;
    struct {
        uint64_t token, index;
    } waits[WAITS_MAX];
};

static void
log_event(enum tally_log_level level, const char *event, uint64_t index, const char *detail)
{
    struct tally_log l;

    if (tally_log_begin(&l, level, event)) {
        tally_log_int(&l, "index", (int64_t)index);
        if (detail != NULL)
            tally_log_str(&l, "detail", detail);
        tally_log_end(&l);
    }
}

static void
answer_ok(cluster_node *n, uint64_t token, uint64_t v)
{
    uint8_t b[9];

    b[0] = CLUSTER_JOIN_OK;
    cluster__put_u64(b + 1, v);
    (void)cluster_log_join_answer(n->lg, token, b, sizeof(b));
}

/* ---- the queue and its jobs ---- */

static void kick(struct node_config *c);

static struct op *
op_new(enum op_kind kind, size_t len)
{
    struct op *o = tally_calloc(1, sizeof(*o) + len);

    if (o != NULL) {
        o->kind = kind;
        o->len = len;
    }
    return o;
}

static void
free_ops(struct op *o)
{
    while (o != NULL) {
        struct op *next = o->next;
        tally_free(o->copy);
        tally_free(o);
        o = next;
    }
}

static void
enqueue(struct node_config *c, struct op *o)
{
    *c->tail = o;
    c->tail = &o->next;
    kick(c);
}

/* The job, on the thread pool: every record of the batch in one transaction, then the
 * copies. */
static void
work_batch(uv_work_t *w)
{
    struct node_config *c = w->data;
    bool writes = false;
    int rc = TALLY_OK;

    for (struct op *o = c->batch; o != NULL; o = o->next)
        writes |= o->kind == OP_APPLY;
    if (c->db == NULL)
        rc = store_config_open(c->n->data, false, &c->db);
    if (rc == TALLY_OK && writes) {
        rc = store_db_begin(c->db);
        for (struct op *o = c->batch; o != NULL && rc == TALLY_OK; o = o->next)
            if (o->kind == OP_APPLY)
                rc = store_config_apply(c->db, o->index, o->bytes, o->len, &o->outcome);
        rc = store_db_end(c->db, rc);
    }
    if (rc == TALLY_OK)
        rc = store_config_applied(c->db, &c->batch_applied);
    for (struct op *o = c->batch; o != NULL && rc == TALLY_OK; o = o->next)
        if (o->kind == OP_COPY)
            o->rc = store_config_copy(c->db, CLUSTER_JOIN_CONFIG_MAX, &o->copy, &o->copy_len,
                                      &o->copy_index);
    c->batch_rc = rc;
    if (rc != TALLY_OK)
        snprintf(c->batch_err, sizeof(c->batch_err), "%s: %s", tally_strerror(rc),
                 c->db != NULL ? store_db_errmsg(c->db) : store_open_errmsg());
}

/* What the batch did: a line per record that met a conflict, one for the batch. */
static void
report(const struct node_config *c, const struct op *batch)
{
    struct tally_log l;
    int64_t records = 0;

    for (const struct op *o = batch; o != NULL; o = o->next) {
        const struct store_config_outcome *out = &o->outcome;

        if (o->kind != OP_APPLY || out->skipped)
            continue;
        records++;
        if (!out->aborted && !out->malformed && out->replaced == 0 && out->omitted == 0)
            continue;
        if (tally_log_begin(&l, TALLY_LOG_WARN, "cluster_config_conflict")) {
            tally_log_int(&l, "index", (int64_t)o->index);
            tally_log_int(&l, "replaced", out->replaced);
            tally_log_int(&l, "omitted", out->omitted);
            tally_log_str(&l, "detail",
                          out->malformed ? "not a changeset: nothing applied"
                          : out->aborted ? "it would leave a row without its parent (a link of "
                                           "a removed tenant): nothing of it applied"
                                         : "rows changed meanwhile: applied over them, or "
                                           "left out when gone or taken");
            tally_log_end(&l);
        }
    }
    if (records > 0 && tally_log_begin(&l, TALLY_LOG_INFO, "cluster_config_applied")) {
        tally_log_int(&l, "records", records);
        tally_log_int(&l, "index", (int64_t)c->applied);
        tally_log_end(&l);
    }
}

static void
finish_copies(struct node_config *c, struct op *batch)
{
    char why[200];

    for (struct op *o = batch; o != NULL; o = o->next) {
        if (o->kind != OP_COPY)
            continue;
        if (o->rc == TALLY_OK) {
            cluster__join_answer(c->n, o->token, o->member, o->copy, o->copy_len, o->copy_index);
            continue;
        }
        snprintf(why, sizeof(why),
                 "the inviting host cannot copy its tally.db (%s): remove member %llu again "
                 "(tally cluster leave %llu)",
                 o->rc == TALLY_ETOOBIG ? "more than a join carries" : tally_strerror(o->rc),
                 (unsigned long long)o->member, (unsigned long long)o->member);
        log_event(TALLY_LOG_ERROR, "cluster_join_failed", c->applied, why);
        cluster__join_refuse(c->n, o->token, CLUSTER_JOIN_BUSY, why);
    }
}

static void
answer_waits(struct node_config *c)
{
    if (uv_now(c->n->loop) < c->in_force_ms)
        return; /* on_settled */
    for (int i = 0; i < WAITS_MAX; i++) {
        if (c->waits[i].token == 0 || c->waits[i].index > c->applied)
            continue;
        answer_ok(c->n, c->waits[i].token, c->applied);
        c->waits[i].token = 0;
    }
}

static void
free_config(struct node_config *c)
{
    cluster_node *n = c->n;

    store_db_close(c->db);
    free_ops(c->head);
    while (c->requests != NULL) { /* the log closed first: their callbacks came */
        struct request *r = c->requests;
        c->requests = r->next;
        tally_free(r);
    }
    tally_free(c);
    n->config = NULL;
    cluster__node_maybe_free(n);
}

static void
close_one(struct node_config *c)
{
    if (--c->closes == 0)
        free_config(c);
}

static void
on_retry(uv_timer_t *t)
{
    struct node_config *c = t->data;

    c->retrying = false;
    kick(c);
}

static void
on_settled(uv_timer_t *t)
{
    answer_waits(t->data);
}

static void
after_batch(uv_work_t *w, int status)
{
    struct node_config *c = w->data;
    struct op *batch = c->batch;

    c->busy = false;
    c->batch = NULL;
    if (c->closing) {
        free_ops(batch); /* applied at the next start, from the log */
        close_one(c);
        return;
    }
    if (status != 0 || c->batch_rc != TALLY_OK) {
        /* Every record stays, in order: nothing is skipped past a record not applied. */
        struct op **end = &batch;
        while (*end != NULL)
            end = &(*end)->next;
        *end = c->head;
        if (c->head == NULL)
            c->tail = end;
        c->head = batch;
        if (c->fails++ % 60 == 0) /* the first of a streak, then one a minute */
            log_event(TALLY_LOG_ERROR, "cluster_config_failed", c->applied,
                      status != 0 ? "the job was cancelled" : c->batch_err);
        c->retrying = true;
        uv_timer_start(&c->retry, on_retry, RETRY_MS, 0);
        return;
    }
    c->fails = 0;
    if (c->known && c->batch_applied > c->applied) {
        c->in_force_ms = uv_now(c->n->loop) + FRONT_RELOAD_MS;
        uv_timer_start(&c->settle, on_settled, FRONT_RELOAD_MS, 0);
    }
    c->applied = c->batch_applied;
    c->known = true;
    report(c, batch);
    finish_copies(c, batch);
    free_ops(batch);
    answer_waits(c);
    kick(c);
}

static void
kick(struct node_config *c)
{
    if (c->busy || c->retrying || c->closing || c->stalled || c->head == NULL)
        return;
    c->batch = c->head;
    c->head = NULL;
    c->tail = &c->head;
    c->work.data = c;
    if (uv_queue_work(c->n->loop, &c->work, work_batch, after_batch) == 0) {
        c->busy = true;
        return;
    }
    c->head = c->batch; /* cannot fail on a live loop; tried again with the next record */
    c->batch = NULL;
    for (c->tail = &c->head; *c->tail != NULL;)
        c->tail = &(*c->tail)->next;
}

/* Without memory for the state, the node keeps this one: stalled, it applies nothing more,
 * so no later record is noted applied past one that was not. */
static struct node_config stalled_config = {.stalled = true};

/* The node's configuration state, made at first use with a job that reads the applied
 * index. */
static struct node_config *
config_of(cluster_node *n)
{
    struct node_config *c = n->config;
    struct op *o;

    if (c != NULL)
        return c;
    c = tally_calloc(1, sizeof(*c));
    o = op_new(OP_READ, 0);
    if (c == NULL || o == NULL) {
        tally_free(c);
        tally_free(o);
        log_event(TALLY_LOG_ERROR, "cluster_config_stalled", 0,
                  "out of memory: configuration changes are not applied here until tallyd "
                  "restarts");
        n->config = &stalled_config;
        return n->config;
    }
    c->n = n;
    c->tail = &c->head;
    uv_timer_init(n->loop, &c->retry);
    c->retry.data = c;
    uv_timer_init(n->loop, &c->settle);
    c->settle.data = c;
    n->config = c;
    enqueue(c, o);
    return c;
}

/* ---- what node.c and node_join.c call ---- */

static void
answer_request(struct node_config *c, uint64_t id, uint64_t index)
{
    for (struct request *r = c->requests; r != NULL; r = r->next) {
        if (r->id != id || r->answered)
            continue;
        answer_ok(c->n, r->token, index);
        r->answered = true;
    }
}

void
cluster__config_apply(cluster_node *n, uint64_t index, const uint8_t *p, size_t len)
{
    struct node_config *c;
    struct op *o;

    if (len < 8)
        return; /* not a record this version writes: ignored everywhere alike */
    c = config_of(n);
    answer_request(c, cluster__get_u64(p), index);
    if (c->stalled || (c->known && index <= c->applied))
        return; /* the file holds it already (the log replays after a restart) */
    o = op_new(OP_APPLY, len - 8);
    if (o == NULL) { /* no later record may be noted applied past this one: a restart replays */
        log_event(TALLY_LOG_ERROR, "cluster_config_stalled", index,
                  "out of memory: configuration changes are not applied here until tallyd "
                  "restarts");
        c->stalled = true;
        return;
    }
    o->index = index;
    memcpy(o->bytes, p + 8, len - 8);
    enqueue(c, o);
}

static void
on_appended(void *req_data, int rc)
{
    struct request *r = req_data;
    struct node_config *c = r->c;
    struct request **at = &c->requests;

    if (!r->answered && rc == TALLY_EUNAVAIL)
        cluster__join_refuse(c->n, r->token, CLUSTER_JOIN_BUSY,
                             "the leader lost its majority before the change was committed: it "
                             "is in force only if a majority comes back with that leader's log "
                             "(check before you try again)");
    else if (NEVER(!r->answered && rc == TALLY_OK)) /* its record applied here first */
        answer_ok(c->n, r->token, cluster_log_applied(c->n->lg));
    while (*at != r)
        at = &(*at)->next;
    *at = r->next;
    c->n_requests--;
    tally_free(r);
}

/* CONFIG: the leader appends the changeset as a record; answered by cluster__config_apply once
 * it is committed, or refused. */
static int
admin_config(cluster_node *n, uint64_t token, const uint8_t *changes, size_t len)
{
    struct node_config *c;
    struct request *r = NULL;
    uint8_t *rec = NULL;
    char why[200];
    int rc;

    if (len == 0)
        return TALLY_EPROTO;
    if (!cluster_log_leading(n->lg)) {
        const struct cluster_member *l = cluster_state_member(&n->st, cluster_log_leader(n->lg));
        snprintf(why, sizeof(why), "not the leader now (leader: %s)",
                 l != NULL ? l->address : "none elected");
        cluster__join_refuse(n, token, CLUSTER_JOIN_NOT_LEADER, why);
        return TALLY_OK;
    }
    if (len > CLUSTER_CONFIG_MAX) {
        snprintf(why, sizeof(why), "the change is %zu bytes, more than the %u a change may have",
                 len, (unsigned)CLUSTER_CONFIG_MAX);
        cluster__join_refuse(n, token, CLUSTER_JOIN_REFUSED, why);
        return TALLY_OK;
    }
    c = config_of(n);
    if (c->stalled || c->n_requests >= REQUESTS_MAX || (r = tally_calloc(1, sizeof(*r))) == NULL ||
        (rec = tally_malloc(9 + len)) == NULL) {
        tally_free(r);
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY, "too many changes at once: try again");
        return TALLY_OK;
    }
    r->c = c;
    r->token = token;
    randombytes_buf(&r->id, sizeof(r->id)); /* which record answers this request */
    rec[0] = RECORD_CONFIG;
    cluster__put_u64(rec + 1, r->id);
    memcpy(rec + 9, changes, len);
    r->next = c->requests; /* listed first: its record may apply before the append returns */
    c->requests = r;
    c->n_requests++;
    rc = cluster_log_append(n->lg, rec, 9 + len, on_appended, r);
    tally_free(rec);
    if (rc != TALLY_OK) {
        c->requests = r->next; /* nothing was applied meanwhile: r is still first */
        c->n_requests--;
        if (!r->answered)
            cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY, "the log did not take the change");
        tally_free(r);
    }
    return TALLY_OK;
}

/* CONFIG_WAIT: answered once this member's file holds record `index`. The oldest wait gives
 * way to a new one when all slots are taken. */
static int
admin_wait(cluster_node *n, uint64_t token, uint64_t index)
{
    struct node_config *c = config_of(n);
    int slot = 0;

    if (c->stalled) {
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY, "configuration changes are stalled here");
        return TALLY_OK;
    }
    if (c->known && c->applied >= index && uv_now(n->loop) >= c->in_force_ms) {
        answer_ok(n, token, c->applied);
        return TALLY_OK;
    }
    for (int i = 0; i < WAITS_MAX; i++) {
        if (c->waits[i].token == 0) {
            slot = i;
            break;
        }
        if (c->waits[i].token < c->waits[slot].token)
            slot = i;
    }
    if (c->waits[slot].token != 0)
        cluster__join_refuse(n, c->waits[slot].token, CLUSTER_JOIN_BUSY, "too many waits");
    c->waits[slot].token = token;
    c->waits[slot].index = index;
    return TALLY_OK;
}

int
cluster__config_admin(cluster_node *n, uint64_t token, const uint8_t *msg, size_t len)
{
    if (len >= 1 && msg[0] == ADMIN_CONFIG)
        return admin_config(n, token, msg + 1, len - 1);
    if (len == 9 && msg[0] == ADMIN_CONFIG_WAIT)
        return admin_wait(n, token, cluster__get_u64(msg + 1));
    return TALLY_EPROTO;
}

bool
cluster__config_fits(cluster_node *n, char *why, size_t cap)
{
    char path[600];
    struct stat sb;

    snprintf(path, sizeof(path), "%s/%s", n->data, STORE_CONFIG_FILE);
    if (stat(path, &sb) != 0 || (uint64_t)sb.st_size <= CLUSTER_JOIN_CONFIG_MAX)
        return true; /* the copy says for sure */
    snprintf(why, cap,
             "the configuration (tally.db, %lld KiB) is more than a join carries (%u KiB)",
             (long long)sb.st_size / 1024, CLUSTER_JOIN_CONFIG_MAX / 1024);
    return false;
}

void
cluster__config_copy(cluster_node *n, uint64_t token, uint64_t id)
{
    struct node_config *c = config_of(n);
    struct op *o = !c->stalled ? op_new(OP_COPY, 0) : NULL;

    if (o == NULL) {
        cluster__join_refuse(n, token, CLUSTER_JOIN_BUSY,
                             "the inviting host cannot copy its tally.db now (out of memory)");
        return;
    }
    o->token = token;
    o->member = id;
    enqueue(c, o);
}

bool
cluster__config_pending(const cluster_node *n)
{
    const struct node_config *c = n->config;

    return c != NULL && (c->stalled || c->busy || c->retrying || c->head != NULL);
}

static void
on_timer_closed(uv_handle_t *h)
{
    close_one(h->data);
}

bool
cluster__config_close(cluster_node *n)
{
    struct node_config *c = n->config;

    if (c == NULL || c == &stalled_config) {
        n->config = NULL;
        return false;
    }
    if (!c->closing) {
        c->closing = true;
        c->closes = 2 + (c->busy ? 1 : 0); /* the two timers, the job in flight */
        uv_close((uv_handle_t *)&c->retry, on_timer_closed);
        uv_close((uv_handle_t *)&c->settle, on_timer_closed);
    }
    return true;
}

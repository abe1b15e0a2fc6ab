/*
 * The focused ledger suites' fixture (sup_sim_fx.h): a ledger of tenant "acme" with three
 * endpoints (search; export, expensive; smooth, GCRA) and its journal, driven the way the process
 * layer drives it.
 */
/* cmocka.h needs these first, in this order (docs/CONVENTIONS.md §6). */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdlib.h>
#include <string.h>

#include "sup_sim_fx.h"

static bool
allows(void *ctx, const char *link, const char *endpoint, int64_t now_ms)
{
    const struct fx *f = ctx;

    (void)endpoint;
    (void)now_ms;
    return !(f->deny_links && strcmp(link, LINK_B) == 0);
}

void
fx_limit(struct tenant_limits *ls, int64_t n, int64_t period_ms)
{
    ls->v[ls->count++] = (struct tenant_limit){n, period_ms};
}

void
fx_config(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    strcpy(f->cfg.tenant, "acme");
    strcpy(f->cfg.plan.name, "pro");
    fx_limit(&f->cfg.plan.limits, 600, MINUTE);
    fx_limit(&f->cfg.plan.limits, 36000, 60 * MINUTE);
    f->cfg.plan.concurrency = 2;
    for (int i = 0; i < 3; i++) {
        struct tenant_endpoint *e = &f->eps[i];

        e->cost = 1;
        e->on_unavailable = TENANT_UNAVAIL_OPEN;
        fx_limit(&e->degraded_limits, 10, MINUTE);
    }
    strcpy(f->eps[0].name, "search");
    strcpy(f->eps[1].name, "export");
    f->eps[1].expensive = true;
    strcpy(f->eps[2].name, "smooth");
    f->eps[2].algorithm = TENANT_ALG_GCRA;
    fx_limit(&f->eps[2].limits, 60, MINUTE);
    f->cfg.endpoints = f->eps;
    f->cfg.endpoint_count = 3;
    f->cfg.link_allows = allows;
    f->cfg.link_ctx = f;
}

void
fx_start(struct fx *f)
{
    f->journal = calloc(FX_JOURNAL, sizeof(*f->journal));
    assert_non_null(f->journal);
    assert_int_equal(sup_ledger_open(&f->cfg, &f->l), TALLY_OK);
}

void
fx_open(struct fx *f)
{
    fx_config(f);
    fx_start(f);
}

void
fx_open_unkept(struct fx *f)
{
    fx_config(f);
    f->cfg.l_keep = -1;
    fx_start(f);
}

void
fx_close(struct fx *f)
{
    sup_ledger_close(f->l);
    free(f->journal);
}

/* Sends `m` (origin filled by the caller) and returns the reply; records go to the journal. */
struct proto_lease_msg
fx_send(struct fx *f, int64_t now, const struct proto_lease_msg *m, size_t *records)
{
    struct sup_records out = {f->journal, f->nj, FX_JOURNAL};
    struct proto_lease_msg reply;

    assert_int_equal(sup_ledger_handle(f->l, now, m, &reply, &out), TALLY_OK);
    if (records != NULL)
        *records = out.count - f->nj;
    f->nj = out.count;
    assert_int_equal(proto_lease_validate(&reply), TALLY_OK);
    assert_true(proto_lease_is_reply(reply.type));
    assert_int_equal(reply.origin.seq, m->origin.seq);
    return reply;
}

void
fx_origin(struct fx *f, struct proto_lease_msg *m, uint8_t type, int child, uint64_t inc)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    strcpy(m->origin.child, f->eps[child].name);
    m->origin.incarnation = inc;
    m->origin.seq = ++f->seq[child];
}

void
fx_hello(struct fx *f, int child, uint64_t inc, int64_t now)
{
    struct proto_lease_msg m, r;

    fx_origin(f, &m, PROTO_LEASE_HELLO, child, inc);
    strcpy(m.hello.tenant, "acme");
    r = fx_send(f, now, &m, NULL);
    assert_int_equal(r.type, PROTO_LEASE_WELCOME);
}

struct proto_lease_msg
fx_acquire(struct fx *f, int child, uint64_t inc, const char *link, int64_t want, int64_t need,
           int64_t now)
{
    struct proto_lease_msg m;

    fx_origin(f, &m, PROTO_LEASE_ACQUIRE, child, inc);
    strcpy(m.acquire.endpoint, f->eps[child].name);
    strcpy(m.acquire.link, link);
    m.acquire.want = want;
    m.acquire.need = need;
    return fx_send(f, now, &m, NULL);
}

struct proto_lease_msg
fx_acquire_next(struct fx *f, int child, uint64_t inc, const char *link, int64_t now)
{
    struct proto_lease_msg m;

    fx_origin(f, &m, PROTO_LEASE_ACQUIRE, child, inc);
    strcpy(m.acquire.endpoint, f->eps[child].name);
    strcpy(m.acquire.link, link);
    m.acquire.want = 1;
    m.acquire.flags = PROTO_LEASE_ACQ_NEXT;
    return fx_send(f, now, &m, NULL);
}

struct cell_find {
    enum tenant_scope scope;
    int64_t period_ms;
    struct sup_cell_info out;
    bool found;
};

static int
find_cell(void *ctx, const struct sup_cell_info *c)
{
    struct cell_find *cf = ctx;

    if (c->scope == cf->scope && c->period_ms == cf->period_ms) {
        cf->out = *c;
        cf->found = true;
        return 1;
    }
    return 0;
}

void
fx_heartbeat(struct fx *f, struct proto_lease_msg *m, const char *link_a, int64_t a,
             const char *link_b, int64_t b)
{
    fx_origin(f, m, PROTO_LEASE_HEARTBEAT, 0, 1);
    strcpy(m->heartbeat.endpoint, "search");
    m->heartbeat.count = link_b != NULL ? 2 : 1;
    strcpy(m->heartbeat.e[0].link, link_a);
    m->heartbeat.e[0].debt = a;
    if (link_b != NULL) {
        strcpy(m->heartbeat.e[1].link, link_b);
        m->heartbeat.e[1].debt = b;
    }
}

void
fx_assert_replay(struct fx *f)
{
    sup_ledger *again = NULL;

    assert_int_equal(sup_ledger_open(&f->cfg, &again), TALLY_OK);
    for (size_t i = 0; i < f->nj; i++)
        assert_int_equal(sup_ledger_replay(again, &f->journal[i]), TALLY_OK);
    assert_int_equal(sup_ledger_digest(again), sup_ledger_digest(f->l));
    sup_ledger_close(again);
}

struct sup_cell_info
fx_plan_cell(struct fx *f, int64_t period_ms)
{
    struct cell_find cf = {TENANT_SCOPE_PLAN, period_ms, {0}, false};

    (void)sup_ledger_each_cell(f->l, find_cell, &cf);
    assert_true(cf.found);
    return cf.out;
}

/*
 * The path evaluator: one request touches up to four budgets (plan, link, endpoint for the
 * tenant, endpoint for the link) and maybe a concurrency slot, and is admitted iff every bound
 * of every one admits it (docs/DESIGN.md §2). Everything is checked first, without writing; only if
 * all admit is anything charged, so a narrower refusal never drains a wider budget and a refused
 * path leaves every state byte as it was. Arguments are validated up front, which is what lets
 * the charges that follow an admission never fail halfway.
 */
#include "count_int.h"

#include <stddef.h>
#include <string.h>

static bool
budget_scope_ok(enum tenant_scope scope)
{
    return scope == TENANT_SCOPE_PLAN || scope == TENANT_SCOPE_LINK ||
           scope == TENANT_SCOPE_ENDPOINT_TENANT || scope == TENANT_SCOPE_ENDPOINT_LINK;
}

static bool
algorithm_ok(enum tenant_algorithm algorithm)
{
    return algorithm == TENANT_ALG_WINDOW || algorithm == TENANT_ALG_GCRA;
}

int
tenant_budget_init(struct tenant_budget *b, enum tenant_scope scope,
                   enum tenant_algorithm algorithm, const struct tenant_limits *ls)
{
    int rc;

    if (b == NULL || !budget_scope_ok(scope) || !algorithm_ok(algorithm))
        return TALLY_EINVAL;
    rc = tenant__count_check_limits(ls);
    if (rc == TALLY_OK && algorithm == TENANT_ALG_GCRA)
        rc = tenant__count_check_no_month(ls);
    if (rc != TALLY_OK)
        return rc;
    memset(b, 0, sizeof(*b));
    b->scope = scope;
    b->algorithm = algorithm;
    b->limits = *ls;
    return TALLY_OK;
}

/* Time, cost and the shape of the path; each budget's limits and state are checked by its own
 * check before anything is charged. */
static int
path_check_args(const struct tenant_path *p, int64_t now_ms, int64_t cost,
                const struct tenant_decision *out)
{
    int rc = tenant__count_check_now(now_ms);

    if (rc == TALLY_OK)
        rc = tenant__count_check_cost(cost);
    if (rc != TALLY_OK)
        return rc;
    if (p == NULL || out == NULL || p->count > TENANT_PATH_MAX_BUDGETS)
        return TALLY_EINVAL;
    for (uint32_t i = 0; i < p->count; i++) {
        const struct tenant_budget *b = p->budgets[i];

        if (b == NULL || !budget_scope_ok(b->scope) || !algorithm_ok(b->algorithm))
            return TALLY_EINVAL;
        /* A budget listed twice would be checked twice against one count, then charged twice. */
        for (uint32_t j = 0; j < i; j++) {
            if (p->budgets[j] == b)
                return TALLY_EINVAL;
        }
    }
    if (p->slots != NULL) {
        if (p->slot_ttl_ms < 0)
            return TALLY_EINVAL;
        if (p->slot_ttl_ms > TENANT__SPAN_MAX_MS || p->slots->next_id == INT64_MAX)
            return TALLY_EOVERFLOW;
    }
    return TALLY_OK;
}

static int
budget_check(const struct tenant_budget *b, int64_t now_ms, int64_t cost,
             struct tenant_verdict *out)
{
    if (b->algorithm == TENANT_ALG_GCRA)
        return tenant_gcra_check(&b->limits, b->burst, &b->st.gcra, now_ms, cost, out);
    return tenant_window_check(&b->limits, &b->st.window, now_ms, cost, out);
}

static int
budget_charge(struct tenant_budget *b, int64_t now_ms, int64_t cost)
{
    if (b->algorithm == TENANT_ALG_GCRA)
        return tenant_gcra_charge(&b->limits, b->burst, &b->st.gcra, now_ms, cost);
    return tenant_window_charge(&b->limits, &b->st.window, now_ms, cost);
}

/* Copies the bound verdict `v` reports into the decision's summary fields. */
static void
decision_report(struct tenant_decision *out, enum tenant_scope scope, uint32_t budget_index,
                const struct tenant_verdict *v)
{
    const struct tenant_bound *b = &v->v[v->bound];

    out->scope = scope;
    out->budget_index = budget_index;
    out->bound_index = v->bound;
    out->limit = b->limit;
    out->period_ms = b->period_ms;
    out->remaining = b->remaining;
    out->reset_ms = b->reset_ms;
}

/*
 * Picks the bound the decision speaks for: when refused, the refusing budget with the longest
 * wait (first on ties, so the widest scope); when admitted, the tightest bound of all.
 */
static void
decision_pick(const struct tenant_path *p, struct tenant_decision *out)
{
    const struct tenant_verdict *best = NULL;

    for (uint32_t i = 0; i <= p->count; i++) {
        const struct tenant_verdict *v = i < p->count ? &out->budget[i] : &out->slot;
        enum tenant_scope scope = i < p->count ? p->budgets[i]->scope : TENANT_SCOPE_CONCURRENCY;
        bool better;

        if (v->count == 0 || v->admitted != out->admitted)
            continue;
        if (best == NULL)
            better = true;
        else if (out->admitted)
            better = tenant__count_tighter(&v->v[v->bound], &best->v[best->bound]);
        else
            better = tenant__count_wait_longer(v->retry_after_ms, best->retry_after_ms);
        if (better) {
            best = v;
            decision_report(out, scope, i, v);
        }
    }
    /* A refused path has a refusing verdict, and a refusing verdict has a bound. */
    if (!out->admitted && ALWAYS(best != NULL)) {
        out->retry_after_ms = best->retry_after_ms;
        out->never = best->never;
    }
}

int
tenant_path_decide(struct tenant_path *p, int64_t now_ms, int64_t cost, struct tenant_decision *out)
{
    int rc = path_check_args(p, now_ms, cost, out);

    if (rc != TALLY_OK)
        return rc;
    out->admitted = true;
    out->never = false;
    out->scope = TENANT_SCOPE_NONE;
    out->budget_index = 0;
    out->bound_index = 0;
    out->retry_after_ms = 0;
    out->limit = TENANT_UNBOUNDED;
    out->period_ms = 0;
    out->remaining = TENANT_UNBOUNDED;
    out->reset_ms = 0;
    out->slot_id = 0;

    /* Check everything; nothing is written until every check has run. */
    for (uint32_t i = 0; i < TENANT_PATH_MAX_BUDGETS; i++) {
        struct tenant_verdict *v = &out->budget[i];

        if (i >= p->count) {
            v->admitted = true;
            v->never = false;
            v->count = 0;
            continue;
        }
        rc = budget_check(p->budgets[i], now_ms, cost, v);
        if (rc != TALLY_OK)
            return rc;
        out->admitted = out->admitted && v->admitted;
    }
    out->slot.admitted = true;
    out->slot.never = false;
    out->slot.count = 0;
    if (p->slots != NULL) {
        rc = tenant_slot_check(p->slots, p->slot_limit, now_ms, &out->slot);
        if (rc != TALLY_OK)
            return rc;
        out->admitted = out->admitted && out->slot.admitted;
    }
    decision_pick(p, out);
    if (!out->admitted)
        return TALLY_OK;

    /* Everything admits with validated arguments: these charges cannot fail. */
    for (uint32_t i = 0; i < p->count; i++) {
        rc = budget_charge(p->budgets[i], now_ms, cost);
        if (NEVER(rc != TALLY_OK))
            return rc;
    }
    if (p->slots != NULL) {
        rc = tenant_slot_charge(p->slots, now_ms, p->slot_ttl_ms, &out->slot_id);
        if (NEVER(rc != TALLY_OK))
            return rc;
    }
    return TALLY_OK;
}

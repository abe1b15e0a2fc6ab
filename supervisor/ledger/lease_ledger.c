/*
 * The ledger's tables (sup_lease.h): opening and configuring a ledger, and the bounded tables it
 * keeps for one tenant. Links are found through a string index (tenant_index.h) and created when
 * they first appear; when the table is full, a link whose every window has ended, with no lease and
 * no held slot, is evicted (its state is then indistinguishable from a fresh one). Endpoint budgets
 * of a link ("ep:E:L") hang off the link, created by their first lease or debt. Children (peers)
 * are created by their first HELLO. All allocation of the ledger happens here.
 */
#include "sup_lease_int.h"

#include <stdio.h>
#include <string.h>

#define LINKS_DEFAULT 4096
/* The link table's first size: it doubles as it fills, to max_links and past it (when
 * every link is in use), up to this. */
#define LINKS_INITIAL  64
#define LINKS_HARD_MAX (1u << 22)
/* The lease table's first size: it grows (doubling) when full, up to this. */
#define LEASES_DEFAULT  64
#define LEASES_HARD_MAX (1u << 22)

static int64_t
or_default(int64_t v, int64_t def)
{
    return v > 0 ? v : def;
}

/* ---- configuration ---- */

static int
limits_ok(const struct tenant_limits *ls, enum tenant_algorithm alg)
{
    struct tenant_budget probe;

    /* tenant_budget_init validates the limits the way every counting call will. */
    return tenant_budget_init(&probe, TENANT_SCOPE_PLAN, alg, ls) == TALLY_OK;
}

static int
config_check(const struct tenant_plan *plan, const struct tenant_endpoint *eps, size_t count)
{
    if (plan == NULL || (count > 0 && eps == NULL) || count > SUP_MAX_ENDPOINTS)
        return TALLY_EINVAL;
    if (!limits_ok(&plan->limits, TENANT_ALG_WINDOW) ||
        !limits_ok(&plan->link_limits, TENANT_ALG_WINDOW) || plan->concurrency < 0 ||
        plan->concurrency > TENANT_CONCURRENCY_MAX)
        return TALLY_ECONFIG;
    for (size_t i = 0; i < count; i++) {
        const struct tenant_endpoint *e = &eps[i];

        if (!tenant_name_valid(e->name) ||
            (e->algorithm != TENANT_ALG_WINDOW && e->algorithm != TENANT_ALG_GCRA) ||
            !limits_ok(&e->limits, e->algorithm) || !limits_ok(&e->tenant_limits, e->algorithm) ||
            !limits_ok(&e->degraded_limits, TENANT_ALG_WINDOW))
            return TALLY_ECONFIG;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(eps[j].name, e->name) == 0)
                return TALLY_ECONFIG;
        }
    }
    return TALLY_OK;
}

/* Rematches every link and pair budget to the current limits. */
static void
links_rematch(sup_ledger *l)
{
    for (uint32_t i = 0; i < l->links_cap; i++) {
        struct sup_link *k = l->links[i];

        if (k == NULL)
            continue;
        sup__cells_match(&k->b, &l->plan.link_limits, l->now_ms);
        for (struct sup_pair *p = k->pairs; p != NULL; p = p->next) {
            const struct sup_endpoint *ep = sup__endpoint_find(l, p->endpoint);

            if (ep != NULL)
                sup__cells_match(&p->b, &ep->policy.limits, l->now_ms);
        }
    }
}

/* The month period of the configuration (every month of one tenant is on its billing day), or 0. */
static int64_t
config_month(const sup_ledger *l)
{
    const struct tenant_limits *ls[2] = {&l->plan.limits, &l->plan.link_limits};

    for (int i = 0; i < 2; i++) {
        for (uint32_t j = 0; j < ls[i]->count; j++) {
            if (tenant_period_is_month(ls[i]->v[j].period_ms))
                return ls[i]->v[j].period_ms;
        }
    }
    for (size_t e = 0; e < l->ep_count; e++) {
        const struct tenant_limits *el[2] = {&l->eps[e].policy.limits,
                                             &l->eps[e].policy.tenant_limits};
        for (int i = 0; i < 2; i++) {
            for (uint32_t j = 0; j < el[i]->count; j++) {
                if (tenant_period_is_month(el[i]->v[j].period_ms))
                    return el[i]->v[j].period_ms;
            }
        }
    }
    return 0;
}

/* Leases reserved on a month go on crediting it under a new billing day (its cells were
 * rekeyed the same way). */
static void
leases_rekey(sup_ledger *l)
{
    int64_t month = config_month(l);

    for (uint32_t i = 0; month != 0 && i < l->lease_hw; i++) {
        struct sup_lease *lease = &l->leases[i];

        for (int kind = 0; lease->id != 0 && kind < SUP_BUDGETS; kind++) {
            for (int j = 0; j < TENANT_MAX_WINDOWS; j++) {
                if (tenant_period_is_month(lease->periods[kind][j]))
                    lease->periods[kind][j] = month;
            }
        }
    }
}

int
sup_ledger_configure(sup_ledger *l, const struct tenant_plan *plan,
                     const struct tenant_endpoint *endpoints, size_t count)
{
    struct sup_endpoint *eps = NULL;
    int rc = l == NULL ? TALLY_EINVAL : config_check(plan, endpoints, count);

    if (rc != TALLY_OK)
        goto out;
    rc = TALLY_ENOMEM;
    eps = tally_calloc(count > 0 ? count : 1, sizeof(*eps));
    if (eps == NULL)
        goto out;
    /* Endpoint budgets carry over by name, their cells by period. */
    for (size_t i = 0; i < count; i++) {
        const struct sup_endpoint *old = sup__endpoint_find(l, endpoints[i].name);

        eps[i].policy = endpoints[i];
        if (old != NULL)
            eps[i].b = old->b;
        sup__cells_match(&eps[i].b, &endpoints[i].tenant_limits, l->now_ms);
    }
    tally_free(l->eps);
    l->eps = eps;
    l->ep_count = count;
    eps = NULL;
    l->plan = *plan;
    sup__cells_match(&l->plan_b, &plan->limits, l->now_ms);
    links_rematch(l);
    leases_rekey(l);
    rc = TALLY_OK;
out:
    tally_free(eps);
    return rc;
}

static void
link_free(struct sup_link *k)
{
    if (k == NULL)
        return;
    while (k->pairs != NULL) {
        struct sup_pair *next = k->pairs->next;

        tally_free(k->pairs);
        k->pairs = next;
    }
    tally_free(k->slot_v);
    tally_free(k);
}

void
sup_ledger_close(sup_ledger *l)
{
    if (l == NULL)
        return;
    for (uint32_t i = 0; l->links != NULL && i < l->links_cap; i++)
        link_free(l->links[i]);
    for (uint32_t i = 0; l->peers != NULL && i < l->peer_count; i++)
        tally_free(l->peers[i]);
    tally_free(l->links);
    tenant_index_release(&l->link_index);
    tally_free(l->leases);
    sup__lease_tables_free(l);
    tally_free(l->peers);
    tally_free(l->eps);
    tally_free(l);
}

int
sup_ledger_open(const struct sup_ledger_config *cfg, sup_ledger **out)
{
    sup_ledger *l = NULL;
    int rc = TALLY_EINVAL;

    *out = NULL;
    if (cfg == NULL || !tenant_name_valid(cfg->tenant) || cfg->max_children > SUP_MAX_CHILDREN)
        goto out;
    rc = TALLY_ENOMEM;
    l = tally_calloc(1, sizeof(*l));
    if (l == NULL)
        goto out;
    memcpy(l->tenant, cfg->tenant, sizeof(l->tenant));
    l->link_allows = cfg->link_allows;
    l->link_ctx = cfg->link_ctx;
    l->lease_ttl_ms = or_default(cfg->lease_ttl_ms, SUP_LEASE_TTL_MS_DEFAULT);
    l->margin_ms = or_default(cfg->margin_ms, SUP_MARGIN_MS_DEFAULT);
    l->pass_ttl_ms = or_default(cfg->pass_ttl_ms, SUP_PASS_TTL_MS_DEFAULT);
    l->slot_ttl_ms = or_default(cfg->slot_ttl_ms, TENANT_SLOT_TTL_MS_DEFAULT);
    l->heartbeat_ms = or_default(cfg->heartbeat_ms, SUP_HEARTBEAT_MS_DEFAULT);
    l->l_min = or_default(cfg->l_min, SUP_L_MIN_DEFAULT);
    l->l_max = or_default(cfg->l_max, SUP_L_MAX_DEFAULT);
    l->l_keep = cfg->l_keep < 0 ? 0 : or_default(cfg->l_keep, SUP_L_KEEP_DEFAULT);
    l->keep_factor = or_default(cfg->keep_factor, SUP_KEEP_FACTOR);
    l->keep_ttl_ms = or_default(cfg->keep_ttl_ms, SUP_KEEP_TTL_MS_DEFAULT);
    if (l->keep_ttl_ms < l->lease_ttl_ms)
        l->keep_ttl_ms = l->lease_ttl_ms; /* a kept lease never lives shorter than another */
    l->max_links = cfg->max_links > 0 ? cfg->max_links : LINKS_DEFAULT;
    l->max_leases = cfg->max_leases > 0 ? cfg->max_leases : LEASES_DEFAULT;
    l->max_peers = cfg->max_children > 0 ? cfg->max_children : SUP_MAX_CHILDREN;
    rc = TALLY_EINVAL;
    if (l->lease_ttl_ms > PROTO_LEASE_MS_MAX || l->pass_ttl_ms > PROTO_LEASE_MS_MAX ||
        l->slot_ttl_ms > PROTO_LEASE_MS_MAX || l->heartbeat_ms > PROTO_LEASE_MS_MAX ||
        l->margin_ms > PROTO_LEASE_MS_MAX || l->l_min > l->l_max || l->l_max > PROTO_LEASE_N_MAX ||
        l->l_keep > PROTO_LEASE_N_MAX || l->keep_factor > 1024 ||
        l->keep_ttl_ms > PROTO_LEASE_MS_MAX || l->max_links > (UINT32_MAX >> 2))
        goto out;
    /* The tables start small and double as they fill: a quiet tenant's supervisor starts
     * without zeroing (each new page a fault) tables sized for thousands of links. */
    l->links_cap = l->max_links < LINKS_INITIAL ? l->max_links : LINKS_INITIAL;
    rc = tenant_index_init(&l->link_index, l->links_cap);
    if (rc != TALLY_OK)
        goto out;
    rc = TALLY_ENOMEM;
    l->links = tally_calloc(l->links_cap, sizeof(*l->links));
    l->leases = tally_calloc(l->max_leases, sizeof(*l->leases));
    l->peers_cap = l->max_peers < SUP_PEERS_FIRST ? l->max_peers : SUP_PEERS_FIRST;
    l->peers = tally_calloc(l->peers_cap, sizeof(*l->peers));
    if (l->links == NULL || l->leases == NULL || l->peers == NULL ||
        sup__lease_tables_build(l) != TALLY_OK)
        goto out;
    rc = sup_ledger_configure(l, &cfg->plan, cfg->endpoints, cfg->endpoint_count);
    if (rc != TALLY_OK)
        goto out;
    *out = l;
    l = NULL; /* ownership moved to the caller */
out:
    sup_ledger_close(l);
    return rc;
}

/* ---- endpoints and peers ---- */

struct sup_endpoint *
sup__endpoint_find(const sup_ledger *l, const char *name)
{
    for (size_t i = 0; i < l->ep_count; i++) {
        if (strcmp(l->eps[i].policy.name, name) == 0)
            return &l->eps[i];
    }
    return NULL;
}

int
sup__peer_room(sup_ledger *l)
{
    struct sup_peer **grown;
    uint32_t cap;

    if (l->peer_count < l->peers_cap)
        return TALLY_OK;
    if (l->peer_count >= l->max_peers)
        return TALLY_EFULL;
    cap = l->peers_cap * 2 < l->max_peers ? l->peers_cap * 2 : l->max_peers;
    grown = tally_realloc(l->peers, cap * sizeof(*grown));
    if (grown == NULL)
        return TALLY_ENOMEM;
    l->peers = grown;
    l->peers_cap = cap;
    return TALLY_OK;
}

int
sup__peer_find(const sup_ledger *l, const char *name)
{
    for (uint32_t i = 0; i < l->peer_count; i++) {
        if (strcmp(l->peers[i]->name, name) == 0)
            return (int)i;
    }
    return -1;
}

/* ---- links ---- */

static const char *
link_key(const void *ctx, uint32_t item)
{
    const sup_ledger *l = ctx;

    return l->links[item]->id;
}

struct sup_link *
sup__link_find(const sup_ledger *l, const char *id)
{
    int64_t i = tenant_index_find(&l->link_index, id, link_key, l);

    return i >= 0 ? l->links[i] : NULL;
}

static int
link_victim(const sup_ledger *l)
{
    for (uint32_t i = 0; i < l->links_cap; i++) {
        if (l->links[i] != NULL && sup__link_idle(l->links[i], l->now_ms))
            return (int)i;
    }
    return -1;
}

bool
sup__link_available(const sup_ledger *l, const char *id)
{
    return sup__link_find(l, id) != NULL || l->link_count < l->max_links ||
           l->max_links < LINKS_HARD_MAX || link_victim(l) >= 0;
}

/* Doubles the link table and rebuilds its index (links keep their slots); past max_links,
 * max_links follows. TALLY_OK, TALLY_EFULL at the hard maximum, TALLY_ENOMEM (nothing
 * changed). */
static int
links_grow(sup_ledger *l)
{
    uint32_t cap = l->links_cap * 2;
    struct tenant_index ix = {NULL, NULL, 0};
    struct sup_link **links;

    if (l->links_cap >= LINKS_HARD_MAX)
        return TALLY_EFULL;
    if (l->links_cap < l->max_links && cap > l->max_links)
        cap = l->max_links; /* eviction starts at max_links exactly */
    if (tenant_index_init(&ix, cap) != TALLY_OK)
        return TALLY_ENOMEM;
    links = tally_realloc(l->links, cap * sizeof(*links));
    if (links == NULL) {
        tenant_index_release(&ix);
        return TALLY_ENOMEM;
    }
    memset(links + l->links_cap, 0, (cap - l->links_cap) * sizeof(*links));
    l->links = links;
    tenant_index_release(&l->link_index);
    l->link_index = ix;
    for (uint32_t i = 0; i < l->links_cap; i++) {
        if (l->links[i] != NULL)
            tenant_index_set(&l->link_index, l->links[i]->id, i, link_key, l);
    }
    l->links_cap = cap;
    if (l->max_links < cap)
        l->max_links = cap;
    return TALLY_OK;
}

struct sup_link *
sup__link_get(sup_ledger *l, const char *id, int *rc)
{
    struct sup_link *k = sup__link_find(l, id);
    uint32_t slot = 0;

    *rc = TALLY_OK;
    if (k != NULL)
        return k;
    if (l->link_count == l->links_cap) {
        /* Below max_links the table grows; at it an idle link makes room first. */
        int victim = l->links_cap < l->max_links ? -1 : link_victim(l);

        if (victim < 0) {
            *rc = links_grow(l);
            if (*rc != TALLY_OK)
                return NULL;
            goto insert;
        }
        tenant_index_remove(&l->link_index,
                            tenant_index_pos(&l->link_index, l->links[victim]->id, link_key, l));
        link_free(l->links[victim]);
        l->links[victim] = NULL;
        l->link_count--;
    }
insert:
    while (l->links[slot] != NULL)
        slot++;
    k = tally_calloc(1, sizeof(*k));
    if (k == NULL) {
        *rc = TALLY_ENOMEM;
        return NULL;
    }
    snprintf(k->id, sizeof(k->id), "%s", id);
    sup__cells_match(&k->b, &l->plan.link_limits, l->now_ms);
    l->links[slot] = k;
    tenant_index_set(&l->link_index, id, slot, link_key, l);
    l->link_count++;
    return k;
}

struct sup_pair *
sup__pair_find(const struct sup_link *k, const char *endpoint)
{
    for (struct sup_pair *p = k->pairs; p != NULL; p = p->next) {
        if (strcmp(p->endpoint, endpoint) == 0)
            return p;
    }
    return NULL;
}

struct sup_pair *
sup__pair_get(struct sup_link *k, const char *endpoint)
{
    struct sup_pair *p = sup__pair_find(k, endpoint);

    if (p != NULL)
        return p;
    p = tally_calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    snprintf(p->endpoint, sizeof(p->endpoint), "%s", endpoint);
    p->next = k->pairs;
    k->pairs = p;
    return p;
}

int
sup__slots_ready(sup_ledger *l, struct sup_link *k)
{
    int64_t want = l->plan.concurrency > 0 ? l->plan.concurrency : 1;
    struct tenant_slot *v;
    struct tenant_slot_table t;

    if (k->slot_v != NULL && k->slot_cap >= want)
        return TALLY_OK;
    v = tally_calloc((size_t)want, sizeof(*v));
    if (v == NULL)
        return TALLY_ENOMEM;
    if (tenant_slot_table_init(&t, v, want) != TALLY_OK) {
        tally_free(v);
        return TALLY_EINVAL;
    }
    if (k->slot_v != NULL) {
        /* Growing with K: the held slots, id counter and clock carry over. */
        memcpy(v, k->slot_v, (size_t)k->slot_cap * sizeof(*v));
        t.next_id = k->slots.next_id;
        t.last_now_ms = k->slots.last_now_ms;
        tally_free(k->slot_v);
    }
    k->slots = t;
    k->slot_v = v;
    k->slot_cap = want;
    return TALLY_OK;
}

/* ---- paths ---- */

void
sup__path_find(const sup_ledger *l, const char *endpoint, const char *link, struct sup_path *p)
{
    memset(p, 0, sizeof(*p));
    p->ep = sup__endpoint_find(l, endpoint);
    p->link = sup__link_find(l, link);
    p->pair = p->link != NULL ? sup__pair_find(p->link, endpoint) : NULL;
    p->b[SUP_B_PLAN] = (struct sup_budget *)&l->plan_b;
    p->ls[SUP_B_PLAN] = &l->plan.limits;
    p->b[SUP_B_LINK] = p->link != NULL ? &p->link->b : NULL;
    p->ls[SUP_B_LINK] = &l->plan.link_limits;
    if (p->ep != NULL) {
        p->b[SUP_B_EP] = &p->ep->b;
        p->ls[SUP_B_EP] = &p->ep->policy.tenant_limits;
        p->alg[SUP_B_EP] = p->ep->policy.algorithm;
        p->b[SUP_B_EPLINK] = p->pair != NULL ? &p->pair->b : NULL;
        p->ls[SUP_B_EPLINK] = &p->ep->policy.limits;
        p->alg[SUP_B_EPLINK] = p->ep->policy.algorithm;
    }
}

int
sup__path_get(sup_ledger *l, const char *endpoint, const char *link, struct sup_path *p)
{
    struct sup_link *k;
    int rc;

    k = sup__link_get(l, link, &rc);
    if (k == NULL) {
        sup__path_find(l, endpoint, link, p);
        return rc;
    }
    if (sup__endpoint_find(l, endpoint) != NULL) {
        struct sup_pair *pair = sup__pair_get(k, endpoint);

        if (pair == NULL)
            return TALLY_ENOMEM;
        sup__cells_match(&pair->b, &sup__endpoint_find(l, endpoint)->policy.limits, l->now_ms);
    }
    sup__path_find(l, endpoint, link, p);
    return TALLY_OK;
}

int
sup__leases_grow(sup_ledger *l)
{
    uint32_t cap = l->max_leases * 2;
    struct sup_lease *v;

    if (l->max_leases >= LEASES_HARD_MAX)
        return TALLY_EFULL;
    v = tally_realloc(l->leases, cap * sizeof(*v));
    if (v == NULL)
        return TALLY_ENOMEM;
    memset(v + l->max_leases, 0, (cap - l->max_leases) * sizeof(*v));
    l->leases = v;
    l->max_leases = cap;
    return sup__lease_tables_build(l);
}

/*
 * The raft mode of the simulation (sup_sim_raft_int.h), what happens to its members: the links
 * between them (cut both ways, or a deposed leader losing what its followers send), kills and
 * revivals, disk faults, and who leads.
 */
#include "sup_sim_raft_int.h"

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
        if (sr_live(s, i) && (leader_ok || (int)i != s->leader))
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
void
sr_disk_fault_arm(struct sim_raft *s, int member)
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

void
sr_faults(struct sim_raft *s)
{
    struct sim_world *w = s->w;

    if (!w->p.faults)
        return;
    if (s->cut_until == 0 && s->leader >= 0 && sr_chance(w, s->rp.leader_cut_per_100k))
        cut(s, true);
    if (s->cut_until == 0 && sr_chance(w, s->rp.follower_cut_per_100k))
        cut(s, false);
    if (sr_chance(w, s->rp.kill_per_100k)) {
        int i = pick(s, true);

        if (i >= 0) {
            member_kill(s, (unsigned)i, w->t + sim_range(w, 20, 8 * (int64_t)s->rp.election_ms));
            s->rr->kills++;
            if (w->p.verbose)
                fprintf(stderr, "t=%lld raft: member %d killed until %lld\n", (long long)w->t, i,
                        (long long)s->m[i].down_until);
        }
    }
    if (s->deposed < 0 && s->leader >= 0 && sr_chance(w, s->rp.depose_per_100k)) {
        s->deposed = s->leader;
        s->depose_until = w->t + 3 * (int64_t)s->rp.election_ms;
        s->rr->deposes++;
        links_apply(s);
    }
    if (sr_chance(w, s->rp.disk_fault_per_100k))
        s->disk_fault = true;
}

/* Cuts over, the deposed leader stepped down, killed members back; all at once when draining. */
void
sr_faults_end(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    bool drain = w->draining;

    if (s->cut_until > 0 && (drain || w->t >= s->cut_until))
        s->cut_until = 0;
    if (s->deposed >= 0 && (drain || w->t >= s->depose_until ||
                            raft_state(sr_member_raft(s, (unsigned)s->deposed)) != RAFT_LEADER))
        s->deposed = -1;
    links_apply(s);
    for (unsigned i = 0; i < s->n; i++) {
        if (!s->m[i].broken && s->m[i].down_until > 0 && (drain || w->t >= s->m[i].down_until))
            member_revive(s, i);
    }
}

/* libraft stops a member on an I/O error it cannot take back (RAFT_UNAVAILABLE). */
void
sr_notice_broken(struct sim_raft *s)
{
    for (unsigned i = 0; i < s->n; i++) {
        if (s->m[i].broken || raft_state(sr_member_raft(s, i)) != RAFT_UNAVAILABLE)
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
void
sr_advance(struct sim_raft *s, int64_t t)
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

void
sr_redraw_timeouts(struct sim_raft *s)
{
    unsigned e = s->rp.election_ms;

    /* The fixture's io->random answers one value per server: drawn again at each change and
     * while nobody leads, so that not always the same member wins, and ties are broken. */
    for (unsigned i = 0; i < s->n; i++)
        raft_fixture_set_randomized_election_timeout(&s->f, i,
                                                     e + (unsigned)sim_range(s->w, 0, e - 1));
}

void
sr_find_leader(struct sim_raft *s)
{
    struct sim_world *w = s->w;
    int best = -1;
    uint64_t term = 0;

    for (unsigned i = 0; i < s->n; i++) {
        struct raft *r = sr_member_raft(s, i);

        if (sr_live(s, i) && raft_state(r) == RAFT_LEADER && r->current_term > term) {
            best = (int)i;
            term = r->current_term;
        }
    }
    if (best < 0)
        sr_redraw_timeouts(s); /* candidates whose timeouts match would split the votes forever */
    if (best == s->leader && term == s->leader_term)
        return;
    if (best >= 0) {
        s->rr->leader_changes += s->ever_led;
        if (s->ever_led && s->leader < 0 && w->t - s->leaderless_since > s->rr->leaderless_max_ms)
            s->rr->leaderless_max_ms = w->t - s->leaderless_since;
        s->ever_led = true;
        sr_redraw_timeouts(s);
    } else {
        s->leaderless_since = w->t;
    }
    s->leader = best;
    s->leader_term = term;
    if (w->p.verbose)
        fprintf(stderr, "t=%lld raft: leader %d term %llu\n", (long long)w->t, best,
                (unsigned long long)term);
}

/*
 * Supervisor starts ahead of a first request. A child counter not in memory opens its file on
 * the thread pool (front_store.c). When its tenant's supervisor is not running, the job first
 * looks whether that file exists. It does (a quiet tenant's child opened again): the same job
 * opens it. It does not (the tenant's first request on that endpoint): the lease the request
 * needs will need the supervisor too, so the job also looks for the tenant's ledger and comes
 * back at once; the loop starts the supervisor (or, for a tenant with no ledger either, begins
 * its first turn: front_first.c) and only then queues the open, and the start overlaps the
 * file's creation instead of following it.
 * The job comes back rather than posting to the loop and going on: where the CPUs share no
 * cache (the kernel then never moves a woken thread to an idle CPU), the loop woken by a post
 * lands on the posting job's CPU and waits behind the open, up to a whole time slice, while
 * the other CPU idles.
 */
#include "sup_front_int.h"

#include <errno.h>
#include <sys/stat.h>

#include "store_paths.h"

/* Thread pool: is there a file yet? If so, the open at once. Reads only what does not change
 * while the front runs. */
static void
look_work(uv_work_t *w)
{
    struct front_child *fc = w->data;
    char path[STORE_PATH_MAX];
    struct stat sb;

    fc->store.fresh = store_path_endpoint_db(fc->f->data, fc->tenant, fc->endpoint, path,
                                             sizeof(path)) == TALLY_OK &&
                      stat(path, &sb) != 0 && errno == ENOENT;
    if (!fc->store.fresh) {
        front_store_open_work(w);
        return;
    }
    fc->store.no_ledger =
        store_path_tenant(fc->f->data, fc->tenant, "ledger.db", path, sizeof(path)) == TALLY_OK &&
        stat(path, &sb) != 0 && errno == ENOENT;
}

static void
look_done(uv_work_t *w, int status)
{
    struct front_child *fc = w->data;
    sup_front *f = fc->f;

    if (!fc->store.fresh) { /* opened by the look (or failed: the open's end says how) */
        front_store_open_done(w, status);
        return;
    }
    /* No file. busy stays set: the start below may run the child's frames, which leave the
     * file and its job alone while it is. In a cluster only the leader's supervisors grant: a
     * follower starts none. */
    /* A first turn of the tenant under way (begun by another endpoint's child, its ledger
     * perhaps made already) has the lock: this child's messages join it. */
    if (!f->closing && !front_lease_remote(f) && !front_first_pending(f, fc->tenant) &&
        !(fc->store.no_ledger && front_first_begin(f, fc->tenant)))
        sup_manager_prestart(f->mgr, fc->tenant); /* best effort: else the first frame */
    /* The tenant's first turn waits for this child's first messages: they go out now, and
     * the file is made beside the turn's ledger instead of before them. */
    if (!f->closing && front_first_pending(f, fc->tenant) && front_child_start_early(fc))
        return;
    front_store_open_queue(fc);
}

bool
front_prestart_look(struct front_child *fc)
{
    sup_front *f = fc->f;
    int rc;

    fc->store.fresh = false;
    fc->store.no_ledger = false;
    if (f->closing || front_lease_remote(f) || sup_manager_is_up(f->mgr, fc->tenant) ||
        sup_manager_is_starting(f->mgr, fc->tenant))
        return false;
    /* uv_queue_work fails only for a missing callback. */
    rc = uv_queue_work(f->loop, &fc->store.work, look_work, look_done);
    if (NEVER(rc != 0))
        return false;
    fc->store.busy = true;
    return true;
}

/*
 * Files made ahead (DATA/pool, store/pool.c): tallyd cleans the pool at start and keeps
 * POOL_CHILDREN new child files and POOL_LEDGERS new ledgers in it, each written and synced
 * with its WAL started, and POOL_OPEN more of each made the same way and kept open as they
 * will be opened (a child file's connection, a first turn's ledger: store_child_pool_open,
 * sup_first_turn_pool_open), the open ones first, one fill at a time on the thread pool. A
 * tenant's first request on an endpoint links an open one into place (front_store.c,
 * first_turn.c), or renames a pooled file when none is open, and
 * a fill POOL_REFILL_AFTER_MS later makes them again: the write, the fdatasyncs and the SQLite
 * open of a new file stay off that request's path.
 */
#include "sup_front_int.h"

#include "store.h"
#include "store_child.h"
#include "store_journal.h"
#include "store_paths.h"
#include "sup_ledger.h"

/* Enough for a burst of new tenants between two fills (each fill is a write and an fdatasync
 * per file, off the requests' path). */
#define POOL_CHILDREN 4
#define POOL_LEDGERS  4
/* Each open one holds two descriptors (its file, its WAL) and a connection's memory. */
#define POOL_OPEN 4
/* A take's fill waits this long. Started at once it ran beside the first answer the file was
 * taken for, which then waits for its supervisor's start and commit: on two CPUs and one disk
 * the fill's CPU and fdatasyncs made that answer 1 to 2 ms slower at the median. Takes
 * meanwhile do not push it back, so a steady stream of new tenants still finds the pool
 * filled. */
#define POOL_REFILL_AFTER_MS 20

/* Thread pool. A failure leaves the creations to write or open their own files. */
static void
pool_fill(uv_work_t *w)
{
    sup_front *f = w->data;
    unsigned made;

    (void)store_child_pool_open(f->pool_flags, POOL_OPEN, &made);
    (void)store_child_pool_fill(POOL_CHILDREN, &made);
    /* Ledgers once tallyd has made a first turn (never in a cluster): a tallyd that serves
     * known tenants only never takes one, and the spares' fills keep plain ones. */
    if (!f->pool_ledgers)
        return;
    (void)sup_first_turn_pool_open(POOL_OPEN, &made);
    (void)store_journal_pool_fill(POOL_LEDGERS, &made);
}

static void
pool_filled(uv_work_t *w, int status)
{
    sup_front *f = w->data;

    (void)status;
    f->pool_busy = false;
    if (f->closing) {
        front_pending_done(f);
        return;
    }
    if (f->pool_again) {
        f->pool_again = false;
        front_pool_refill(f);
    }
}

void
front_pool_refill(sup_front *f)
{
    if (f->closing || !f->pool_on)
        return;
    if (f->pool_busy) {
        f->pool_again = true;
        return;
    }
    f->pool_work.data = f;
    /* Read by the job: set here, on the loop, before it runs. */
    f->pool_flags = front_store_flags(f);
    f->pool_ledgers = !f->cl_on && f->pool_turned;
    if (uv_queue_work(f->loop, &f->pool_work, pool_fill, pool_filled) == 0)
        f->pool_busy = true;
}

void
front_pool_open(sup_front *f)
{
    char path[STORE_PATH_MAX];

    /* No pool (a read-only data dir, say): every new file is written where it goes. */
    if (store_path_pool(f->data, path, sizeof(path)) != TALLY_OK ||
        store_pool_clean(path) != TALLY_OK)
        return;
    store_pool_use(path);
    f->pool_on = true;
}

static void
on_pool_timer(uv_timer_t *t)
{
    front_pool_refill(t->data);
}

void
front_pool_start(sup_front *f)
{
    uv_timer_init(f->loop, &f->pool_timer);
    f->pool_timer.data = f;
    front_pool_refill(f);
}

void
front_pool_taken(sup_front *f)
{
    if (!f->closing && f->pool_on && !uv_is_active((uv_handle_t *)&f->pool_timer))
        uv_timer_start(&f->pool_timer, on_pool_timer, POOL_REFILL_AFTER_MS, 0);
}

void
front_pool_close(sup_front *f, uv_close_cb cb)
{
    uv_close((uv_handle_t *)&f->pool_timer, cb);
}

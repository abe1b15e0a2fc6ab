/*
 * A supervisor's log lines (tally_log.h: one JSON line each, naming its tenant and pid) and
 * the exit status that tells tallyd why it stopped (sup_process_int.h).
 */
#include "sup_ledger.h"

#include <unistd.h>
#include <uv.h>

#include "tally_log.h"

#include "sup_process_int.h"

/* One JSON line (tally_log.h) naming the tenant and this process. */
bool
sp_log_begin(const struct sp *s, struct tally_log *l, enum tally_log_level level, const char *event)
{
    if (!tally_log_begin(l, level, event))
        return false;
    tally_log_str(l, "tenant", s->o->tenant);
    tally_log_int(l, "pid", (int64_t)getpid());
    return true;
}

void
sp_log_event(const struct sp *s, enum tally_log_level level, const char *event)
{
    struct tally_log l;

    if (sp_log_begin(s, &l, level, event))
        tally_log_end(&l);
}

void
sp_log_error(const struct sp *s, enum tally_log_level level, const char *event, int rc,
             const char *detail)
{
    struct tally_log l;

    if (!sp_log_begin(s, &l, level, event))
        return;
    tally_log_str(&l, "error", tally_strerror(rc));
    if (detail != NULL)
        tally_log_str(&l, "detail", detail);
    tally_log_end(&l);
}

/* A libuv failure of the process itself (not of storage): the call and libuv's words. */
void
sp_log_uv_error(const struct sp *s, const char *event, const char *call, int uv_rc)
{
    struct tally_log l;

    if (!sp_log_begin(s, &l, TALLY_LOG_ERROR, event))
        return;
    tally_log_str(&l, "call", call);
    tally_log_str(&l, "error", uv_strerror(uv_rc));
    tally_log_end(&l);
}

int
sp_exit_code_for(int rc)
{
    switch (rc) {
    case TALLY_ELOCKED:
        return 75;
    case TALLY_ENODATA:
    case TALLY_ENOTFOUND:
    case TALLY_ENAME:
        return 78;
    default:
        return 74;
    }
}

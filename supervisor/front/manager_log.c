/*
 * The manager's log lines: one per supervisor start or restart, exit (why, and
 * when the next start may happen) and hibernation at the ceiling.
 */
#include "sup_manager_int.h"

#include "tally_log.h"

void
sup__manager_log_start(const struct sup_proc *p, bool restart)
{
    struct tally_log l;

    if (!tally_log_begin(&l, TALLY_LOG_INFO, restart ? "supervisor_restart" : "supervisor_start"))
        return;
    tally_log_str(&l, "tenant", p->tenant);
    if (p->forked)
        tally_log_str(&l, "via", "fork_server"); /* its pid comes back later */
    else
        tally_log_int(&l, "pid", p->process.pid);
    if (restart)
        tally_log_int(&l, "backoff_ms", p->backoff_ms);
    tally_log_end(&l);
}

/* The first answer of a start: how long the start took (debug level). */
void
sup__manager_log_ready(const struct sup_proc *p, uint64_t start_us)
{
    struct tally_log l;

    if (!tally_log_begin(&l, TALLY_LOG_DEBUG, "supervisor_first_answer"))
        return;
    tally_log_str(&l, "tenant", p->tenant);
    tally_log_int(&l, "pid", p->forked ? p->pid : p->process.pid);
    tally_log_int(&l, "start_us", (int64_t)start_us);
    tally_log_end(&l);
}

/* One line per exit: why, and when the next start may happen. */
void
sup__manager_log_exit(const struct sup_proc *p, int pid, int64_t status, int term_signal,
                      uint64_t ran_ms)
{
    struct tally_log l;
    bool idle = status == SUP_EXIT_IDLE && term_signal == 0;
    /* A start asked for just before tallyd began to stop, never forked: nothing failed. */
    bool abandoned = p->m->closing && pid == 0;
    const char *reason = idle                                        ? "idle"
                         : abandoned                                 ? "stopping"
                         : status == SUP_EXIT_LOCKED && !term_signal ? "locked"
                         : term_signal != 0                          ? "signal"
                                                                     : "error";

    if (!tally_log_begin(&l, idle || abandoned ? TALLY_LOG_INFO : TALLY_LOG_WARN,
                         "supervisor_exit"))
        return;
    tally_log_str(&l, "tenant", p->tenant);
    tally_log_int(&l, "pid", pid);
    tally_log_str(&l, "reason", reason);
    if (term_signal != 0)
        tally_log_int(&l, "signal", term_signal);
    else
        tally_log_int(&l, "status", status);
    tally_log_int(&l, "ran_ms", (int64_t)ran_ms);
    if (!idle)
        tally_log_int(&l, "restart_in_ms", p->backoff_ms);
    tally_log_end(&l);
}

void
sup__manager_log_hibernate(const struct sup_proc *p, const sup_manager *m)
{
    struct tally_log l;

    if (!tally_log_begin(&l, TALLY_LOG_INFO, "supervisor_hibernate"))
        return;
    tally_log_str(&l, "tenant", p->tenant);
    tally_log_int(&l, "pid", p->process.pid);
    tally_log_str(&l, "reason", "max_supervisors");
    tally_log_int(&l, "max_supervisors", m->cfg.max_supervisors);
    tally_log_end(&l);
}

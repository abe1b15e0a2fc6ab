/*
 * front_callers: requests on endpoints keyed by caller and the caller authority
 * processes that count them (front_callers.c). Internal to supervisor/front/.
 */
#ifndef FRONT_CALLERS_H
#define FRONT_CALLERS_H

#include "sup_front_int.h"

struct front_callers;

/** *out is owned by the service, closed with front_callers_close() and freed with
 *  front_callers_free() once closed. TALLY_OK or TALLY_ENOMEM. */
TALLY_MUST_CHECK int front_callers_open(sup_front *f, struct front_callers **out /* OUT */);
/** sup_front_check_callers(): answers r or keeps it until its verdicts or deadline. */
void front_callers_check(struct front_callers *fc, struct sup_front_req *r, const char *token,
                         const char *endpoint, const char *const *callers, const size_t *lens,
                         size_t n, int64_t cost);
/** r's client went away: r is forgotten, what its authorities admit is cancelled. */
void front_callers_cancel(struct front_callers *fc, struct sup_front_req *r);
/** Answers what waits (503), ends the authorities (EOF, SIGTERM, SIGKILL after 2 s) and
 *  calls closed once every handle is closed. */
void front_callers_close(struct front_callers *fc, void (*closed)(sup_front *f));
void front_callers_free(struct front_callers *fc);
/** The pid of authority `shard`, 0 when none runs (logs, tests). */
int front_callers_pid(const struct front_callers *fc, unsigned shard);

#endif /* FRONT_CALLERS_H */

/*
 * The caller authorities: the processes that count the budgets of endpoints
 * keyed by caller (docs/DESIGN.md §12, docs/LEASE-PROTOCOL.md §6). A caller's
 * keyed hash names its authority, one of SUP_CALLER_SHARDS, and that process is
 * the only writer of the caller's budgets on every caller endpoint. tallyd starts
 * one as `tallyd --callers S --data DIR ...` with its channel on fd 3; it locks
 * DATA/callers/S.lock, reads its entries back from DATA/callers/S.db, then
 * answers DECIDE and CANCEL (proto_caller.h). The entries a turn changed are
 * committed in one transaction (synchronous=FULL in strict durability) before
 * any verdict of that turn is written, as the supervisors do. It exits on EOF of
 * its channel, on SIGTERM/SIGINT, and after idle_exit_ms without a message.
 */
#ifndef SUP_CALLERS_H
#define SUP_CALLERS_H

#include <stdbool.h>
#include <stdint.h>

#include "tenant_callers.h"

/* Authorities per deployment. A caller's is fixed by its hash, so this number is
 * part of the data dir's layout: changing it moves callers between files. */
#define SUP_CALLER_SHARDS 4

/** The authority of a caller's keyed hash: 0..SUP_CALLER_SHARDS - 1. */
static inline unsigned
sup_caller_shard(const unsigned char key[TENANT_CALLER_KEY_BYTES])
{
    return key[TENANT_CALLER_KEY_BYTES - 1] % SUP_CALLER_SHARDS;
}

struct sup_callers_opts {
    const char *data;
    unsigned shard;       /* 0..SUP_CALLER_SHARDS - 1 */
    bool strict;          /* synchronous=FULL; NORMAL otherwise */
    int64_t idle_exit_ms; /* 0 = 60000 */
    int channel_fd;       /* 3 */
};

/** Runs an authority until it should exit; returns the exit status: 0 (idle, EOF or
 *  signal), 75 (another process holds the shard), 74 (storage or loop failure:
 *  logged). */
int sup_callers_run(const struct sup_callers_opts *o);

#endif /* SUP_CALLERS_H */

/*
 * The exact use counters of live leases (store_use.h): one file, DATA/lease-use.map, mapped
 * MAP_SHARED once at open. A slot is claimed by writing its key, deadline and count, then its
 * lease id (a release store); freed by clearing the lease id first. A process killed between
 * two stores leaves either a free slot or a whole one: the page cache holds every store made
 * before the kill. Nothing here is fsynced: after a reboot the page cache is gone and the disk
 * may hold any older copy, so a file from another boot (its recorded boot id differs) is
 * emptied, never read. Free slots are kept on a stack in memory, lowest high water first, so
 * the pages touched stay few: a slot file of 10,000 children with two live leases each is
 * about 1.3 MB.
 */
#include "store_use.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_paths.h"

#define HDR_BYTES   4096
#define SLOT_BYTES  64
#define GROW_SLOTS  64 /* the file is extended this many slots at a time */
#define FORMAT      1
#define CHECK_BYTES 40 /* the header bytes the check covers */

static const char magic[8] = {'T', 'A', 'L', 'L', 'Y', 'U', 'S', 'E'};

struct use_hdr {
    char magic[8];
    uint32_t format, slot_bytes, capacity, high_water;
    uint8_t boot_id[STORE_USE_BOOT_ID];
    uint64_t check;
};

struct use_slot {
    uint64_t lease_id; /* 0 = free */
    int64_t used;
    int64_t deadline_mono_ms;
    uint64_t spare0;
    uint8_t key[STORE_USE_KEY];
    uint8_t spare1[16];
};

_Static_assert(sizeof(struct use_hdr) == CHECK_BYTES + 8, "use file header layout");
_Static_assert(sizeof(struct use_slot) == SLOT_BYTES, "use file slot layout");

/* A slot kept from before the restart, until a resume adopts it or its deadline passes. */
struct orphan {
    uint8_t key[STORE_USE_KEY];
    uint64_t lease_id;
    uint32_t slot; /* UINT32_MAX: adopted or freed */
};

struct store_use {
    int fd;
    uint8_t *map;
    size_t map_len;
    struct use_hdr *hdr;
    struct use_slot *slot;
    uint32_t capacity, backed; /* slots mapped; slots the file holds */
    uint32_t *free;            /* free slots below the high water */
    uint32_t n_free, cap_free;
    struct orphan *orphan; /* sorted by key, lease id */
    uint32_t n_orphan, orphans_left;
    uint32_t bound;
    uint64_t adopted, ignored, full;
};

static int
from_errno(int e)
{
    switch (e) {
    case ENOSPC:
    case EDQUOT:
        return TALLY_EFULL;
    case EROFS:
        return TALLY_EREADONLY;
    case EACCES:
    case EPERM:
        return TALLY_EPERM;
    case ENOMEM:
        return TALLY_ENOMEM;
    default:
        return TALLY_EIO;
    }
}

static uint64_t
check_of(const struct use_hdr *h)
{
    const uint8_t *p = (const uint8_t *)h;
    uint64_t x = 14695981039346656037ull; /* FNV-1a */

    for (size_t i = 0; i < CHECK_BYTES; i++)
        x = (x ^ p[i]) * 1099511628211ull;
    return x;
}

static int
hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int
store_use_boot_id(uint8_t out[STORE_USE_BOOT_ID])
{
    char buf[64];
    FILE *fp = fopen("/proc/sys/kernel/random/boot_id", "re");
    size_t got = 0;
    int n = 0;

    memset(out, 0, STORE_USE_BOOT_ID);
    if (fp == NULL)
        return TALLY_EIO;
    got = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[got] = '\0';
    /* "8-4-4-4-12" hex digits; the dashes are skipped. */
    for (size_t i = 0; i < got && n < 2 * STORE_USE_BOOT_ID; i++) {
        int v = hexval(buf[i]);

        if (buf[i] == '-')
            continue;
        if (v < 0)
            break;
        out[n / 2] = (uint8_t)(out[n / 2] << 4 | v);
        n++;
    }
    return n == 2 * STORE_USE_BOOT_ID ? TALLY_OK : TALLY_EIO;
}

/* Extends the file by GROW_SLOTS slots, allocated on disk. */
static int
grow(store_use *u)
{
    uint32_t add = u->capacity - u->backed < GROW_SLOTS ? u->capacity - u->backed : GROW_SLOTS;
    int e;

    if (add == 0)
        return TALLY_EFULL;
    e = posix_fallocate(u->fd, HDR_BYTES + (off_t)u->backed * SLOT_BYTES, (off_t)add * SLOT_BYTES);
    if (e != 0)
        return from_errno(e);
    u->backed += add;
    return TALLY_OK;
}

/* Empties the file and writes this boot's header. */
static int
reset(store_use *u, const uint8_t boot_id[STORE_USE_BOOT_ID])
{
    int e;

    if (ftruncate(u->fd, 0) != 0)
        return from_errno(errno);
    e = posix_fallocate(u->fd, 0, HDR_BYTES);
    if (e != 0)
        return from_errno(e);
    u->backed = 0;
    memset(u->hdr, 0, sizeof(*u->hdr));
    memcpy(u->hdr->magic, magic, sizeof(magic));
    u->hdr->format = FORMAT;
    u->hdr->slot_bytes = SLOT_BYTES;
    u->hdr->capacity = u->capacity;
    memcpy(u->hdr->boot_id, boot_id, STORE_USE_BOOT_ID);
    u->hdr->check = check_of(u->hdr);
    return grow(u);
}

static int
orphan_cmp(const void *a, const void *b)
{
    const struct orphan *x = a, *y = b;
    int c = memcmp(x->key, y->key, STORE_USE_KEY);

    if (c != 0)
        return c;
    return x->lease_id < y->lease_id ? -1 : x->lease_id > y->lease_id;
}

static int
free_push(store_use *u, uint32_t i)
{
    if (u->n_free == u->cap_free) {
        uint32_t cap = u->cap_free == 0 ? 64 : u->cap_free * 2;
        uint32_t *n = tally_realloc(u->free, cap * sizeof(*n));

        if (n == NULL)
            return TALLY_ENOMEM; /* the slot stays unused until the next reset */
        u->free = n;
        u->cap_free = cap;
    }
    u->free[u->n_free++] = i;
    return TALLY_OK;
}

/* Same boot: keeps the slots of leases still alive as orphans, frees the rest. */
static int
adopt_file(store_use *u, int64_t now_mono_ms)
{
    uint32_t hw = u->hdr->high_water < u->backed ? u->hdr->high_water : u->backed;
    uint32_t live = 0;

    u->hdr->high_water = hw;
    u->hdr->check = check_of(u->hdr);
    for (uint32_t i = 0; i < hw; i++)
        live += u->slot[i].lease_id != 0 && u->slot[i].deadline_mono_ms > now_mono_ms;
    if (live > 0) {
        u->orphan = tally_calloc(live, sizeof(*u->orphan));
        if (u->orphan == NULL)
            return TALLY_ENOMEM;
    }
    for (uint32_t i = hw; i-- > 0;) {
        struct use_slot *s = &u->slot[i];

        if (s->lease_id != 0 && s->deadline_mono_ms > now_mono_ms) {
            struct orphan *o = &u->orphan[u->n_orphan++];

            memcpy(o->key, s->key, STORE_USE_KEY);
            o->lease_id = s->lease_id;
            o->slot = i;
            continue;
        }
        __atomic_store_n(&s->lease_id, 0, __ATOMIC_RELEASE);
        if (free_push(u, i) != TALLY_OK)
            return TALLY_ENOMEM;
    }
    u->orphans_left = u->n_orphan;
    if (u->n_orphan > 1)
        qsort(u->orphan, u->n_orphan, sizeof(*u->orphan), orphan_cmp);
    return TALLY_OK;
}

static bool
header_ok(const store_use *u, off_t size)
{
    const struct use_hdr *h = u->hdr;

    return size >= HDR_BYTES && memcmp(h->magic, magic, sizeof(magic)) == 0 &&
           h->format == FORMAT && h->slot_bytes == SLOT_BYTES && h->capacity == u->capacity &&
           h->check == check_of(h);
}

int
store_use_open(const char *data, const uint8_t boot_id[STORE_USE_BOOT_ID], uint32_t capacity,
               int64_t now_mono_ms, store_use **out, enum store_use_start *how)
{
    char path[STORE_PATH_MAX];
    store_use *u = NULL;
    struct stat st;
    int rc = TALLY_ETOOBIG;

    *out = NULL;
    *how = STORE_USE_CREATED;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", data, STORE_USE_FILE) >= sizeof(path))
        goto out;
    rc = TALLY_ENOMEM;
    u = tally_calloc(1, sizeof(*u));
    if (u == NULL)
        goto out;
    u->fd = -1;
    u->capacity = capacity > 0 ? capacity : STORE_USE_SLOTS_DEFAULT;
    u->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (u->fd < 0 || fstat(u->fd, &st) != 0) {
        rc = from_errno(errno);
        goto out;
    }
    rc = TALLY_EPERM;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
        goto out;
    if ((st.st_mode & 077) != 0 && fchmod(u->fd, 0600) != 0)
        goto out;
    u->map_len = HDR_BYTES + (size_t)u->capacity * SLOT_BYTES;
    u->map = mmap(NULL, u->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, u->fd, 0);
    if (u->map == MAP_FAILED) {
        u->map = NULL;
        rc = from_errno(errno);
        goto out;
    }
    u->hdr = (struct use_hdr *)u->map;
    u->slot = (struct use_slot *)(u->map + HDR_BYTES);
    /* Only the header is read before it is known to be this boot's. */
    if (st.st_size == 0)
        *how = STORE_USE_CREATED;
    else if (!header_ok(u, st.st_size))
        *how = STORE_USE_CORRUPT;
    else if (memcmp(u->hdr->boot_id, boot_id, STORE_USE_BOOT_ID) != 0)
        *how = STORE_USE_OTHER_BOOT;
    else
        *how = STORE_USE_RESUMED;
    if (*how == STORE_USE_RESUMED) {
        u->backed = (uint32_t)((st.st_size - HDR_BYTES) / SLOT_BYTES);
        if (u->backed > u->capacity)
            u->backed = u->capacity;
        rc = adopt_file(u, now_mono_ms);
    } else {
        rc = reset(u, boot_id);
    }
    if (rc != TALLY_OK)
        goto out;
    *out = u;
    u = NULL; /* ownership moved to the caller */
out:
    store_use_close(u);
    return rc;
}

static struct orphan *
orphan_find(store_use *u, const uint8_t key[STORE_USE_KEY], uint64_t lease_id)
{
    struct orphan probe, *o;

    if (u->orphans_left == 0)
        return NULL;
    memset(&probe, 0, sizeof(probe));
    memcpy(probe.key, key, STORE_USE_KEY);
    probe.lease_id = lease_id;
    o = bsearch(&probe, u->orphan, u->n_orphan, sizeof(*u->orphan), orphan_cmp);
    return o != NULL && o->slot != UINT32_MAX ? o : NULL;
}

static void
orphan_done(store_use *u, struct orphan *o)
{
    o->slot = UINT32_MAX;
    if (--u->orphans_left == 0) {
        tally_free(u->orphan);
        u->orphan = NULL;
        u->n_orphan = 0;
    }
}

static void
slot_free(store_use *u, uint32_t i)
{
    __atomic_store_n(&u->slot[i].lease_id, 0, __ATOMIC_RELEASE);
    (void)free_push(u, i); /* no memory: the slot is left unused until the next reset */
}

int64_t *
store_use_bind(store_use *u, const uint8_t key[STORE_USE_KEY], uint64_t lease_id,
               int64_t deadline_mono_ms, int64_t *used)
{
    struct orphan *o;
    struct use_slot *s;
    uint32_t i;

    if (u == NULL || lease_id == 0)
        return NULL;
    o = orphan_find(u, key, lease_id);
    if (o != NULL) {
        s = &u->slot[o->slot];
        orphan_done(u, o);
        if (s->used >= 0 && s->used <= *used) {
            /* Same boot, same lease, within its mark: exactly what was admitted. */
            *used = s->used;
            s->deadline_mono_ms = deadline_mono_ms;
            u->adopted++;
            u->bound++;
            return &s->used;
        }
        u->ignored++; /* above the durable mark: not this lease's count */
        store_use_set(&s->used, *used);
        s->deadline_mono_ms = deadline_mono_ms;
        u->bound++;
        return &s->used;
    }
    if (u->n_free > 0) {
        i = u->free[--u->n_free];
    } else {
        if (u->hdr->high_water == u->backed && grow(u) != TALLY_OK) {
            u->full++;
            return NULL;
        }
        i = u->hdr->high_water;
        u->hdr->high_water = i + 1;
        u->hdr->check = check_of(u->hdr);
    }
    s = &u->slot[i];
    memcpy(s->key, key, STORE_USE_KEY);
    s->deadline_mono_ms = deadline_mono_ms;
    s->used = *used;
    /* Last: a slot names a lease only once its count is there. */
    __atomic_store_n(&s->lease_id, lease_id, __ATOMIC_RELEASE);
    u->bound++;
    return &s->used;
}

void
store_use_unbind(store_use *u, int64_t *counter)
{
    uintptr_t off;

    if (u == NULL || counter == NULL)
        return;
    off = (uintptr_t)counter - (uintptr_t)u->slot;
    if (NEVER(off % SLOT_BYTES != offsetof(struct use_slot, used) ||
              off / SLOT_BYTES >= u->capacity))
        return;
    u->bound--;
    slot_free(u, (uint32_t)(off / SLOT_BYTES));
}

void
store_use_sweep(store_use *u, int64_t now_mono_ms)
{
    for (uint32_t j = 0; u != NULL && j < u->n_orphan; j++) {
        struct orphan *o = &u->orphan[j];

        if (o->slot == UINT32_MAX || u->slot[o->slot].deadline_mono_ms > now_mono_ms)
            continue;
        slot_free(u, o->slot);
        orphan_done(u, o); /* may free the array: the loop's bound becomes 0 */
    }
}

void
store_use_stats(const store_use *u, struct store_use_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (u == NULL)
        return;
    out->capacity = u->capacity;
    out->high_water = u->hdr->high_water;
    out->bound = u->bound;
    out->orphans = u->orphans_left;
    out->adopted = u->adopted;
    out->ignored = u->ignored;
    out->full = u->full;
}

void
store_use_close(store_use *u)
{
    if (u == NULL)
        return;
    if (u->map != NULL)
        munmap(u->map, u->map_len);
    if (u->fd >= 0)
        close(u->fd);
    tally_free(u->free);
    tally_free(u->orphan);
    tally_free(u);
}

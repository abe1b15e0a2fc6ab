/*
 * A host's cluster files (cluster_state.h): the static key and the member
 * list, both small text files with a version line, each replaced as a whole
 * (temporary file, fsync, rename, directory fsync). Parsing is strict: a line
 * that is not exactly what the writer writes makes the file corrupt rather
 * than half read.
 */
#define _GNU_SOURCE /* O_CLOEXEC, O_DIRECTORY with _POSIX_C_SOURCE */
#include "cluster_state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_HEADER     "tally-host-key 1\n"
#define MEMBERS_HEADER "tally-cluster 1\n"
#define FILE_MAX       8192

const char *
cluster_role_name(enum cluster_role r)
{
    return r == CLUSTER_ROLE_FRONT ? "front" : "voter";
}

int
cluster_role_parse(const char *s, enum cluster_role *out)
{
    if (s != NULL && strcmp(s, "voter") == 0)
        *out = CLUSTER_ROLE_VOTER;
    else if (s != NULL && strcmp(s, "front") == 0)
        *out = CLUSTER_ROLE_FRONT;
    else
        return TALLY_EINVAL;
    return TALLY_OK;
}

int
cluster_path(const char *data, const char *name, char *out, size_t cap)
{
    int n = name[0] != '\0' ? snprintf(out, cap, "%s/cluster/%s", data, name)
                            : snprintf(out, cap, "%s/cluster", data);

    return n < 0 || (size_t)n >= cap ? TALLY_ETOOBIG : TALLY_OK;
}

bool
cluster_state_exists(const char *data)
{
    char path[512];

    return cluster_path(data, "members", path, sizeof(path)) == TALLY_OK && access(path, F_OK) == 0;
}

const struct cluster_member *
cluster_state_member(const struct cluster_state *s, uint64_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->members[i].id == id)
            return &s->members[i];
    return NULL;
}

static int
sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc;

    if (fd < 0)
        return TALLY_EIO;
    rc = fsync(fd) == 0 ? TALLY_OK : TALLY_EIO;
    close(fd);
    return rc;
}

/* DATA/cluster/NAME replaced by text (len bytes), mode 0600. */
static int
write_file(const char *data, const char *name, const char *text, size_t len)
{
    char path[512], tmp[520], dir[512];
    int fd, rc = TALLY_EIO;

    if (cluster_path(data, name, path, sizeof(path)) != TALLY_OK ||
        cluster_path(data, "", dir, sizeof(dir)) != TALLY_OK)
        return TALLY_ETOOBIG;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return TALLY_EIO;
    if (write(fd, text, len) == (ssize_t)len && fsync(fd) == 0)
        rc = TALLY_OK;
    close(fd);
    if (rc == TALLY_OK && rename(tmp, path) != 0)
        rc = TALLY_EIO;
    if (rc != TALLY_OK)
        unlink(tmp);
    return rc == TALLY_OK ? sync_dir(dir) : rc;
}

/* DATA/cluster/NAME into buf (NUL-terminated). */
static int
read_file(const char *data, const char *name, char *buf, size_t cap, struct stat *sb)
{
    char path[512];
    ssize_t n;
    int fd;

    if (cluster_path(data, name, path, sizeof(path)) != TALLY_OK)
        return TALLY_ETOOBIG;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TALLY_ENOTFOUND : TALLY_EIO;
    if (fstat(fd, sb) != 0) {
        close(fd);
        return TALLY_EIO;
    }
    n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return TALLY_EIO;
    if ((size_t)n == cap - 1)
        return TALLY_ECORRUPT; /* larger than any file we write */
    buf[n] = '\0';
    return TALLY_OK;
}

static int
format_members(const struct cluster_state *s, char *out, size_t cap, size_t *len)
{
    size_t off;
    int n = snprintf(out, cap, MEMBERS_HEADER "self %" PRIu64 "\n", s->self);

    if (n < 0 || (size_t)n >= cap)
        return TALLY_ETOOBIG;
    off = (size_t)n;
    for (size_t i = 0; i < s->n; i++) {
        char hex[2 * CLUSTER_KEY_BYTES + 1];

        cluster_key_hex(s->members[i].pk, hex);
        n = snprintf(out + off, cap - off, "member %" PRIu64 " %s %s %s\n", s->members[i].id,
                     s->members[i].address, cluster_role_name(s->roles[i]), hex);
        if (n < 0 || (size_t)n >= cap - off)
            return TALLY_ETOOBIG;
        off += (size_t)n;
    }
    {
        struct cluster_state c = *s;

        for (size_t i = 0; i < c.n; i++)
            (void)cluster_state_note_id(&c, c.members[i].id);
        n = snprintf(out + off, cap - off, "next %" PRIu64 "\n", c.next_id);
        if (n < 0 || (size_t)n >= cap - off)
            return TALLY_ETOOBIG;
        off += (size_t)n;
    }
    *len = off;
    return TALLY_OK;
}

bool
cluster_state_note_id(struct cluster_state *s, uint64_t id)
{
    if (id == UINT64_MAX || id < s->next_id)
        return false;
    s->next_id = id + 1;
    return true;
}

int
cluster_state_save(const char *data, const struct cluster_state *s)
{
    char text[FILE_MAX];
    size_t len = 0;
    int rc = format_members(s, text, sizeof(text), &len);

    return rc == TALLY_OK ? write_file(data, "members", text, len) : rc;
}

int
cluster_state_create(const char *data, const struct cluster_hostkey *key,
                     const struct cluster_state *s)
{
    char dir[512], raft[512], text[128], hex[2 * CLUSTER_KEY_BYTES + 1];
    int n, rc;

    if (cluster_state_exists(data))
        return TALLY_EEXIST;
    if (cluster_path(data, "", dir, sizeof(dir)) != TALLY_OK ||
        cluster_path(data, "raft", raft, sizeof(raft)) != TALLY_OK)
        return TALLY_ETOOBIG;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || (mkdir(raft, 0700) != 0 && errno != EEXIST))
        return TALLY_EIO;
    cluster_key_hex(key->sk, hex);
    n = snprintf(text, sizeof(text), KEY_HEADER "%s\n", hex);
    sodium_memzero(hex, sizeof(hex));
    rc = write_file(data, "host.key", text, (size_t)n);
    sodium_memzero(text, sizeof(text));
    if (rc == TALLY_OK)
        rc = cluster_state_save(data, s); /* last: its presence means "in a cluster" */
    return rc == TALLY_OK ? sync_dir(data) : rc;
}

/* One "member ID ADDRESS ROLE KEY" line (NUL-terminated, no newline) into s. */
static int
parse_member(char *line, struct cluster_state *s)
{
    char *save = NULL, *f[6];
    int nf = 0;
    char *end = NULL;
    unsigned long long id;
    struct sockaddr_storage ss;
    struct cluster_member *m;

    for (char *t = strtok_r(line, " ", &save); t != NULL && nf < 6; t = strtok_r(NULL, " ", &save))
        f[nf++] = t;
    if (nf != 5 || strcmp(f[0], "member") != 0 || s->n == CLUSTER_MEMBERS_MAX)
        return TALLY_ECORRUPT;
    errno = 0;
    id = strtoull(f[1], &end, 10);
    if (errno != 0 || *end != '\0' || id == 0 || strlen(f[2]) >= CLUSTER_ADDR_MAX ||
        cluster_addr_parse(f[2], &ss) != TALLY_OK)
        return TALLY_ECORRUPT;
    m = &s->members[s->n];
    m->id = id;
    snprintf(m->address, sizeof(m->address), "%s", f[2]);
    if (cluster_role_parse(f[3], &s->roles[s->n]) != TALLY_OK ||
        cluster_key_parse(f[4], m->pk) != TALLY_OK || cluster_state_member(s, id) != NULL)
        return TALLY_ECORRUPT;
    s->n++;
    return TALLY_OK;
}

static int
parse_members(char *text, struct cluster_state *s)
{
    char *save = NULL, *line, *end = NULL;
    unsigned long long self;

    memset(s, 0, sizeof(*s));
    if (strncmp(text, MEMBERS_HEADER, strlen(MEMBERS_HEADER)) != 0)
        return TALLY_ECORRUPT;
    line = strtok_r(text + strlen(MEMBERS_HEADER), "\n", &save);
    if (line == NULL || strncmp(line, "self ", 5) != 0)
        return TALLY_ECORRUPT;
    errno = 0;
    self = strtoull(line + 5, &end, 10);
    if (errno != 0 || *end != '\0' || self == 0)
        return TALLY_ECORRUPT;
    s->self = self;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        if (strncmp(line, "next ", 5) == 0) {
            unsigned long long next;

            errno = 0;
            next = strtoull(line + 5, &end, 10);
            if (errno != 0 || *end != '\0' || next == 0 || s->next_id != 0)
                return TALLY_ECORRUPT;
            s->next_id = next;
        } else if (parse_member(line, s) != TALLY_OK) {
            return TALLY_ECORRUPT;
        }
    }
    for (size_t i = 0; i < s->n; i++)
        (void)cluster_state_note_id(s, s->members[i].id);
    return cluster_state_member(s, s->self) != NULL ? TALLY_OK : TALLY_ECORRUPT;
}

int
cluster_state_load(const char *data, struct cluster_hostkey *key, struct cluster_state *s)
{
    char text[FILE_MAX];
    struct stat sb;
    int rc = read_file(data, "members", text, sizeof(text), &sb);

    if (rc != TALLY_OK)
        return rc;
    rc = parse_members(text, s);
    if (rc != TALLY_OK)
        return rc;
    rc = read_file(data, "host.key", text, sizeof(text), &sb);
    if (rc == TALLY_ENOTFOUND)
        rc = TALLY_ECORRUPT; /* members without a key: not a state we write */
    if (rc != TALLY_OK)
        return rc;
    if ((sb.st_mode & 077) != 0)
        rc = TALLY_EKEYMODE;
    else if (strncmp(text, KEY_HEADER, strlen(KEY_HEADER)) != 0 ||
             strlen(text) != strlen(KEY_HEADER) + 2 * CLUSTER_KEY_BYTES + 1 ||
             text[strlen(text) - 1] != '\n')
        rc = TALLY_ECORRUPT;
    else {
        text[strlen(text) - 1] = '\0';
        rc = cluster_key_parse(text + strlen(KEY_HEADER), key->sk) == TALLY_OK ? TALLY_OK
                                                                               : TALLY_ECORRUPT;
        if (rc == TALLY_OK)
            crypto_scalarmult_base(key->pk, key->sk);
    }
    sodium_memzero(text, sizeof(text));
    if (rc == TALLY_OK &&
        sodium_memcmp(key->pk, cluster_state_member(s, s->self)->pk, CLUSTER_KEY_BYTES) != 0)
        rc = TALLY_ECORRUPT; /* the key is not the one this host is known by */
    return rc;
}

/* ---- invites ---- */

#define INVITES_HEADER "tally-invites 1\n"

/* The invites file without expired entries and without `drop` (a hash, or NULL), into out;
 * *found says whether `drop` was there. */
static int
invites_filter(const char *data, const char *drop, int64_t now_ms, char *out, size_t cap,
               size_t *len, bool *found)
{
    char text[FILE_MAX], *save = NULL, *line;
    struct stat sb;
    int rc = read_file(data, "invites", text, sizeof(text), &sb);
    size_t off;

    *found = false;
    if (rc == TALLY_ENOTFOUND) {
        text[0] = '\0';
        rc = TALLY_OK;
    } else if (rc == TALLY_OK && strncmp(text, INVITES_HEADER, strlen(INVITES_HEADER)) != 0) {
        rc = TALLY_ECORRUPT;
    }
    if (rc != TALLY_OK)
        return rc;
    off = (size_t)snprintf(out, cap, INVITES_HEADER);
    line = text[0] != '\0' ? strtok_r(text + strlen(INVITES_HEADER), "\n", &save) : NULL;
    for (; line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char hash[65];
        long long exp;
        int n;

        if (sscanf(line, "%64s %lld", hash, &exp) != 2 || strlen(hash) != 64)
            continue; /* not ours: dropped */
        if (exp <= now_ms)
            continue;
        if (drop != NULL && strcmp(hash, drop) == 0) {
            *found = true;
            continue;
        }
        n = snprintf(out + off, cap - off, "%s %lld\n", hash, exp);
        if (n < 0 || (size_t)n >= cap - off)
            return TALLY_ETOOBIG;
        off += (size_t)n;
    }
    *len = off;
    return TALLY_OK;
}

static void
invite_hash(const uint8_t secret[32], char hex[65])
{
    uint8_t h[32];

    crypto_generichash(h, sizeof(h), secret, 32, NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof(h));
}

/* The invites file is read, changed and replaced by `tally cluster invite` and by tallyd
 * taking an invite: each holds this lock meanwhile, or an invite taken could come back (a
 * one-time code used twice). -1 when it cannot be taken. */
static int
invites_lock(const char *data)
{
    char path[512];
    int fd;

    if (cluster_path(data, "invites.lock", path, sizeof(path)) != TALLY_OK)
        return -1;
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void
invites_unlock(int fd)
{
    close(fd); /* releases the lock */
}

int
cluster_invite_add(const char *data, const uint8_t secret[32], int64_t now_ms, int64_t expires_ms)
{
    char text[FILE_MAX], hex[65];
    size_t len = 0;
    bool found;
    int n, rc, lock = invites_lock(data);

    if (lock < 0)
        return TALLY_EIO;
    rc = invites_filter(data, NULL, now_ms, text, sizeof(text), &len, &found);
    if (rc == TALLY_OK) {
        invite_hash(secret, hex);
        n = snprintf(text + len, sizeof(text) - len, "%s %lld\n", hex, (long long)expires_ms);
        if (n < 0 || (size_t)n >= sizeof(text) - len)
            rc = TALLY_ETOOBIG;
        else
            rc = write_file(data, "invites", text, len + (size_t)n);
    }
    invites_unlock(lock);
    return rc;
}

int
cluster_invite_take(const char *data, const uint8_t secret[32], int64_t now_ms)
{
    char text[FILE_MAX], hex[65];
    size_t len = 0;
    bool found = false;
    int rc;

    int lock = invites_lock(data);

    if (lock < 0)
        return TALLY_EIO;
    invite_hash(secret, hex);
    rc = invites_filter(data, hex, now_ms, text, sizeof(text), &len, &found);
    if (rc == TALLY_OK)
        rc = write_file(data, "invites", text, len);
    invites_unlock(lock);
    if (rc != TALLY_OK)
        return rc;
    return found ? TALLY_OK : TALLY_ENOTFOUND;
}

bool
cluster_invites_pending(const char *data, int64_t now_ms)
{
    char text[FILE_MAX];
    size_t len = 0;
    bool found;

    return invites_filter(data, NULL, now_ms, text, sizeof(text), &len, &found) == TALLY_OK &&
           len > strlen(INVITES_HEADER);
}

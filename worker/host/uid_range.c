/*
 * uid_range.c: per-Sandbox host uids as exclusive symlinks UID_RANGE_DIR/<uid> -> <sandboxId>
 * (see uid_range.h).
 */
#include "host/uid_range.h"
#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int uid_range_parse(const char *text, struct uid_range *out, char *err, size_t errlen)
{
    out->first = out->last = -1;
    if (!text[0] || strcmp(text, "off") == 0)
        return 0;
    char *end;
    errno = 0;
    long long a = strtoll(text, &end, 10);
    long long b = -1;
    if (!errno && end != text && *end == '-') {
        const char *second = end + 1;
        b = strtoll(second, &end, 10);
        if (end == second)
            b = -1;
    }
    if (errno || *end || a < 1 || b < a || b >= 4294967295LL) {
        snprintf(err, errlen,
                 "sandbox_uid_range \"%s\" is not FIRST-LAST (1 <= FIRST <= LAST < 4294967295) "
                 "or off",
                 text);
        return -1;
    }
    out->first = a;
    out->last = b;
    return 0;
}

bool uid_range_on(const struct uid_range *r)
{
    return r->first > 0;
}

/* mkdir -p of UID_RANGE_DIR, readable by root only (it names every live Sandbox). */
static int ensure_dir(char *err, size_t errlen)
{
    if (fs_mkdir_p(UID_RANGE_DIR, 0700) == 0)
        return 0;
    snprintf(err, errlen, "mkdir %s: %s", UID_RANGE_DIR, strerror(errno));
    return -1;
}

/* Where to start looking: spread by the id so concurrent boots rarely probe the same uids. */
static uint64_t start_offset(const char *sandbox_id, uint64_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *p = sandbox_id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h % n;
}

/* True when a process of the host runs with uid as its real or effective uid. */
static bool uid_in_use(int64_t uid)
{
    DIR *d = opendir("/proc");
    if (!d)
        return true; /* cannot tell: assume it is */
    bool used = false;
    struct dirent *e;
    while (!used && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[64], line[128];
        snprintf(path, sizeof path, "/proc/%.20s/status", e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "Uid:", 4) == 0) {
                long long real = -1, effective = -1;
                sscanf(line + 4, "%lld %lld", &real, &effective);
                used = real == uid || effective == uid;
                break;
            }
        fclose(f);
    }
    closedir(d);
    return used;
}

/* An entry whose Sandbox is gone without its worker removing it (the store that would have let
 * reconciliation find it was lost, say) is taken over: when it is older than a boot can take and
 * no process runs as the uid. Reclaims are serialised by a lock on the directory, and the entry is
 * checked again under it, so two boots never both take one stale uid. */
static int reclaim_stale(const char *path, int64_t uid, const char *sandbox_id)
{
    char owner[128];
    struct stat st;
    ssize_t n = readlink(path, owner, sizeof owner - 1);
    if (n <= 0 || lstat(path, &st) != 0 || time(NULL) - st.st_mtime < UID_RANGE_STALE_S ||
        uid_in_use(uid))
        return -1;
    owner[n] = '\0';
    int dir = open(UID_RANGE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    int rc = -1;
    char again[128];
    if (flock(dir, LOCK_EX) == 0) {
        n = readlink(path, again, sizeof again - 1);
        if (n > 0) {
            again[n] = '\0';
            if (strcmp(again, owner) == 0 && unlink(path) == 0 && symlink(sandbox_id, path) == 0)
                rc = 0;
        }
    }
    close(dir); /* releases the lock */
    return rc;
}

int uid_range_acquire(const struct uid_range *r, const char *sandbox_id, int64_t *uid, char *err,
                      size_t errlen)
{
    if (ensure_dir(err, errlen) != 0)
        return -1;
    uint64_t n = (uint64_t)(r->last - r->first + 1);
    uint64_t start = start_offset(sandbox_id, n);
    /* Free uids first; stale entries are looked at only when none is left. */
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t i = 0; i < n; i++) {
            int64_t candidate = r->first + (int64_t)((start + i) % n);
            char path[64];
            snprintf(path, sizeof path, "%s/%lld", UID_RANGE_DIR, (long long)candidate);
            if (pass == 0 ? symlink(sandbox_id, path) == 0
                          : reclaim_stale(path, candidate, sandbox_id) == 0) {
                *uid = candidate;
                return 0;
            }
            if (pass == 0 && errno != EEXIST) {
                snprintf(err, errlen, "symlink %s: %s", path, strerror(errno));
                return -1;
            }
        }
    snprintf(err, errlen,
             "no free Sandbox uid: all %llu uids of sandbox_uid_range %lld-%lld are in use "
             "(see %s)",
             (unsigned long long)n, (long long)r->first, (long long)r->last, UID_RANGE_DIR);
    return -1;
}

/* Removes entry name of UID_RANGE_DIR when it points at sandbox_id; true when it did. */
static bool release_entry(const char *name, const char *sandbox_id)
{
    char path[PATH_MAX], owner[128];
    snprintf(path, sizeof path, "%s/%s", UID_RANGE_DIR, name);
    ssize_t n = readlink(path, owner, sizeof owner - 1);
    if (n <= 0)
        return false;
    owner[n] = '\0';
    return strcmp(owner, sandbox_id) == 0 && unlink(path) == 0;
}

void uid_range_release(int64_t uid, const char *sandbox_id)
{
    if (uid <= 0)
        return;
    char name[32];
    snprintf(name, sizeof name, "%lld", (long long)uid);
    release_entry(name, sandbox_id);
}

int uid_range_release_owner(const char *sandbox_id)
{
    DIR *d = opendir(UID_RANGE_DIR);
    if (!d)
        return 0;
    int released = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && release_entry(e->d_name, sandbox_id))
            released++;
    closedir(d);
    return released;
}

/*
 * uid_range.h: one host uid/gid per Sandbox from config sandbox_uid_range (e.g. 200000-265535),
 * so that per-uid kernel state (RLIMIT_NPROC, keyrings, signals, ptrace, file ownership) is never
 * shared between Sandboxes, or with a host daemon that runs as nobody.
 *
 * Allocation is race-free across threads, worker processes and sbx installations of one host, as
 * network slots are (links.h): a uid is taken by creating the symlink UID_RANGE_DIR/<uid> whose
 * target is the owning Sandbox's id; symlink() creates it atomically with its content or fails
 * with EEXIST, so two Sandboxes can never hold one uid and the entry itself says who owns it. The
 * entry is removed when the Sandbox is gone (its cgroup empty, so no process of the uid is left):
 * at terminate, after a failed boot, and by reap after a worker crash (reconciliation), which
 * finds the entries of a Sandbox id without knowing its uid. An entry left behind with no one to
 * reap it (its store gone) is taken over once no uid is free, if it is older than
 * UID_RANGE_STALE_S and no process of the host runs as its uid.
 */
#ifndef SBX_UID_RANGE_H
#define SBX_UID_RANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Host-global, shared by every installation on the host (uids are a host-wide resource). */
#define UID_RANGE_DIR "/run/sbx/sandbox-uids"
/* An entry younger than this may belong to a Sandbox still booting (its processes not started). */
#define UID_RANGE_STALE_S 60

struct uid_range {
    int64_t first, last; /* both -1: off (every Sandbox runs as sandbox_uid) */
};

/* Parses "A-B" (1 <= A <= B < 2^32-1) or "" / "off"; -1 with the reason otherwise. */
int uid_range_parse(const char *text, struct uid_range *out, char *err, size_t errlen);
bool uid_range_on(const struct uid_range *r);
/* Takes a free uid of the range for sandbox_id; -1 with a clear reason when all are in use. */
int uid_range_acquire(const struct uid_range *r, const char *sandbox_id, int64_t *uid, char *err,
                      size_t errlen);
/* Gives uid back if sandbox_id holds it. */
void uid_range_release(int64_t uid, const char *sandbox_id);
/* Gives back every uid sandbox_id holds (reap: the uid was not recorded); returns how many. */
int uid_range_release_owner(const char *sandbox_id);

#endif

/*
 * cgroup.h: per-Sandbox cgroups for accounting (CPU time, peak memory) and for finding and killing
 * every process of a Sandbox. Accounting only: no limits are written, as the platform promises.
 *
 * A Sandbox's cgroup is <v2 root>/sbx/<sandboxId> in the unified hierarchy. Where the v2 memory
 * controller is not available but cgroup v1's memory hierarchy is (hybrid hosts), memory is
 * measured in <v1 memory root>/sbx/<sandboxId> as well; likewise pids in <v1 pids root>/sbx/<id>.
 */
#ifndef SBX_CGROUP_H
#define SBX_CGROUP_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cgroup_host {
    char v2_root[512];        /* "" when no writable cgroup v2 hierarchy was found */
    bool v2_memory;           /* memory.current/memory.peak exist in Sandbox cgroups */
    bool v2_memory_peak;      /* the kernel has memory.peak */
    bool v2_kill;             /* cgroup.kill exists (Linux 5.14+) */
    char v1_memory_root[512]; /* "" unless v1 memory accounting is used */
    bool v2_pids;             /* pids.max is written in the v2 Sandbox cgroups */
    char v1_pids_root[512];   /* "" unless the v1 pids hierarchy is used */
    int64_t pids_max;         /* the limit written */
};

/* Whether each Sandbox's tasks are limited by a pids cgroup (v2 or v1). */
bool cgroup_limits_pids(const struct cgroup_host *h);

/* Finds the hierarchies (cfg->cgroup_root, else /sys/fs/cgroup or /sys/fs/cgroup/unified), makes
 * <root>/sbx, and writes a one-line account of what can and cannot be measured to report. */
int cgroup_detect(const struct sbx_config *cfg, struct cgroup_host *h, char *report,
                  size_t reportlen);

/* Creates the Sandbox's cgroup(s); path receives the v2 directory ("" when there is none). */
int cgroup_create(const struct cgroup_host *h, const char *sandbox_id, char *path, size_t pathlen,
                  char *err, size_t errlen);
/* Moves pid into the Sandbox's cgroup(s). */
int cgroup_add_pid(const struct cgroup_host *h, const char *path, const char *sandbox_id, pid_t pid,
                   char *err, size_t errlen);
/* Reads CPU time (microseconds) and peak memory (bytes); -1 for what cannot be measured. */
void cgroup_read_usage(const struct cgroup_host *h, const char *path, const char *sandbox_id,
                       int64_t *cpu_usec, int64_t *mem_peak_bytes);
/* True while any process is in the v2 cgroup. */
bool cgroup_populated(const char *path);
/* True when pid is a member of the v2 cgroup at path. */
bool cgroup_has_pid(const char *path, pid_t pid);
/* SIGKILLs every process in the cgroup (cgroup.kill, or each listed pid). */
int cgroup_kill_all(const char *path);
/* Removes the Sandbox's cgroup(s), waiting up to timeout_ms for them to empty. ENOENT is success.
 */
int cgroup_remove(const struct cgroup_host *h, const char *path, const char *sandbox_id,
                  int timeout_ms, char *err, size_t errlen);

#endif

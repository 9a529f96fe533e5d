/*
 * cgroup.h: per-Sandbox cgroups for accounting (CPU time, peak memory), for the Sandbox's bounds
 * (pids; memory and CPU from its shape, cgroup_limits.c) and for finding and killing every process
 * of a Sandbox.
 *
 * A Sandbox's cgroup is <v2 root>/sbx/<name> in the unified hierarchy, where <name> is
 * "<installation>-<sandboxId>" (cgroup_name, host_tag.h; a Sandbox made before cgroups were tagged
 * has its bare id). Functions below that take a "name" want that one. Where the v2 memory
 * controller is not available but cgroup v1's memory hierarchy is (hybrid hosts), memory is
 * measured (and bounded) in <v1 memory root>/sbx/<name> as well; likewise pids in
 * <v1 pids root>/sbx/<id> and the CPU bound in <v1 cpu root>/sbx/<id>.
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
    bool v2_cpu;              /* cpu.max is written in the v2 Sandbox cgroups */
    char v1_cpu_root[512];    /* "" unless the v1 cpu hierarchy bounds CPU */
};

#define CGROUP_NAME_LEN 128

/* The name of a Sandbox's cgroups (the v1 twins too): that of its v2 directory path once it has
 * one, else "<installation>-<sandboxId>". Returns out. */
const char *cgroup_name(const char *sandbox_id, const char *path, char out[CGROUP_NAME_LEN]);

/* Start-up sweep (cgroup_sweep.c): kills the processes of and removes every cgroup (v2 and v1
 * twins) tagged with this installation whose Sandbox is_live() says is not live; another
 * installation's and untagged ones are left alone. Returns how many Sandboxes' cgroups went. */
size_t cgroup_sweep(const struct cgroup_host *h, bool (*is_live)(const char *sandbox_id, void *arg),
                    void *arg);

/* Whether each Sandbox's tasks are limited by a pids cgroup (v2 or v1). */
bool cgroup_limits_pids(const struct cgroup_host *h);

/* Finds the hierarchies (cfg->cgroup_root, else /sys/fs/cgroup or /sys/fs/cgroup/unified), makes
 * <root>/sbx, and writes a one-line account of what can and cannot be measured to report. */
int cgroup_detect(const struct sbx_config *cfg, struct cgroup_host *h, char *report,
                  size_t reportlen);

/* Creates the Sandbox's cgroup(s); path receives the v2 directory ("" when there is none). */
int cgroup_create(const struct cgroup_host *h, const char *name, char *path, size_t pathlen,
                  char *err, size_t errlen);
/* Moves pid into the Sandbox's cgroup(s). */
int cgroup_add_pid(const struct cgroup_host *h, const char *path, const char *name, pid_t pid,
                   char *err, size_t errlen);
/* Reads CPU time (microseconds) and peak memory (bytes); -1 for what cannot be measured. */
void cgroup_read_usage(const struct cgroup_host *h, const char *path, const char *name,
                       int64_t *cpu_usec, int64_t *mem_peak_bytes);
/* True while any process is in the v2 cgroup. */
bool cgroup_populated(const char *path);
/* True when pid is a member of the v2 cgroup at path. */
bool cgroup_has_pid(const char *path, pid_t pid);
/* SIGKILLs every process in the cgroup (cgroup.kill, or each listed pid). */
int cgroup_kill_all(const char *path);
/* Removes the Sandbox's cgroup(s), waiting up to timeout_ms for them to empty. ENOENT is success.
 */
int cgroup_remove(const struct cgroup_host *h, const char *path, const char *name, int timeout_ms,
                  char *err, size_t errlen);

/* cgroup_limits.c: the Sandbox's shape as bounds. */
/* Whether memory (memSizeMib) and CPU (vcpuCount) can be bounded on this host. */
bool cgroup_bounds_memory(const struct cgroup_host *h);
bool cgroup_bounds_cpu(const struct cgroup_host *h);
/* One line saying how each bound is applied, or that it cannot be. */
void cgroup_limits_report(const struct cgroup_host *h, char *report, size_t len);
/* The bounds that cannot be applied, comma-separated ("memory", "cpu"); "" when none. */
void cgroup_limits_unbounded(const struct cgroup_host *h, char *out, size_t len);
/* Writes memory = mem_mib MiB (swap off) and CPU = vcpus CPUs into the Sandbox's cgroup(s);
 * values <= 0 and bounds the host cannot apply are skipped. */
int cgroup_apply_limits(const struct cgroup_host *h, const char *path, const char *name,
                        int64_t mem_mib, int64_t vcpus, char *err, size_t errlen);
/* How many processes the OOM killer killed in the Sandbox's cgroup; -1 when unknown. */
int64_t cgroup_oom_kills(const struct cgroup_host *h, const char *path, const char *name);

#endif

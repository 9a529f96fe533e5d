/*
 * cgroup_limits.c: the Sandbox's size as cgroup bounds (memory = memSizeMib with swap off, CPU =
 * vcpuCount CPUs), the OOM kills they caused, and the account of which bounds this host can apply.
 *
 * Memory: cgroup v2 memory.max (+ memory.swap.max 0) where the v2 memory controller is enabled for
 * <root>/sbx, else cgroup v1 memory.limit_in_bytes (+ memory.memsw.limit_in_bytes equal to it, so
 * no swap either, where swap accounting exists; memory.swappiness 0). tmpfs pages (the Sandbox's
 * /tmp, a tmpfs upper of its root) are charged to the cgroup of the process that wrote them, so
 * they count against the same bound.
 * CPU: v2 cpu.max "<vcpus * period> <period>", else v1 cpu.cfs_quota_us / cpu.cfs_period_us in
 * <v1 cpu root>/sbx/<sandboxId> (cgroup.c creates, joins and removes that directory).
 */
#include "host/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The CFS period for the CPU bound: 100 ms, the kernel's default. */
#define CPU_PERIOD_US 100000

static int write_value(const char *dir, const char *name, const char *text, char *err,
                       size_t errlen)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : write(fd, text, strlen(text));
    int saved = errno;
    if (fd >= 0)
        close(fd);
    if (n == (ssize_t)strlen(text))
        return 0;
    snprintf(err, errlen, "write %s to %s: %s", text, p, strerror(saved));
    return -1;
}

static bool exists(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* Reads "<key> <n>" from a flat-keyed cgroup file; -1 when absent. */
static int64_t read_key(const char *dir, const char *name, const char *key)
{
    char p[1024], line[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "re");
    if (!f)
        return -1;
    int64_t value = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            value = strtoll(line + klen + 1, NULL, 10);
            break;
        }
    fclose(f);
    return value;
}

bool cgroup_bounds_memory(const struct cgroup_host *h)
{
    return h->v2_memory || h->v1_memory_root[0];
}

bool cgroup_bounds_cpu(const struct cgroup_host *h)
{
    return h->v2_cpu || h->v1_cpu_root[0];
}

void cgroup_limits_report(const struct cgroup_host *h, char *report, size_t len)
{
    snprintf(report, len, "memory bound: %s; CPU bound: %s",
             h->v2_memory           ? "cgroup v2 memory.max, swap off"
             : h->v1_memory_root[0] ? "cgroup v1 memory.limit_in_bytes, swap off"
                                    : "none (no memory controller)",
             h->v2_cpu           ? "cgroup v2 cpu.max"
             : h->v1_cpu_root[0] ? "cgroup v1 cpu.cfs_quota_us"
                                 : "none (no cpu controller)");
}

void cgroup_limits_unbounded(const struct cgroup_host *h, char *out, size_t len)
{
    snprintf(out, len, "%s%s%s", cgroup_bounds_memory(h) ? "" : "memory",
             !cgroup_bounds_memory(h) && !cgroup_bounds_cpu(h) ? "," : "",
             cgroup_bounds_cpu(h) ? "" : "cpu");
}

static int apply_memory(const struct cgroup_host *h, const char *path, const char *sandbox_id,
                        int64_t mem_mib, char *err, size_t errlen)
{
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%lld", (long long)mem_mib * 1024 * 1024);
    if (h->v2_memory && path[0]) {
        if (write_value(path, "memory.max", bytes, err, errlen) != 0)
            return -1;
        /* Absent without swap accounting: there is no swap to turn off then. */
        if (exists(path, "memory.swap.max") &&
            write_value(path, "memory.swap.max", "0", err, errlen) != 0)
            return -1;
        return 0;
    }
    if (!h->v1_memory_root[0])
        return 0;
    char v1[700];
    snprintf(v1, sizeof v1, "%s/%s", h->v1_memory_root, sandbox_id);
    if (write_value(v1, "memory.limit_in_bytes", bytes, err, errlen) != 0)
        return -1;
    /* memsw (memory + swap) may not be below the memory limit, so it is written after it. */
    if (exists(v1, "memory.memsw.limit_in_bytes") &&
        write_value(v1, "memory.memsw.limit_in_bytes", bytes, err, errlen) != 0)
        return -1;
    if (exists(v1, "memory.swappiness"))
        write_value(v1, "memory.swappiness", "0", err, errlen); /* refused under a parent's: fine */
    return 0;
}

static int apply_cpu(const struct cgroup_host *h, const char *path, const char *sandbox_id,
                     int64_t vcpus, char *err, size_t errlen)
{
    char quota[32], period[32];
    snprintf(quota, sizeof quota, "%lld", (long long)vcpus * CPU_PERIOD_US);
    snprintf(period, sizeof period, "%d", CPU_PERIOD_US);
    if (h->v2_cpu && path[0]) {
        char max[64];
        snprintf(max, sizeof max, "%s %s", quota, period);
        return write_value(path, "cpu.max", max, err, errlen);
    }
    if (!h->v1_cpu_root[0])
        return 0;
    char v1[700];
    snprintf(v1, sizeof v1, "%s/%s", h->v1_cpu_root, sandbox_id);
    if (write_value(v1, "cpu.cfs_period_us", period, err, errlen) != 0)
        return -1;
    return write_value(v1, "cpu.cfs_quota_us", quota, err, errlen);
}

int cgroup_apply_limits(const struct cgroup_host *h, const char *path, const char *sandbox_id,
                        int64_t mem_mib, int64_t vcpus, char *err, size_t errlen)
{
    if (mem_mib > 0 && apply_memory(h, path, sandbox_id, mem_mib, err, errlen) != 0)
        return -1;
    if (vcpus > 0 && apply_cpu(h, path, sandbox_id, vcpus, err, errlen) != 0)
        return -1;
    return 0;
}

int64_t cgroup_oom_kills(const struct cgroup_host *h, const char *path, const char *sandbox_id)
{
    if (h->v2_memory && path[0])
        return read_key(path, "memory.events", "oom_kill");
    if (!h->v1_memory_root[0])
        return -1;
    char v1[700];
    snprintf(v1, sizeof v1, "%s/%s", h->v1_memory_root, sandbox_id);
    return read_key(v1, "memory.oom_control", "oom_kill");
}

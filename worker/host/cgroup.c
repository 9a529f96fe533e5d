/*
 * cgroup.c: per-Sandbox cgroup v2 (and v1 memory, pids, cpu) directories: create, join, measure,
 * kill, remove.
 */
#include "host/cgroup.h"
#include "host/host_tag.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

static bool file_exists(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int saved = errno;
    close(fd);
    errno = saved;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Reads a small file into buf (NUL-terminated); -1 when it cannot be read. */
static int read_file(const char *dir, const char *name, char *buf, size_t len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    buf[got] = '\0';
    return 0;
}

static bool is_fs(const char *dir, long magic)
{
    struct statfs sf;
    return statfs(dir, &sf) == 0 && (long)sf.f_type == magic;
}

static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
            return true;
    return false;
}

static void find_v2_root(const struct sbx_config *cfg, char *out, size_t len)
{
    static const char *const candidates[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    out[0] = '\0';
    if (cfg->cgroup_root[0]) {
        snprintf(out, len, "%s", cfg->cgroup_root);
        return;
    }
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        if (is_fs(candidates[i], CGROUP2_SUPER_MAGIC)) {
            snprintf(out, len, "%s", candidates[i]);
            return;
        }
    }
}

/* Turns the memory controller on for <root>/sbx's children where the host offers it. */
static bool enable_v2_memory(const char *root, const char *sbx)
{
    char list[512];
    if (read_file(sbx, "cgroup.controllers", list, sizeof list) != 0 || !has_word(list, "memory")) {
        /* Not yet delegated to sbx: ask the root (fails harmlessly if it has processes). */
        write_file(root, "cgroup.subtree_control", "+memory");
        if (read_file(sbx, "cgroup.controllers", list, sizeof list) != 0 ||
            !has_word(list, "memory"))
            return false;
    }
    if (read_file(sbx, "cgroup.subtree_control", list, sizeof list) == 0 &&
        has_word(list, "memory"))
        return true;
    return write_file(sbx, "cgroup.subtree_control", "+memory") == 0;
}

/* Enables the v2 pids controller for <root>/sbx's children, as enable_v2_memory does. */
static bool enable_v2_pids(const char *root, const char *sbx)
{
    char list[512];
    if (read_file(sbx, "cgroup.controllers", list, sizeof list) != 0 || !has_word(list, "pids")) {
        write_file(root, "cgroup.subtree_control", "+pids");
        if (read_file(sbx, "cgroup.controllers", list, sizeof list) != 0 || !has_word(list, "pids"))
            return false;
    }
    if (read_file(sbx, "cgroup.subtree_control", list, sizeof list) == 0 && has_word(list, "pids"))
        return true;
    return write_file(sbx, "cgroup.subtree_control", "+pids") == 0;
}

/* Enables the v2 cpu controller for <root>/sbx's children, as enable_v2_memory does. */
static bool enable_v2_cpu(const char *root, const char *sbx)
{
    char list[512];
    if (read_file(sbx, "cgroup.controllers", list, sizeof list) != 0 || !has_word(list, "cpu")) {
        write_file(root, "cgroup.subtree_control", "+cpu");
        if (read_file(sbx, "cgroup.controllers", list, sizeof list) != 0 || !has_word(list, "cpu"))
            return false;
    }
    if (read_file(sbx, "cgroup.subtree_control", list, sizeof list) == 0 && has_word(list, "cpu"))
        return true;
    return write_file(sbx, "cgroup.subtree_control", "+cpu") == 0;
}

/* The v1 cpu hierarchy's sbx directory, where v2 cannot bound CPU (hybrid hosts). */
static void find_v1_cpu(struct cgroup_host *h)
{
    static const char *const candidates[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && !h->v2_cpu; i++) {
        char sbx[64];
        snprintf(sbx, sizeof sbx, "%s/sbx", candidates[i]);
        if (is_fs(candidates[i], CGROUP_SUPER_MAGIC) &&
            file_exists(candidates[i], "cpu.cfs_quota_us") &&
            (mkdir(sbx, 0755) == 0 || errno == EEXIST) && access(sbx, W_OK) == 0) {
            snprintf(h->v1_cpu_root, sizeof h->v1_cpu_root, "%s", sbx);
            return;
        }
    }
}

bool cgroup_limits_pids(const struct cgroup_host *h)
{
    return h->v2_pids || h->v1_pids_root[0];
}

int cgroup_detect(const struct sbx_config *cfg, struct cgroup_host *h, char *report,
                  size_t reportlen)
{
    memset(h, 0, sizeof *h);
    char root[512], sbx[600];
    find_v2_root(cfg, root, sizeof root);
    const char *cpu = "CPU time: not measured (no cgroup v2 hierarchy found)";
    if (root[0] && !is_fs(root, CGROUP2_SUPER_MAGIC)) {
        cpu = "CPU time: not measured (cgroup_root is not a cgroup v2 directory)";
    } else if (root[0]) {
        snprintf(sbx, sizeof sbx, "%s/sbx", root);
        if ((mkdir(sbx, 0755) != 0 && errno != EEXIST) || access(sbx, W_OK) != 0) {
            cpu = "CPU time: not measured (cannot create cgroups in <cgroup_root>/sbx)";
        } else {
            snprintf(h->v2_root, sizeof h->v2_root, "%s", root);
            cpu = "CPU time: cgroup v2 cpu.stat";
            h->v2_memory = enable_v2_memory(root, sbx);
            h->v2_pids = enable_v2_pids(root, sbx);
            h->v2_cpu = enable_v2_cpu(root, sbx);
            h->v2_kill = file_exists(sbx, "cgroup.kill");
        }
    }
    const char *mem = "peak memory: not measured (no v2 memory controller, no v1 memory hierarchy)";
    if (h->v2_memory) {
        mem = "peak memory: cgroup v2 memory.peak";
    } else if (is_fs("/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC) &&
               file_exists("/sys/fs/cgroup/memory", "memory.max_usage_in_bytes")) {
        if ((mkdir("/sys/fs/cgroup/memory/sbx", 0755) == 0 || errno == EEXIST) &&
            access("/sys/fs/cgroup/memory/sbx", W_OK) == 0) {
            snprintf(h->v1_memory_root, sizeof h->v1_memory_root, "/sys/fs/cgroup/memory/sbx");
            mem = "peak memory: cgroup v1 memory.max_usage_in_bytes (v2 memory controller not "
                  "enabled)";
        }
    }
    h->pids_max = cfg->sandbox_pids_max;
    const char *pids = "pids: not limited per Sandbox (no pids controller; only RLIMIT_NPROC)";
    if (h->v2_pids) {
        pids = "pids: cgroup v2 pids.max";
    } else if (is_fs("/sys/fs/cgroup/pids", CGROUP_SUPER_MAGIC) &&
               (mkdir("/sys/fs/cgroup/pids/sbx", 0755) == 0 || errno == EEXIST) &&
               access("/sys/fs/cgroup/pids/sbx", W_OK) == 0) {
        snprintf(h->v1_pids_root, sizeof h->v1_pids_root, "/sys/fs/cgroup/pids/sbx");
        pids = "pids: cgroup v1 pids.max";
    }
    find_v1_cpu(h);
    snprintf(report, reportlen, "%s at %s; %s; %s%s", cpu, h->v2_root[0] ? h->v2_root : "-", mem,
             pids, h->v2_root[0] && !h->v2_kill ? "; no cgroup.kill (kills go pid by pid)" : "");
    return 0;
}

int cgroup_create(const struct cgroup_host *h, const char *sandbox_id, char *path, size_t pathlen,
                  char *err, size_t errlen)
{
    path[0] = '\0';
    if (h->v2_root[0]) {
        snprintf(path, pathlen, "%s/sbx/%s", h->v2_root, sandbox_id);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "mkdir %s: %s", path, strerror(errno));
            path[0] = '\0';
            return -1;
        }
        if (h->v2_memory && file_exists(path, "memory.peak")) {
            /* Some kernels let the peak be reset; start from zero for this Sandbox. */
            write_file(path, "memory.peak", "0");
        }
    }
    char max[32];
    snprintf(max, sizeof max, "%lld", (long long)h->pids_max);
    if (h->v2_pids && path[0] && write_file(path, "pids.max", max) != 0) {
        snprintf(err, errlen, "%s/pids.max: %s", path, strerror(errno));
        return -1;
    }
    if (h->v1_pids_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_pids_root, sandbox_id);
        if ((mkdir(v1, 0755) != 0 && errno != EEXIST) || write_file(v1, "pids.max", max) != 0) {
            snprintf(err, errlen, "%s (pids.max): %s", v1, strerror(errno));
            return -1;
        }
    }
    if (h->v1_memory_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_memory_root, sandbox_id);
        if (mkdir(v1, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "mkdir %s: %s", v1, strerror(errno));
            return -1;
        }
    }
    if (h->v1_cpu_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_cpu_root, sandbox_id);
        if (mkdir(v1, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "mkdir %s: %s", v1, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int cgroup_add_pid(const struct cgroup_host *h, const char *path, const char *sandbox_id, pid_t pid,
                   char *err, size_t errlen)
{
    char text[32];
    snprintf(text, sizeof text, "%d", (int)pid);
    if (path[0] && write_file(path, "cgroup.procs", text) != 0) {
        snprintf(err, errlen, "join %s: %s", path, strerror(errno));
        return -1;
    }
    if (h->v1_memory_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_memory_root, sandbox_id);
        if (write_file(v1, "cgroup.procs", text) != 0) {
            snprintf(err, errlen, "join %s: %s", v1, strerror(errno));
            return -1;
        }
    }
    if (h->v1_pids_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_pids_root, sandbox_id);
        if (write_file(v1, "cgroup.procs", text) != 0) {
            snprintf(err, errlen, "join %s: %s", v1, strerror(errno));
            return -1;
        }
    }
    if (h->v1_cpu_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_cpu_root, sandbox_id);
        if (write_file(v1, "cgroup.procs", text) != 0) {
            snprintf(err, errlen, "join %s: %s", v1, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int64_t read_int_file(const char *dir, const char *name)
{
    char buf[64];
    if (read_file(dir, name, buf, sizeof buf) != 0 || buf[0] < '0' || buf[0] > '9')
        return -1;
    return strtoll(buf, NULL, 10);
}

void cgroup_read_usage(const struct cgroup_host *h, const char *path, const char *sandbox_id,
                       int64_t *cpu_usec, int64_t *mem_peak_bytes)
{
    *cpu_usec = -1;
    *mem_peak_bytes = -1;
    char stat[2048];
    if (path[0] && read_file(path, "cpu.stat", stat, sizeof stat) == 0) {
        const char *p = strstr(stat, "usage_usec ");
        if (p)
            *cpu_usec = strtoll(p + strlen("usage_usec "), NULL, 10);
    }
    if (path[0] && h->v2_memory)
        *mem_peak_bytes = read_int_file(path, "memory.peak");
    if (*mem_peak_bytes < 0 && h->v1_memory_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_memory_root, sandbox_id);
        *mem_peak_bytes = read_int_file(v1, "memory.max_usage_in_bytes");
    }
}

bool cgroup_populated(const char *path)
{
    char events[256];
    if (!path[0] || read_file(path, "cgroup.events", events, sizeof events) != 0)
        return false;
    return strstr(events, "populated 1") != NULL;
}

bool cgroup_has_pid(const char *path, pid_t pid)
{
    char procs[65536];
    if (!path[0] || read_file(path, "cgroup.procs", procs, sizeof procs) != 0)
        return false;
    char *save = NULL;
    for (char *line = strtok_r(procs, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (atoi(line) == pid)
            return true;
    return false;
}

int cgroup_kill_all(const char *path)
{
    if (!path[0])
        return -1;
    if (file_exists(path, "cgroup.kill"))
        return write_file(path, "cgroup.kill", "1");
    char procs[65536];
    if (read_file(path, "cgroup.procs", procs, sizeof procs) != 0)
        return -1;
    char *save = NULL;
    for (char *line = strtok_r(procs, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        kill((pid_t)atoi(line), SIGKILL);
    return 0;
}

static int remove_dir_waiting(const char *dir, int timeout_ms, char *err, size_t errlen)
{
    for (int waited = 0;; waited += 10) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY || waited >= timeout_ms) {
            snprintf(err, errlen, "rmdir %s: %s", dir, strerror(errno));
            return -1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int cgroup_remove(const struct cgroup_host *h, const char *path, const char *sandbox_id,
                  int timeout_ms, char *err, size_t errlen)
{
    int rc = 0;
    if (path[0] && remove_dir_waiting(path, timeout_ms, err, errlen) != 0)
        rc = -1;
    if (h->v1_memory_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_memory_root, sandbox_id);
        if (remove_dir_waiting(v1, timeout_ms, err, errlen) != 0)
            rc = -1;
    }
    if (h->v1_pids_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_pids_root, sandbox_id);
        if (remove_dir_waiting(v1, timeout_ms, err, errlen) != 0)
            rc = -1;
    }
    if (h->v1_cpu_root[0]) {
        char v1[700];
        snprintf(v1, sizeof v1, "%s/%s", h->v1_cpu_root, sandbox_id);
        if (remove_dir_waiting(v1, timeout_ms, err, errlen) != 0)
            rc = -1;
    }
    return rc;
}

const char *cgroup_name(const char *sandbox_id, const char *path, char out[CGROUP_NAME_LEN])
{
    const char *slash = strrchr(path, '/');
    if (slash && slash[1])
        snprintf(out, CGROUP_NAME_LEN, "%s", slash + 1);
    else if (host_tag_name(sandbox_id, out, CGROUP_NAME_LEN) != 0)
        snprintf(out, CGROUP_NAME_LEN, "%s", sandbox_id);
    return out;
}

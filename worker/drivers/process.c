/*
 * process.c: the `process` driver, the embedded default: a Sandbox is a process tree in new
 * mount, pid, network, ipc and uts namespaces (and a user namespace when the worker is not root),
 * pivot_root'ed into a read-only rootfs inside its jail, running sbx-agent (which installs the
 * seccomp filter of agent/sandbox_filter.c) as a host uid/gid of its own (host/uid_range.h) with
 * rlimits, in its own cgroup for accounting and for the App's size as its bounds
 * (host/cgroup_limits.c).
 *
 * Boot:   jail dir + shared Workspace slot (jail.c), cgroup (cgroup.c), socketpair for the agent
 *         channel, clone() into the new namespaces without a copy of the worker (CLONE_VM |
 *         CLONE_VFORK; drivers/process_child.h says why), the child exec'ing sbx-process-init at
 *         once with the plan in a memfd. That program waits until the worker has put it in its
 *         cgroup and set up its network, builds its root, drops privileges and execs
 *         /usr/bin/sbx-agent --channel-fd 3 as the namespace's init. boot() returns once the
 *         agent's "ready" line arrived.
 * Workspace: a host-side bind mount on the jail's shared slot, which propagates into the Sandbox's
 *         /workspace (a slave of the slot). Chosen over setns()+open_tree()/move_mount() from a
 *         forked helper because it needs no thread-unsafe setns in a threaded worker, works on any
 *         kernel with shared subtrees, keeps the Sandbox from ever holding a host path, and is
 *         one-way: the slave cannot propagate mounts back to the host. Unmounting the slot on the
 *         host detaches the Workspace from the Sandbox too.
 * End:    SIGTERM to the agent (it stops the App's command), SIGKILL after a grace period; the
 *         death of a pid namespace's init kills everything in it. Then usage is read, and the jail
 *         and cgroup are removed.
 *
 * The Sandbox's init sets PR_SET_PDEATHSIG after its last credential change (a change clears it),
 * so a dying worker takes its Sandboxes along. Note that Linux delivers it when the *thread* that
 * cloned the child exits: the worker must call boot() from long-lived helper threads. The agent
 * also ends when its channel closes, which covers the rest.
 *
 * Hidden state: `cgroups`, the host's hierarchies as drivers/shared.h detected them (set by
 * ensure_detected before each use).
 */
#include "clock.h"
#include "host/cgroup.h"
#include "drivers/driver.h"
#include "drivers/process_child.h"
#include "drivers/process_image.h"
#include "drivers/shared.h"
#include "host/jail.h"
#include "log.h"
#include "host/egress.h"
#include "host/links.h"
#include "host/uid_range.h"
#include "host/workspace_idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <time.h>
#include <unistd.h>

#ifndef SBX_BUILD_DIR
#define SBX_BUILD_DIR "."
#endif

#define PROCESS_DRIVER "process"
/* How long boot() waits for the agent's ready line. */
#define BOOT_TIMEOUT_MS 10000
/* How long terminate() gives the agent after SIGTERM before SIGKILL. */
#define TERM_GRACE_MS 2000
/* Child-side descriptors are moved above this so dup2 onto 0..3 cannot clobber them. */
#define CHILD_FD_FLOOR 10

/* Rlimits of everything in a Sandbox. RLIMIT_NPROC counts all processes of the uid on the host,
 * and all Sandboxes share sandbox_uid, so it cannot be a per-Sandbox quota: one Sandbox's fork
 * storm would use it up for every other. Where a pids cgroup caps each Sandbox (pids.max), the
 * uid-wide brake is raised far above that cap; without one, it is all there is. */
#define SANDBOX_NPROC 4096
#define SANDBOX_NPROC_WITH_PIDS_CGROUP 262144

/* ---- host facts, detected once ---- */

/* The host's cgroup hierarchies (drivers/shared.h), set by ensure_detected before each use. */
static const struct cgroup_host *cgroups;

static void ensure_detected(const struct sbx_config *cfg)
{
    cgroups = driver_cgroups(cfg, "process driver");
}

static void rootfs_path(const struct sbx_config *cfg, char *out, size_t len)
{
    if (cfg->rootfs[0])
        snprintf(out, len, "%s", cfg->rootfs);
    else
        snprintf(out, len, "%s/rootfs", SBX_BUILD_DIR);
}

/* "sha256:<hex>" from <rootfs>.sha256, written by tools/build-rootfs; "" when absent. */
static void read_image_hash(const char *rootfs, char *out, size_t len)
{
    char path[PATH_MAX];
    out[0] = '\0';
    snprintf(path, sizeof path, "%s.sha256", rootfs);
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (fgets(out, (int)len, f))
        out[strcspn(out, "\r\n")] = '\0';
    fclose(f);
}

/* ---- network (worker/host/links.h): veth pair, address pair, nftables elements ---- */

/* Called after the child exists, before it may run: the Sandbox's network namespace is that of
 * pid. Sets rt->net_address. Without a network (a worker that is not root: the Sandbox's namespace
 * then belongs to a user namespace the host cannot configure) it has only its loopback. */
static int process_network_up(const struct sbx_config *cfg, struct sandbox_runtime *rt, pid_t pid,
                              char *err, size_t errlen)
{
    (void)cfg;
    rt->net_address[0] = '\0';
    /* Not root (now): the Sandbox's namespace belongs to a user namespace we cannot configure. */
    if (!net_firewall() || geteuid() != 0)
        return 0;
    struct net_link link;
    if (net_sandbox_attach_process(rt->sandbox_id, pid, &link, err, errlen) != 0)
        return -1;
    net_link_sandbox_address(&link, rt->net_address, sizeof rt->net_address);
    return 0;
}

/* Removes the Sandbox's host-side network state (veth, firewall elements); idempotent; also used
 * by reap. net_address: what was recorded ("" when unknown: found by owner). */
static void process_network_down(const struct sbx_config *cfg, const char *sandbox_id,
                                 const char *net_address)
{
    (void)cfg;
    char err[256];
    if (net_firewall() && geteuid() == 0 &&
        net_sandbox_release(sandbox_id, net_address, err, sizeof err) != 0)
        log_warn("process driver: network state of %s: %s", sandbox_id, err);
}

/* ---- the child: cloned without a copy of the worker (drivers/process_child.h) ---- */

/* sbx-process-init beside this program (sbx-worker installed with it, or both in the build's
 * worker/), else in the build directory (test programs linking the driver). */
static void process_init_path(char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, len, "%s/%s", self, PROCESS_INIT_NAME);
            if (access(out, X_OK) == 0)
                return;
        }
    }
    snprintf(out, len, "%s/worker/%s", SBX_BUILD_DIR, PROCESS_INIT_NAME);
}

/* What the clone's child needs to exec sbx-process-init: all of it made before clone(). */
struct init_exec {
    char path[PATH_MAX];
    char plan_fd_arg[16];
    char *argv[4];
    char *envp[1];
    int keep[5]; /* descriptors the program inherits (close-on-exec cleared), -1: none */
    int error_fd;
};

/* The child of clone(CLONE_VM | CLONE_VFORK): it runs on the worker's memory, on a stack of its
 * own, while the cloning thread waits for its exec. So system calls only, through syscall(),
 * which writes nothing of the worker's but errno, the waiting thread's (meaningless to it once
 * clone returns), and no sanitizer runtime. Signals are all blocked (clone_sandbox): no handler
 * of the worker can run here. */
__attribute__((no_sanitize("address", "undefined"))) static int exec_process_init(void *arg)
{
    const struct init_exec *x = arg;
    for (size_t i = 0; i < sizeof x->keep / sizeof *x->keep; i++)
        if (x->keep[i] >= 0 && syscall(SYS_fcntl, x->keep[i], F_SETFD, 0) != 0)
            break; /* execve's failure below reports it all the same */
    syscall(SYS_execve, x->path, x->argv, x->envp);
    int failed = errno;
    /* "exec sbx-process-init: error <n>": without strerror, which may touch locale state. */
    static const char prefix[] = "exec " PROCESS_INIT_NAME ": error ";
    char msg[64], digits[12];
    size_t len = 0, nd = 0;
    while (prefix[len] && len < sizeof msg - sizeof digits) {
        msg[len] = prefix[len];
        len++;
    }
    unsigned e = (unsigned)failed;
    do {
        digits[nd++] = (char)('0' + e % 10);
        e /= 10;
    } while (e != 0 && nd < sizeof digits);
    while (nd > 0 && len < sizeof msg)
        msg[len++] = digits[--nd];
    syscall(SYS_write, x->error_fd, msg, len);
    syscall(SYS_exit, 127);
    return 127;
}

/* In the fork-like child of a worker that is not root (process_child.h): maps the worker's own
 * ids to the new user namespace's 0, which an unprivileged process may do for the namespace it
 * made. Its own memory: stdio is safe here, but a failure can only be told through error_fd. */
static void map_own_user_namespace(int error_fd)
{
    static const char *const files[3] = {"/proc/self/setgroups", "/proc/self/uid_map",
                                         "/proc/self/gid_map"};
    char maps[3][32];
    snprintf(maps[0], sizeof maps[0], "deny");
    snprintf(maps[1], sizeof maps[1], "0 %u 1\n", (unsigned)geteuid());
    snprintf(maps[2], sizeof maps[2], "0 %u 1\n", (unsigned)getegid());
    /* A worker that dropped root is not dumpable, which makes its /proc files root's. */
    const char *failed = prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 ? "set dumpable" : NULL;
    for (size_t i = 0; i < 3 && !failed; i++) {
        int fd = open(files[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, maps[i], strlen(maps[i])) != (ssize_t)strlen(maps[i]))
            failed = files[i];
        if (fd >= 0)
            close(fd);
    }
    if (failed) {
        char msg[256];
        int n = snprintf(msg, sizeof msg, "%s: %s", failed, strerror(errno));
        ssize_t ignored = write(error_fd, msg, n > 0 ? (size_t)n : 0);
        (void)ignored;
        _exit(1);
    }
}

/* Clones into the new namespaces; the child execs sbx-process-init with the plan in plan_fd.
 * Returns the child's pid once it has exec'ed (or died trying), or -1 with errno. */
static pid_t clone_sandbox(struct process_child_plan *plan, int plan_fd)
{
    unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
    if (geteuid() != 0)
        flags |= CLONE_NEWUSER;
    struct init_exec x = {
        .keep = {plan_fd, plan->sync_fd, plan->error_fd, plan->channel_fd, plan->image.userns_fd},
        .error_fd = plan->error_fd};
    process_init_path(x.path, sizeof x.path);
    snprintf(x.plan_fd_arg, sizeof x.plan_fd_arg, "%d", plan_fd);
    x.argv[0] = PROCESS_INIT_NAME;
    x.argv[1] = "--plan-fd";
    x.argv[2] = x.plan_fd_arg;
    x.argv[3] = NULL;
    x.envp[0] = NULL;
    enum { STACK_SIZE = 64 * 1024 };
    void *stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -1;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &plan->sigmask);
    /* The plan's copy of the mask is what the child restores; write the plan after taking it. */
    pid_t pid = -1;
    if (pwrite(plan_fd, plan, sizeof *plan, 0) != (ssize_t)sizeof *plan) {
        /* errno says why */
    } else if (flags & CLONE_NEWUSER) {
        /* The raw system call with no new stack behaves like fork(). */
        pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid == 0) {
            map_own_user_namespace(plan->error_fd);
            exec_process_init(&x);
        }
    } else {
        pid = clone(exec_process_init, (char *)stack + STACK_SIZE,
                    (int)(flags | CLONE_VM | CLONE_VFORK | SIGCHLD), &x);
    }
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &plan->sigmask, NULL);
    munmap(stack, STACK_SIZE);
    errno = saved;
    return pid;
}

/* ---- boot ---- */

static void plan_paths(struct process_child_plan *p, const char *rootfs, const char *jail_dir)
{
    snprintf(p->rootfs, sizeof p->rootfs, "%s", rootfs);
    jail_root_path(jail_dir, p->root, sizeof p->root);
    jail_slot_path(jail_dir, p->slot, sizeof p->slot);
    snprintf(p->root_tmp, sizeof p->root_tmp, "%s/tmp", p->root);
    snprintf(p->root_proc, sizeof p->root_proc, "%s/proc", p->root);
    snprintf(p->root_dev, sizeof p->root_dev, "%s/dev", p->root);
    snprintf(p->root_workspace, sizeof p->root_workspace, "%s/workspace", p->root);
    for (size_t i = 0; i < sizeof p->dev_files / sizeof *p->dev_files; i++)
        snprintf(p->dev_files[i], sizeof p->dev_files[i], "%s/dev/%s", p->root,
                 process_child_dev_names[i]);
}

/* With the worker's network only: without it the Sandbox has loopback alone, no resolver. */
static void plan_resolv_conf(struct process_child_plan *p)
{
    const char *src = net_firewall() && geteuid() == 0 ? net_egress_resolv_conf() : "";
    snprintf(p->resolv_src, sizeof p->resolv_src, "%s", src);
}

static int fd_above_floor(int fd)
{
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, CHILD_FD_FLOOR);
    close(fd);
    return moved;
}

/* Reads the child's failure report: 0 when it exec'ed (EOF without data), -1 with its reason. */
static int wait_for_exec(int error_fd, int64_t deadline, char *err, size_t errlen)
{
    char msg[256];
    size_t got = 0;
    for (;;) {
        int left = (int)(deadline - clock_mono_ms());
        struct pollfd pfd = {.fd = error_fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, left) == 0) {
            snprintf(err, errlen, "the Sandbox did not start within %d ms", BOOT_TIMEOUT_MS);
            return -1;
        }
        ssize_t n = read(error_fd, msg + got, sizeof msg - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == sizeof msg - 1)
            break;
    }
    if (got == 0)
        return 0;
    msg[got] = '\0';
    snprintf(err, errlen, "Sandbox setup failed at %s", msg);
    return -1;
}

/* Says why the Sandbox's init ended before it was ready, reaping it when it has. */
static void describe_early_exit(struct sandbox_runtime *rt, char *err, size_t errlen)
{
    pid_t pid = rt->pid;
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 20 && (r = waitpid(pid, &status, WNOHANG)) == 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (r == pid && WIFEXITED(status))
        snprintf(err, errlen, "the agent exited with status %d before it was ready",
                 WEXITSTATUS(status));
    else if (r == pid && WIFSIGNALED(status))
        snprintf(err, errlen, "the agent was killed by signal %d before it was ready",
                 WTERMSIG(status));
    else
        snprintf(err, errlen, "the agent closed its channel before it was ready");
    if (r == pid)
        rt->pid = 0; /* reaped: nothing left to kill */
}

/* Reads the agent's ready line (drivers/shared.h: nothing after it is consumed). */
static int wait_for_ready(struct sandbox_runtime *rt, int64_t deadline, char *err, size_t errlen)
{
    char line[1024], agent_err[8];
    size_t len;
    switch (driver_read_line(rt->channel_fd, deadline, NULL, NULL, line, sizeof line, &len)) {
    case DRIVER_LINE_OK:
        break;
    case DRIVER_LINE_TIMEOUT:
        snprintf(err, errlen, "the agent did not say ready within %d ms", BOOT_TIMEOUT_MS);
        return -1;
    case DRIVER_LINE_TOO_LONG:
        snprintf(err, errlen, "the agent's ready line is too long");
        return -1;
    default:
        describe_early_exit(rt, err, errlen);
        return -1;
    }
    if (driver_ready_line(line, len, rt, agent_err, sizeof agent_err) != 0) {
        snprintf(err, errlen, "the agent's first line was not ready: %.200s", line);
        return -1;
    }
    return 0;
}

static void kill_and_wait(pid_t pid, const char *cgroup_path, int grace_ms);

/* Removes what a failed or finished Sandbox left: the jail, the cgroup, the network state. */
static int cleanup_host_state(const struct sbx_config *cfg, const char *sandbox_id,
                              const char *net_address, const char *jail_dir,
                              const char *cgroup_path, char *err, size_t errlen)
{
    int rc = 0;
    process_network_down(cfg, sandbox_id, net_address);
    if (jail_dir[0] && jail_remove(jail_dir, err, errlen) != 0)
        rc = -1;
    char cg_err[256], name[CGROUP_NAME_LEN];
    if (cgroup_remove(cgroups, cgroup_path, cgroup_name(sandbox_id, cgroup_path, name), 5000,
                      cg_err, sizeof cg_err) != 0) {
        if (rc == 0)
            snprintf(err, errlen, "%s", cg_err);
        rc = -1;
    }
    return rc;
}

static int tmp_size_mib(const struct store_shape *shape)
{
    int64_t half = shape->mem_size_mib / 2;
    if (shape->mem_size_mib <= 0)
        return 64;
    return half < 16 ? 16 : (half > 4096 ? 4096 : (int)half);
}

/* A uid of its own for the Sandbox from sandbox_uid_range (uid_range.h), when configured. */
static int acquire_uid(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                       struct process_child_plan *plan, char *err, size_t errlen)
{
    struct uid_range range;
    if (uid_range_parse(cfg->sandbox_uid_range, &range, err, errlen) != 0)
        return -1;
    if (!uid_range_on(&range))
        return 0;
    if (uid_range_acquire(&range, rt->sandbox_id, &rt->uid, err, errlen) != 0)
        return -1;
    plan->uid = (uid_t)rt->uid;
    plan->gid = (gid_t)rt->uid;
    return 0;
}

static int process_boot(const struct sbx_config *cfg, struct sandbox_runtime *rt, char *err,
                        size_t errlen)
{
    ensure_detected(cfg);
    int64_t deadline = clock_mono_ms() + BOOT_TIMEOUT_MS;
    char rootfs[PATH_MAX];
    rootfs_path(cfg, rootfs, sizeof rootfs);
    rt->pid = 0;
    atomic_store(&rt->boot_pid, 0);
    rt->channel_fd = -1;
    rt->driver_state = NULL;
    rt->uid = -1;
    rt->cgroup_path[0] = rt->net_address[0] = rt->kernel[0] = '\0';
    read_image_hash(rootfs, rt->image_hash, sizeof rt->image_hash);
    if (jail_path(cfg->chroot_base, PROCESS_DRIVER, rt->sandbox_id, rt->jail_dir,
                  sizeof rt->jail_dir) != 0) {
        snprintf(err, errlen, "cannot make a jail path from chroot_base %s and id %s",
                 cfg->chroot_base, rt->sandbox_id);
        rt->jail_dir[0] = '\0';
        return -1;
    }
    struct process_child_plan *plan = calloc(1, sizeof *plan);
    int chan[2] = {-1, -1}, sync[2] = {-1, -1}, errp[2] = {-1, -1}, plan_fd = -1;
    if (!plan) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    plan->magic = PROCESS_CHILD_PLAN_MAGIC;
    plan->size = (uint32_t)sizeof *plan;
    plan_paths(plan, rootfs, rt->jail_dir);
    plan_resolv_conf(plan);
    snprintf(plan->tmp_options, sizeof plan->tmp_options, "size=%dm,mode=1777",
             tmp_size_mib(&rt->shape));
    snprintf(plan->hostname, sizeof plan->hostname, "%s", rt->sandbox_id);
    plan->uid = (uid_t)cfg->sandbox_uid;
    plan->nproc = cgroup_limits_pids(cgroups) ? SANDBOX_NPROC_WITH_PIDS_CGROUP : SANDBOX_NPROC;
    plan->gid = (gid_t)cfg->sandbox_gid;
    plan->drop_privileges = geteuid() == 0;
    bool privileged = geteuid() == 0;
    /* Before the image's plan: its idmapping shows the image's user as the Sandbox's own uid. */
    driver_boot_step(rt, "its uid");
    if (privileged && acquire_uid(cfg, rt, plan, err, errlen) != 0) {
        free(plan);
        return -1;
    }
    driver_boot_step(rt, "its image (user lookup, id mapping)");
    if (process_image_prepare(cfg, &rt->shape, plan->root, rootfs, plan->drop_privileges, plan->uid,
                              plan->gid, &plan->image, rt->image_hash, sizeof rt->image_hash, err,
                              errlen) != 0) {
        uid_range_release(rt->uid, rt->sandbox_id);
        rt->uid = -1;
        free(plan);
        return -1;
    }

    driver_boot_step(rt, "its jail and cgroup");
    if (jail_create(rt->jail_dir, privileged, err, errlen) != 0)
        goto fail;
    /* Accounting is not worth refusing a Sandbox for when we are not root (init said so). */
    char cg_err[256], cg_name[CGROUP_NAME_LEN];
    cgroup_name(rt->sandbox_id, "", cg_name);
    if (cgroup_create(cgroups, cg_name, rt->cgroup_path, sizeof rt->cgroup_path, cg_err,
                      sizeof cg_err) != 0) {
        if (privileged) {
            snprintf(err, errlen, "%s", cg_err);
            goto fail;
        }
        rt->cgroup_path[0] = '\0';
    } else if (cgroup_apply_limits(cgroups, rt->cgroup_path, cg_name, rt->shape.mem_size_mib,
                                   rt->shape.vcpu_count, cg_err, sizeof cg_err) != 0) {
        snprintf(err, errlen, "the Sandbox's bounds: %s", cg_err);
        goto fail;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0 ||
        pipe2(sync, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 ||
        (plan_fd = memfd_create("sbx-process-plan", MFD_CLOEXEC)) < 0) {
        snprintf(err, errlen, "socketpair/pipe/memfd: %s", strerror(errno));
        goto fail;
    }
    plan->channel_fd = chan[1] = fd_above_floor(chan[1]);
    plan->sync_fd = sync[0] = fd_above_floor(sync[0]);
    plan->error_fd = errp[1] = fd_above_floor(errp[1]);
    plan_fd = fd_above_floor(plan_fd);
    if (chan[1] < 0 || sync[0] < 0 || errp[1] < 0 || plan_fd < 0) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        goto fail;
    }

    driver_boot_step(rt, "clone");
    pid_t pid = clone_sandbox(plan, plan_fd);
    if (pid < 0) {
        snprintf(err, errlen, "clone: %s", strerror(errno));
        goto fail;
    }
    rt->pid = pid;
    atomic_store(&rt->boot_pid, pid);
    close(chan[1]);
    close(sync[0]);
    close(errp[1]);
    close(plan_fd);
    chan[1] = sync[0] = errp[1] = plan_fd = -1;
    rt->channel_fd = chan[0];
    chan[0] = -1;
    /* The clone returned after the exec or the child's end: a failed exec has said so already. */
    struct pollfd failed = {.fd = errp[0], .events = POLLIN};
    if (poll(&failed, 1, 0) == 1 && wait_for_exec(errp[0], deadline, err, errlen) != 0)
        goto fail;

    driver_boot_step(rt, "its cgroup and network");
    if (cgroup_add_pid(cgroups, rt->cgroup_path, cg_name, pid, cg_err, sizeof cg_err) != 0) {
        if (privileged) {
            snprintf(err, errlen, "%s", cg_err);
            goto fail;
        }
        rt->cgroup_path[0] = '\0';
    }
    if (process_network_up(cfg, rt, pid, err, errlen) != 0)
        goto fail;
    if (write(sync[1], "g", 1) != 1) {
        snprintf(err, errlen, "the Sandbox's init died before it started");
        goto fail;
    }
    driver_boot_step(rt, "its root and the agent's ready line");
    if (wait_for_exec(errp[0], deadline, err, errlen) != 0 ||
        wait_for_ready(rt, deadline, err, errlen) != 0)
        goto fail;
    int fl = fcntl(rt->channel_fd, F_GETFL);
    fcntl(rt->channel_fd, F_SETFL, fl | O_NONBLOCK);
    close(sync[1]);
    close(errp[0]);
    process_image_release(&plan->image);
    free(plan);
    return 0;

fail:
    if (plan_fd >= 0)
        close(plan_fd);
    for (int i = 0; i < 2; i++) {
        if (chan[i] >= 0)
            close(chan[i]);
        if (sync[i] >= 0)
            close(sync[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    if (rt->channel_fd >= 0)
        close(rt->channel_fd);
    rt->channel_fd = -1;
    driver_boot_step(rt, "cleanup after a failed boot");
    atomic_store(&rt->boot_pid, 0); /* reaped below: the pid may be another's after */
    if (rt->pid > 0)
        kill_and_wait(rt->pid, rt->cgroup_path, 0);
    rt->pid = 0;
    char cleanup_err[256];
    if (cleanup_host_state(cfg, rt->sandbox_id, rt->net_address, rt->jail_dir, rt->cgroup_path,
                           cleanup_err, sizeof cleanup_err) != 0)
        log_warn("process driver: cleanup after a failed boot of %s: %s", rt->sandbox_id,
                 cleanup_err);
    uid_range_release(rt->uid, rt->sandbox_id);
    rt->uid = -1;
    process_image_release(&plan->image);
    free(plan);
    return -1;
}

/* ---- attach ---- */

static int process_attach_workspace(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                                    const char *host_dir, char *err, size_t errlen)
{
    if (!host_dir)
        return 0;
    if (!rt->jail_dir[0] || rt->pid <= 0) {
        snprintf(err, errlen, "the Sandbox is not running");
        return -1;
    }
    if (rt->uid < 0)
        return jail_attach_workspace(rt->jail_dir, host_dir, err, errlen);
    /* The Sandbox's own uid sees the Workspace's files (owned by sandbox_uid on disk) as its. */
    char slot[PATH_MAX];
    jail_slot_path(rt->jail_dir, slot, sizeof slot);
    return workspace_idmap_mount(host_dir, slot, (uid_t)cfg->sandbox_uid, (gid_t)cfg->sandbox_gid,
                                 (uid_t)rt->uid, (gid_t)rt->uid, err, errlen);
}

/* ---- terminate ---- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* True when pid no longer runs: gone, or a zombie that only its parent can reap. */
static bool not_running(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && (p[2] == 'Z' || p[2] == 'X');
}

/* Waits for pid to end, reaping it when it is our child; true when it ended within timeout_ms.
 * When pid is not our child (after a worker restart) it waits for it to stop running. */
static bool wait_gone(pid_t pid, int timeout_ms)
{
    for (int waited = 0;; waited += 10) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD && not_running(pid)))
            return true;
        if (waited >= timeout_ms)
            return false;
        sleep_ms(10);
    }
}

/* SIGTERM (when grace_ms > 0), then SIGKILL to the Sandbox's init and its whole cgroup; waits. */
static void kill_and_wait(pid_t pid, const char *cgroup_path, int grace_ms)
{
    if (grace_ms > 0) {
        kill(pid, SIGTERM);
        if (wait_gone(pid, grace_ms))
            goto gone;
    }
    kill(pid, SIGKILL);
    cgroup_kill_all(cgroup_path);
    if (!wait_gone(pid, 5000))
        log_error("process driver: pid %d survived SIGKILL for 5 s", (int)pid);
gone:
    /* The init's death kills the namespace; its members leave the cgroup shortly after. */
    for (int waited = 0; cgroup_populated(cgroup_path) && waited < 5000; waited += 10) {
        cgroup_kill_all(cgroup_path);
        sleep_ms(10);
    }
}

static int process_terminate(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                             struct store_usage *usage, char *err, size_t errlen)
{
    ensure_detected(cfg);
    usage->cpu_usec = usage->mem_peak_bytes = -1;
    /* Closing the channel already asks the agent to stop the App's command. */
    if (rt->channel_fd >= 0)
        close(rt->channel_fd);
    rt->channel_fd = -1;
    if (rt->pid > 0)
        kill_and_wait(rt->pid, rt->cgroup_path, TERM_GRACE_MS);
    rt->pid = 0;
    /* No process of the uid is left (the cgroup is empty): another Sandbox may have it. */
    uid_range_release(rt->uid, rt->sandbox_id);
    rt->uid = -1;
    char cg_name[CGROUP_NAME_LEN];
    if (rt->cgroup_path[0] || cgroups->v1_memory_root[0])
        cgroup_read_usage(cgroups, rt->cgroup_path,
                          cgroup_name(rt->sandbox_id, rt->cgroup_path, cg_name), &usage->cpu_usec,
                          &usage->mem_peak_bytes);
    int rc = cleanup_host_state(cfg, rt->sandbox_id, rt->net_address, rt->jail_dir, rt->cgroup_path,
                                err, errlen);
    if (rc == 0) {
        rt->jail_dir[0] = '\0';
        rt->cgroup_path[0] = '\0';
    }
    return rc;
}

/* ---- reap ---- */

/* Seconds since boot at which pid started, from /proc/<pid>/stat; -1 when unknown. */
static double process_start_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    unsigned long long start = 0;
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                     "%*d %*d %llu",
                     &start) != 1)
        return -1;
    return (double)start / (double)sysconf(_SC_CLK_TCK);
}

/* True when pid is the recorded Sandbox's init: same program, started when the Sandbox booted.
 * Guards against killing an unrelated process that reuses the pid after a host reboot or wrap. */
static bool pid_is_sandbox_init(pid_t pid, const struct store_sandbox *sb)
{
    char path[64], cmd[256];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(cmd, 1, sizeof cmd - 1, f);
    fclose(f);
    cmd[n] = '\0';
    if (strcmp(cmd, "sbx-agent") != 0)
        return false;
    double started = process_start_seconds(pid);
    struct timespec boot, real;
    clock_gettime(CLOCK_BOOTTIME, &boot);
    clock_gettime(CLOCK_REALTIME, &real);
    double boot_epoch = (double)real.tv_sec - (double)boot.tv_sec;
    double started_ms = (boot_epoch + started) * 1000.0;
    return started >= 0 && sb->created_at > 0 && started_ms >= (double)sb->created_at - 5000 &&
           started_ms <= (double)sb->created_at + BOOT_TIMEOUT_MS + 5000;
}

static int process_reap(const struct sbx_config *cfg, const struct store_sandbox *sb, char *err,
                        size_t errlen)
{
    ensure_detected(cfg);
    char jail_dir[512] = "", cgroup_path[512] = "";
    if (sb->jail_dir[0]) {
        if (!jail_path_is(cfg->chroot_base, PROCESS_DRIVER, sb->id, sb->jail_dir)) {
            snprintf(err, errlen, "refusing to reap %s: its jail_dir %s is not %s/%s/%s", sb->id,
                     sb->jail_dir, cfg->chroot_base, PROCESS_DRIVER, sb->id);
            return -1;
        }
        snprintf(jail_dir, sizeof jail_dir, "%s", sb->jail_dir);
    } else if (jail_path(cfg->chroot_base, PROCESS_DRIVER, sb->id, jail_dir, sizeof jail_dir) !=
               0) {
        /* The worker died after making the jail but before recording it: the path is derived
         * from the id alone, so the jail is still found. */
        jail_dir[0] = '\0';
    }
    char tagged[CGROUP_NAME_LEN], legacy[600] = "";
    cgroup_name(sb->id, "", tagged);
    if (cgroups->v2_root[0]) {
        snprintf(cgroup_path, sizeof cgroup_path, "%.400s/sbx/%.64s", cgroups->v2_root, tagged);
        snprintf(legacy, sizeof legacy, "%.400s/sbx/%.64s", cgroups->v2_root, sb->id);
    }
    if (sb->cgroup_path[0] && strcmp(sb->cgroup_path, legacy) == 0)
        snprintf(cgroup_path, sizeof cgroup_path, "%s", legacy); /* made before tagging */
    else if (sb->cgroup_path[0] && strcmp(sb->cgroup_path, cgroup_path) != 0)
        log_warn("process driver: %s recorded cgroup %s, reaping %s", sb->id, sb->cgroup_path,
                 cgroup_path);

    /* The cgroup is the authority on what belongs to the Sandbox; the pid is checked first. */
    pid_t pid = (pid_t)sb->pid;
    bool ours = pid > 0 && (cgroup_has_pid(cgroup_path, pid) || pid_is_sandbox_init(pid, sb));
    if (ours)
        kill(pid, SIGKILL);
    for (int waited = 0; cgroup_populated(cgroup_path) && waited < 5000; waited += 10) {
        cgroup_kill_all(cgroup_path);
        sleep_ms(10);
    }
    if (ours && !wait_gone(pid, 5000))
        log_error("process driver: %s's init %d survived SIGKILL", sb->id, (int)pid);
    uid_range_release_owner(sb->id);
    return cleanup_host_state(cfg, sb->id, sb->net_address, jail_dir, cgroup_path, err, errlen);
}

/* ---- OOM ---- */

static int64_t process_oom_kills(const struct sbx_config *cfg, const struct sandbox_runtime *rt)
{
    ensure_detected(cfg);
    char cg_name[CGROUP_NAME_LEN];
    return cgroup_oom_kills(cgroups, rt->cgroup_path,
                            cgroup_name(rt->sandbox_id, rt->cgroup_path, cg_name));
}

static void process_unbounded(const struct sbx_config *cfg, char *out, size_t len)
{
    ensure_detected(cfg);
    cgroup_limits_unbounded(cgroups, out, len);
}

/* ---- init ---- */

static int process_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
    ensure_detected(cfg);
    char rootfs[PATH_MAX], agent[PATH_MAX + 32], hash[80];
    rootfs_path(cfg, rootfs, sizeof rootfs);
    snprintf(agent, sizeof agent, "%s/usr/bin/sbx-agent", rootfs);
    if (access(agent, X_OK) != 0) {
        snprintf(err, errlen,
                 "rootfs %s has no /usr/bin/sbx-agent (build it: cmake --build, "
                 "target rootfs, or set rootfs)",
                 rootfs);
        return -1;
    }
    char init_path[PATH_MAX];
    process_init_path(init_path, sizeof init_path);
    if (access(init_path, X_OK) != 0) {
        snprintf(err, errlen,
                 "no %s beside this program nor at %s (build it: cmake --build, target %s; an "
                 "installed sbx-worker needs it installed beside it)",
                 PROCESS_INIT_NAME, init_path, PROCESS_INIT_NAME);
        return -1;
    }
    read_image_hash(rootfs, hash, sizeof hash);
    struct uid_range range;
    if (uid_range_parse(cfg->sandbox_uid_range, &range, err, errlen) != 0)
        return -1;
    log_info("process driver: rootfs %s (%s), jails under %s/%s, sandbox uid %lld gid %lld", rootfs,
             hash[0] ? hash : "no image hash file", cfg->chroot_base, PROCESS_DRIVER,
             (long long)cfg->sandbox_uid, (long long)cfg->sandbox_gid);
    if (uid_range_on(&range))
        log_info("process driver: each Sandbox runs as a uid/gid of its own from %lld-%lld "
                 "(entries in %s); Workspace files belong to uid %lld, mapped to it",
                 (long long)range.first, (long long)range.last, UID_RANGE_DIR,
                 (long long)cfg->sandbox_uid);
    char bounds[256], unbounded[32];
    cgroup_limits_report(cgroups, bounds, sizeof bounds);
    cgroup_limits_unbounded(cgroups, unbounded, sizeof unbounded);
    log_info("process driver: %s", bounds);
    if (unbounded[0])
        log_warn("process driver: cannot bound the Sandboxes' %s on this host (App sizes are "
                 "not enforced for them)",
                 unbounded);
    if (!cgroups->v2_root[0])
        log_warn("process driver: CPU time cannot be measured on this host");
    if (!cgroups->v2_memory && !cgroups->v1_memory_root[0])
        log_warn("process driver: peak memory cannot be measured on this host");
    if (geteuid() != 0) {
        log_warn("process driver: not root: Sandboxes run in a user namespace as the worker's "
                 "own uid (sandbox_uid is not applied) and Workspaces cannot be attached");
        log_warn("process driver: not root: Sandboxes get no network (loopback only)");
        return 0;
    }
    /* As root every Sandbox gets its link and firewall; without a firewall, no Sandbox boots. */
    if (net_init(cfg->net_pool, err, errlen) != 0)
        return -1;
    return net_egress_init(cfg, err, errlen);
}

const struct driver driver_process = {
    .name = PROCESS_DRIVER,
    .init = process_init,
    .boot = process_boot,
    .attach_workspace = process_attach_workspace,
    .terminate = process_terminate,
    .reap = process_reap,
    .oom_kills = process_oom_kills,
    .unbounded = process_unbounded,
    /* Its own wait for the agent, then the cleanup of a failed boot (kill_and_wait, the cgroup's
     * removal: 5 s each at most) with room to spare. */
    .boot_deadline_ms = BOOT_TIMEOUT_MS + 20000,
};

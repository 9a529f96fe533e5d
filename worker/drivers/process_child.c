/*
 * process_child.c: the Sandbox's own side of a process driver boot (process_child.h), run by
 * sbx-process-init in the Sandbox's new namespaces: its root (the built-in rootfs or an App's
 * image as an overlay), /dev, /tmp, /proc and the Workspace slot, pivot_root, rlimits,
 * credentials, then the agent's exec. A process of its own by now, not a fork of the worker.
 */
#include "drivers/process_child.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The agent's fd for the channel inside the Sandbox. */
#define CHANNEL_FD_IN_SANDBOX 3
/* Rlimits of everything in a Sandbox besides RLIMIT_NPROC (the plan's nproc, process.c). */
#define SANDBOX_NOFILE 1024
#define SANDBOX_FSIZE (1ll << 30)

const char *const process_child_dev_names[5] = {"null", "zero", "full", "random", "urandom"};

__attribute__((noreturn)) static void child_fail(const struct process_child_plan *p,
                                                 const char *step)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%s: %s", step, strerror(errno));
    ssize_t ignored = write(p->error_fd, msg, n > 0 ? (size_t)n : 0);
    (void)ignored;
    _exit(1);
}

static void bring_up_loopback(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    close(s);
}

static void child_build_dev(const struct process_child_plan *p)
{
    if (mount("tmpfs", p->root_dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") != 0)
        child_fail(p, "mount /dev");
    for (size_t i = 0; i < sizeof process_child_dev_names / sizeof *process_child_dev_names; i++) {
        char host[32];
        snprintf(host, sizeof host, "/dev/%s", process_child_dev_names[i]);
        int fd = open(p->dev_files[i], O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
        if (fd < 0)
            child_fail(p, "create a /dev node");
        close(fd);
        if (mount(host, p->dev_files[i], NULL, MS_BIND, NULL) != 0)
            child_fail(p, "bind a /dev node");
    }
    static const char *const links[][2] = {{"/proc/self/fd", "fd"},
                                           {"/proc/self/fd/0", "stdin"},
                                           {"/proc/self/fd/1", "stdout"},
                                           {"/proc/self/fd/2", "stderr"}};
    for (size_t i = 0; i < 4; i++) {
        char at[PATH_MAX + 16];
        snprintf(at, sizeof at, "%s/%s", p->root_dev, links[i][1]);
        if (symlink(links[i][0], at) != 0)
            child_fail(p, "symlink in /dev");
    }
    if (mount(NULL, p->root_dev, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) != 0)
        child_fail(p, "remount /dev read-only");
}

/* The Sandbox's /etc/resolv.conf names the resolvers it may use: sbx's file bound
 * read-only over the root's, before pivot_root. Only onto a path without any symlink (checked with
 * openat2 RESOLVE_NO_SYMLINKS inside the root), so an image's links cannot aim the bind elsewhere.
 * A writable root (an App's image) without the file gets an empty one to bind onto; a read-only
 * root without it, or with a symlink on the way (e.g. to systemd-resolved's stub), keeps what it
 * has. */
static void child_bind_resolv_conf(const struct process_child_plan *p)
{
    if (!p->resolv_src[0])
        return;
    int root = open(p->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        child_fail(p, "open the root");
    struct open_how create = {.flags = O_WRONLY | O_CREAT | O_CLOEXEC,
                              .mode = 0644,
                              .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
    int fd = (int)syscall(SYS_openat2, root, "etc/resolv.conf", &create, sizeof create);
    if (fd < 0) { /* a read-only root: is the file there, and reached without a link? */
        struct open_how find = {.flags = O_PATH | O_CLOEXEC,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
        fd = (int)syscall(SYS_openat2, root, "etc/resolv.conf", &find, sizeof find);
    }
    close(root);
    if (fd < 0)
        return;
    close(fd);
    char at[PATH_MAX + 32];
    snprintf(at, sizeof at, "%s/etc/resolv.conf", p->root);
    if (mount(p->resolv_src, at, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, at, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) != 0)
        child_fail(p, "bind /etc/resolv.conf");
}

/* The built-in rootfs, bound read-only as the Sandbox's root. */
static void child_bind_default_rootfs(const struct process_child_plan *p)
{
    if (mount(p->rootfs, p->root, NULL, MS_BIND, NULL) != 0)
        child_fail(p, "bind the rootfs");
    if (mount(NULL, p->root, NULL, MS_PRIVATE, NULL) != 0)
        child_fail(p, "make the root private");
    if (mount(NULL, p->root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) !=
        0)
        child_fail(p, "remount the rootfs read-only");
}

static void child_build_root(const struct process_child_plan *p)
{
    /* Nothing we mount may reach the host; the slot stays a slave so the host's Workspace bind
     * still arrives. */
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0)
        child_fail(p, "make mounts slave");
    if (p->image.enabled) {
        /* An App's image: a writable overlay over the cached tree (process_image.h). */
        const char *step = process_image_mount(&p->image, p->drop_privileges, p->uid, p->gid);
        if (step)
            child_fail(p, step);
    } else {
        child_bind_default_rootfs(p);
    }
    child_bind_resolv_conf(p);
    if (mount("tmpfs", p->root_tmp, "tmpfs", MS_NOSUID | MS_NODEV, p->tmp_options) != 0)
        child_fail(p, "mount /tmp");
    if (mount("proc", p->root_proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        child_fail(p, "mount /proc");
    child_build_dev(p);
    if (mount(p->slot, p->root_workspace, NULL, MS_BIND, NULL) != 0)
        child_fail(p, "bind the workspace slot");
    /* pivot_root(".", ".") stacks the old root under the new one, so the read-only rootfs needs no
     * put_old directory; the old root is then detached. */
    if (chdir(p->root) != 0 || syscall(SYS_pivot_root, ".", ".") != 0)
        child_fail(p, "pivot_root");
    if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
        child_fail(p, "detach the old root");
    if (mount("/proc/sys", "/proc/sys", NULL, MS_BIND | MS_REC, NULL) != 0 ||
        mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0)
        child_fail(p, "make /proc/sys read-only");
}

static void child_limit(const struct process_child_plan *p)
{
    const struct {
        int resource;
        rlim_t value;
    } limits[] = {{RLIMIT_NPROC, p->nproc},
                  {RLIMIT_NOFILE, SANDBOX_NOFILE},
                  {RLIMIT_FSIZE, SANDBOX_FSIZE},
                  {RLIMIT_CORE, 0}};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        struct rlimit rl = {limits[i].value, limits[i].value}, current;
        if (getrlimit(limits[i].resource, &current) == 0 && current.rlim_max < rl.rlim_max)
            rl.rlim_cur = rl.rlim_max = current.rlim_max; /* only root may raise a hard limit */
        if (setrlimit(limits[i].resource, &rl) != 0)
            child_fail(p, "setrlimit");
    }
}

static void child_drop_privileges(const struct process_child_plan *p)
{
    if (p->drop_privileges) {
        for (int cap = 0; cap <= 63; cap++)
            if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
                child_fail(p, "drop capabilities");
        /* Raw system calls, as ever in a Sandbox's init: a process of one thread needs none of
         * the broadcast to other threads that glibc's wrappers add. */
        if (syscall(SYS_setgroups, 1, &p->gid) != 0)
            child_fail(p, "setgroups");
        if (syscall(SYS_setresgid, p->gid, p->gid, p->gid) != 0)
            child_fail(p, "setresgid");
        if (syscall(SYS_setresuid, p->uid, p->uid, p->uid) != 0)
            child_fail(p, "setresuid");
    }
    /* A uid change already cleared them as root; in a user namespace we stay its uid 0, so clear
     * them explicitly: the agent must not be able to undo the read-only mounts. */
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {{0, 0, 0}, {0, 0, 0}};
    if (!p->drop_privileges) {
        for (int cap = 0; cap <= 63; cap++)
            if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
                child_fail(p, "drop capabilities");
    }
    if (syscall(SYS_capset, &hdr, data) != 0)
        child_fail(p, "capset");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        child_fail(p, "no_new_privs");
    /* After the last credential change, which clears it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
        child_fail(p, "pdeathsig");
}

void process_child_run(const struct process_child_plan *p)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    char go;
    if (read(p->sync_fd, &go, 1) != 1)
        _exit(1); /* the parent gave up or died */
    close(p->sync_fd);
    child_build_root(p);
    if (sethostname(p->hostname, strlen(p->hostname)) != 0)
        child_fail(p, "sethostname");
    bring_up_loopback();
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
        child_fail(p, "open /dev/null");
    if (dup2(p->channel_fd, CHANNEL_FD_IN_SANDBOX) < 0)
        child_fail(p, "dup2 the channel");
    child_limit(p);
    child_drop_privileges(p);
    /* Everything but 0-3 (and error_fd, so that the worker sees the agent's exec) is closed at
     * exec. */
    if (syscall(SYS_close_range, CHANNEL_FD_IN_SANDBOX + 1, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) != 0)
        child_fail(p, "close_range");
    /* --seccomp: the agent filters itself and the App (agent/sandbox_filter.c). */
    char *const argv[] = {"sbx-agent", "--channel-fd", "3", "--seccomp", NULL};
    char *const envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", NULL};
    const char *agent = p->image.enabled ? PROCESS_IMAGE_AGENT : "/usr/bin/sbx-agent";
    execve(agent, argv, envp);
    child_fail(p, "exec sbx-agent");
}

/* ---- an App's image as the root (process_image.h) ---- */

/* Mounts the cache's tree idmapped (read-only, nosuid, nodev) at lower_mount. Returns 0, 1 when
 * the file system cannot idmap (the tree is then used as it is), -1 on another failure. */
static int mount_idmapped_lower(const struct process_image_plan *p)
{
    if (mkdir(p->lower_mount, 0755) != 0)
        return -1;
    int tree =
        (int)syscall(SYS_open_tree, AT_FDCWD, p->lower_src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return -1;
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                          MOUNT_ATTR_NODEV,
                              .userns_fd = (uint64_t)p->userns_fd};
    int rc = 0;
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        rc = (errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS) ? 1 : -1;
    else if (syscall(SYS_move_mount, tree, "", AT_FDCWD, p->lower_mount, MOVE_MOUNT_F_EMPTY_PATH) !=
             0)
        rc = -1;
    close(tree);
    return rc;
}

/* Makes path a real directory in the overlay. Whatever the image has there instead (a symlink,
 * perhaps to a host path, or a file) is removed in the upper layer only. */
static int ensure_directory(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        if (unlink(path) != 0)
            return -1;
    } else if (errno != ENOENT) {
        return -1;
    }
    return mkdir(path, 0755);
}

const char *process_image_mount(const struct process_image_plan *p, bool chown_root,
                                uid_t owner_uid, gid_t owner_gid)
{
    /* The writable layer first, on the root's own mount point; the overlay then covers it and
     * keeps its layers alive after the old root is detached. */
    if (mount("sbx-rw", p->root, "tmpfs", MS_NOSUID | MS_NODEV, p->rw_options) != 0)
        return "mount the image's writable layer";
    if (mkdir(p->upper, 0755) != 0 || mkdir(p->work, 0700) != 0)
        return "make the overlay's upper and work directories";
    if (chown_root && chown(p->upper, owner_uid, owner_gid) != 0)
        return "give the image's root to the Sandbox's uid";
    const char *options = p->plain_overlay_options;
    if (p->userns_fd >= 0) {
        int idmapped = mount_idmapped_lower(p);
        if (idmapped < 0)
            return "mount the image's tree idmapped";
        if (idmapped == 0)
            options = p->overlay_options;
    }
    if (mount("overlay", p->root, "overlay", MS_NOSUID | MS_NODEV, options) != 0)
        return "mount the image's overlay";
    if (mount(NULL, p->root, NULL, MS_PRIVATE, NULL) != 0)
        return "make the image's root private";
    for (size_t i = 0; i < 5; i++)
        if (ensure_directory(p->mount_points[i]) != 0)
            return "make a mount point in the image";
    /* /.sbx: a read-only tmpfs holding sbx's agent, bound read-only from the built-in rootfs. */
    if (mount("sbx", p->sbx_dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=16k,mode=0755") != 0)
        return "mount /.sbx";
    int fd = open(p->sbx_agent, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0755);
    if (fd < 0)
        return "create /.sbx/sbx-agent";
    close(fd);
    if (mount(p->agent, p->sbx_agent, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, p->sbx_agent, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              NULL) != 0)
        return "bind sbx-agent read-only";
    if (mount(NULL, p->sbx_dir, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
        return "remount /.sbx read-only";
    return NULL;
}

/*
 * firecracker.c: the "firecracker" Sandbox driver, Firecracker's production path.
 *
 * One Sandbox is one Firecracker microVM started through Firecracker's `jailer`:
 *   <chroot_base>/<exec-file-name>/<jailer id>/          the jail directory (removed at the end)
 *   <chroot_base>/<exec-file-name>/<jailer id>/root/     the VMM's chroot, owned by the sandbox uid
 *       vmlinux|vmlinuz, rootfs.ext4|initramfs.cpio.gz   guest artefacts, hard-linked (or copied)
 *       run/firecracker.socket                           Firecracker's API socket
 *       run/vsock.sock                                   the vsock device's host side
 *       image.erofs                                      an App's image: its cached rootfs.erofs,
 *                                                        linked (root-owned, 0444: read-only)
 *       firecracker.pid                                  written by the jailer (--new-pid-ns)
 * Boot: jailer (its own cgroup <v2 root>/sbx/<jailer id> from cgroup.h, network namespace with
 * the Sandbox's link from links.h, PID namespace, non-root uid/gid), then the API calls
 * boot-source, drives, machine-config, network-interfaces, vsock, InstanceStart, then a
 * host-initiated vsock connection ("CONNECT 1024") to the guest's sbx-agent, whose ready line ends
 * the boot. That connection is the agent channel (protocol in driver.h).
 */
#include "fs.h"
#include "clock.h"
#include "host/cgroup.h"
#include "drivers/driver.h"
#include "drivers/shared.h"
#include "drivers/fc_api.h"
#include "images/image_cache.h"
#include "images/image_erofs.h"
#include "log.h"
#include "host/log_cap.h"
#include "host/egress.h"
#include "host/links.h"

#include <jansson.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The guest side of the agent channel: sbx-agent listens on this vsock port. */
#define FC_AGENT_VSOCK_PORT 1024
/* Each VM has its own vsock device, so every guest can use the first non-reserved CID. */
#define FC_GUEST_CID 3
#define FC_API_SOCK_IN_JAIL "/run/firecracker.socket"
#define FC_VSOCK_IN_JAIL "/run/vsock.sock"
#define FC_TAP_NAME "tap0"
#define FC_API_TIMEOUT_MS 5000
#define FC_JAILER_TIMEOUT_MS 10000
#define FC_AGENT_READY_TIMEOUT_MS 30000
#define FC_SHUTDOWN_GRACE_MS 3000
#define FC_KILL_WAIT_MS 2000
#define FC_JAILER_ID_MAX 64
/* An App's image inside the jail, attached as a read-only drive after the root drive (if any). */
#define FC_IMAGE_IN_JAIL "/image.erofs"

/* Everything derived from one Sandbox id; recomputable from the store for reap(). */
struct fc_layout {
    char jailer_id[FC_JAILER_ID_MAX + 1];
    char jail_dir[512];   /* <chroot_base>/<exec name>/<jailer id> */
    char root_dir[600];   /* <jail_dir>/root */
    char api_sock[700];   /* host path of the API socket */
    char vsock_path[700]; /* host path of the vsock UDS */
    char pid_file[700];   /* where the jailer writes the VMM's pid */
    char netns_name[80];  /* name under /var/run/netns */
    char netns_path[128];
    char cgroup_parent[256];       /* --parent-cgroup, relative to the cgroup2 mount */
    char cgroup_dir[512];          /* <cgroup v2 root>/sbx/<jailer id>, "" when not measurable */
    char sandbox_id[FW_OWNER_LEN]; /* the owner of the link and firewall elements */
    char net_address[INET_ADDRSTRLEN]; /* the guest's address, "" without the worker's network */
};

/* The guest kernel and root filesystem chosen from the guest directory. */
struct fc_guest {
    char kernel[600];     /* host path */
    char kernel_name[64]; /* file name inside the chroot */
    char rootfs[600];     /* host path of an ext4 image, "" when booting an initramfs */
    char initrd[600];     /* host path of an initramfs, "" when booting a rootfs drive */
    char root_name[64];
    char image_hash[80];
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool is_executable(const char *path)
{
    return path[0] != '\0' && access(path, X_OK) == 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Sandbox ids are "sbx_<base32>"; the jailer accepts only alphanumerics and hyphens. */
static int jailer_id_for(const char *sandbox_id, char *out, size_t outlen, char *err, size_t errlen)
{
    size_t len = strlen(sandbox_id);
    if (len == 0 || len > FC_JAILER_ID_MAX || len >= outlen) {
        snprintf(err, errlen, "sandbox id \"%s\" cannot be a jailer id (1-%d characters)",
                 sandbox_id, FC_JAILER_ID_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        char c = sandbox_id[i];
        if (c == '_')
            c = '-';
        if (!isalnum((unsigned char)c) && c != '-') {
            snprintf(err, errlen, "sandbox id \"%s\" has a character the jailer refuses",
                     sandbox_id);
            return -1;
        }
        out[i] = c;
    }
    out[len] = '\0';
    return 0;
}

/* The cgroup2 mount point, from /proc/self/mountinfo (the jailer finds it the same way). */
static int cgroup2_mount(char *out, size_t outlen)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[4096];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        /* "id parent major:minor root mountpoint options ... - fstype source superoptions" */
        char *sep = strstr(line, " - ");
        if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
            continue;
        char mount_point[1024];
        if (sscanf(line, "%*s %*s %*s %*s %1023s", mount_point) == 1 &&
            strlen(mount_point) < outlen) {
            strcpy(out, mount_point);
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* The host's cgroup hierarchies as worker/host/cgroup.c finds them (cgroup_root, else detected),
 * shared with the process driver: VM cgroups are <v2 root>/sbx/<jailer id>, plus
 * <v1 memory root>/<jailer id> for the memory peak on hosts without the v2 memory controller. */
static const struct cgroup_host *host_cgroups(const struct sbx_config *cfg)
{
    return driver_cgroups(cfg, "firecracker");
}

/* --parent-cgroup is relative to the cgroup2 mount (the jailer finds the mount itself and makes
 * <mount>/<parent>/<id>): the v2 root's path below the mount, then "sbx". */
static void cgroup_layout(const struct sbx_config *cfg, struct fc_layout *lay)
{
    const struct cgroup_host *h = host_cgroups(cfg);
    char mount_point[512];
    lay->cgroup_dir[0] = '\0';
    snprintf(lay->cgroup_parent, sizeof lay->cgroup_parent, "sbx");
    if (!h->v2_root[0] || cgroup2_mount(mount_point, sizeof mount_point) != 0)
        return;
    size_t mlen = strlen(mount_point);
    const char *root = h->v2_root;
    if (strncmp(root, mount_point, mlen) != 0 || (root[mlen] != '/' && root[mlen] != '\0'))
        return; /* not below the mount the jailer will use: not measurable */
    if (root[mlen] == '/' && root[mlen + 1])
        snprintf(lay->cgroup_parent, sizeof lay->cgroup_parent, "%.200s/sbx", root + mlen + 1);
    int n = snprintf(lay->cgroup_dir, sizeof lay->cgroup_dir, "%s/sbx/%s", root, lay->jailer_id);
    if (n < 0 || (size_t)n >= sizeof lay->cgroup_dir)
        lay->cgroup_dir[0] = '\0';
}

static int layout_for(const struct sbx_config *cfg, const char *sandbox_id, struct fc_layout *lay,
                      char *err, size_t errlen)
{
    memset(lay, 0, sizeof *lay);
    if (jailer_id_for(sandbox_id, lay->jailer_id, sizeof lay->jailer_id, err, errlen) != 0)
        return -1;
    int n = snprintf(lay->jail_dir, sizeof lay->jail_dir, "%s/%s/%s", cfg->chroot_base,
                     base_name(cfg->firecracker_bin), lay->jailer_id);
    if (n < 0 || (size_t)n >= sizeof lay->jail_dir) {
        snprintf(err, errlen, "chroot_base is too long");
        return -1;
    }
    snprintf(lay->root_dir, sizeof lay->root_dir, "%s/root", lay->jail_dir);
    snprintf(lay->api_sock, sizeof lay->api_sock, "%s%s", lay->root_dir, FC_API_SOCK_IN_JAIL);
    snprintf(lay->vsock_path, sizeof lay->vsock_path, "%s%s", lay->root_dir, FC_VSOCK_IN_JAIL);
    snprintf(lay->pid_file, sizeof lay->pid_file, "%s/%s.pid", lay->root_dir,
             base_name(cfg->firecracker_bin));
    snprintf(lay->sandbox_id, sizeof lay->sandbox_id, "%s", sandbox_id);
    snprintf(lay->netns_name, sizeof lay->netns_name, "sbx-fc-%.60s", lay->jailer_id);
    snprintf(lay->netns_path, sizeof lay->netns_path, "/var/run/netns/%s", lay->netns_name);
    cgroup_layout(cfg, lay);
    /* The API socket path must fit a sockaddr_un; say so now rather than at connect. */
    if (strlen(lay->api_sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        snprintf(err, errlen, "chroot_base is too long for Unix socket paths: %s", lay->api_sock);
        return -1;
    }
    return 0;
}

/* Picks the guest artefacts: the build tree's guest image when guest_dir has none. */
static int find_guest_in(const char *dir, struct fc_guest *g)
{
    static const char *kernels[] = {"vmlinux", "vmlinuz"};
    static const char *rootfses[] = {"rootfs.ext4"};
    static const char *initrds[] = {"initramfs.cpio.gz", "initramfs.img"};
    char path[600];
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < sizeof kernels / sizeof *kernels && !g->kernel[0]; i++) {
        snprintf(path, sizeof path, "%.580s/%s", dir, kernels[i]);
        if (access(path, R_OK) == 0) {
            snprintf(g->kernel, sizeof g->kernel, "%s", path);
            snprintf(g->kernel_name, sizeof g->kernel_name, "%s", kernels[i]);
        }
    }
    for (size_t i = 0; i < sizeof rootfses / sizeof *rootfses && !g->root_name[0]; i++) {
        snprintf(path, sizeof path, "%.580s/%s", dir, rootfses[i]);
        if (access(path, R_OK) == 0) {
            snprintf(g->rootfs, sizeof g->rootfs, "%s", path);
            snprintf(g->root_name, sizeof g->root_name, "%s", rootfses[i]);
        }
    }
    for (size_t i = 0; i < sizeof initrds / sizeof *initrds && !g->root_name[0]; i++) {
        snprintf(path, sizeof path, "%.580s/%s", dir, initrds[i]);
        if (access(path, R_OK) == 0) {
            snprintf(g->initrd, sizeof g->initrd, "%s", path);
            snprintf(g->root_name, sizeof g->root_name, "%s", initrds[i]);
        }
    }
    if (!g->kernel[0] || !g->root_name[0])
        return -1;
    snprintf(path, sizeof path, "%.580s/image.sha256", dir);
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(g->image_hash, sizeof g->image_hash, f))
            g->image_hash[strcspn(g->image_hash, "\r\n")] = '\0';
        fclose(f);
    }
    return 0;
}

static int find_guest(const struct sbx_config *cfg, struct fc_guest *g, char *err, size_t errlen)
{
    if (find_guest_in(cfg->guest_dir, g) == 0)
        return 0;
#ifdef SBX_BUILD_DIR
    if (find_guest_in(SBX_BUILD_DIR "/guest", g) == 0)
        return 0;
#endif
    snprintf(err, errlen,
             "no guest image in %s: need vmlinux (or vmlinuz) and rootfs.ext4 (or "
             "initramfs.cpio.gz); build it with tools/build-guest-image",
             cfg->guest_dir);
    return -1;
}

static int make_dir(const char *path, mode_t mode, uid_t uid, gid_t gid, char *err, size_t errlen)
{
    if (mkdir(path, mode) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", path, strerror(errno));
        return -1;
    }
    if (chown(path, uid, gid) != 0) {
        snprintf(err, errlen, "chown %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int make_dirs(const char *path, mode_t mode, char *err, size_t errlen)
{
    if (fs_mkdir_p(path, mode) == 0)
        return 0;
    snprintf(err, errlen, "mkdir %s: %s", path, strerror(errno));
    return -1;
}

static int copy_file(const char *src, const char *dst, uid_t uid, gid_t gid, char *err,
                     size_t errlen)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        snprintf(err, errlen, "open %s: %s", src, strerror(errno));
        return -1;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
    if (out < 0) {
        snprintf(err, errlen, "create %s: %s", dst, strerror(errno));
        close(in);
        return -1;
    }
    char buf[65536];
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n == 0)
            break;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || write(out, buf, (size_t)n) != n) {
            snprintf(err, errlen, "copy %s to %s: %s", src, dst, strerror(errno));
            rc = -1;
            break;
        }
    }
    if (rc == 0 && fchown(out, uid, gid) != 0) {
        snprintf(err, errlen, "chown %s: %s", dst, strerror(errno));
        rc = -1;
    }
    close(in);
    if (close(out) != 0 && rc == 0) {
        snprintf(err, errlen, "close %s: %s", dst, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* Puts a read-only guest artefact into the chroot. A hard link shares the inode with the shared
 * guest image, so its owner and mode must not be changed for one Sandbox: link only when the
 * file is already world-readable (and read-only for others), otherwise, or across filesystems,
 * copy it and give the copy to the sandbox uid, mode 0400. */
static int place_in_jail(const char *src, const char *dst, uid_t uid, gid_t gid, char *err,
                         size_t errlen)
{
    struct stat st;
    if (stat(src, &st) != 0) {
        snprintf(err, errlen, "stat %s: %s", src, strerror(errno));
        return -1;
    }
    bool shareable = (st.st_mode & S_IROTH) && !(st.st_mode & S_IWOTH);
    if (shareable && link(src, dst) == 0)
        return 0;
    if (shareable && errno != EXDEV && errno != EPERM) {
        snprintf(err, errlen, "link %s to %s: %s", src, dst, strerror(errno));
        return -1;
    }
    return copy_file(src, dst, uid, gid, err, errlen);
}

/* ---- network namespace, tap device and the Sandbox's link ----
 * The jailer's --netns makes Firecracker open its tap inside a named network namespace (as
 * `ip netns add` makes it: the namespace bind-mounted on /var/run/netns/<name>). With the worker's
 * network (root, net_init done) that namespace gets the Sandbox's link from worker/host/links.h
 * (net_sandbox_attach_netns_tap): a veth "sbx<slot>" from the host, bridged there with the tap, and
 * the Sandbox's firewall elements; the guest configures its address from sbx.net. Without it the
 * namespace holds a bare persistent tap (the guest has no route out), and the log says so. */

/* Runs in a forked child: new network namespace, pinned by a bind mount, with the tap in it when
 * ifr is not NULL. Only system calls after fork(): the worker is multi-threaded. */
static int net_child(const char *netns_path, struct ifreq *ifr, uid_t uid, gid_t gid)
{
    if (unshare(CLONE_NEWNET) != 0)
        return 10;
    if (mount("/proc/self/ns/net", netns_path, "none", MS_BIND, NULL) != 0)
        return 11;
    if (!ifr)
        return 0;
    int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (tun < 0)
        return 12;
    if (ioctl(tun, TUNSETIFF, ifr) != 0 || ioctl(tun, TUNSETOWNER, (unsigned long)uid) != 0 ||
        ioctl(tun, TUNSETGROUP, (unsigned long)gid) != 0 || ioctl(tun, TUNSETPERSIST, 1) != 0)
        return 13;
    close(tun);
    return 0;
}

/* Releases the Sandbox's link and firewall elements (net_address: what was recorded, "" if
 * unknown), then the namespace; the tap and bridge go with the namespace's last reference. */
static void net_destroy(const struct fc_layout *lay, const char *sandbox_id,
                        const char *net_address)
{
    char why[256];
    if (net_firewall() != NULL && sandbox_id && sandbox_id[0] &&
        net_sandbox_release(sandbox_id, net_address, why, sizeof why) != 0)
        log_warn("firecracker %s: network state: %s", lay->jailer_id, why);
    if (umount2(lay->netns_path, MNT_DETACH) != 0 && errno != ENOENT && errno != EINVAL)
        log_warn("firecracker: umount %s: %s", lay->netns_path, strerror(errno));
    if (unlink(lay->netns_path) != 0 && errno != ENOENT)
        log_warn("firecracker: unlink %s: %s", lay->netns_path, strerror(errno));
}

/* The named namespace, with a bare tap in it when with_tap. */
static int netns_create(const struct sbx_config *cfg, const struct fc_layout *lay, bool with_tap,
                        char *err, size_t errlen)
{
    if (make_dirs("/var/run/netns", 0755, err, errlen) != 0)
        return -1;
    int fd = open(lay->netns_path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0) {
        snprintf(err, errlen, "create %s: %s", lay->netns_path, strerror(errno));
        return -1;
    }
    close(fd);
    struct ifreq ifr = {0};
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", FC_TAP_NAME);
    /* unshare() in a child: the worker's own threads must stay in the host namespace. */
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        unlink(lay->netns_path);
        return -1;
    }
    if (pid == 0)
        _exit(net_child(lay->netns_path, with_tap ? &ifr : NULL, (uid_t)cfg->sandbox_uid,
                        (gid_t)cfg->sandbox_gid));
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        static const char *steps[] = {"unshare(CLONE_NEWNET)", "bind-mount the namespace",
                                      "open /dev/net/tun", "create the tap device"};
        int code = WIFEXITED(status) ? WEXITSTATUS(status) - 10 : -1;
        snprintf(err, errlen, "network namespace %s: %s failed", lay->netns_name,
                 code >= 0 && code < 4 ? steps[code] : "setup");
        net_destroy(lay, NULL, NULL);
        return -1;
    }
    return 0;
}

/* Sets lay->net_address and guest_net (the guest's sbx.net value "<addr>/<prefix>,<gateway>"),
 * both "" without the worker's network. On failure the caller's clean_up releases what was made
 * (net_sandbox_release finds the owner's elements without an address). */
static int net_create(const struct sbx_config *cfg, struct fc_layout *lay, char *guest_net,
                      size_t guest_netlen, char *err, size_t errlen)
{
    lay->net_address[0] = guest_net[0] = '\0';
    bool linked = net_firewall() != NULL;
    if (netns_create(cfg, lay, !linked, err, errlen) != 0)
        return -1;
    if (!linked) {
        log_warn("firecracker %s: no worker network (not root, or no net_init): the guest gets a "
                 "bare tap without address, route or firewall",
                 lay->jailer_id);
        return 0;
    }
    struct net_link link;
    if (net_sandbox_attach_netns_tap(lay->sandbox_id, lay->netns_path, FC_TAP_NAME,
                                     (uid_t)cfg->sandbox_uid, (gid_t)cfg->sandbox_gid, &link, err,
                                     errlen) != 0)
        return -1;
    net_link_sandbox_address(&link, lay->net_address, sizeof lay->net_address);
    char gw[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &link.host_addr, gw, sizeof gw);
    snprintf(guest_net, guest_netlen, "%s/%d,%s", lay->net_address, link.prefix_len, gw);
    return 0;
}

/* ---- the VMM process ---- */

/* True when pid is alive and is this Sandbox's VMM: the jailer passes --id=<jailer id> to
 * Firecracker, which guards against killing a recycled pid. */
static bool vmm_is_ours(pid_t pid, const char *jailer_id)
{
    if (pid <= 0)
        return false;
    char path[64], cmdline[4096];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
    close(fd);
    if (n <= 0)
        return false;
    char want[FC_JAILER_ID_MAX + 8];
    snprintf(want, sizeof want, "--id=%s", jailer_id);
    cmdline[n] = '\0';
    bool previous_was_id = false;
    for (ssize_t i = 0; i < n;) { /* NUL-separated arguments: "--id=<id>" or "--id" "<id>" */
        const char *arg = cmdline + i;
        if (strcmp(arg, want) == 0 || (previous_was_id && strcmp(arg, jailer_id) == 0))
            return true;
        previous_was_id = strcmp(arg, "--id") == 0;
        i += (ssize_t)strlen(arg) + 1;
    }
    return false;
}

/* Waits until pid exits. The VMM is not our child (the jailer's PID-namespace init is its own
 * parent's orphan), so a pidfd is the way to wait for it. Returns 0 when it is gone. */
static int wait_gone(pid_t pid, int timeout_ms)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0)
        return errno == ESRCH ? 0 : -1;
    long long deadline = clock_mono_ms() + timeout_ms;
    int rc = -1;
    for (;;) {
        long long left = deadline - clock_mono_ms();
        struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
        int n = poll(&pfd, 1, left > 0 ? (int)left : 0);
        if (n > 0) {
            rc = 0;
            break;
        }
        if (n == 0 || (n < 0 && errno != EINTR))
            break;
    }
    close(pidfd);
    return rc;
}

static void stop_vmm(pid_t pid, const char *jailer_id, const char *api_sock, bool graceful)
{
    if (!vmm_is_ours(pid, jailer_id))
        return;
    if (graceful) {
        /* Ctrl-Alt-Del makes the guest reboot, and with reboot=k Firecracker then exits. */
        char err[256];
        if (fc_api_put(api_sock, "/actions", "{\"action_type\":\"SendCtrlAltDel\"}", 1000, err,
                       sizeof err) != 0)
            log_info("firecracker %s: %s; killing the VMM", jailer_id, err);
        else if (wait_gone(pid, FC_SHUTDOWN_GRACE_MS) == 0)
            return;
    }
    if (kill(pid, SIGKILL) != 0 && errno != ESRCH)
        log_warn("firecracker %s: kill %d: %s", jailer_id, (int)pid, strerror(errno));
    if (wait_gone(pid, FC_KILL_WAIT_MS) != 0)
        log_warn("firecracker %s: VMM %d still alive after SIGKILL", jailer_id, (int)pid);
}

/* The last lines of the jailer's log, for boot errors. */
static void log_tail(const char *jail_dir, char *out, size_t outlen)
{
    char path[600];
    snprintf(path, sizeof path, "%s/jailer.log", jail_dir);
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        long start = size > (long)outlen - 1 ? size - ((long)outlen - 1) : 0;
        if (fseek(f, start, SEEK_SET) == 0) {
            size_t n = fread(out, 1, outlen - 1, f);
            out[n] = '\0';
            for (size_t i = 0; i < n; i++)
                if (out[i] == '\n')
                    out[i] = ' ';
        }
    }
    fclose(f);
}

/* jailer --id ... -- --api-sock /run/firecracker.socket, its output to <jail_dir>/jailer.log
 * (the guest's serial console goes there too). Returns the jailer's pid. */
static pid_t spawn_jailer(const struct sbx_config *cfg, const struct fc_layout *lay, char *err,
                          size_t errlen)
{
    char uid[24], gid[24], log_path[600];
    snprintf(uid, sizeof uid, "%lld", (long long)cfg->sandbox_uid);
    snprintf(gid, sizeof gid, "%lld", (long long)cfg->sandbox_gid);
    snprintf(log_path, sizeof log_path, "%s/jailer.log", lay->jail_dir);
    char *const argv[] = {
        (char *)cfg->jailer_bin,
        "--id",
        (char *)lay->jailer_id,
        "--exec-file",
        (char *)cfg->firecracker_bin,
        "--uid",
        uid,
        "--gid",
        gid,
        "--cgroup-version",
        "2",
        "--parent-cgroup",
        (char *)lay->cgroup_parent,
        "--chroot-base-dir",
        (char *)cfg->chroot_base,
        "--netns",
        (char *)lay->netns_path,
        "--new-pid-ns",
        "--",
        "--api-sock",
        FC_API_SOCK_IN_JAIL,
        NULL,
    };
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0640);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawnattr_init(&attr);
    /* Its own session: a Ctrl-C aimed at the worker must not reach the VMMs. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    pid_t pid;
    int rc = posix_spawn(&pid, cfg->jailer_bin, &actions, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        snprintf(err, errlen, "spawn %s: %s", cfg->jailer_bin, strerror(rc));
        return -1;
    }
    /* Rotated at vmm_log_max_kib (log_cap.h; the jailer opened it O_APPEND). Without a hard
     * RLIMIT_FSIZE: posix_spawn cannot make the VMM ignore SIGXFSZ. */
    if (log_cap_watch(log_path, cfg->vmm_log_max_kib * 1024) != 0)
        log_warn("firecracker %s: its log is not rotated (out of memory)", lay->jailer_id);
    return pid;
}

/* With --new-pid-ns the jailer writes the VMM's pid to <exec name>.pid and exits 0. */
static pid_t await_vmm_pid(const struct fc_layout *lay, pid_t jailer, char *err, size_t errlen)
{
    long long deadline = clock_mono_ms() + FC_JAILER_TIMEOUT_MS;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(jailer, &status, WNOHANG);
        if (r == jailer)
            break;
        if (r < 0 && errno == ECHILD) {
            /* Someone else reaped it (a worker-wide SIGCHLD reaper): its pid file tells. */
            if (access(lay->pid_file, R_OK) == 0) {
                status = 0;
                break;
            }
        } else if (r < 0 && errno != EINTR) {
            snprintf(err, errlen, "waitpid jailer: %s", strerror(errno));
            return -1;
        }
        if (clock_mono_ms() > deadline) {
            kill(jailer, SIGKILL);
            waitpid(jailer, &status, 0);
            snprintf(err, errlen, "the jailer did not finish within %d ms", FC_JAILER_TIMEOUT_MS);
            return -1;
        }
        sleep_ms(5);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char tail[400];
        log_tail(lay->jail_dir, tail, sizeof tail);
        snprintf(err, errlen, "the jailer failed (%s %d): %s",
                 WIFEXITED(status) ? "exit" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), tail);
        return -1;
    }
    FILE *f = fopen(lay->pid_file, "re");
    long long pid = 0;
    if (!f || fscanf(f, "%lld", &pid) != 1 || pid <= 0 || pid > INT_MAX) {
        snprintf(err, errlen, "no VMM pid in %s", lay->pid_file);
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    return (pid_t)pid;
}

/* Waits until Firecracker answers on its API socket (it creates it right after exec). */
static int await_api(const struct fc_layout *lay, pid_t vmm, char *err, size_t errlen)
{
    long long deadline = clock_mono_ms() + FC_JAILER_TIMEOUT_MS;
    char last[256] = "";
    while (clock_mono_ms() < deadline) {
        struct fc_response resp;
        if (fc_api_request(lay->api_sock, "GET", "/", NULL, 1000, &resp, last, sizeof last) == 0) {
            fc_response_clear(&resp);
            return 0;
        }
        if (kill(vmm, 0) != 0) {
            char tail[400];
            log_tail(lay->jail_dir, tail, sizeof tail);
            snprintf(err, errlen, "the VMM exited before serving its API: %s", tail);
            return -1;
        }
        sleep_ms(10);
    }
    snprintf(err, errlen, "Firecracker's API did not come up within %d ms (%s)",
             FC_JAILER_TIMEOUT_MS, last);
    return -1;
}

/* ---- the API calls of a boot ---- */

static int put_json(const struct fc_layout *lay, const char *path, json_t *body, char *err,
                    size_t errlen)
{
    if (!body) {
        snprintf(err, errlen, "PUT %s: cannot build the JSON body", path);
        return -1;
    }
    char *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    if (!text) {
        snprintf(err, errlen, "PUT %s: out of memory", path);
        return -1;
    }
    int rc = fc_api_put(lay->api_sock, path, text, FC_API_TIMEOUT_MS, err, errlen);
    free(text);
    return rc;
}

/* A locally administered unicast MAC derived from the jailer id (stable for one Sandbox). */
static void guest_mac_for(const char *jailer_id, char *out, size_t outlen)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = jailer_id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    snprintf(out, outlen, "06:00:%02x:%02x:%02x:%02x", (h >> 24) & 0xff, (h >> 16) & 0xff,
             (h >> 8) & 0xff, h & 0xff);
}

static int configure_vm(const struct fc_layout *lay, const struct fc_guest *g,
                        const struct store_shape *shape, const char *guest_net, bool with_image,
                        char *err, size_t errlen)
{
    char kernel[80], root[80], boot_args[720], mac[24], net[256] = "", dns[160], image[64] = "";
    snprintf(kernel, sizeof kernel, "/%s", g->kernel_name);
    snprintf(root, sizeof root, "/%s", g->root_name);
    /* reboot=k: a guest reboot (Ctrl-Alt-Del at terminate) ends the VMM. sbx.channel=vsock:<port>
     * tells the guest init (agent/guest_init.c) to run sbx-agent listening on that vsock port. */
    /* sbx.net=<addr>/<prefix>,<gateway>: the guest init configures eth0 from it; sbx.dns= its
     * resolv.conf (the host's dns_resolvers). */
    if (guest_net[0]) {
        net_egress_kernel_arg(dns, sizeof dns);
        snprintf(net, sizeof net, " sbx.net=%s %s", guest_net, dns);
    }
    /* sbx.image: the guest init mounts the App's image from it (agent/guest_image.h). Firecracker
     * attaches the root device first, so the image is the second disk after a root drive. */
    if (with_image)
        snprintf(image, sizeof image, " sbx.image=%s", g->rootfs[0] ? "/dev/vdb" : "/dev/vda");
    snprintf(boot_args, sizeof boot_args,
             "console=ttyS0 reboot=k panic=1 pci=off i8042.noaux i8042.nomux i8042.dumbkbd "
             "quiet %s sbx.channel=vsock:%d%s%s",
             g->rootfs[0] ? "root=/dev/vda ro" : "rdinit=/init", FC_AGENT_VSOCK_PORT, net, image);
    guest_mac_for(lay->jailer_id, mac, sizeof mac);

    json_t *boot = json_pack("{s:s, s:s}", "kernel_image_path", kernel, "boot_args", boot_args);
    if (boot && g->initrd[0])
        json_object_set_new(boot, "initrd_path", json_string(root));
    if (put_json(lay, "/boot-source", boot, err, errlen) != 0)
        return -1;
    if (g->rootfs[0] &&
        put_json(lay, "/drives/rootfs",
                 json_pack("{s:s, s:s, s:b, s:b}", "drive_id", "rootfs", "path_on_host", root,
                           "is_root_device", 1, "is_read_only", 1),
                 err, errlen) != 0)
        return -1;
    if (with_image &&
        put_json(lay, "/drives/image",
                 json_pack("{s:s, s:s, s:b, s:b}", "drive_id", "image", "path_on_host",
                           FC_IMAGE_IN_JAIL, "is_root_device", 0, "is_read_only", 1),
                 err, errlen) != 0)
        return -1;
    if (put_json(lay, "/machine-config",
                 json_pack("{s:I, s:I}", "vcpu_count", (json_int_t)shape->vcpu_count,
                           "mem_size_mib", (json_int_t)shape->mem_size_mib),
                 err, errlen) != 0)
        return -1;
    if (put_json(lay, "/network-interfaces/eth0",
                 json_pack("{s:s, s:s, s:s}", "iface_id", "eth0", "host_dev_name", FC_TAP_NAME,
                           "guest_mac", mac),
                 err, errlen) != 0)
        return -1;
    if (put_json(lay, "/vsock",
                 json_pack("{s:i, s:s}", "guest_cid", FC_GUEST_CID, "uds_path", FC_VSOCK_IN_JAIL),
                 err, errlen) != 0)
        return -1;
    return put_json(lay, "/actions", json_pack("{s:s}", "action_type", "InstanceStart"), err,
                    errlen);
}

/* ---- the agent channel over vsock ---- */

/* One attempt of the host-initiated vsock handshake. Returns the connected fd, or -1 when the
 * guest is not listening yet (Firecracker then closes the connection) or on error. */
static int vsock_connect_once(const struct fc_layout *lay, long long deadline, char *why,
                              size_t whylen)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(lay->vsock_path) >= sizeof addr.sun_path) {
        snprintf(why, whylen, "vsock socket path too long: %s", lay->vsock_path);
        return -1;
    }
    memcpy(addr.sun_path, lay->vsock_path, strlen(lay->vsock_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        snprintf(why, whylen, "connect %s: %s", lay->vsock_path, strerror(errno));
        close(fd);
        return -1;
    }
    char line[128];
    int n = snprintf(line, sizeof line, "CONNECT %d\n", FC_AGENT_VSOCK_PORT);
    if (send(fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
        snprintf(why, whylen, "send CONNECT: %s", strerror(errno));
        close(fd);
        return -1;
    }
    /* The answer to CONNECT comes once the guest accepted or refused; bound each attempt. */
    long long attempt_deadline = clock_mono_ms() + 2000;
    size_t len;
    if (driver_read_line(fd, attempt_deadline < deadline ? attempt_deadline : deadline, NULL, NULL,
                         line, sizeof line, &len) != DRIVER_LINE_OK) {
        snprintf(why, whylen, "no answer to CONNECT %d (guest agent not listening yet)",
                 FC_AGENT_VSOCK_PORT);
        close(fd);
        return -1;
    }
    unsigned host_port;
    char extra;
    if (sscanf(line, "OK %u%c", &host_port, &extra) != 1) {
        snprintf(why, whylen, "unexpected answer to CONNECT: \"%.60s\"", line);
        close(fd);
        return -1;
    }
    return fd;
}

/* Connects to the guest agent and waits for {"type":"ready","kernel":...}. Returns the channel
 * fd (non-blocking, close-on-exec). */
static int open_agent_channel(const struct fc_layout *lay, pid_t vmm, struct sandbox_runtime *rt,
                              char *err, size_t errlen)
{
    long long deadline = clock_mono_ms() + FC_AGENT_READY_TIMEOUT_MS;
    char why[256] = "";
    int fd = -1;
    while (fd < 0) {
        fd = vsock_connect_once(lay, deadline, why, sizeof why);
        if (fd >= 0)
            break;
        if (kill(vmm, 0) != 0) {
            char tail[400];
            log_tail(lay->jail_dir, tail, sizeof tail);
            snprintf(err, errlen, "the VMM exited while the guest booted: %s", tail);
            return -1;
        }
        if (clock_mono_ms() >= deadline) {
            snprintf(err, errlen, "the guest agent was not reachable within %d ms: %s",
                     FC_AGENT_READY_TIMEOUT_MS, why);
            return -1;
        }
        sleep_ms(50);
    }
    char line[1024];
    size_t len;
    if (driver_read_line(fd, deadline, NULL, NULL, line, sizeof line, &len) != DRIVER_LINE_OK) {
        snprintf(err, errlen, "the guest agent sent no ready line within %d ms",
                 FC_AGENT_READY_TIMEOUT_MS);
        close(fd);
        return -1;
    }
    char agent_err[400];
    if (driver_ready_line(line, len, rt, agent_err, sizeof agent_err) != 0) {
        snprintf(err, errlen, "the guest agent did not report ready: %.300s",
                 agent_err[0] ? agent_err : line);
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- cleanup ---- */

/* Everything a Sandbox may have left: VMM, jail, cgroup, network namespace. Idempotent. */
static void clean_up(const struct sbx_config *cfg, const struct fc_layout *lay, pid_t vmm,
                     bool graceful, struct store_usage *usage)
{
    const struct cgroup_host *h = host_cgroups(cfg);
    stop_vmm(vmm, lay->jailer_id, lay->api_sock, graceful);
    /* Whatever the VMM left in its cgroup (nothing, normally) goes too. */
    if (lay->cgroup_dir[0] && cgroup_populated(lay->cgroup_dir))
        cgroup_kill_all(lay->cgroup_dir);
    if (usage)
        cgroup_read_usage(h, lay->cgroup_dir, lay->jailer_id, &usage->cpu_usec,
                          &usage->mem_peak_bytes);
    char cg_err[256];
    if (cgroup_remove(h, lay->cgroup_dir, lay->jailer_id, 2000, cg_err, sizeof cg_err) != 0)
        log_warn("firecracker %s: %s", lay->jailer_id, cg_err);
    net_destroy(lay, lay->sandbox_id, lay->net_address);
    (void)fs_remove_tree(lay->jail_dir);
}

/* ---- the driver interface ---- */

/* The binaries and a guest image, as fc_init checks them first. */
static int fc_probe(const struct sbx_config *cfg, char *err, size_t errlen)
{
    struct fc_guest guest;
    if (!is_executable(cfg->jailer_bin) || !is_executable(cfg->firecracker_bin)) {
        snprintf(err, errlen,
                 "needs jailer_bin and firecracker_bin (executables), got \"%s\" and "
                 "\"%s\"",
                 cfg->jailer_bin, cfg->firecracker_bin);
        return -1;
    }
    return find_guest(cfg, &guest, err, errlen);
}

static int fc_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
    if (!is_executable(cfg->jailer_bin) || !is_executable(cfg->firecracker_bin)) {
        snprintf(err, errlen,
                 "the firecracker driver needs jailer_bin and firecracker_bin (executables), "
                 "got \"%s\" and \"%s\"",
                 cfg->jailer_bin, cfg->firecracker_bin);
        return -1;
    }
    /* The jailer refuses an exec file whose name does not contain "firecracker". */
    if (!strstr(base_name(cfg->firecracker_bin), "firecracker")) {
        snprintf(err, errlen, "firecracker_bin's file name must contain \"firecracker\": %s",
                 cfg->firecracker_bin);
        return -1;
    }
    struct fc_guest guest;
    if (find_guest(cfg, &guest, err, errlen) != 0)
        return -1;
    if (access("/dev/kvm", R_OK | W_OK) != 0)
        log_warn("firecracker: /dev/kvm is not usable (%s): VMs will not boot", strerror(errno));
    host_cgroups(cfg); /* logs what can be measured here */
    if (strcmp(guest.kernel_name, "vmlinuz") == 0)
        log_warn("firecracker: guest kernel is %s (compressed); Firecracker on x86_64 boots an "
                 "uncompressed ELF vmlinux",
                 guest.kernel);
    if (geteuid() != 0) {
        log_warn("firecracker: not root: guests get a bare tap without address or firewall");
        return 0;
    }
    /* As root every guest gets its link and firewall (shared with the other drivers). */
    if (net_init(cfg->net_pool, err, errlen) != 0)
        return -1;
    return net_egress_init(cfg, err, errlen);
}

/* An App's image in the jail: a hard link of the cache's rootfs.erofs, which is root-owned and
 * 0444, so the VMM (the sandbox uid) can neither write nor chmod it; across file systems a copy
 * that is the same. */
static int place_image_in_jail(const char *erofs, const char *root_dir, char *err, size_t errlen)
{
    char path[700];
    snprintf(path, sizeof path, "%.600s%s", root_dir, FC_IMAGE_IN_JAIL);
    if (link(erofs, path) == 0)
        return 0;
    if (errno != EXDEV && errno != EPERM) {
        snprintf(err, errlen, "link %s to %s: %s", erofs, path, strerror(errno));
        return -1;
    }
    if (copy_file(erofs, path, 0, 0, err, errlen) != 0)
        return -1;
    if (chmod(path, 0444) != 0) {
        snprintf(err, errlen, "chmod %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int fc_boot(const struct sbx_config *cfg, struct sandbox_runtime *rt, char *err,
                   size_t errlen)
{
    struct fc_layout *lay = calloc(1, sizeof *lay);
    struct fc_guest guest;
    if (!lay) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rt->pid = 0;
    rt->channel_fd = -1;
    /* An App's image: the digest's read-only block image, built on first use. */
    char image_erofs[PATH_MAX] = "";
    if (layout_for(cfg, rt->sandbox_id, lay, err, errlen) != 0 ||
        find_guest(cfg, &guest, err, errlen) != 0 ||
        (!image_is_default(rt->shape.image) &&
         image_erofs_ensure(cfg, rt->shape.image, image_erofs, sizeof image_erofs, err, errlen) !=
             0)) {
        free(lay);
        return -1;
    }
    uid_t uid = (uid_t)cfg->sandbox_uid;
    gid_t gid = (gid_t)cfg->sandbox_gid;
    char path[700], guest_net[96] = "";
    pid_t vmm = 0;
    /* The root and its run/ exist before the jailer (which keeps existing directories), so the
     * guest artefacts are in place when Firecracker starts. */
    /* 0711 like (and stricter than) the 0755 the jailer itself uses: the sandbox uid may pass
     * through to its root but list nothing. */
    int rc = make_dirs(lay->jail_dir, 0711, err, errlen);
    if (rc == 0)
        rc = make_dir(lay->root_dir, 0750, uid, gid, err, errlen);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/run", lay->root_dir);
        rc = make_dir(path, 0750, uid, gid, err, errlen);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/%s", lay->root_dir, guest.kernel_name);
        rc = place_in_jail(guest.kernel, path, uid, gid, err, errlen);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/%s", lay->root_dir, guest.root_name);
        rc = place_in_jail(guest.rootfs[0] ? guest.rootfs : guest.initrd, path, uid, gid, err,
                           errlen);
    }
    if (rc == 0 && image_erofs[0])
        rc = place_image_in_jail(image_erofs, lay->root_dir, err, errlen);
    if (rc == 0)
        rc = net_create(cfg, lay, guest_net, sizeof guest_net, err, errlen);
    /* The jailer joins an existing cgroup; making it first also makes the v1 memory twin. */
    if (rc == 0 && lay->cgroup_dir[0]) {
        char path_out[512];
        rc = cgroup_create(host_cgroups(cfg), lay->jailer_id, path_out, sizeof path_out, err,
                           errlen);
    }
    if (rc == 0) {
        pid_t jailer = spawn_jailer(cfg, lay, err, errlen);
        vmm = jailer > 0 ? await_vmm_pid(lay, jailer, err, errlen) : -1;
        rc = vmm > 0 ? 0 : -1;
    }
    /* Before InstanceStart, so that guest memory is charged where it is measured. */
    if (rc == 0 && lay->cgroup_dir[0])
        rc = cgroup_add_pid(host_cgroups(cfg), lay->cgroup_dir, lay->jailer_id, vmm, err, errlen);
    if (rc == 0)
        rc = await_api(lay, vmm, err, errlen);
    if (rc == 0)
        rc = configure_vm(lay, &guest, &rt->shape, guest_net, image_erofs[0] != '\0', err, errlen);
    int channel = rc == 0 ? open_agent_channel(lay, vmm, rt, err, errlen) : -1;
    if (channel < 0) {
        clean_up(cfg, lay, vmm > 0 ? vmm : 0, false, NULL);
        free(lay);
        return -1;
    }
    rt->pid = vmm;
    rt->channel_fd = channel;
    snprintf(rt->jail_dir, sizeof rt->jail_dir, "%s", lay->jail_dir);
    snprintf(rt->cgroup_path, sizeof rt->cgroup_path, "%s", lay->cgroup_dir);
    snprintf(rt->image_hash, sizeof rt->image_hash, "%s",
             image_erofs[0] ? rt->shape.image : guest.image_hash);
    snprintf(rt->net_address, sizeof rt->net_address, "%s", lay->net_address);
    rt->driver_state = lay;
    log_info("firecracker %s: booted (vmm pid %d, kernel %s, address %s)", lay->jailer_id, (int)vmm,
             rt->kernel, lay->net_address[0] ? lay->net_address : "none");
    return 0;
}

static int fc_attach_workspace(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                               const char *host_dir, char *err, size_t errlen)
{
    (void)cfg;
    (void)rt;
    if (!host_dir)
        return 0;
    /* Firecracker has no host directory sharing (no virtio-fs, no 9p): a Workspace reaches a
     * microVM over NFS, which the network issue provides. */
    snprintf(err, errlen,
             "the firecracker driver cannot attach the Workspace %s: Firecracker shares no host "
             "directories (NFS Workspaces are not implemented yet)",
             host_dir);
    return -1;
}

static int fc_terminate(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                        struct store_usage *usage, char *err, size_t errlen)
{
    struct fc_layout computed;
    struct fc_layout *lay = rt->driver_state;
    if (!lay) { /* never booted or already terminated: clean what the id implies */
        if (layout_for(cfg, rt->sandbox_id, &computed, err, errlen) != 0)
            return -1;
        snprintf(computed.net_address, sizeof computed.net_address, "%s", rt->net_address);
        lay = &computed;
    }
    if (rt->channel_fd >= 0) {
        close(rt->channel_fd);
        rt->channel_fd = -1;
    }
    char log_path[600];
    snprintf(log_path, sizeof log_path, "%s/jailer.log", lay->jail_dir);
    log_cap_unwatch(log_path);
    struct store_usage measured;
    clean_up(cfg, lay, rt->pid, true, &measured);
    if (usage)
        *usage = measured;
    if (lay != &computed)
        free(lay);
    rt->driver_state = NULL;
    rt->pid = 0;
    struct stat st;
    if (stat(rt->jail_dir[0] ? rt->jail_dir : computed.jail_dir, &st) == 0) {
        snprintf(err, errlen, "the jail %s could not be removed completely", rt->jail_dir);
        return -1;
    }
    return 0;
}

static int fc_reap(const struct sbx_config *cfg, const struct store_sandbox *sb, char *err,
                   size_t errlen)
{
    struct fc_layout lay;
    if (layout_for(cfg, sb->id, &lay, err, errlen) != 0)
        return -1;
    /* What the store recorded wins over what today's config implies (it may have changed). */
    if (sb->jail_dir[0])
        snprintf(lay.jail_dir, sizeof lay.jail_dir, "%s", sb->jail_dir);
    if (sb->cgroup_path[0])
        snprintf(lay.cgroup_dir, sizeof lay.cgroup_dir, "%s", sb->cgroup_path);
    snprintf(lay.net_address, sizeof lay.net_address, "%s", sb->net_address);
    snprintf(lay.api_sock, sizeof lay.api_sock, "%s/root%s", lay.jail_dir, FC_API_SOCK_IN_JAIL);
    clean_up(cfg, &lay, (pid_t)sb->pid, false, NULL);
    struct stat st;
    if (stat(lay.jail_dir, &st) == 0) {
        snprintf(err, errlen, "the jail %s could not be removed completely", lay.jail_dir);
        return -1;
    }
    return 0;
}

/* The App's optional host caps (limits): memory and CPU of the VMM's cgroup(s), named by the
 * jailer id (cgroup_limits.c). */
static int fc_apply_host_caps(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                              int64_t mem_mib, int64_t cpus, char *err, size_t errlen)
{
    const struct fc_layout *lay = rt->driver_state;
    const struct cgroup_host *h = host_cgroups(cfg);
    if (!lay || !lay->cgroup_dir[0] || (mem_mib > 0 && !cgroup_bounds_memory(h)) ||
        (cpus > 0 && !cgroup_bounds_cpu(h))) {
        snprintf(err, errlen, "the VMM has no cgroup for them on this host");
        return -1;
    }
    return cgroup_apply_limits(h, lay->cgroup_dir, lay->jailer_id, mem_mib, cpus, err, errlen);
}

const struct driver driver_firecracker = {
    .name = "firecracker",
    .init = fc_init,
    .probe = fc_probe,
    .boot = fc_boot,
    .attach_workspace = fc_attach_workspace,
    .terminate = fc_terminate,
    .reap = fc_reap,
    .apply_host_caps = fc_apply_host_caps,
};

/*
 * qemu.c: the qemu driver: each Sandbox is a `qemu-system-x86_64 -M microvm` guest booting
 * the guest image of tools/build-guest-image, with the agent channel on a virtio-serial port.
 *
 * Isolation, modelled on Firecracker's jailer:
 *  - a per-Sandbox jail <chroot_base>/qemu/<installation>-<sandboxId>/root holding the kernel
 *    and initramfs (hard links to the built image, copies across filesystems; root-owned, so
 * read-only to QEMU), the unix sockets of the agent channel and QMP, and the guest's console log;
 *  - QEMU is started by a fork that unshares a mount and a network namespace, bind-mounts the
 *    host's /usr read-only into the jail (QEMU needs its shared libraries and firmware; /lib,
 *    /lib64 and /bin are symlinks into usr on a merged-/usr Debian), chroots into the jail, drops
 *    to sandbox_uid/sandbox_gid with no supplementary groups and no_new_privs, and execs QEMU. The
 *    bind mount lives only in QEMU's private mount namespace, so it vanishes with the process and
 *    can never be caught by the jail's removal;
 *  - the network namespace holds a tap device (tap0) whose fd is handed to QEMU (-netdev tap,fd=)
 *    as the guest's virtio-net link; addresses and the firewall are the network module's part;
 *  - a cgroup per Sandbox (worker/host/cgroup.h: <v2 root>/sbx/<sandboxId>) for CPU and memory
 *    accounting of the QEMU process (the whole guest), capped by the App's optional limits;
 *  - the guest console and QEMU's stderr capped and rotated (worker/host/log_cap.h).
 * The driver, not QEMU, listens on the two unix sockets and QEMU connects to them at start-up
 * (chardev client mode), so the channel exists before the guest runs and nothing can race it.
 *
 * Termination: QMP system_powerdown (the guest init powers off on the ACPI power button), then
 * QMP quit, then SIGKILL, each after a timeout; then the jail and cgroup are removed.
 *
 * The jail, the jailed process and QMP are in qemu_jail.c (qemu_internal.h).
 */
#include "drivers/qemu_internal.h"

#include "fs.h"
#include "clock.h"
#include "host/cgroup.h"
#include "host/jail.h"
#include "host/log_cap.h"
#include "drivers/driver.h"
#include "drivers/shared.h"
#include "host/egress.h"
#include "host/links.h"
#include "host/nfs_export.h"
#include "images/image_cache.h"
#include "images/image_erofs.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <limits.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SBX_BUILD_DIR
#define SBX_BUILD_DIR "."
#endif

struct qemu_state {
    int qmp_fd;
};

static const struct cgroup_host *host_cgroups(const struct sbx_config *cfg);

/* ---------------------------------------------------------------- guest image and settings */

/* The directory holding vmlinuz, initramfs.cpio.gz and image.sha256: guest_dir, or the build
 * tree's guest/ when guest_dir is the unconfigured default and holds no image (a developer
 * running from the build tree). */
static void resolve_guest_dir(const struct sbx_config *cfg, char *out, size_t outlen)
{
    char probe[PATH_MAX], default_dir[PATH_MAX];
    snprintf(probe, sizeof probe, "%s/vmlinuz", cfg->guest_dir);
    snprintf(default_dir, sizeof default_dir, "%s/guest", cfg->data_dir);
    if (access(probe, R_OK) != 0 && strcmp(cfg->guest_dir, default_dir) == 0)
        snprintf(out, outlen, "%s/guest", SBX_BUILD_DIR);
    else
        snprintf(out, outlen, "%s", cfg->guest_dir);
}

static int read_image_hash(const char *guest_dir, char *out, size_t outlen, char *err,
                           size_t errlen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/image.sha256", guest_dir);
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(err, errlen, "guest image hash %s: %s (build it with the guest-image target)",
                 path, strerror(errno));
        return -1;
    }
    char line[128] = "";
    if (fgets(line, sizeof line, f) == NULL)
        line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "sha256:", 7) != 0 || strlen(line) != 7 + 64) {
        snprintf(err, errlen, "%s does not hold a sha256:<hex> hash", path);
        return -1;
    }
    snprintf(out, outlen, "%s", line);
    return 0;
}

/* Resolves qemu_bin through PATH to an absolute path, which must lie under /usr: that is the only
 * part of the host the jail shows QEMU. */
static int resolve_qemu_bin(const struct sbx_config *cfg, char *out, size_t outlen, char *err,
                            size_t errlen)
{
    char candidate[PATH_MAX] = "";
    if (strchr(cfg->qemu_bin, '/') != NULL) {
        snprintf(candidate, sizeof candidate, "%s", cfg->qemu_bin);
    } else {
        const char *path = getenv("PATH");
        char dirs[4096];
        snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/local/bin:/usr/bin:/bin");
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
            snprintf(candidate, sizeof candidate, "%s/%s", d, cfg->qemu_bin);
            if (access(candidate, X_OK) == 0)
                break;
            candidate[0] = '\0';
        }
    }
    char real[PATH_MAX];
    if (candidate[0] == '\0' || realpath(candidate, real) == NULL || access(real, X_OK) != 0) {
        snprintf(err, errlen, "qemu binary %s not found (install qemu-system-x86)", cfg->qemu_bin);
        return -1;
    }
    if (strncmp(real, "/usr/", 5) != 0) {
        snprintf(err, errlen, "qemu binary %s is outside /usr, which is all the jail shows", real);
        return -1;
    }
    snprintf(out, outlen, "%s", real);
    return 0;
}

/* The accelerator to pass to -accel: kvm only when configured (or auto and /dev/kvm opens). */
static const char *choose_accel(const struct sbx_config *cfg)
{
    if (strcmp(cfg->qemu_accel, "kvm") == 0)
        return "kvm";
    if (strcmp(cfg->qemu_accel, "auto") == 0) {
        int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            return "kvm";
        }
    }
    return "tcg";
}

/* The binary and the guest image: what a fresh clone may lack (tools/sbx up builds the image). */
static int qemu_probe(const struct sbx_config *cfg, char *err, size_t errlen)
{
    char bin[PATH_MAX], guest_dir[PATH_MAX], hash[80];
    if (resolve_qemu_bin(cfg, bin, sizeof bin, err, errlen) != 0)
        return -1;
    resolve_guest_dir(cfg, guest_dir, sizeof guest_dir);
    return read_image_hash(guest_dir, hash, sizeof hash, err, errlen);
}

static int qemu_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
    if (strcmp(cfg->qemu_accel, "tcg") != 0 && strcmp(cfg->qemu_accel, "kvm") != 0 &&
        strcmp(cfg->qemu_accel, "auto") != 0) {
        snprintf(err, errlen, "qemu_accel must be tcg, kvm or auto, not %s", cfg->qemu_accel);
        return -1;
    }
    char bin[PATH_MAX], guest_dir[PATH_MAX], hash[80];
    if (resolve_qemu_bin(cfg, bin, sizeof bin, err, errlen) != 0)
        return -1;
    resolve_guest_dir(cfg, guest_dir, sizeof guest_dir);
    if (read_image_hash(guest_dir, hash, sizeof hash, err, errlen) != 0)
        return -1;
    log_info("qemu driver: %s, accel %s, guest image %s (%s)", bin, choose_accel(cfg), guest_dir,
             hash);
    host_cgroups(cfg);
    if (geteuid() != 0) {
        log_warn("qemu driver: not root: guests get a network device without a link");
        return 0;
    }
    /* As root every guest gets its tap link and firewall (shared with the process driver). */
    if (net_init(cfg->net_pool, err, errlen) != 0)
        return -1;
    return net_egress_init(cfg, err, errlen);
}

/* ---------------------------------------------------------------- cgroup */

/* The host's cgroup hierarchies (drivers/shared.h, detected once per process): a Sandbox's QEMU
 * goes into <v2 root>/sbx/<sandboxId> for CPU time, and v1 memory where the v2 controller is
 * missing. */
static const struct cgroup_host *host_cgroups(const struct sbx_config *cfg)
{
    return driver_cgroups(cfg, "qemu driver");
}

/* For accounting (and an App's VMM limits, applied at claim): a failure is logged and the Sandbox
 * runs unmeasured; limits asked for later then fail that claim. */
static void cgroup_attach(const struct sbx_config *cfg, struct sandbox_runtime *rt)
{
    const struct cgroup_host *h = host_cgroups(cfg);
    char why[512], name[CGROUP_NAME_LEN];
    cgroup_name(rt->sandbox_id, "", name); /* tagged with the installation */
    if (cgroup_create(h, name, rt->cgroup_path, sizeof rt->cgroup_path, why, sizeof why) != 0 ||
        cgroup_add_pid(h, rt->cgroup_path, name, rt->pid, why, sizeof why) != 0)
        log_warn("qemu driver: %s: cgroup: %s (usage will not be measured)", rt->sandbox_id, why);
}

/* The App's optional host caps (limits): memory and CPU of the VMM's cgroup (cgroup_limits.c). */
static int qemu_apply_host_caps(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                                int64_t mem_mib, int64_t cpus, char *err, size_t errlen)
{
    const struct cgroup_host *h = host_cgroups(cfg);
    if ((mem_mib > 0 && !cgroup_bounds_memory(h)) || (cpus > 0 && !cgroup_bounds_cpu(h))) {
        snprintf(err, errlen, "this host has no cgroup controller for them");
        return -1;
    }
    char name[CGROUP_NAME_LEN];
    if (cgroup_apply_limits(h, rt->cgroup_path, cgroup_name(rt->sandbox_id, rt->cgroup_path, name),
                            mem_mib, cpus, err, errlen) != 0)
        return -1;
    log_info("qemu driver: %s: VMM capped at %lld MiB, %lld CPUs", rt->sandbox_id,
             (long long)mem_mib, (long long)cpus);
    return 0;
}

static void cgroup_detach(const struct sbx_config *cfg, const char *path, const char *sandbox_id)
{
    char why[512], name[CGROUP_NAME_LEN];
    if (cgroup_remove(host_cgroups(cfg), path, cgroup_name(sandbox_id, path, name), 5000, why,
                      sizeof why) != 0)
        log_warn("qemu driver: %s: %s", sandbox_id, why);
}

/* ---------------------------------------------------------------- network (worker/host/links.h) */

/* How long network_up waits for another thread's fork to let go of a tap just made (links.h). */
#define TAP_BUSY_WAIT_MS 2000

/* " sbx.net=<guest_net> sbx.dns=<resolvers>": the guest's link and the resolvers it may use. */
static void guest_net_args(const char *guest_net, char *out, size_t outlen)
{
    char dns[160];
    net_egress_kernel_arg(dns, sizeof dns);
    snprintf(out, outlen, " sbx.net=%s %s", guest_net, dns);
}

/* With the worker's network (net_init done, as root): a persistent tap "sbx<slot>" in the host's
 * namespace with the Sandbox's firewall elements; opened here, by name, and handed to QEMU as an
 * fd, so QEMU itself stays in an empty network namespace. Sets rt->net_address and the guest's
 * sbx.net value ("<addr>/<prefix>,<gateway>"). Without it: no tap fd, *tap_fd = -1. */
static int network_up(const struct sbx_config *cfg, struct sandbox_runtime *rt, int *tap_fd,
                      char *guest_net, size_t guest_netlen, char *err, size_t errlen)
{
    *tap_fd = -1;
    rt->net_address[0] = guest_net[0] = '\0';
    if (net_firewall() == NULL)
        return 0;
    struct net_link link;
    if (net_sandbox_attach_tap(rt->sandbox_id, (uid_t)cfg->sandbox_uid, (gid_t)cfg->sandbox_gid,
                               &link, err, errlen) != 0)
        return -1;
    net_link_sandbox_address(&link, rt->net_address, sizeof rt->net_address);
    char gw[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &link.host_addr, gw, sizeof gw);
    snprintf(guest_net, guest_netlen, "%s/%d,%s", rt->net_address, link.prefix_len, gw);

    int fd = net_tap_open(link.ifname, TAP_BUSY_WAIT_MS, err, errlen);
    if (fd < 0)
        return -1; /* terminate() releases the tap and its elements */
    *tap_fd = fd;
    return 0;
}

static void network_down(const char *sandbox_id, const char *net_address)
{
    char why[256];
    if (net_firewall() != NULL &&
        net_sandbox_release(sandbox_id, net_address, why, sizeof why) != 0)
        log_warn("qemu driver: network state of %s: %s", sandbox_id, why);
}

/* ---------------------------------------------------------------- driver functions */

static bool qemu_gone(void *arg)
{
    return !qemu_process_alive(*(const pid_t *)arg);
}

/* Reads the agent's ready line (drivers/shared.h: nothing after it is consumed). */
static int wait_ready(struct sandbox_runtime *rt, char *err, size_t errlen)
{
    static const char *const why[] = {[DRIVER_LINE_TIMEOUT] = "timed out",
                                      [DRIVER_LINE_CLOSED] = "channel closed",
                                      [DRIVER_LINE_TOO_LONG] = "line too long",
                                      [DRIVER_LINE_ERROR] = "channel read failed",
                                      [DRIVER_LINE_GONE] = "qemu exited"};
    char line[1024], agent_err[256];
    size_t len;
    pid_t pid = rt->pid;
    enum driver_line got =
        driver_read_line(rt->channel_fd, clock_mono_ms() + QEMU_BOOT_TIMEOUT_MS,
                         pid > 0 ? qemu_gone : NULL, &pid, line, sizeof line, &len);
    if (got != DRIVER_LINE_OK) {
        if (got == DRIVER_LINE_TIMEOUT)
            snprintf(err, errlen, "guest agent not ready: timed out after %d ms",
                     QEMU_BOOT_TIMEOUT_MS);
        else
            snprintf(err, errlen, "guest agent not ready: %s", why[got]);
        return -1;
    }
    if (driver_ready_line(line, len, rt, agent_err, sizeof agent_err) != 0) {
        snprintf(err, errlen, "guest agent said %.200s instead of ready", line);
        return -1;
    }
    return 0;
}

/* The host's TSC rate in kHz from /proc/cpuinfo (constant_tsc hosts report it as "cpu MHz"), or
 * 0 when unknown. */
static long long host_tsc_khz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (f == NULL)
        return 0;
    char line[256];
    double mhz = 0;
    bool constant_tsc = false;
    while (fgets(line, sizeof line, f) != NULL) {
        if (mhz == 0)
            sscanf(line, "cpu MHz : %lf", &mhz);
        if (strncmp(line, "flags", 5) == 0) {
            constant_tsc = strstr(line, " constant_tsc") != NULL;
            if (mhz > 0)
                break;
        }
    }
    fclose(f);
    return constant_tsc ? (long long)(mhz * 1000.0) : 0;
}

/* Builds QEMU's argv into args (pointers into strs, which the caller keeps alive). */
struct qemu_args {
    char strs[12][256];
    char *argv[48];
};

static void build_argv(struct qemu_args *a, const char *bin, const char *accel,
                       const struct store_shape *shape, const char *guest_net, bool with_image)
{
    int n = 0, s = 0;
#define ARG(x) (a->argv[n++] = (char *)(x))
#define FMT(...) (snprintf(a->strs[s], sizeof a->strs[s], __VA_ARGS__), ARG(a->strs[s++]))
    FMT("%s", bin);
    ARG("-M");
    ARG("microvm");
    ARG("-accel");
    FMT("%s", accel);
    ARG("-cpu");
    ARG(strcmp(accel, "kvm") == 0 ? "host" : "max");
    ARG("-nodefaults");
    ARG("-no-user-config");
    ARG("-nographic");
    ARG("-no-reboot");
    /* QEMU's seccomp filter, as Firecracker filters its VMM: no exec, no privilege changes, no
     * obsolete or resource-control system calls once the guest runs. */
    ARG("-sandbox");
    ARG("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
    ARG("-smp");
    FMT("%lld", (long long)(shape->vcpu_count > 0 ? shape->vcpu_count : 1));
    ARG("-m");
    FMT("%lldM", (long long)(shape->mem_size_mib > 0 ? shape->mem_size_mib : 256));
    ARG("-kernel");
    ARG("/vmlinuz");
    ARG("-initrd");
    ARG("/initramfs.cpio.gz");
    ARG("-append");
    /* microvm has no HPET or PM timer, and under TCG on a loaded host the guest's calibration of
     * its TSC against the PIT fails (the TSC is the host's, read with jitter), after which the
     * kernel hangs setting up its timers. TCG's guest TSC runs at the host's TSC rate, so the
     * kernel is told that rate and to trust it. */
    long long tsc_khz = strcmp(accel, "tcg") == 0 ? host_tsc_khz() : 0;
    char tsc[64] = "", net[256] = "", image[64] = "";
    if (tsc_khz > 0)
        snprintf(tsc, sizeof tsc, " tsc=reliable tsc_early_khz=%lld", tsc_khz);
    /* The guest init configures eth0 from sbx.net and its resolv.conf from sbx.dns (see
     * agent/guest_init.c). */
    if (guest_net[0] != '\0')
        guest_net_args(guest_net, net, sizeof net);
    /* The guest init mounts an App's image from sbx.image (agent/guest_image.c). */
    if (with_image)
        snprintf(image, sizeof image, " sbx.image=%s", QEMU_IMAGE_DEVICE);
    FMT("console=ttyS0 quiet panic=-1 rdinit=/init sbx.channel=virtio:%s%s%s%s", QEMU_AGENT_PORT,
        tsc, net, image);
    /* Appended, so that log_cap.c can truncate it when it rotates it. */
    ARG("-chardev");
    ARG("file,id=console,path=/console.log,append=on");
    ARG("-serial");
    ARG("chardev:console");
    ARG("-chardev");
    ARG("socket,id=agent,path=/agent.sock");
    ARG("-device");
    ARG("virtio-serial-device");
    ARG("-device");
    ARG("virtserialport,chardev=agent,name=" QEMU_AGENT_PORT);
    ARG("-chardev");
    ARG("socket,id=qmp,path=/qmp.sock");
    ARG("-mon");
    ARG("chardev=qmp,mode=control");
    ARG("-netdev");
    FMT("tap,id=net0,fd=%d", QEMU_TAP_FD);
    ARG("-device");
    ARG("virtio-net-device,netdev=net0");
    if (with_image) {
        /* Read-only to the guest as well as to QEMU: writes go to the guest's tmpfs upper. */
        ARG("-drive");
        ARG("file=" QEMU_IMAGE_IN_JAIL ",if=none,id=image,format=raw,readonly=on");
        ARG("-device");
        ARG("virtio-blk-device,drive=image");
    }
    a->argv[n] = NULL;
#undef ARG
#undef FMT
}

static void release_runtime(struct sandbox_runtime *rt)
{
    struct qemu_state *st = rt->driver_state;
    if (st != NULL) {
        if (st->qmp_fd >= 0)
            close(st->qmp_fd);
        free(st);
        rt->driver_state = NULL;
    }
    if (rt->channel_fd >= 0) {
        close(rt->channel_fd);
        rt->channel_fd = -1;
    }
}

static int stop_qemu(struct sandbox_runtime *rt)
{
    if (rt->pid <= 0)
        return 0;
    struct qemu_state *st = rt->driver_state;
    char why[256];
    if (!qemu_process_alive(rt->pid))
        return 0;
    if (st != NULL && st->qmp_fd >= 0) {
        if (qmp_execute(st->qmp_fd, "system_powerdown", QEMU_QUIT_TIMEOUT_MS, why, sizeof why) ==
                0 &&
            qemu_wait_exit(rt->pid, QEMU_POWERDOWN_TIMEOUT_MS))
            return 0;
        log_info("qemu driver: %s did not power down in time, quitting", rt->sandbox_id);
        if (qemu_process_alive(rt->pid) &&
            qmp_execute(st->qmp_fd, "quit", QEMU_QUIT_TIMEOUT_MS, why, sizeof why) != 0)
            log_info("qemu driver: %s quit: %s", rt->sandbox_id, why);
        if (qemu_wait_exit(rt->pid, QEMU_QUIT_TIMEOUT_MS))
            return 0;
    }
    log_warn("qemu driver: killing %s (pid %d)", rt->sandbox_id, (int)rt->pid);
    kill(rt->pid, SIGKILL);
    return qemu_wait_exit(rt->pid, 5000) ? 0 : -1;
}

static int qemu_terminate(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                          struct store_usage *usage, char *err, size_t errlen);

static int qemu_boot(const struct sbx_config *cfg, struct sandbox_runtime *rt, char *err,
                     size_t errlen)
{
    int64_t started = clock_mono_ms();
    rt->pid = -1;
    rt->channel_fd = -1;
    rt->driver_state = NULL;
    rt->cgroup_path[0] = rt->net_address[0] = rt->kernel[0] = '\0';

    char bin[PATH_MAX], guest_dir[PATH_MAX];
    if (resolve_qemu_bin(cfg, bin, sizeof bin, err, errlen) != 0)
        return -1;
    resolve_guest_dir(cfg, guest_dir, sizeof guest_dir);
    if (read_image_hash(guest_dir, rt->image_hash, sizeof rt->image_hash, err, errlen) != 0)
        return -1;
    char image_erofs[PATH_MAX] = "";
    if (qemu_app_image_prepare(cfg, rt, image_erofs, sizeof image_erofs, err, errlen) != 0)
        return -1;

    if (strlen(cfg->chroot_base) > 400) {
        snprintf(err, errlen, "chroot_base is too long for unix socket paths in the jail");
        return -1;
    }
    /* <chroot_base>/qemu/<installation>-<sandboxId> (jail.h, host_tag.h). */
    if (jail_path(cfg->chroot_base, "qemu", rt->sandbox_id, rt->jail_dir, sizeof rt->jail_dir) !=
        0) {
        snprintf(err, errlen, "cannot make a jail path from chroot_base %s and id %s",
                 cfg->chroot_base, rt->sandbox_id);
        return -1;
    }
    char root[PATH_MAX], usr[PATH_MAX], devnull[PATH_MAX], qlog[PATH_MAX], agent_sock[PATH_MAX],
        qmp_sock[PATH_MAX], console[PATH_MAX];
    snprintf(root, sizeof root, "%s/root", rt->jail_dir);
    snprintf(usr, sizeof usr, "%.500s/usr", root);
    snprintf(devnull, sizeof devnull, "%.500s/dev/null", root);
    snprintf(qlog, sizeof qlog, "%s/qemu.log", rt->jail_dir);
    snprintf(agent_sock, sizeof agent_sock, "%.500s/agent.sock", root);
    snprintf(qmp_sock, sizeof qmp_sock, "%.500s/qmp.sock", root);
    snprintf(console, sizeof console, "%.500s/console.log", root);

    uid_t uid = (uid_t)cfg->sandbox_uid;
    gid_t gid = (gid_t)cfg->sandbox_gid;
    int agent_lfd = -1, qmp_lfd = -1;
    struct qemu_state *st = calloc(1, sizeof *st);
    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    st->qmp_fd = -1;
    rt->driver_state = st;

    if (qemu_build_jail(guest_dir, rt->jail_dir, err, errlen) != 0 ||
        (image_erofs[0] && qemu_app_image_place(image_erofs, root, err, errlen) != 0))
        goto fail;
    /* QEMU writes the guest console as the sandbox uid. */
    int cfd = open(console, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (cfd < 0 || fchown(cfd, uid, gid) != 0) {
        snprintf(err, errlen, "console log %s: %s", console, strerror(errno));
        if (cfd >= 0)
            close(cfd);
        goto fail;
    }
    close(cfd);
    if ((agent_lfd = qemu_listen_unix(agent_sock, uid, gid, err, errlen)) < 0 ||
        (qmp_lfd = qemu_listen_unix(qmp_sock, uid, gid, err, errlen)) < 0)
        goto fail;

    struct qemu_args args;
    char guest_net[80] = "";
    int tap_fd = -1;
    if (network_up(cfg, rt, &tap_fd, guest_net, sizeof guest_net, err, errlen) != 0)
        goto fail;
    build_argv(&args, bin, choose_accel(cfg), &rt->shape, guest_net, image_erofs[0] != '\0');
    struct qemu_launch launch = {.jail_root = root,
                                 .usr_target = usr,
                                 .dev_null = devnull,
                                 .qemu_log = qlog,
                                 .uid = uid,
                                 .gid = gid,
                                 .tap_fd = tap_fd,
                                 .argv = args.argv,
                                 .log_max = cfg->vmm_log_max_kib * 1024};
    rt->pid = spawn_qemu(&launch, err, errlen);
    if (tap_fd >= 0)
        close(tap_fd); /* QEMU holds its own copy */
    if (rt->pid < 0)
        goto fail;
    /* Rotated at the cap (one older generation, .1); QEMU's RLIMIT_FSIZE makes the cap hard. */
    if (log_cap_watch(console, launch.log_max) != 0 || log_cap_watch(qlog, launch.log_max) != 0)
        log_warn("qemu driver: %s: its logs are not rotated (out of memory)", rt->sandbox_id);
    cgroup_attach(cfg, rt);

    rt->channel_fd =
        accept_from_qemu(agent_lfd, rt->pid, QEMU_CONNECT_TIMEOUT_MS, "agent", err, errlen);
    if (rt->channel_fd < 0)
        goto fail_log;
    st->qmp_fd = accept_from_qemu(qmp_lfd, rt->pid, QEMU_CONNECT_TIMEOUT_MS, "qmp", err, errlen);
    if (st->qmp_fd < 0 || qmp_handshake(st->qmp_fd, err, errlen) != 0)
        goto fail_log;
    close(agent_lfd);
    close(qmp_lfd);
    agent_lfd = qmp_lfd = -1;
    /* Nobody else may connect in the Sandbox's lifetime: the listening sockets go. */
    unlink(agent_sock);
    unlink(qmp_sock);

    if (wait_ready(rt, err, errlen) != 0)
        goto fail_log;
    log_info("qemu driver: %s ready in %lld ms (pid %d, guest kernel %s)", rt->sandbox_id,
             (long long)(clock_mono_ms() - started), (int)rt->pid, rt->kernel);
    return 0;

fail_log:
    qemu_append_log_tail(rt->jail_dir, "qemu.log", err, errlen);
    qemu_append_log_tail(rt->jail_dir, "root/console.log", err, errlen);
fail:
    if (agent_lfd >= 0)
        close(agent_lfd);
    if (qmp_lfd >= 0)
        close(qmp_lfd);
    {
        struct store_usage ignored;
        char why[256];
        qemu_terminate(cfg, rt, &ignored, why, sizeof why);
    }
    return -1;
}

/* A warm guest is booted before its Workspace is known and -M microvm has no hotplug, so the
 * Workspace reaches the guest over its tap link: sbx's NFS server exports the directory to this
 * Sandbox's address alone, the firewall opens TCP 2049 for it, and the agent mounts
 * rt->workspace_nfs at /workspace before the command starts (docs/workspaces.md). */
static int qemu_attach_workspace(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                                 const char *host_dir, char *err, size_t errlen)
{
    rt->workspace_nfs[0] = '\0';
    if (host_dir == NULL)
        return 0;
    struct net_link link;
    if (net_firewall() == NULL || rt->net_address[0] == '\0' ||
        net_link_of_address(net_worker_pool(), rt->sandbox_id, rt->net_address, &link) != 0) {
        snprintf(err, errlen,
                 "Workspace %s needs the worker's network (root): a microVM mounts it over NFS",
                 host_dir);
        return -1;
    }
    if (link.slot >= UINT16_MAX) { /* export ids are 16-bit; 0 is ganesha's pseudo root */
        snprintf(err, errlen, "network slot %u has no NFS export id (net_pool too large)",
                 (unsigned)link.slot);
        return -1;
    }
    char pseudo[128];
    if (nfs_export_add(cfg, rt->sandbox_id, rt->net_address, host_dir, (uint16_t)(link.slot + 1),
                       pseudo, sizeof pseudo, err, errlen) != 0)
        return -1;
    if (net_sandbox_set_nfs(&link, true, err, errlen) != 0) {
        char why[256];
        if (nfs_export_remove(cfg, rt->sandbox_id, why, sizeof why) != 0)
            log_warn("qemu driver: NFS export of %s: %s", rt->sandbox_id, why);
        return -1;
    }
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &link.host_addr, host, sizeof host);
    snprintf(rt->workspace_nfs, sizeof rt->workspace_nfs, "%s:%s", host, pseudo);
    return 0;
}

/* Terminate and reap: the export and the 2049 element go; the Workspace's data stays. */
static void workspace_detach(const struct sbx_config *cfg, const char *sandbox_id,
                             const char *net_address)
{
    char why[512];
    struct net_link link;
    if (nfs_export_remove(cfg, sandbox_id, why, sizeof why) != 0)
        log_warn("qemu driver: NFS export of %s: %s", sandbox_id, why);
    if (net_firewall() != NULL && net_address && net_address[0] &&
        net_link_of_address(net_worker_pool(), sandbox_id, net_address, &link) == 0 &&
        net_sandbox_set_nfs(&link, false, why, sizeof why) != 0)
        log_warn("qemu driver: NFS firewall element of %s: %s", sandbox_id, why);
}

static int qemu_terminate(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                          struct store_usage *usage, char *err, size_t errlen)
{
    int rc = 0;
    usage->cpu_usec = -1;
    usage->mem_peak_bytes = -1;
    if (rt->jail_dir[0]) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%.500s/root/console.log", rt->jail_dir);
        log_cap_unwatch(path);
        snprintf(path, sizeof path, "%.500s/qemu.log", rt->jail_dir);
        log_cap_unwatch(path);
    }
    if (stop_qemu(rt) != 0) {
        snprintf(err, errlen, "qemu pid %d did not exit after SIGKILL", (int)rt->pid);
        rc = -1;
    }
    release_runtime(rt);
    if (rc == 0) {
        const struct cgroup_host *h = host_cgroups(cfg);
        char name[CGROUP_NAME_LEN];
        if (rt->cgroup_path[0] != '\0' || h->v1_memory_root[0] != '\0')
            cgroup_read_usage(h, rt->cgroup_path,
                              cgroup_name(rt->sandbox_id, rt->cgroup_path, name), &usage->cpu_usec,
                              &usage->mem_peak_bytes);
        cgroup_detach(cfg, rt->cgroup_path, rt->sandbox_id);
        rt->cgroup_path[0] = '\0';
    }
    if (rc == 0) {
        workspace_detach(cfg, rt->sandbox_id, rt->net_address);
        rt->workspace_nfs[0] = '\0';
        network_down(rt->sandbox_id, rt->net_address);
    }
    if (rc == 0 && rt->jail_dir[0] != '\0' && fs_remove_tree(rt->jail_dir) != 0) {
        snprintf(err, errlen, "cannot remove jail %s", rt->jail_dir);
        rc = -1;
    }
    return rc;
}

/* True if pid is a live QEMU process (not a recycled pid of something else). */
static bool is_qemu_process(pid_t pid)
{
    char path[64], comm[64] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    if (fgets(comm, sizeof comm, f) == NULL)
        comm[0] = '\0';
    fclose(f);
    return strncmp(comm, "qemu-system", 11) == 0;
}

static int qemu_reap(const struct sbx_config *cfg, const struct store_sandbox *sb, char *err,
                     size_t errlen)
{
    if (sb->pid > 0 && is_qemu_process((pid_t)sb->pid)) {
        kill((pid_t)sb->pid, SIGKILL);
        if (!qemu_wait_exit((pid_t)sb->pid, 5000)) {
            snprintf(err, errlen, "qemu pid %lld survived SIGKILL", (long long)sb->pid);
            return -1;
        }
    }
    cgroup_detach(cfg, sb->cgroup_path, sb->id);
    workspace_detach(cfg, sb->id, sb->net_address);
    network_down(sb->id, sb->net_address);
    /* Only ever remove what lies in this driver's part of chroot_base: the recorded jail when it
     * is this Sandbox's (tagged, or bare from before jails were tagged). A Sandbox whose worker
     * died before it recorded the jail still has one there: the path follows from the id. */
    char expected[600];
    if (jail_path(cfg->chroot_base, "qemu", sb->id, expected, sizeof expected) != 0) {
        snprintf(err, errlen, "refusing to reap %s: no jail path from chroot_base %s", sb->id,
                 cfg->chroot_base);
        return -1;
    }
    if (sb->jail_dir[0] != '\0' && !jail_path_is(cfg->chroot_base, "qemu", sb->id, sb->jail_dir)) {
        snprintf(err, errlen, "refusing to reap %s: its jail_dir %s is not %s", sb->id,
                 sb->jail_dir, expected);
        return -1;
    }
    const char *jail = sb->jail_dir[0] != '\0' ? sb->jail_dir : expected;
    struct stat st;
    if (lstat(jail, &st) == 0 && fs_remove_tree(jail) != 0) {
        snprintf(err, errlen, "cannot remove jail %s", jail);
        return -1;
    }
    return 0;
}

const struct driver driver_qemu = {
    .name = "qemu",
    .boot_deadline_ms = QEMU_BOOT_TIMEOUT_MS + 30000,
    .init = qemu_init,
    .probe = qemu_probe,
    .boot = qemu_boot,
    .attach_workspace = qemu_attach_workspace,
    .terminate = qemu_terminate,
    .reap = qemu_reap,
    .apply_host_caps = qemu_apply_host_caps,
};

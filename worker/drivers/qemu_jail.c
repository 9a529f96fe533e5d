/*
 * qemu_jail.c: the qemu driver's jail and process (qemu_internal.h): a Sandbox's jail with the
 * guest image and the App's image in it, the unix sockets QEMU connects to, QEMU started in its
 * own mount and network namespace, chrooted and unprivileged, waiting on it, and QMP.
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

/* ---------------------------------------------------------------- jail */

/* Hard-links src to dst, or copies it when they are on different filesystems. */
static int link_or_copy(const char *src, const char *dst, char *err, size_t errlen)
{
    if (link(src, dst) == 0)
        return 0;
    if (errno != EXDEV && errno != EPERM) {
        snprintf(err, errlen, "link %s -> %s: %s", src, dst, strerror(errno));
        return -1;
    }
    int in = open(src, O_RDONLY | O_CLOEXEC);
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    int rc = (in >= 0 && out >= 0) ? 0 : -1;
    char buf[1 << 16];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0 || write(out, buf, (size_t)n) != n)
            rc = -1;
    }
    if (rc != 0)
        snprintf(err, errlen, "copy %s -> %s: %s", src, dst, strerror(errno));
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0 && rc == 0) {
        snprintf(err, errlen, "copy %s -> %s: %s", src, dst, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* Makes <jail>/root with the image, mount points and the symlinks a merged-/usr system needs. */
int qemu_build_jail(const char *guest_dir, const char *jail, char *err, size_t errlen)
{
    char path[PATH_MAX], src[PATH_MAX];
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", jail);
    char *slash = strrchr(parent, '/');
    if (slash != NULL) {
        *slash = '\0';
        /* <chroot_base>/qemu, created on demand with its parents. */
        for (char *p = parent + 1; *p; p++) {
            if (*p == '/') {
                *p = '\0';
                mkdir(parent, 0755);
                *p = '/';
            }
        }
        mkdir(parent, 0755);
    }
    if (mkdir(jail, 0755) != 0) {
        snprintf(err, errlen, "mkdir %s: %s", jail, strerror(errno));
        return -1;
    }
    static const char *const dirs[] = {"root", "root/usr", "root/dev", "root/tmp"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", jail, dirs[i]);
        if (mkdir(path, 0755) != 0) {
            snprintf(err, errlen, "mkdir %s: %s", path, strerror(errno));
            return -1;
        }
    }
    static const char *const links[][2] = {
        {"usr/lib", "lib"}, {"usr/lib64", "lib64"}, {"usr/bin", "bin"}, {"usr/sbin", "sbin"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(path, sizeof path, "%s/root/%s", jail, links[i][1]);
        if (symlink(links[i][0], path) != 0) {
            snprintf(err, errlen, "symlink %s: %s", path, strerror(errno));
            return -1;
        }
    }
    snprintf(path, sizeof path, "%s/root/dev/null", jail);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "create %s: %s", path, strerror(errno));
        return -1;
    }
    close(fd);
    static const char *const image[] = {"vmlinuz", "initramfs.cpio.gz"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", guest_dir, image[i]);
        snprintf(path, sizeof path, "%s/root/%s", jail, image[i]);
        if (link_or_copy(src, path, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- an App's image */

/* For a Sandbox of an imported image: its rootfs.erofs (built on first use), whose path goes to
 * erofs, and the digest as the Sandbox's image hash. For the built-in image erofs stays "". */
int qemu_app_image_prepare(const struct sbx_config *cfg, struct sandbox_runtime *rt, char *erofs,
                           size_t erofslen, char *err, size_t errlen)
{
    erofs[0] = '\0';
    if (image_is_default(rt->shape.image))
        return 0;
    if (image_erofs_ensure(cfg, rt->shape.image, erofs, erofslen, err, errlen) != 0)
        return -1;
    snprintf(rt->image_hash, sizeof rt->image_hash, "%s", rt->shape.image);
    return 0;
}

/* Links (or copies) the image into the jail's root. The cache's file is root-owned and 0444, so
 * the link is read-only to the jailed QEMU; a copy is made the same. */
int qemu_app_image_place(const char *erofs, const char *jail_root, char *err, size_t errlen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%.4000s%s", jail_root, QEMU_IMAGE_IN_JAIL);
    return link_or_copy(erofs, path, err, errlen);
}

/* Creates a listening unix socket at path, owned by uid:gid so the jailed QEMU may connect. */
int qemu_listen_unix(const char *path, uid_t uid, gid_t gid, char *err, size_t errlen)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        snprintf(err, errlen, "socket path too long: %s (shorten chroot_base)", path);
        return -1;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 1) != 0 ||
        chown(path, uid, gid) != 0 || chmod(path, 0600) != 0) {
        snprintf(err, errlen, "unix socket %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* ---------------------------------------------------------------- the jailed QEMU process */

/* In the child: reports which step failed and errno ("<step>:<errno>") to the parent through
 * errfd, then exits. No stdio or strerror here: after fork in a multi-threaded worker only
 * async-signal-safe calls are safe. */
static void child_fail(int errfd, const char *step)
{
    char msg[128], digits[16];
    size_t len = 0, nd = 0;
    for (const char *p = step; *p && len < sizeof msg - 20; p++)
        msg[len++] = *p;
    msg[len++] = ':';
    unsigned e = (unsigned)errno;
    do {
        digits[nd++] = (char)('0' + e % 10);
        e /= 10;
    } while (e != 0 && nd < sizeof digits);
    while (nd > 0)
        msg[len++] = digits[--nd];
    if (write(errfd, msg, len) < 0) {
        /* nothing left to tell anybody */
    }
    _exit(127);
}

/* Without the worker's network (not root, or no net_init): creates tap0 inside QEMU's own empty
 * network namespace and puts its fd at QEMU_TAP_FD, so the guest still has its virtio-net device
 * but no way out. */
static int create_tap(void)
{
    int fd = open("/dev/net/tun", O_RDWR);
    if (fd < 0)
        return -1;
    struct ifreq ifr = {0};
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    strcpy(ifr.ifr_name, "tap0");
    if (ioctl(fd, TUNSETIFF, &ifr) != 0)
        return -1;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct ifreq up = {0};
    strcpy(up.ifr_name, "tap0");
    up.ifr_flags = IFF_UP;
    int rc = ioctl(s, SIOCSIFFLAGS, &up);
    close(s);
    if (rc != 0)
        return -1;
    if (fd != QEMU_TAP_FD) {
        if (dup2(fd, QEMU_TAP_FD) < 0)
            return -1;
        close(fd);
    }
    return 0;
}

/* The child side of the fork: namespaces, tap, jail mounts, chroot, credentials, exec. Only
 * system calls here: the worker is multi-threaded. */
static void run_jailed_qemu(const struct qemu_launch *l, int errfd)
{
    if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC) != 0)
        child_fail(errfd, "unshare");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        child_fail(errfd, "make mounts private");
    if (l->tap_fd >= 0) {
        if (dup2(l->tap_fd, QEMU_TAP_FD) < 0)
            child_fail(errfd, "tap fd");
    } else if (create_tap() != 0) {
        child_fail(errfd, "tap device");
    }
    if (mount("/usr", l->usr_target, NULL, MS_BIND | MS_REC, NULL) != 0 ||
        mount(NULL, l->usr_target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
              NULL) != 0)
        child_fail(errfd, "bind /usr read-only");
    if (mount("/dev/null", l->dev_null, NULL, MS_BIND, NULL) != 0)
        child_fail(errfd, "bind /dev/null");
    /* O_APPEND: log_cap.c truncates it when it rotates (console.log is QEMU's append=on). */
    int logfd = open(l->qemu_log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (logfd < 0 || nullfd < 0)
        child_fail(errfd, "open qemu.log");
    if (dup2(nullfd, STDIN_FILENO) < 0 || dup2(logfd, STDOUT_FILENO) < 0 ||
        dup2(logfd, STDERR_FILENO) < 0)
        child_fail(errfd, "redirect stdio");
    if (chdir(l->jail_root) != 0 || chroot(".") != 0 || chdir("/") != 0)
        child_fail(errfd, "chroot");
    if (setgroups(0, NULL) != 0 || setresgid(l->gid, l->gid, l->gid) != 0 ||
        setresuid(l->uid, l->uid, l->uid) != 0)
        child_fail(errfd, "drop to sandbox uid/gid");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        child_fail(errfd, "no_new_privs");
    if (log_cap_child_limit(l->log_max) != 0)
        child_fail(errfd, "cap the logs");
    execv(l->argv[0], l->argv);
    child_fail(errfd, "exec qemu");
}

/* Forks the jailed QEMU. Returns its pid, or -1 with the failed step in err. */
pid_t spawn_qemu(const struct qemu_launch *l, char *err, size_t errlen)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    /* Keep the error pipe clear of the fd number the tap must take. */
    int errfd = fcntl(pipefd[1], F_DUPFD_CLOEXEC, 10);
    close(pipefd[1]);
    if (errfd < 0) {
        close(pipefd[0]);
        snprintf(err, errlen, "dup: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        run_jailed_qemu(l, errfd);
    }
    close(errfd);
    if (pid < 0) {
        close(pipefd[0]);
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    /* EOF means exec succeeded (the pipe is close-on-exec); anything else is the child's error. */
    char msg[256];
    ssize_t n;
    do {
        n = read(pipefd[0], msg, sizeof msg - 1);
    } while (n < 0 && errno == EINTR);
    close(pipefd[0]);
    if (n > 0) {
        msg[n] = '\0';
        char *colon = strrchr(msg, ':');
        int child_errno = colon ? atoi(colon + 1) : 0;
        if (colon)
            *colon = '\0';
        snprintf(err, errlen, "starting jailed qemu: %s: %s", msg, strerror(child_errno));
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

/* True while pid has not exited (reaps it if it has and it is our child). */
bool qemu_process_alive(pid_t pid)
{
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
        return false;
    if (r < 0 && errno == ECHILD) /* not our child (or reaped elsewhere): ask the kernel */
        return kill(pid, 0) == 0;
    return true;
}

bool qemu_wait_exit(pid_t pid, int timeout_ms)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    while (qemu_process_alive(pid)) {
        if (clock_mono_ms() >= deadline)
            return false;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return true;
}

/* Appends the last line of a log in the jail to err (QEMU's own log usually says why it stopped,
 * the guest console why the agent never came up). */
void qemu_append_log_tail(const char *jail, const char *name, char *err, size_t errlen)
{
    char path[PATH_MAX], line[512];
    snprintf(path, sizeof path, "%.3000s/%s", jail, name);
    if (fs_last_line(path, line, sizeof line) != 0)
        return;
    size_t used = strlen(err);
    snprintf(err + used, errlen - used, " (%s: %s)", name, line);
}

/* Accepts the one connection QEMU makes to a listening socket, watching that QEMU is still up. */
int accept_from_qemu(int lfd, pid_t pid, int timeout_ms, const char *what, char *err, size_t errlen)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0)
            return fd;
        if (errno != EAGAIN && errno != EINTR) {
            snprintf(err, errlen, "accept %s: %s", what, strerror(errno));
            return -1;
        }
        if (!qemu_process_alive(pid)) {
            snprintf(err, errlen, "qemu exited before connecting its %s socket", what);
            return -1;
        }
        if (clock_mono_ms() >= deadline) {
            snprintf(err, errlen, "qemu did not connect its %s socket within %d ms", what,
                     timeout_ms);
            return -1;
        }
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        poll(&p, 1, 50);
    }
}

/* Reads one QMP line (without the newline) from a non-blocking fd, byte by byte; a longer line
 * than outlen is cut. Fails on timeout or EOF. (The agent's ready line: driver_read_line.) */
static int read_line(int fd, int timeout_ms, char *out, size_t outlen, char *err, size_t errlen)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    size_t len = 0;
    for (;;) {
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n == 1) {
            if (c == '\n') {
                out[len] = '\0';
                return 0;
            }
            if (len + 1 < outlen)
                out[len++] = c;
            continue;
        }
        if (n == 0) {
            snprintf(err, errlen, "channel closed");
            return -1;
        }
        if (errno != EAGAIN && errno != EINTR) {
            snprintf(err, errlen, "channel read: %s", strerror(errno));
            return -1;
        }
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0) {
            snprintf(err, errlen, "timed out after %d ms", timeout_ms);
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, left < 100 ? (int)left : 100);
    }
}

/* ---------------------------------------------------------------- QMP */

static int write_all(int fd, const char *s, int timeout_ms)
{
    size_t len = strlen(s), off = 0;
    int64_t deadline = clock_mono_ms() + timeout_ms;
    while (off < len) {
        ssize_t n = write(fd, s + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (clock_mono_ms() >= deadline)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, 50);
    }
    return 0;
}

/* Sends one QMP command and waits for its return, skipping asynchronous events. */
int qmp_execute(int fd, const char *command, int timeout_ms, char *err, size_t errlen)
{
    char line[4096];
    snprintf(line, sizeof line, "{\"execute\":\"%s\"}\n", command);
    if (write_all(fd, line, timeout_ms) != 0) {
        snprintf(err, errlen, "qmp %s: %s", command, strerror(errno));
        return -1;
    }
    for (;;) {
        if (read_line(fd, timeout_ms, line, sizeof line, err, errlen) != 0)
            return -1;
        json_t *reply = json_loads(line, 0, NULL);
        int done = reply && json_object_get(reply, "return")  ? 1
                   : reply && json_object_get(reply, "error") ? -1
                                                              : 0;
        json_decref(reply);
        if (done == 1)
            return 0;
        if (done == -1) {
            snprintf(err, errlen, "qmp %s: %.200s", command, line);
            return -1;
        }
    }
}

/* Reads QEMU's greeting and leaves negotiation mode. */
int qmp_handshake(int fd, char *err, size_t errlen)
{
    char greeting[4096];
    if (read_line(fd, QEMU_CONNECT_TIMEOUT_MS, greeting, sizeof greeting, err, errlen) != 0)
        return -1;
    return qmp_execute(fd, "qmp_capabilities", QEMU_CONNECT_TIMEOUT_MS, err, errlen);
}

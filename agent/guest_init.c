/*
 * guest_init.c: /init of the guest image (PID 1 in a qemu or Firecracker microVM).
 *
 * It does what a guest needs before the agent can run: mounts /proc, /sys, /dev, /dev/pts, /tmp and
 * /run; loads the kernel modules listed in /etc/modules.order (written in dependency order by
 * tools/build-guest-image) with finit_module; sets the hostname, brings up lo and configures eth0
 * from sbx.net=<addr>/<prefix>,<gateway> when the host gave the guest a link, and writes
 * /etc/resolv.conf from sbx.dns=<addr>,... (the host's dns_resolvers, the only resolvers the
 * Sandbox's firewall lets DNS reach; "sbx.dns=" for none). Then it starts
 * /usr/bin/sbx-agent on the channel the kernel command line names:
 *     sbx.channel=virtio:<port name>   (qemu: virtio-serial, the default virtio:sbx.agent)
 *     sbx.channel=vsock:<port>         (firecracker: vsock, host-initiated)
 * For a Sandbox of an App's image (sbx.image=<device>) it first makes that image the root, under a
 * writable overlay, with sbx's own files at /.sbx (agent/guest_image.h), and runs the agent from
 * there. It stays PID 1: it reaps every orphan, powers the VM off when the agent exits (a guest
 * without its agent is useless to the host), and on the ACPI power button (QMP system_powerdown) it
 * stops the agent and powers off, which is the graceful path of the host's terminate().
 *
 * Console output (serial, the jail's console log) is a few "sbx-init:" lines for operators.
 */
#include "guest_image.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/input.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AGENT_PATH "/usr/bin/sbx-agent"
#define MODULES_ORDER "/etc/modules.order"
#define MAX_INPUTS 8

static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    dprintf(STDERR_FILENO, "sbx-init: %s\n", line);
}

static void mount_or_say(const char *src, const char *target, const char *type, unsigned long flags,
                         const char *data)
{
    mkdir(target, 0755);
    if (mount(src, target, type, flags, data) != 0 && errno != EBUSY)
        say("mount %s on %s: %s", type, target, strerror(errno));
}

static void mount_filesystems(void)
{
    mount_or_say("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
    /* The initramfs has no /dev/console node, so the kernel could not give us a console: take it
     * now that devtmpfs provides one. */
    int con = open("/dev/console", O_RDWR | O_NOCTTY);
    if (con >= 0) {
        dup2(con, STDIN_FILENO);
        dup2(con, STDOUT_FILENO);
        dup2(con, STDERR_FILENO);
        if (con > STDERR_FILENO)
            close(con);
    }
    mount_or_say("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mount_or_say("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mount_or_say("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "mode=0620,ptmxmode=0666");
    mount_or_say("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    mount_or_say("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
}

/* Loads every module of /etc/modules.order in file order; one that fails is reported and skipped
 * (the agent then says what is missing, e.g. no virtio-serial port). */
static void load_modules(void)
{
    FILE *f = fopen(MODULES_ORDER, "re");
    if (f == NULL) {
        say("%s: %s", MODULES_ORDER, strerror(errno));
        return;
    }
    char path[256];
    int loaded = 0;
    while (fgets(path, sizeof path, f) != NULL) {
        path[strcspn(path, "\n")] = '\0';
        if (path[0] == '\0')
            continue;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            say("module %s: %s", path, strerror(errno));
            continue;
        }
        if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
            say("finit_module %s: %s", path, strerror(errno));
        else
            loaded++;
        close(fd);
    }
    fclose(f);
    say("loaded %d modules", loaded);
}

static void set_hostname(void)
{
    char name[64] = "sbx-guest";
    FILE *f = fopen("/etc/hostname", "re");
    if (f != NULL) {
        if (fgets(name, sizeof name, f) == NULL)
            strcpy(name, "sbx-guest");
        name[strcspn(name, "\n")] = '\0';
        fclose(f);
    }
    if (sethostname(name, strlen(name)) != 0)
        say("sethostname: %s", strerror(errno));
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
        if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
            say("lo up: %s", strerror(errno));
    }
    close(s);
}

/* Configures eth0 from "sbx.net=<addr>/<prefix>,<gateway>" (the host's tap link, see
 * worker/host/links.h): address, netmask, up, default route. The kernel's own ip= cannot do this:
 * virtio_net is a module, loaded after the kernel's IP autoconfiguration ran. */
static void configure_network(const char *spec)
{
    char addr[32], gw[32];
    int prefix;
    if (sscanf(spec, "%31[0-9.]/%d,%31[0-9.]", addr, &prefix, gw) != 3 || prefix < 1 ||
        prefix > 32) {
        say("malformed sbx.net=%s (want <addr>/<prefix>,<gateway>)", spec);
        return;
    }
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "eth0");
    struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, addr, &sin->sin_addr);
    int rc = ioctl(s, SIOCSIFADDR, &ifr);
    sin->sin_addr.s_addr = htonl(prefix == 32 ? 0xffffffffu : ~(0xffffffffu >> prefix));
    if (rc == 0)
        rc = ioctl(s, SIOCSIFNETMASK, &ifr);
    if (rc == 0)
        rc = ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    if (rc == 0)
        rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    struct rtentry route = {0};
    struct sockaddr_in *dst = (struct sockaddr_in *)&route.rt_dst;
    struct sockaddr_in *mask = (struct sockaddr_in *)&route.rt_genmask;
    struct sockaddr_in *via = (struct sockaddr_in *)&route.rt_gateway;
    dst->sin_family = mask->sin_family = via->sin_family = AF_INET;
    inet_pton(AF_INET, gw, &via->sin_addr);
    route.rt_flags = RTF_UP | RTF_GATEWAY;
    if (rc == 0)
        rc = ioctl(s, SIOCADDRT, &route);
    if (rc != 0)
        say("eth0 %s/%d via %s: %s", addr, prefix, gw, strerror(errno));
    else
        say("eth0 %s/%d via %s", addr, prefix, gw);
    close(s);
}

/* Writes /etc/resolv.conf naming the resolvers of "sbx.dns=a.b.c.d,...", so that
 * getaddrinfo and the image's own tools resolve through them. Each must be an IPv4 address. */
static void configure_resolvers(const char *list)
{
    char text[512];
    size_t n = (size_t)snprintf(text, sizeof text, "# written by sbx-init from sbx.dns\n");
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    int count = 0;
    for (char *save = NULL, *a = strtok_r(copy, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        struct in_addr ia;
        if (inet_pton(AF_INET, a, &ia) != 1 || n >= sizeof text - 32) {
            say("ignoring resolver \"%s\" in sbx.dns", a);
            continue;
        }
        n += (size_t)snprintf(text + n, sizeof text - n, "nameserver %s\n", a);
        count++;
    }
    /* An initramfs root is writable; a read-only root (an image on a disk) gets the file from
     * /run (a tmpfs) bound over its own /etc/resolv.conf. */
    const char *path = "/etc/resolv.conf";
    mkdir("/etc", 0755);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EROFS) {
        path = "/run/resolv.conf";
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    bool ok = fd >= 0 && write(fd, text, n) == (ssize_t)n;
    if (fd >= 0)
        close(fd);
    if (ok && strcmp(path, "/etc/resolv.conf") != 0 &&
        mount(path, "/etc/resolv.conf", NULL, MS_BIND, NULL) != 0)
        ok = false;
    if (!ok)
        say("/etc/resolv.conf: %s", strerror(errno));
    else
        say("resolv.conf: %d resolver(s)", count);
}

/* Reads the kernel command line: sbx.net= configures eth0 on the spot; sbx.channel= gives the
 * agent's channel option and value. Returns 0, or -1 if the channel is malformed. */
static int channel_from_cmdline(char *option, size_t optlen, char *value, size_t valuelen)
{
    snprintf(option, optlen, "--virtio-port");
    snprintf(value, valuelen, "sbx.agent");
    char cmdline[4096] = "";
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
        cmdline[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    for (char *tok = strtok(cmdline, " \n"); tok != NULL; tok = strtok(NULL, " \n")) {
        if (strncmp(tok, "sbx.net=", 8) == 0) {
            configure_network(tok + 8);
            continue;
        }
        if (strncmp(tok, "sbx.dns=", 8) == 0) {
            configure_resolvers(tok + 8);
            continue;
        }
        if (strncmp(tok, "sbx.channel=", 12) != 0)
            continue;
        const char *spec = tok + 12;
        if (strncmp(spec, "virtio:", 7) == 0 && spec[7] != '\0') {
            snprintf(option, optlen, "--virtio-port");
            snprintf(value, valuelen, "%s", spec + 7);
        } else if (strncmp(spec, "vsock:", 6) == 0 && spec[6] != '\0') {
            snprintf(option, optlen, "--vsock-port");
            snprintf(value, valuelen, "%s", spec + 6);
        } else {
            say("malformed %s (want virtio:<name> or vsock:<port>)", tok);
            return -1;
        }
    }
    return 0;
}

static pid_t start_agent(const sigset_t *blocked, const char *agent, const char *option,
                         const char *value)
{
    pid_t pid = fork();
    if (pid == 0) {
        sigprocmask(SIG_UNBLOCK, blocked, NULL);
        setsid();
        char *argv[] = {(char *)agent, "--guest", (char *)option, (char *)value, NULL};
        char *envp[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", NULL};
        execve(agent, argv, envp);
        say("exec %s: %s", agent, strerror(errno));
        _exit(127);
    }
    if (pid < 0)
        say("fork: %s", strerror(errno));
    return pid;
}

/* Opens the event devices that have a power key (the ACPI power button of QMP
 * system_powerdown). */
static int open_power_buttons(struct pollfd *fds, int max)
{
    int n = 0;
    for (int i = 0; i < 32 && n < max; i++) {
        char path[64];
        snprintf(path, sizeof path, "/dev/input/event%d", i);
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            continue;
        unsigned long keys[KEY_MAX / (8 * sizeof(unsigned long)) + 1] = {0};
        if (ioctl(fd, EVIOCGBIT(EV_KEY, sizeof keys), keys) >= 0 &&
            (keys[KEY_POWER / (8 * sizeof(unsigned long))] >>
             (KEY_POWER % (8 * sizeof(unsigned long)))) &
                1) {
            fds[n].fd = fd;
            fds[n].events = POLLIN;
            n++;
        } else {
            close(fd);
        }
    }
    return n;
}

static int power_key_pressed(int fd)
{
    struct input_event ev;
    while (read(fd, &ev, sizeof ev) == (ssize_t)sizeof ev)
        if (ev.type == EV_KEY && ev.code == KEY_POWER && ev.value == 1)
            return 1;
    return 0;
}

static void power_off(void)
{
    sync();
    reboot(RB_POWER_OFF);
    /* Only reached if the kernel refused; PID 1 must not exit (that panics, also ending the VM). */
    for (;;)
        pause();
}

int main(void)
{
    if (getpid() != 1) {
        fprintf(stderr, "sbx-init: this is the guest's init and must run as PID 1\n");
        return 2;
    }
    mount_filesystems();
    load_modules();
    set_hostname();
    bring_up_loopback();

    char option[32], value[128];
    if (channel_from_cmdline(option, sizeof option, value, sizeof value) != 0)
        power_off();
    bool image = false;
    char why[512];
    if (guest_image_enter(&image, why, sizeof why) != 0) {
        say("the App's image: %s", why);
        power_off();
    }
    const char *agent = image ? GUEST_IMAGE_SBX_DIR AGENT_PATH : AGENT_PATH;
    if (image)
        say("root is the App's image; sbx-agent from %s", agent);

    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGCHLD);
    sigprocmask(SIG_BLOCK, &blocked, NULL);
    int sfd = signalfd(-1, &blocked, SFD_CLOEXEC | SFD_NONBLOCK);

    pid_t agent_pid = start_agent(&blocked, agent, option, value);
    if (agent_pid < 0)
        power_off();
    say("started sbx-agent %s %s", option, value);

    struct pollfd fds[1 + MAX_INPUTS];
    fds[0].fd = sfd;
    fds[0].events = POLLIN;
    int nbuttons = open_power_buttons(fds + 1, MAX_INPUTS);

    for (;;) {
        if (poll(fds, 1 + nbuttons, -1) < 0 && errno != EINTR)
            sleep(1);
        for (int i = 1; i <= nbuttons; i++) {
            if ((fds[i].revents & POLLIN) && power_key_pressed(fds[i].fd)) {
                say("power button: stopping the agent");
                kill(-agent_pid, SIGTERM);
                kill(agent_pid, SIGTERM);
                power_off();
            }
        }
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            if (pid == agent_pid) {
                say("sbx-agent exited (status %d): powering off",
                    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
                power_off();
            }
        }
    }
}

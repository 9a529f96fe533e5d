/*
 * test_qemu_driver.c: it.microvm.qemu_driver: drives a real `qemu-system-x86_64 -M microvm` guest
 * (TCG) through the qemu driver as the worker would: boot until the guest agent is ready, check
 * the jail (chroot, read-only image links, QEMU running as the sandbox uid in its own network
 * namespace with a tap device, its cgroup), start the echo agent in the guest, have one message
 * answered from the guest kernel, then terminate and check that QEMU, the jail and the cgroup are
 * gone.
 *
 * With "reap" (it.microvm.qemu_reap) it instead drops the runtime as a crashed worker would and
 * checks that reap() alone, from the store's record, removes the VM, jail, cgroup and tap.
 *
 * With "bad_kernel" (it.microvm.qemu_bad_kernel) it boots a copy of the guest image whose vmlinuz
 * is junk: boot must fail at once with QEMU's own words in the error, and leave no QEMU process,
 * jail, cgroup or tap behind.
 *
 * Usage: test_qemu_driver GUEST_DIR [reap|bad_kernel]   (GUEST_DIR: the guest-image fixture's
 * output)
 */
#include "test_channel.h"
#include "check.h"
#include "clock.h"
#include "config.h"
#include "drivers/driver.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static int proc_status_field(pid_t pid, const char *field, char *out, size_t outlen)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    int rc = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            snprintf(out, outlen, "%s", line + flen + 1);
            out[strcspn(out, "\n")] = '\0';
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

static bool same_link(const char *a, const char *b)
{
    char ta[PATH_MAX] = "", tb[PATH_MAX] = "";
    ssize_t na = readlink(a, ta, sizeof ta - 1), nb = readlink(b, tb, sizeof tb - 1);
    return na > 0 && nb > 0 && na == nb && memcmp(ta, tb, (size_t)na) == 0;
}

/* True when a directory under dir has a name containing id (a jail or cgroup left behind). */
static bool dir_has_entry_with(const char *dir, const char *id)
{
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | grep -q -- '%s'", dir, id);
    return system(cmd) == 0;
}

/* True when a network interface (the host side of a Sandbox's link, sbx<slot>) has id in its
 * alias. */
static bool link_with_alias(const char *id)
{
    FILE *ip = popen("ip -o link show", "r");
    char l[512];
    bool found = false;
    while (ip != NULL && fgets(l, sizeof l, ip) != NULL)
        if (strstr(l, id) != NULL)
            found = true;
    if (ip != NULL)
        pclose(ip);
    return found;
}

/* A copy of the guest image whose vmlinuz is junk; the rest is the real image. */
static int make_junk_kernel_guest(const char *guest_dir, const char *dst)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/initramfs.cpio.gz' '%s/image.sha256' '%s/'",
             dst, guest_dir, guest_dir, dst);
    if (system(cmd) != 0)
        return -1;
    snprintf(cmd, sizeof cmd, "%s/vmlinuz", dst);
    FILE *f = fopen(cmd, "we");
    if (f == NULL)
        return -1;
    for (int i = 0; i < 4096; i++)
        fputs("not a kernel\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    bool reap_mode = argc == 3 && strcmp(argv[2], "reap") == 0;
    bool bad_kernel_mode = argc == 3 && strcmp(argv[2], "bad_kernel") == 0;
    if (argc != 2 && !reap_mode && !bad_kernel_mode) {
        fprintf(stderr, "usage: %s GUEST_DIR [reap|bad_kernel]\n", argv[0]);
        return 2;
    }
    log_init("test", "info");
    signal(SIGPIPE, SIG_IGN); /* as the worker runs: a VM gone mid-write is an error, not death */
    char tmpl[] = "/tmp/sbx-it-qemu-XXXXXX";
    char *data = mkdtemp(tmpl);
    if (data == NULL)
        return 2;
    char cgroot[PATH_MAX];
    snprintf(cgroot, sizeof cgroot, "/sys/fs/cgroup/unified/sbx-it-qemu-%d", (int)getpid());
    if (mkdir(cgroot, 0755) != 0)
        cgroot[0] = '\0';

    struct sbx_config cfg;
    char err[1024];
    char *cargv[] = {argv[0], NULL};
    setenv("SBX_DATA_DIR", data, 1);
    if (config_load(&cfg, 1, cargv, err, sizeof err) != 0) {
        fprintf(stderr, "config: %s\n", err);
        return 2;
    }
    snprintf(cfg.guest_dir, sizeof cfg.guest_dir, "%s", argv[1]);
    snprintf(cfg.cgroup_root, sizeof cfg.cgroup_root, "%.400s", cgroot);
    snprintf(cfg.qemu_accel, sizeof cfg.qemu_accel, "tcg");

    struct sandbox_runtime rt = {.channel_fd = -1};
    struct test_channel ch = {0};
    bool booted = false;
    snprintf(rt.sandbox_id, sizeof rt.sandbox_id, "sbx_itqemu%d", (int)getpid());
    snprintf(rt.shape.driver, sizeof rt.shape.driver, "qemu");
    rt.shape.vcpu_count = 1;
    rt.shape.mem_size_mib = 256;

    REQUIRE(driver_qemu.init(&cfg, err, sizeof err) == 0, "init: %s", err);
    if (bad_kernel_mode) {
        /* A broken kernel is QEMU's to refuse: boot fails without waiting out the agent's
         * timeout, says why in QEMU's words, and cleans up everything it made. */
        snprintf(cfg.guest_dir, sizeof cfg.guest_dir, "%.400s/junk-guest", data);
        REQUIRE(make_junk_kernel_guest(argv[1], cfg.guest_dir) == 0, "cannot copy the guest image");
        int64_t t_bad = clock_mono_ms();
        int rc = driver_qemu.boot(&cfg, &rt, err, sizeof err);
        fprintf(stderr, "junk kernel: boot rc %d in %lld ms: %s\n", rc,
                (long long)(clock_mono_ms() - t_bad), err);
        CHECK(rc != 0, "a junk kernel booted");
        CHECK(strstr(err, "(qemu.log: ") != NULL, "the error does not carry QEMU's log: %s", err);
        CHECK(rt.pid <= 0 || (kill(rt.pid, 0) != 0 && errno == ESRCH), "qemu pid %d survived",
              (int)rt.pid);
        char qemu_jails[PATH_MAX];
        snprintf(qemu_jails, sizeof qemu_jails, "%.400s/qemu", cfg.chroot_base);
        CHECK(!dir_has_entry_with(qemu_jails, rt.sandbox_id), "a jail of %s is left in %s",
              rt.sandbox_id, qemu_jails);
        static const char *const cgroup_dirs[] = {
            "/sys/fs/cgroup/cpu/sbx", "/sys/fs/cgroup/memory/sbx", "/sys/fs/cgroup/pids/sbx"};
        for (size_t i = 0; i < sizeof cgroup_dirs / sizeof cgroup_dirs[0]; i++)
            CHECK(!dir_has_entry_with(cgroup_dirs[i], rt.sandbox_id),
                  "a cgroup of %s is left in %s", rt.sandbox_id, cgroup_dirs[i]);
        if (cgroot[0] != '\0') {
            char sbx_dir[PATH_MAX + 8];
            snprintf(sbx_dir, sizeof sbx_dir, "%s/sbx", cgroot);
            CHECK(!dir_has_entry_with(sbx_dir, rt.sandbox_id), "a cgroup of %s is left in %s",
                  rt.sandbox_id, sbx_dir);
        }
        CHECK(!link_with_alias(rt.sandbox_id), "the tap of %s is left", rt.sandbox_id);
        goto out;
    }
    int64_t t0 = clock_mono_ms();
    REQUIRE(driver_qemu.boot(&cfg, &rt, err, sizeof err) == 0, "boot: %s", err);
    booted = true;
    fprintf(stderr, "booted in %lld ms, guest kernel %s\n", (long long)(clock_mono_ms() - t0),
            rt.kernel);

    /* The guest runs its own kernel, not the host's. */
    struct utsname host;
    uname(&host);
    CHECK(rt.kernel[0] != '\0', "the agent reported no kernel release");
    CHECK(strcmp(rt.kernel, host.release) != 0, "guest kernel %s equals the host's", rt.kernel);
    CHECK(strncmp(rt.image_hash, "sha256:", 7) == 0, "image hash %s", rt.image_hash);

    /* The jail: QEMU is chrooted into <chroot_base>/qemu/<id>/root, as the sandbox uid, with its
     * own network namespace holding tap0, in its cgroup. */
    char expect_jail[PATH_MAX], path[PATH_MAX], host_path[PATH_MAX], field[256];
    snprintf(expect_jail, sizeof expect_jail, "%s/qemu/%s", cfg.chroot_base, rt.sandbox_id);
    CHECK(strcmp(rt.jail_dir, expect_jail) == 0, "jail %s, want %s", rt.jail_dir, expect_jail);
    snprintf(path, sizeof path, "/proc/%d/root", (int)rt.pid);
    char root_target[PATH_MAX] = "";
    ssize_t n = readlink(path, root_target, sizeof root_target - 1);
    if (n > 0)
        root_target[n] = '\0';
    snprintf(host_path, sizeof host_path, "%s/root", rt.jail_dir);
    CHECK(strcmp(root_target, host_path) == 0, "qemu root is %s", root_target);
    CHECK(proc_status_field(rt.pid, "Uid", field, sizeof field) == 0 &&
              atoll(field) == cfg.sandbox_uid,
          "qemu uid line: %s", field);
    CHECK(proc_status_field(rt.pid, "Seccomp", field, sizeof field) == 0 && atoi(field) == 2,
          "qemu runs without its seccomp filter (Seccomp:%s)", field);
    CHECK(proc_status_field(rt.pid, "NoNewPrivs", field, sizeof field) == 0 && atoi(field) == 1,
          "qemu may gain privileges (NoNewPrivs:%s)", field);
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)rt.pid);
    CHECK(!same_link(path, "/proc/self/ns/net"), "qemu shares the host's network namespace");
    /* As root the guest's link is a host tap with the Sandbox's firewall (worker/host/links.h) and
     * QEMU's own namespace stays empty; otherwise the tap is private to QEMU's namespace. */
    snprintf(path, sizeof path, "/proc/%d/net/dev", (int)rt.pid);
    FILE *f = fopen(path, "re");
    bool has_private_tap = false;
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strstr(line, "tap0:") != NULL)
            has_private_tap = true;
    if (f != NULL)
        fclose(f);
    if (geteuid() == 0)
        CHECK(rt.net_address[0] != '\0' && !has_private_tap, "no host tap link (address '%s')",
              rt.net_address);
    else
        CHECK(has_private_tap, "no tap0 in qemu's network namespace");
    snprintf(path, sizeof path, "%s/root/vmlinuz", rt.jail_dir);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_uid == 0 && !(st.st_mode & 0022), "kernel in the jail");
    if (cgroot[0] != '\0')
        CHECK(rt.cgroup_path[0] != '\0', "qemu got no cgroup under %s", cgroot);

    if (reap_mode) {
        /* The worker crashed: nothing but the store's record is left. reap() must remove the VM,
         * the jail, the cgroup and the network link from that record alone. */
        struct store_sandbox sb = {0};
        snprintf(sb.id, sizeof sb.id, "%s", rt.sandbox_id);
        sb.shape = rt.shape;
        sb.pid = rt.pid;
        snprintf(sb.jail_dir, sizeof sb.jail_dir, "%s", rt.jail_dir);
        snprintf(sb.cgroup_path, sizeof sb.cgroup_path, "%s", rt.cgroup_path);
        snprintf(sb.net_address, sizeof sb.net_address, "%s", rt.net_address);
        CHECK(driver_qemu.reap(&cfg, &sb, err, sizeof err) == 0, "reap: %s", err);
        CHECK(kill(rt.pid, 0) != 0 && errno == ESRCH, "qemu pid %d survived reap", (int)rt.pid);
        CHECK(access(rt.jail_dir, F_OK) != 0, "jail %s survived reap", rt.jail_dir);
        CHECK(rt.cgroup_path[0] == '\0' || access(rt.cgroup_path, F_OK) != 0,
              "cgroup %s survived reap", rt.cgroup_path);
        if (rt.net_address[0] != '\0') {
            /* The host side of the link, sbx<slot>, must be gone: no interface has its alias. */
            CHECK(!link_with_alias(rt.sandbox_id), "the tap of %s survived reap", rt.sandbox_id);
        }
        /* Terminate on what is left is a no-op that releases the lost runtime's descriptors. */
        struct store_usage usage;
        CHECK(driver_qemu.terminate(&cfg, &rt, &usage, err, sizeof err) == 0,
              "terminate after reap: %s", err);
        booted = false;
        goto out;
    }

    /* Start the echo agent in the guest and have it answer one message. */
    REQUIRE(test_channel_open(&ch, rt.channel_fd, "channel", 65536) == 0, "out of memory");
    REQUIRE(test_channel_send(&ch, "{\"type\":\"start\",\"argv\":[\"/usr/bin/sbx-echo-agent\"],"
                                   "\"workspace\":null}") == 0,
            "send start");
    json_t *started = test_channel_read_until(&ch, "type", 30000);
    const char *type = json_string_value(json_object_get(started, "type"));
    CHECK(type != NULL && strcmp(type, "started") == 0, "agent answered %s to start",
          type ? type : "nothing");
    json_decref(started);
    REQUIRE(test_channel_send(&ch, "{\"id\":\"msg_1\",\"seq\":1,\"body\":\"hello guest\"}") == 0,
            "send message");
    json_t *reply = test_channel_read_until(&ch, "id", 30000);
    REQUIRE(reply != NULL, "no reply from the guest");
    json_t *body = json_object_get(reply, "reply");
    const char *echo = json_string_value(json_object_get(body, "echo"));
    const char *kernel = json_string_value(json_object_get(body, "kernel"));
    CHECK(echo != NULL && strcmp(echo, "hello guest") == 0, "echo %s", echo ? echo : "(none)");
    CHECK(kernel != NULL && strcmp(kernel, rt.kernel) == 0 && strcmp(kernel, host.release) != 0,
          "the reply came from kernel %s (guest %s, host %s)", kernel ? kernel : "(none)",
          rt.kernel, host.release);
    json_decref(reply);

    /* The guest configured its end of the link from the kernel command line. */
    if (rt.net_address[0] != '\0') {
        REQUIRE(test_channel_send(&ch, "{\"id\":\"msg_2\",\"seq\":2,\"body\":{\"run\":"
                                       "[\"/bin/ip\",\"-4\",\"addr\",\"show\",\"eth0\"]}}") == 0,
                "send message");
        json_t *ip = test_channel_read_until(&ch, "id", 30000);
        const char *output = json_string_value(
            json_object_get(json_object_get(json_object_get(ip, "reply"), "run"), "output"));
        char want[96];
        snprintf(want, sizeof want, "inet %s/", rt.net_address);
        CHECK(output != NULL && strstr(output, want) != NULL, "guest eth0: %s",
              output ? output : "(no output)");
        json_decref(ip);

        /* And the link carries traffic: the guest connects to the host side of its link on TCP
         * 443, the one host port the firewall lets Sandboxes reach (gateway callbacks). */
        char gw[INET_ADDRSTRLEN];
        struct in_addr guest_addr;
        inet_pton(AF_INET, rt.net_address, &guest_addr);
        guest_addr.s_addr = htonl(ntohl(guest_addr.s_addr) - 1); /* .1 of the /30: links.h */
        inet_ntop(AF_INET, &guest_addr, gw, sizeof gw);
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_in sin = {
            .sin_family = AF_INET, .sin_port = htons(443), .sin_addr = guest_addr};
        int one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        REQUIRE(lfd >= 0 && bind(lfd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
                    listen(lfd, 1) == 0,
                "listen on %s:443: %s", gw, strerror(errno));
        char run[256];
        snprintf(run, sizeof run,
                 "{\"id\":\"msg_3\",\"seq\":3,\"body\":{\"run\":[\"/bin/nc\",\"-w\",\"5\",\"%s\","
                 "\"443\"]}}",
                 gw);
        REQUIRE(test_channel_send(&ch, run) == 0, "send message");
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        bool connected = poll(&p, 1, 20000) == 1;
        int cfd = connected ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
        CHECK(cfd >= 0, "the guest did not reach %s:443 over its tap link", gw);
        if (cfd >= 0)
            close(cfd);
        json_decref(test_channel_read_until(&ch, "id", 30000));
        close(lfd);
    }

out:
    test_channel_free(&ch);
    if (booted) {
        pid_t pid = rt.pid;
        char jail[sizeof rt.jail_dir], cg[sizeof rt.cgroup_path];
        snprintf(jail, sizeof jail, "%s", rt.jail_dir);
        snprintf(cg, sizeof cg, "%s", rt.cgroup_path);
        struct store_usage usage;
        int64_t t1 = clock_mono_ms();
        CHECK(driver_qemu.terminate(&cfg, &rt, &usage, err, sizeof err) == 0, "terminate: %s", err);
        fprintf(stderr, "terminated in %lld ms, cpu %lld usec, peak memory %lld bytes\n",
                (long long)(clock_mono_ms() - t1), (long long)usage.cpu_usec,
                (long long)usage.mem_peak_bytes);
        CHECK(kill(pid, 0) != 0 && errno == ESRCH, "qemu pid %d still exists", (int)pid);
        CHECK(access(jail, F_OK) != 0, "jail %s still exists", jail);
        CHECK(cg[0] == '\0' || access(cg, F_OK) != 0, "cgroup %s still exists", cg);
        if (cgroot[0] != '\0')
            CHECK(usage.cpu_usec > 0, "cpu usage not measured: %lld", (long long)usage.cpu_usec);
        /* Hosts like this one account memory only in cgroup v1 (worker/host/cgroup.h uses it). */
        if (access("/sys/fs/cgroup/memory/memory.max_usage_in_bytes", F_OK) == 0)
            CHECK(usage.mem_peak_bytes > 0, "peak memory not measured: %lld",
                  (long long)usage.mem_peak_bytes);
    }
    if (cgroot[0] != '\0') {
        char sbx_dir[PATH_MAX + 8];
        snprintf(sbx_dir, sizeof sbx_dir, "%s/sbx", cgroot);
        rmdir(sbx_dir); /* made by cgroup_detect */
        rmdir(cgroot);
    }
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", data);
    int failures = check_failures();
    fprintf(stderr, failures ? "it.microvm.qemu_driver: %d failure(s)\n" : "ok\n", failures);
    return failures ? 1 : 0;
}

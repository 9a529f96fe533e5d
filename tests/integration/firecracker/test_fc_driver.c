/*
 * test_fc_driver.c: the firecracker driver against Firecracker's contract, without Firecracker.
 *
 * The driver runs for real (jailer argv, chroot, network namespace, cgroup, API calls, vsock
 * handshake, agent channel, termination) against test stand-ins: fake-jailer (builds the jail the
 * way the jailer documents it) and the `firecracker` executable that runs fc-standin.js, which
 * accepts only what ../shared/firecracker/firecracker.yaml accepts and records every request.
 * With --real it instead boots a real microVM when FIRECRACKER_BIN and JAILER_BIN name real
 * binaries, and exits 77 (skipped) otherwise.
 */
#include "drivers/driver.h"
#include "drivers/fc_api.h"
#include "id.h"
#include "host/egress.h"
#include "host/links.h"

#include <jansson.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FC_TEST_DIR SBX_SOURCE_DIR "/tests/integration/firecracker"
#define SANDBOX_UID 65534
#define SANDBOX_GID 65534
/* cgroup_root of the test; the driver's VM cgroups go to <cgroup_root>/sbx/<jailer id>. */
#define CGROUP_ROOT_NAME "sbx-fc-test"
#define CGROUP_PARENT CGROUP_ROOT_NAME "/sbx"
#define CGROUP_ROOT "/sys/fs/cgroup/unified/" CGROUP_ROOT_NAME
/* The test runs in a network namespace of its own (tests/in-netns.sh): the pool and `table inet
 * sbx` are that namespace's. */
#define NET_POOL "10.213.0.0/16"
/* The VM cgroups' pids.max (the config's default); 0 would leave the VMM unable to fork. */
#define SANDBOX_PIDS_MAX 1024

static char tmp_dir[64];
static char record_path[128];
static char argv_path[128];

/* ---- small helpers ---- */

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

/* Reads a whole file; *len gets its size. The caller frees. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (got == 0)
            break;
        n += got;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* The recorded requests (one JSON object per line), as a JSON array. */
static json_t *recorded_requests(void)
{
    char *text = read_all(record_path, NULL);
    assert_non_null(text);
    json_t *all = json_array();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t jerr;
        json_t *req = json_loads(line, 0, &jerr);
        assert_non_null(req);
        json_array_append_new(all, req);
    }
    free(text);
    return all;
}

/* The recorded non-GET requests as "METHOD PATH BODY" lines, for exact comparison. */
static void assert_requests(json_t *all, const char *const *expected, size_t n_expected)
{
    size_t i, seen = 0;
    json_t *req;
    bool configured = false;
    json_array_foreach(all, i, req)
    {
        const char *method = json_string_value(json_object_get(req, "method"));
        const char *path = json_string_value(json_object_get(req, "path"));
        const char *spec = json_string_value(json_object_get(req, "spec"));
        int status = (int)json_integer_value(json_object_get(req, "status"));
        if (strcmp(method, "GET") == 0) {
            /* Only the readiness probe of the API, before any configuration. */
            assert_string_equal(path, "/");
            assert_false(configured);
            continue;
        }
        configured = true;
        char *body = json_dumps(json_object_get(req, "body"), JSON_COMPACT | JSON_SORT_KEYS);
        char line[2048];
        snprintf(line, sizeof line, "%s %s %s", method, path, body ? body : "null");
        free(body);
        if (seen >= n_expected)
            fail_msg("unexpected extra request: %s", line);
        if (strcmp(line, expected[seen]) != 0)
            fail_msg("request %zu:\n  got      %s\n  expected %s", seen, line, expected[seen]);
        if (strcmp(spec, "accepted") != 0 || status != 204)
            fail_msg("request %s was answered %d (%s): %s", line, status, spec,
                     json_string_value(json_object_get(req, "fault_message")));
        seen++;
    }
    assert_int_equal(seen, n_expected);
}

/* One line from the (non-blocking) agent channel, within 5 s. */
static json_t *channel_read(int fd)
{
    char line[4096];
    size_t len = 0;
    for (;;) {
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n == 1) {
            if (c == '\n')
                break;
            assert_true(len + 1 < sizeof line);
            line[len++] = c;
            continue;
        }
        assert_true(n < 0 && (errno == EAGAIN || errno == EINTR));
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        assert_true(poll(&pfd, 1, 5000) == 1);
    }
    line[len] = '\0';
    json_t *msg = json_loads(line, 0, NULL);
    if (!msg)
        fail_msg("not JSON on the agent channel: %s", line);
    return msg;
}

static void channel_write(int fd, const char *line)
{
    size_t len = strlen(line);
    assert_int_equal(write(fd, line, len), (ssize_t)len);
}

static void fill_config(struct sbx_config *cfg, const char *guest_sub)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", tmp_dir);
    snprintf(cfg->chroot_base, sizeof cfg->chroot_base, "%s/jail", tmp_dir);
    snprintf(cfg->guest_dir, sizeof cfg->guest_dir, "%s/%s", tmp_dir, guest_sub);
    snprintf(cfg->firecracker_bin, sizeof cfg->firecracker_bin, "%s/firecracker", FC_TEST_DIR);
    snprintf(cfg->jailer_bin, sizeof cfg->jailer_bin, "%s/fake-jailer", FC_TEST_DIR);
    snprintf(cfg->cgroup_root, sizeof cfg->cgroup_root, "%s", CGROUP_ROOT);
    snprintf(cfg->net_pool, sizeof cfg->net_pool, "%s", NET_POOL);
    cfg->sandbox_pids_max = SANDBOX_PIDS_MAX;
    cfg->sandbox_uid = SANDBOX_UID;
    cfg->sandbox_gid = SANDBOX_GID;
}

/* The firewall elements owned by sandbox_id; *addr gets the last one's address. */
static size_t fw_elements_of(const char *sandbox_id, struct in_addr *addr, char *ifname)
{
    struct fw_element *v = NULL;
    size_t n = 0, found = 0;
    char err[256];
    assert_non_null(net_firewall());
    if (fw_elements(net_firewall(), &v, &n, err, sizeof err) != 0)
        fail_msg("fw_elements: %s", err);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].owner, sandbox_id) == 0) {
            found++;
            if (addr)
                *addr = v[i].addr;
            if (ifname)
                snprintf(ifname, IFNAMSIZ, "%s", v[i].ifname);
        }
    free(v);
    return found;
}

/* The guest's sbx.net value the driver must have given, from the Sandbox's recorded address:
 * "<addr>/30,<gateway>" with the gateway the address before it (links.h's /30 slots). */
static void expected_guest_net(const char *net_address, char *out, size_t outlen)
{
    struct in_addr a;
    assert_int_equal(inet_pton(AF_INET, net_address, &a), 1);
    struct in_addr gw = {htonl(ntohl(a.s_addr) - 1)};
    char gws[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &gw, gws, sizeof gws);
    snprintf(out, outlen, "%s/30,%s", net_address, gws);
}

/* The Sandbox's network as the worker's records and the host show it: an address of the pool,
 * its firewall element (owner = the Sandbox id, same address, host interface sbx<k>) and that
 * interface on the host. Returns the host interface. */
static void assert_sandbox_network(const struct sandbox_runtime *rt, char *ifname)
{
    struct in_addr addr, pool_net;
    assert_int_equal(inet_pton(AF_INET, rt->net_address, &addr), 1);
    assert_int_equal(inet_pton(AF_INET, "10.213.0.0", &pool_net), 1);
    assert_int_equal(ntohl(addr.s_addr) & 0xffff0000u, ntohl(pool_net.s_addr));
    assert_int_equal(ntohl(addr.s_addr) & 3u, 2u); /* the second address of its /30 */
    struct in_addr fw_addr = {0};
    assert_int_equal(fw_elements_of(rt->sandbox_id, &fw_addr, ifname), 1);
    assert_int_equal(fw_addr.s_addr, addr.s_addr);
    assert_int_equal(strncmp(ifname, "sbx", 3), 0);
    assert_int_not_equal(if_nametoindex(ifname), 0);
}

/* Terminate and reap leave no element and no host interface of the Sandbox. */
static void assert_sandbox_network_gone(const char *sandbox_id, const char *ifname)
{
    assert_int_equal(fw_elements_of(sandbox_id, NULL, NULL), 0);
    if (ifname)
        assert_int_equal(if_nametoindex(ifname), 0);
}

static void new_runtime(struct sandbox_runtime *rt, int64_t vcpus, int64_t mem_mib)
{
    memset(rt, 0, sizeof *rt);
    assert_int_equal(id_new("sbx", rt->sandbox_id, sizeof rt->sandbox_id), 0);
    snprintf(rt->shape.driver, sizeof rt->shape.driver, "firecracker");
    snprintf(rt->shape.image, sizeof rt->shape.image, "default");
    rt->shape.vcpu_count = vcpus;
    rt->shape.mem_size_mib = mem_mib;
    rt->channel_fd = -1;
}

static void jailer_id(const char *sandbox_id, char *out)
{
    strcpy(out, sandbox_id);
    for (char *p = out; *p; p++)
        if (*p == '_')
            *p = '-';
}

static void reset_records(void)
{
    write_file(record_path, "", 0666);
    unlink(argv_path);
}

/* Gone, or a zombie waiting for whoever inherited it (the VMM is not the test's child: the jailer
 * that started it has exited, as the real one does with --new-pid-ns). */
static bool process_gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return true;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    char *stat_line = read_all(path, NULL);
    if (!stat_line)
        return true;
    const char *after_comm = strrchr(stat_line, ')');
    bool zombie = after_comm && after_comm[1] == ' ' && after_comm[2] == 'Z';
    free(stat_line);
    return zombie;
}

static ino_t inode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_ino;
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/sbx-fc-XXXXXX");
    if (!mkdtemp(tmp_dir) || chmod(tmp_dir, 0755) != 0)
        return -1;
    char path[256];
    snprintf(record_path, sizeof record_path, "%s/requests.jsonl", tmp_dir);
    snprintf(argv_path, sizeof argv_path, "%s/jailer-argv", tmp_dir);
    /* A guest with a read-only root drive, and one with an initramfs. */
    const char *guests[] = {"guest-drive", "guest-initrd"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp_dir, guests[i]);
        if (mkdir(path, 0755) != 0)
            return -1;
        snprintf(path, sizeof path, "%s/%s/vmlinux", tmp_dir, guests[i]);
        write_file(path, "ELF kernel stand-in\n", 0444);
        snprintf(path, sizeof path, "%s/%s/image.sha256", tmp_dir, guests[i]);
        write_file(path, "sha256:0123abcd\n", 0444);
    }
    snprintf(path, sizeof path, "%s/guest-drive/rootfs.ext4", tmp_dir);
    write_file(path, "ext4 stand-in\n", 0444);
    snprintf(path, sizeof path, "%s/guest-initrd/initramfs.cpio.gz", tmp_dir);
    write_file(path, "initramfs stand-in\n", 0444);
    /* As tools/build-guest-image makes it: the bzImage (qemu's) beside the ELF vmlinux, which
     * Firecracker boots and the driver must pick. */
    snprintf(path, sizeof path, "%s/guest-initrd/vmlinuz", tmp_dir);
    write_file(path, "bzImage stand-in\n", 0444);
    if (mkdir(CGROUP_ROOT, 0755) != 0 && errno != EEXIST)
        return -1;
    setenv("FC_STANDIN_RECORD", record_path, 1);
    setenv("FAKE_JAILER_ARGV", argv_path, 1);
    setenv("FC_STANDIN_BOOT_MS", "300", 1);
    return 0;
}

static int remove_entry(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    return system(cmd);
}

static int group_teardown(void **state)
{
    (void)state;
    rmdir(CGROUP_ROOT "/sbx");
    rmdir(CGROUP_ROOT);
    return remove_entry(tmp_dir) == 0 ? 0 : -1;
}

/* ---- tests ---- */

static const char *const drive_sequence[] = {
    "PUT /boot-source {\"boot_args\":\"console=ttyS0 reboot=k panic=1 pci=off i8042.noaux "
    "i8042.nomux i8042.dumbkbd quiet root=/dev/vda ro "
    "sbx.channel=vsock:1024 sbx.net=%NET%\",\"kernel_image_path\":\"/vmlinux\"}",
    "PUT /drives/rootfs {\"drive_id\":\"rootfs\",\"is_read_only\":true,\"is_root_device\":true,"
    "\"path_on_host\":\"/rootfs.ext4\"}",
    "PUT /machine-config {\"mem_size_mib\":256,\"vcpu_count\":2}",
    "PUT /network-interfaces/eth0 {\"guest_mac\":\"%MAC%\",\"host_dev_name\":\"tap0\","
    "\"iface_id\":\"eth0\"}",
    "PUT /vsock {\"guest_cid\":3,\"uds_path\":\"/run/vsock.sock\"}",
    "PUT /actions {\"action_type\":\"InstanceStart\"}",
};

/* The guest MAC is derived from the id; take it from the record, check its form. */
static void expected_with_mac(json_t *all, const char *const *in, char out[][2048], size_t n,
                              const char *guest_net)
{
    const char *mac = NULL;
    size_t i;
    json_t *req;
    json_array_foreach(all, i, req)
    {
        if (strcmp(json_string_value(json_object_get(req, "path")), "/network-interfaces/eth0") ==
            0)
            mac = json_string_value(json_object_get(json_object_get(req, "body"), "guest_mac"));
    }
    assert_non_null(mac);
    unsigned b[6];
    assert_int_equal(
        sscanf(mac, "%2x:%2x:%2x:%2x:%2x:%2x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]), 6);
    assert_int_equal(b[0] & 3, 2); /* locally administered, unicast */
    /* The guest's resolvers follow its link on the kernel line: dns_resolvers as the worker
     * read them at start ("sbx.dns=" when there are none; docs/network.md). */
    char dns[160];
    net_egress_kernel_arg(dns, sizeof dns);
    assert_true(strncmp(dns, "sbx.dns=", 8) == 0);
    for (size_t k = 0; k < n; k++) {
        const char *at = strstr(in[k], "%MAC%");
        const char *net_at = strstr(in[k], "%NET%");
        if (at)
            snprintf(out[k], 2048, "%.*s%s%s", (int)(at - in[k]), in[k], mac, at + 5);
        else if (net_at)
            snprintf(out[k], 2048, "%.*s%s %s%s", (int)(net_at - in[k]), in[k], guest_net, dns,
                     net_at + 5);
        else
            snprintf(out[k], 2048, "%s", in[k]);
    }
}

static void assert_jailer_argv(const struct sbx_config *cfg, const char *jid)
{
    size_t len;
    char *raw = read_all(argv_path, &len);
    assert_non_null(raw);
    char netns[128], uid[16], gid[16];
    snprintf(netns, sizeof netns, "/var/run/netns/sbx-fc-%s", jid);
    snprintf(uid, sizeof uid, "%d", SANDBOX_UID);
    snprintf(gid, sizeof gid, "%d", SANDBOX_GID);
    const char *expected[] = {
        cfg->jailer_bin,
        "--id",
        jid,
        "--exec-file",
        cfg->firecracker_bin,
        "--uid",
        uid,
        "--gid",
        gid,
        "--cgroup-version",
        "2",
        "--parent-cgroup",
        CGROUP_PARENT,
        "--chroot-base-dir",
        cfg->chroot_base,
        "--netns",
        netns,
        "--new-pid-ns",
        "--",
        "--api-sock",
        "/run/firecracker.socket",
    };
    size_t n = sizeof expected / sizeof *expected, k = 0;
    for (size_t off = 0; off < len; off += strlen(raw + off) + 1, k++) {
        assert_true(k < n);
        assert_string_equal(raw + off, expected[k]);
    }
    assert_int_equal(k, n);
    free(raw);
}

static void assert_agent_answers(int fd)
{
    channel_write(fd, "{\"type\":\"start\",\"argv\":[\"/usr/bin/sbx-echo-agent\"],"
                      "\"workspace\":null}\n");
    json_t *started = channel_read(fd);
    assert_string_equal(json_string_value(json_object_get(started, "type")), "started");
    json_decref(started);
    channel_write(fd, "{\"id\":\"msg_1\",\"seq\":1,\"body\":{\"hello\":\"fc\"}}\n");
    json_t *reply = channel_read(fd);
    assert_string_equal(json_string_value(json_object_get(reply, "id")), "msg_1");
    json_t *echo = json_object_get(json_object_get(reply, "reply"), "echo");
    assert_string_equal(json_string_value(json_object_get(echo, "hello")), "fc");
    json_decref(reply);
}

static void test_boot_follows_contract_and_terminate_removes_jail(void **state)
{
    (void)state;
    struct sbx_config cfg;
    struct sandbox_runtime rt;
    char err[1024] = "", jid[64], path[700], want_dir[600];
    fill_config(&cfg, "guest-drive");
    reset_records();
    assert_int_equal(driver_firecracker.init(&cfg, err, sizeof err), 0);
    new_runtime(&rt, 2, 256);
    jailer_id(rt.sandbox_id, jid);
    if (driver_firecracker.boot(&cfg, &rt, err, sizeof err) != 0)
        fail_msg("boot: %s", err);

    /* What the worker records. */
    snprintf(want_dir, sizeof want_dir, "%s/firecracker/%s", cfg.chroot_base, jid);
    assert_string_equal(rt.jail_dir, want_dir);
    assert_string_equal(rt.kernel, "6.1.0-fc-standin");
    assert_string_equal(rt.image_hash, "sha256:0123abcd");
    char ifname[IFNAMSIZ] = "", guest_net[96];
    assert_sandbox_network(&rt, ifname);
    expected_guest_net(rt.net_address, guest_net, sizeof guest_net);
    assert_true(rt.pid > 0);
    assert_true(rt.channel_fd >= 0);
    assert_true(fcntl(rt.channel_fd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(rt.channel_fd, F_GETFD) & FD_CLOEXEC);

    /* The jail as the jailer documents it: artefacts hard-linked, socket, pid file, owner. */
    struct stat st;
    snprintf(path, sizeof path, "%s/root", want_dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_uid, SANDBOX_UID);
    snprintf(path, sizeof path, "%s/root/vmlinux", want_dir);
    char src[600];
    snprintf(src, sizeof src, "%s/guest-drive/vmlinux", tmp_dir);
    assert_int_equal(inode_of(path), inode_of(src));
    snprintf(path, sizeof path, "%s/root/rootfs.ext4", want_dir);
    snprintf(src, sizeof src, "%s/guest-drive/rootfs.ext4", tmp_dir);
    assert_int_equal(inode_of(path), inode_of(src));
    snprintf(path, sizeof path, "%s/root/run/firecracker.socket", want_dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    snprintf(path, sizeof path, "%s/root/firecracker.pid", want_dir);
    char *pid_text = read_all(path, NULL);
    assert_non_null(pid_text);
    assert_int_equal(atoi(pid_text), rt.pid);
    free(pid_text);
    snprintf(path, sizeof path, "/var/run/netns/sbx-fc-%s", jid);
    assert_true(exists(path));
    snprintf(path, sizeof path, "/sys/fs/cgroup/unified/" CGROUP_PARENT "/%s", jid);
    assert_string_equal(rt.cgroup_path, path);
    /* The VMM is accounted in its cgroup (the jailer put it there). */
    char procs_path[800];
    snprintf(procs_path, sizeof procs_path, "%s/cgroup.procs", path);
    char *procs = read_all(procs_path, NULL);
    assert_non_null(procs);
    char pid_line[32];
    snprintf(pid_line, sizeof pid_line, "%d\n", (int)rt.pid);
    assert_true(strncmp(procs, pid_line, strlen(pid_line)) == 0 || strstr(procs, pid_line));
    free(procs);

    assert_jailer_argv(&cfg, jid);
    json_t *all = recorded_requests();
    char expected[6][2048];
    const char *expected_ptrs[6];
    expected_with_mac(all, drive_sequence, expected, 6, guest_net);
    for (int i = 0; i < 6; i++)
        expected_ptrs[i] = expected[i];
    assert_requests(all, expected_ptrs, 6);
    json_decref(all);

    /* No Workspace: nothing to do. A Workspace: refused clearly (Firecracker shares no host
     * directories), never silently ignored. */
    assert_int_equal(driver_firecracker.attach_workspace(&cfg, &rt, NULL, err, sizeof err), 0);
    assert_int_equal(driver_firecracker.attach_workspace(&cfg, &rt, tmp_dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot attach the Workspace"));

    assert_agent_answers(rt.channel_fd);

    /* Termination: graceful stop through the API, then nothing left. */
    pid_t vmm = rt.pid;
    struct store_usage usage = {0, 0};
    if (driver_firecracker.terminate(&cfg, &rt, &usage, err, sizeof err) != 0)
        fail_msg("terminate: %s", err);
    assert_int_equal(rt.channel_fd, -1);
    assert_null(rt.driver_state);
    assert_true(usage.cpu_usec > 0);
    /* Where the host can measure memory (v2 memory controller or v1 memory hierarchy), the
     * VMM's peak is known; the v1 twin cgroup is removed too. */
    if (access("/sys/fs/cgroup/memory/memory.max_usage_in_bytes", F_OK) == 0) {
        assert_true(usage.mem_peak_bytes > 0);
        snprintf(path, sizeof path, "/sys/fs/cgroup/memory/sbx/%s", jid);
        assert_false(exists(path));
    }
    assert_false(exists(want_dir));
    assert_false(exists(rt.cgroup_path));
    snprintf(path, sizeof path, "/var/run/netns/sbx-fc-%s", jid);
    assert_false(exists(path));
    assert_sandbox_network_gone(rt.sandbox_id, ifname);
    assert_true(process_gone(vmm));
    all = recorded_requests();
    json_t *last = json_array_get(all, json_array_size(all) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "path")), "/actions");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(last, "body"), "action_type")),
        "SendCtrlAltDel");
    assert_int_equal(json_integer_value(json_object_get(last, "status")), 204);
    json_decref(all);
    /* Idempotent. */
    assert_int_equal(driver_firecracker.terminate(&cfg, &rt, &usage, err, sizeof err), 0);
}

static void test_initramfs_guest_boots_without_drive(void **state)
{
    (void)state;
    struct sbx_config cfg;
    struct sandbox_runtime rt;
    char err[1024] = "";
    fill_config(&cfg, "guest-initrd");
    reset_records();
    new_runtime(&rt, 1, 128);
    if (driver_firecracker.boot(&cfg, &rt, err, sizeof err) != 0)
        fail_msg("boot: %s", err);
    static const char *const sequence[] = {
        "PUT /boot-source {\"boot_args\":\"console=ttyS0 reboot=k panic=1 pci=off i8042.noaux "
        "i8042.nomux i8042.dumbkbd quiet rdinit=/init sbx.channel=vsock:1024 sbx.net=%NET%\","
        "\"initrd_path\":\"/initramfs.cpio.gz\",\"kernel_image_path\":\"/vmlinux\"}",
        "PUT /machine-config {\"mem_size_mib\":128,\"vcpu_count\":1}",
        "PUT /network-interfaces/eth0 {\"guest_mac\":\"%MAC%\",\"host_dev_name\":\"tap0\","
        "\"iface_id\":\"eth0\"}",
        "PUT /vsock {\"guest_cid\":3,\"uds_path\":\"/run/vsock.sock\"}",
        "PUT /actions {\"action_type\":\"InstanceStart\"}",
    };
    char ifname[IFNAMSIZ] = "", guest_net[96];
    assert_sandbox_network(&rt, ifname);
    expected_guest_net(rt.net_address, guest_net, sizeof guest_net);
    json_t *all = recorded_requests();
    char expected[5][2048];
    const char *expected_ptrs[5];
    expected_with_mac(all, sequence, expected, 5, guest_net);
    for (int i = 0; i < 5; i++)
        expected_ptrs[i] = expected[i];
    assert_requests(all, expected_ptrs, 5);
    json_decref(all);
    char jail[600], path[700];
    snprintf(jail, sizeof jail, "%s", rt.jail_dir);
    snprintf(path, sizeof path, "%s/root/vmlinuz", jail);
    assert_false(exists(path)); /* only the kernel it boots is in the jail */
    assert_int_equal(driver_firecracker.terminate(&cfg, &rt, NULL, err, sizeof err), 0);
    assert_false(exists(jail));
    assert_sandbox_network_gone(rt.sandbox_id, ifname);
}

/* A Sandbox of an App's image: the digest's rootfs.erofs is built once in its cache
 * directory, hard-linked read-only into the jail and attached as a second, read-only drive; the
 * guest init learns its device from sbx.image; the Sandbox records the digest. The stand-in
 * refuses a writable drive or a drive file the VMM could write (fc-standin.js sbxDriveCheck). */
static void test_image_is_a_read_only_drive(void **state)
{
    (void)state;
    static const char digest[] =
        "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    char dir[512], path[700], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/images/sha256/%s", tmp_dir, digest + 7);
    snprintf(path, sizeof path, "%s/rootfs/etc", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/rootfs/etc/os-release", dir);
    write_file(path, "ID=fc-image-test\n", 0644);
    snprintf(path, sizeof path, "%s/ready", dir);
    write_file(path, "", 0644);
    /* What a builder that died halfway left behind; the next build removes it. */
    char stale[700];
    snprintf(stale, sizeof stale, "%s/.rootfs.erofs.99999.tmp", dir);
    write_file(stale, "half an image", 0600);

    struct sbx_config cfg;
    struct sandbox_runtime rt;
    fill_config(&cfg, "guest-initrd");
    reset_records();
    new_runtime(&rt, 1, 128);
    snprintf(rt.shape.image, sizeof rt.shape.image, "%s", digest);
    if (driver_firecracker.boot(&cfg, &rt, err, sizeof err) != 0)
        fail_msg("boot: %s", err);
    assert_string_equal(rt.image_hash, digest);

    /* Built once, in the cache, read-only; the jail holds the same inode. */
    char erofs[600];
    snprintf(erofs, sizeof erofs, "%s/rootfs.erofs", dir);
    struct stat st;
    assert_int_equal(stat(erofs, &st), 0);
    assert_int_equal(st.st_uid, 0);
    assert_int_equal(st.st_mode & 0222, 0);
    snprintf(path, sizeof path, "%s/root/image.erofs", rt.jail_dir);
    assert_int_equal(inode_of(path), inode_of(erofs));
    assert_false(exists(stale));

    char ifname[IFNAMSIZ] = "", guest_net[96];
    assert_sandbox_network(&rt, ifname);
    expected_guest_net(rt.net_address, guest_net, sizeof guest_net);
    static const char *const sequence[] = {
        "PUT /boot-source {\"boot_args\":\"console=ttyS0 reboot=k panic=1 pci=off i8042.noaux "
        "i8042.nomux i8042.dumbkbd quiet rdinit=/init sbx.channel=vsock:1024 sbx.net=%NET% "
        "sbx.image=/dev/vda\",\"initrd_path\":\"/initramfs.cpio.gz\",\"kernel_image_path\":"
        "\"/vmlinux\"}",
        "PUT /drives/image {\"drive_id\":\"image\",\"is_read_only\":true,\"is_root_device\":false,"
        "\"path_on_host\":\"/image.erofs\"}",
        "PUT /machine-config {\"mem_size_mib\":128,\"vcpu_count\":1}",
        "PUT /network-interfaces/eth0 {\"guest_mac\":\"%MAC%\",\"host_dev_name\":\"tap0\","
        "\"iface_id\":\"eth0\"}",
        "PUT /vsock {\"guest_cid\":3,\"uds_path\":\"/run/vsock.sock\"}",
        "PUT /actions {\"action_type\":\"InstanceStart\"}",
    };
    json_t *all = recorded_requests();
    char expected[6][2048];
    const char *expected_ptrs[6];
    expected_with_mac(all, sequence, expected, 6, guest_net);
    for (int i = 0; i < 6; i++)
        expected_ptrs[i] = expected[i];
    assert_requests(all, expected_ptrs, 6);
    json_decref(all);

    /* A second Sandbox of the digest reuses the image; terminate leaves the cache alone. */
    struct sandbox_runtime rt2;
    new_runtime(&rt2, 1, 128);
    snprintf(rt2.shape.image, sizeof rt2.shape.image, "%s", digest);
    if (driver_firecracker.boot(&cfg, &rt2, err, sizeof err) != 0)
        fail_msg("second boot: %s", err);
    struct stat again;
    assert_int_equal(stat(erofs, &again), 0);
    assert_int_equal(again.st_ino, st.st_ino);
    assert_int_equal(driver_firecracker.terminate(&cfg, &rt2, NULL, err, sizeof err), 0);
    assert_int_equal(driver_firecracker.terminate(&cfg, &rt, NULL, err, sizeof err), 0);
    assert_false(exists(rt.jail_dir));
    assert_int_equal(stat(erofs, &again), 0);
    assert_int_equal(again.st_ino, st.st_ino);
    assert_int_equal(again.st_nlink, 1);
    assert_sandbox_network_gone(rt.sandbox_id, ifname);
}

/* A shape the spec refuses (vcpu_count above 32): the boot fails with Firecracker's
 * fault_message and leaves no VMM, jail, network namespace or cgroup behind. */
static void test_refused_request_fails_boot_and_cleans_up(void **state)
{
    (void)state;
    struct sbx_config cfg;
    struct sandbox_runtime rt;
    char err[1024] = "", jid[64], path[600];
    fill_config(&cfg, "guest-drive");
    reset_records();
    new_runtime(&rt, 64, 256);
    jailer_id(rt.sandbox_id, jid);
    assert_int_equal(driver_firecracker.boot(&cfg, &rt, err, sizeof err), -1);
    assert_non_null(strstr(err, "PUT /machine-config: HTTP 400"));
    assert_non_null(strstr(err, "body.vcpu_count: 64 is above the maximum 32"));
    assert_int_equal(rt.channel_fd, -1);
    assert_null(rt.driver_state);
    snprintf(path, sizeof path, "%s/firecracker/%s", cfg.chroot_base, jid);
    assert_false(exists(path));
    snprintf(path, sizeof path, "/var/run/netns/sbx-fc-%s", jid);
    assert_false(exists(path));
    snprintf(path, sizeof path, "/sys/fs/cgroup/unified/" CGROUP_PARENT "/%s", jid);
    assert_false(exists(path));
    assert_sandbox_network_gone(rt.sandbox_id, NULL);
    json_t *all = recorded_requests();
    size_t i;
    json_t *req;
    bool refused = false;
    json_array_foreach(all, i, req)
    {
        if (strcmp(json_string_value(json_object_get(req, "path")), "/machine-config") == 0) {
            assert_int_equal(json_integer_value(json_object_get(req, "status")), 400);
            assert_string_equal(json_string_value(json_object_get(req, "spec")), "rejected");
            refused = true;
        }
    }
    assert_true(refused);
    json_decref(all);
}

/* After a worker crash only the store's record remains: reap() removes VMM and jail. */
static void test_reap_removes_what_a_lost_runtime_left(void **state)
{
    (void)state;
    struct sbx_config cfg;
    struct sandbox_runtime rt;
    char err[1024] = "";
    fill_config(&cfg, "guest-drive");
    reset_records();
    new_runtime(&rt, 1, 128);
    if (driver_firecracker.boot(&cfg, &rt, err, sizeof err) != 0)
        fail_msg("boot: %s", err);
    struct store_sandbox sb;
    memset(&sb, 0, sizeof sb);
    snprintf(sb.id, sizeof sb.id, "%s", rt.sandbox_id);
    sb.pid = rt.pid;
    snprintf(sb.jail_dir, sizeof sb.jail_dir, "%s", rt.jail_dir);
    snprintf(sb.cgroup_path, sizeof sb.cgroup_path, "%s", rt.cgroup_path);
    snprintf(sb.net_address, sizeof sb.net_address, "%s", rt.net_address);
    char ifname[IFNAMSIZ] = "";
    assert_sandbox_network(&rt, ifname);
    /* The runtime is lost with the worker. */
    close(rt.channel_fd);
    free(rt.driver_state);
    assert_int_equal(driver_firecracker.reap(&cfg, &sb, err, sizeof err), 0);
    assert_false(exists(sb.jail_dir));
    assert_false(exists(sb.cgroup_path));
    assert_sandbox_network_gone(sb.id, ifname);
    assert_true(process_gone((pid_t)sb.pid));
}

/* The stand-in is not a rubber stamp: requests the spec refuses come back as 400 with a
 * fault_message, which fc_api_put reports. */
static void test_standin_rejects_what_the_spec_rejects(void **state)
{
    (void)state;
    char sock[128], err[1024];
    snprintf(sock, sizeof sock, "%s/direct.socket", tmp_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execlp("node", "node", FC_TEST_DIR "/fc-standin.js", "--api-sock", sock, (char *)NULL);
        _exit(127);
    }
    struct fc_response resp;
    int up = -1;
    for (int i = 0; i < 200 && up != 0; i++) {
        up = fc_api_request(sock, "GET", "/", NULL, 500, &resp, err, sizeof err);
        if (up == 0)
            fc_response_clear(&resp);
        else
            usleep(25000);
    }
    assert_int_equal(up, 0);
    struct {
        const char *path, *body, *fault;
    } bad[] = {
        {"/machine-config", "{\"vcpu_count\":\"2\",\"mem_size_mib\":256}",
         "body.vcpu_count: expected an integer"},
        {"/machine-config", "{\"vcpu_count\":2,\"mem_size_mib\":256,\"vcpus\":2}",
         "unknown field \"vcpus\""},
        {"/machine-config", "{\"vcpu_count\":2}", "missing required field \"mem_size_mib\""},
        {"/actions", "{\"action_type\":\"Boot\"}", "is not one of"},
        {"/vsock", "{\"guest_cid\":2,\"uds_path\":\"/v.sock\"}", "below the minimum 3"},
        {"/drives/rootfs", "{\"drive_id\":\"other\",\"is_root_device\":true}",
         "does not match the id from the body"},
        {"/no-such-thing", "{}", "Invalid request method and/or path"},
        {"/machine-config", "not json", "deserializing the json body"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        assert_int_equal(fc_api_put(sock, bad[i].path, bad[i].body, 2000, err, sizeof err), -1);
        if (!strstr(err, "HTTP 400") || !strstr(err, bad[i].fault))
            fail_msg("PUT %s %s: expected a 400 with \"%s\", got: %s", bad[i].path, bad[i].body,
                     bad[i].fault, err);
    }
    assert_int_equal(fc_api_put(sock, "/machine-config", "{\"vcpu_count\":2,\"mem_size_mib\":256}",
                                2000, err, sizeof err),
                     0);
    /* A transport failure is an error too, not a status. */
    assert_int_equal(fc_api_put("/nonexistent/x.sock", "/", "{}", 200, err, sizeof err), -1);
    assert_non_null(strstr(err, "connect"));
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

struct boot_job {
    struct sbx_config *cfg;
    struct sandbox_runtime rt;
    char err[1024];
    int rc;
};

static void *boot_thread(void *arg)
{
    struct boot_job *job = arg;
    job->rc = driver_firecracker.boot(job->cfg, &job->rt, job->err, sizeof job->err);
    return NULL;
}

/* The worker boots its warm pool from several helper threads at once: Sandboxes booted
 * concurrently get their own jail, VMM and channel. */
static void test_concurrent_boots_are_independent(void **state)
{
    (void)state;
    struct sbx_config cfg;
    fill_config(&cfg, "guest-drive");
    reset_records();
    struct boot_job jobs[2];
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].cfg = &cfg;
        new_runtime(&jobs[i].rt, 1, 128);
        assert_int_equal(pthread_create(&threads[i], NULL, boot_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
        if (jobs[i].rc != 0)
            fail_msg("boot %d: %s", i, jobs[i].err);
    }
    assert_int_not_equal(jobs[0].rt.pid, jobs[1].rt.pid);
    assert_string_not_equal(jobs[0].rt.jail_dir, jobs[1].rt.jail_dir);
    /* Each its own slot: own address, own firewall element. */
    char ifnames[2][IFNAMSIZ];
    for (int i = 0; i < 2; i++)
        assert_sandbox_network(&jobs[i].rt, ifnames[i]);
    assert_string_not_equal(jobs[0].rt.net_address, jobs[1].rt.net_address);
    assert_string_not_equal(ifnames[0], ifnames[1]);
    for (int i = 0; i < 2; i++)
        assert_agent_answers(jobs[i].rt.channel_fd);
    for (int i = 0; i < 2; i++) {
        char jail[600], err[1024];
        snprintf(jail, sizeof jail, "%s", jobs[i].rt.jail_dir);
        assert_int_equal(driver_firecracker.terminate(&cfg, &jobs[i].rt, NULL, err, sizeof err), 0);
        assert_false(exists(jail));
        assert_sandbox_network_gone(jobs[i].rt.sandbox_id, ifnames[i]);
    }
}

static void test_driver_find_knows_firecracker(void **state)
{
    (void)state;
    assert_ptr_equal(driver_find("firecracker"), &driver_firecracker);
    assert_string_equal(driver_firecracker.name, "firecracker");
}

/* ---- a real microVM, when the binaries are there ---- */

static int real_vm(void)
{
    const char *fc = getenv("FIRECRACKER_BIN"), *jailer = getenv("JAILER_BIN");
    if (!fc || !jailer || access(fc, X_OK) != 0 || access(jailer, X_OK) != 0) {
        printf("SKIPPED: it.firecracker.real_vm needs FIRECRACKER_BIN and JAILER_BIN to name "
               "real Firecracker and jailer binaries (and /dev/kvm); none are installed here\n");
        return 77;
    }
    struct sbx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/sbx-fc-real-XXXXXX");
    if (!mkdtemp(tmp_dir))
        return 1;
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", tmp_dir);
    snprintf(cfg.chroot_base, sizeof cfg.chroot_base, "%s/jail", tmp_dir);
    snprintf(cfg.net_pool, sizeof cfg.net_pool, "%s", NET_POOL);
    cfg.sandbox_pids_max = SANDBOX_PIDS_MAX;
    const char *guest = getenv("SBX_GUEST_DIR");
    snprintf(cfg.guest_dir, sizeof cfg.guest_dir, "%s", guest ? guest : SBX_BUILD_DIR "/guest");
    snprintf(cfg.firecracker_bin, sizeof cfg.firecracker_bin, "%s", fc);
    snprintf(cfg.jailer_bin, sizeof cfg.jailer_bin, "%s", jailer);
    cfg.sandbox_uid = SANDBOX_UID;
    cfg.sandbox_gid = SANDBOX_GID;
    char err[1024];
    struct sandbox_runtime rt;
    memset(&rt, 0, sizeof rt);
    id_new("sbx", rt.sandbox_id, sizeof rt.sandbox_id);
    snprintf(rt.shape.driver, sizeof rt.shape.driver, "firecracker");
    rt.shape.vcpu_count = 1;
    rt.shape.mem_size_mib = 256;
    int rc = 1;
    if (driver_firecracker.init(&cfg, err, sizeof err) != 0 ||
        driver_firecracker.boot(&cfg, &rt, err, sizeof err) != 0) {
        fprintf(stderr, "real VM: %s\n", err);
        remove_entry(tmp_dir);
        return 1;
    }
    struct utsname host;
    uname(&host);
    printf("guest kernel %s, host kernel %s\n", rt.kernel, host.release);
    if (rt.kernel[0] && strcmp(rt.kernel, host.release) != 0)
        rc = 0;
    char jail[600];
    snprintf(jail, sizeof jail, "%s", rt.jail_dir);
    if (driver_firecracker.terminate(&cfg, &rt, NULL, err, sizeof err) != 0 || exists(jail)) {
        fprintf(stderr, "real VM terminate: %s\n", err);
        rc = 1;
    }
    remove_entry(tmp_dir);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--real") == 0)
        return real_vm();
    if (geteuid() != 0) {
        printf("SKIPPED: the firecracker driver test needs root (namespaces, cgroups, chown)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_driver_find_knows_firecracker),
        cmocka_unit_test(test_standin_rejects_what_the_spec_rejects),
        cmocka_unit_test(test_boot_follows_contract_and_terminate_removes_jail),
        cmocka_unit_test(test_initramfs_guest_boots_without_drive),
        cmocka_unit_test(test_image_is_a_read_only_drive),
        cmocka_unit_test(test_refused_request_fails_boot_and_cleans_up),
        cmocka_unit_test(test_reap_removes_what_a_lost_runtime_left),
        cmocka_unit_test(test_concurrent_boots_are_independent),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

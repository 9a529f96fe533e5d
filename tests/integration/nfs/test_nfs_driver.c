/*
 * test_nfs_driver.c: it.nfs.qemu_workspace: a Workspace over sbx's own NFS export, through the
 * qemu driver with two real TCG guests (A and B) and the real firewall, as the worker drives them:
 *   - before any attach, neither Sandbox's TCP 2049 element exists; attach adds it for A alone;
 *   - A (echo agent) writes /workspace/note.txt; the host's Workspace directory has it, owned by
 *     sandbox_uid (the export squashes to it);
 *   - B, with TCP 2049 opened in the firewall but no export of its own, cannot mount A's export:
 *     the start fails with a clear mount error;
 *   - B attached to the same Workspace reads A's file, writes one that A reads (shared);
 *   - terminating A removes its export and its 2049 element, the data stays, B still works;
 *   - terminating B leaves no export; the data is still on the host.
 *
 * Usage: test_nfs_driver GUEST_DIR      (needs root, nfs-ganesha, the guest-image fixture)
 */
#include "test_channel.h"
#include "check.h"
#include "clock.h"
#include "config.h"
#include "drivers/driver.h"
#include "host/firewall.h"
#include "log.h"
#include "host/links.h"
#include "host/nfs_export.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct vm {
    const char *name;
    struct sandbox_runtime rt;
    bool booted;
    struct test_channel ch;
    int seq;
};

/* Sends {"type":"start"} for the echo agent with the NFS source; "" when started, else the
 * agent's error (static). */
static const char *start_echo(struct vm *vm, const char *nfs_source)
{
    static char why[1024];
    json_t *start =
        json_pack("{s:s,s:[s],s:{s:s,s:s}}", "type", "start", "argv", "/usr/bin/sbx-echo-agent",
                  "workspace", "path", "/workspace", "nfs", nfs_source);
    char *line = json_dumps(start, JSON_COMPACT);
    json_decref(start);
    int rc = test_channel_send(&vm->ch, line);
    free(line);
    if (rc != 0)
        return "cannot send start";
    json_t *ans = test_channel_read_until(&vm->ch, "type", 60000);
    const char *type = json_string_value(json_object_get(ans, "type"));
    const char *error = json_string_value(json_object_get(ans, "error"));
    snprintf(why, sizeof why, "%s",
             type && strcmp(type, "started") == 0 ? ""
             : error                              ? error
                                                  : "no answer to start");
    json_decref(ans);
    return why;
}

/* One echo-agent request; returns the reply's member `op` (caller decrefs the returned root via
 * *root). */
static json_t *request(struct vm *vm, json_t *body, const char *op, json_t **root)
{
    char id[32];
    snprintf(id, sizeof id, "msg_%d", ++vm->seq);
    json_t *msg = json_pack("{s:s,s:i,s:o}", "id", id, "seq", vm->seq, "body", body);
    char *line = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    int rc = test_channel_send(&vm->ch, line);
    free(line);
    *root = rc == 0 ? test_channel_read_until(&vm->ch, "id", 60000) : NULL;
    return json_object_get(json_object_get(*root, "reply"), op);
}

static bool write_file(struct vm *vm, const char *path, const char *data)
{
    json_t *root;
    json_t *r = request(vm, json_pack("{s:{s:s,s:s}}", "writeFile", "path", path, "data", data),
                        "writeFile", &root);
    bool ok = json_is_true(json_object_get(r, "ok"));
    json_decref(root);
    return ok;
}

/* The file's content as the guest reads it (static), or NULL. */
static const char *read_file(struct vm *vm, const char *path)
{
    static char out[4096];
    json_t *root;
    json_t *r = request(vm, json_pack("{s:{s:s}}", "readFile", "path", path), "readFile", &root);
    const char *data = json_string_value(json_object_get(r, "data"));
    snprintf(out, sizeof out, "%s", data ? data : "");
    json_decref(root);
    return data ? out : NULL;
}

/* Whether the firewall has the Sandbox in its `nfs` set (TCP 2049 allowed). */
static bool nfs_element(const char *sandbox_id)
{
    struct fw_element *v = NULL;
    size_t n = 0;
    char err[256];
    bool found = false;
    if (fw_elements(net_firewall(), &v, &n, err, sizeof err) != 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].owner, sandbox_id) == 0 && v[i].nfs)
            found = true;
    free(v);
    return found;
}

static bool host_file_is(const char *dir, const char *name, const char *want, uid_t owner)
{
    char path[PATH_MAX + 64], got[256] = "";
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    size_t n = fread(got, 1, sizeof got - 1, f);
    got[n] = '\0';
    fclose(f);
    return stat(path, &st) == 0 && st.st_uid == owner && strcmp(got, want) == 0;
}

static int terminate(const struct sbx_config *cfg, struct vm *vm)
{
    char err[512];
    struct store_usage usage;
    test_channel_free(&vm->ch);
    if (!vm->booted)
        return 0;
    vm->booted = false;
    int rc = driver_qemu.terminate(cfg, &vm->rt, &usage, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "terminate %s: %s\n", vm->name, err);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s GUEST_DIR\n", argv[0]);
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: needs root (firewall, taps, NFS server)\n");
        return 77;
    }
    log_init("test", "info");
    signal(SIGPIPE, SIG_IGN); /* as the worker runs: a VM gone mid-write is an error, not death */
    char tmpl[] = "/tmp/sbx-it-nfs-XXXXXX";
    char *data = mkdtemp(tmpl);
    if (data == NULL)
        return 2;
    chmod(data, 0755);
    struct sbx_config cfg;
    char err[1024];
    char *cargv[] = {argv[0], NULL};
    setenv("SBX_DATA_DIR", data, 1);
    if (config_load(&cfg, 1, cargv, err, sizeof err) != 0) {
        fprintf(stderr, "config: %s\n", err);
        return 2;
    }
    snprintf(cfg.guest_dir, sizeof cfg.guest_dir, "%s", argv[1]);
    snprintf(cfg.qemu_accel, sizeof cfg.qemu_accel, "tcg");
    cfg.cgroup_root[0] = '\0';

    /* The Workspace as the gateway makes it: owned by the Sandbox uid:gid, mode 0770. */
    char ws[PATH_MAX];
    snprintf(ws, sizeof ws, "%s/workspaces", data);
    mkdir(ws, 0755);
    snprintf(ws, sizeof ws, "%s/workspaces/app_nfs", data);
    mkdir(ws, 0755);
    snprintf(ws, sizeof ws, "%s/workspaces/app_nfs/wsp_1", data);
    mkdir(ws, 0770);
    if (chown(ws, (uid_t)cfg.sandbox_uid, (gid_t)cfg.sandbox_gid) != 0)
        return 2;

    static struct vm a = {.name = "A"}, b = {.name = "B"};
    struct vm *vms[] = {&a, &b};
    const char *why;
    char a_source[sizeof a.rt.workspace_nfs];
    REQUIRE(driver_qemu.init(&cfg, err, sizeof err) == 0, "init: %s", err);
    REQUIRE(net_firewall() != NULL, "the worker's network is not up");
    for (int i = 0; i < 2; i++) {
        struct vm *vm = vms[i];
        vm->rt.channel_fd = -1;
        snprintf(vm->rt.sandbox_id, sizeof vm->rt.sandbox_id, "sbx_itnfs%s%d", vm->name,
                 (int)getpid());
        snprintf(vm->rt.shape.driver, sizeof vm->rt.shape.driver, "qemu");
        vm->rt.shape.vcpu_count = 1;
        vm->rt.shape.mem_size_mib = 256;
        int64_t t0 = clock_mono_ms();
        REQUIRE(driver_qemu.boot(&cfg, &vm->rt, err, sizeof err) == 0, "boot %s: %s", vm->name,
                err);
        vm->booted = true;
        REQUIRE(test_channel_open(&vm->ch, vm->rt.channel_fd, vm->name, 65536) == 0,
                "out of memory");
        fprintf(stderr, "%s booted in %lld ms at %s\n", vm->name, (long long)(clock_mono_ms() - t0),
                vm->rt.net_address);
        CHECK(!nfs_element(vm->rt.sandbox_id), "%s may reach TCP 2049 with no Workspace", vm->name);
    }

    /* A: attach, mount, write. */
    REQUIRE(driver_qemu.attach_workspace(&cfg, &a.rt, ws, err, sizeof err) == 0, "attach A: %s",
            err);
    fprintf(stderr, "A's Workspace source: %s\n", a.rt.workspace_nfs);
    CHECK(a.rt.workspace_nfs[0] != '\0', "attach gave no NFS source");
    CHECK(nfs_element(a.rt.sandbox_id), "attached A may not reach TCP 2049");
    CHECK(!nfs_element(b.rt.sandbox_id), "B got A's TCP 2049 element");
    CHECK(nfs_export_exists(&cfg, a.rt.sandbox_id), "no export for A");
    snprintf(a_source, sizeof a_source, "%s", a.rt.workspace_nfs);
    why = start_echo(&a, a.rt.workspace_nfs);
    REQUIRE(why[0] == '\0', "A did not start with its Workspace mounted: %s", why);
    CHECK(write_file(&a, "/workspace/note.txt", "from A"), "A cannot write in /workspace");
    CHECK(host_file_is(ws, "note.txt", "from A", (uid_t)cfg.sandbox_uid),
          "the host's Workspace does not hold A's file owned by uid %lld",
          (long long)cfg.sandbox_uid);

    /* B: the firewall lets it reach TCP 2049, but A's export admits A's address alone. */
    struct net_link b_link;
    REQUIRE(net_link_of_address(net_worker_pool(), b.rt.sandbox_id, b.rt.net_address, &b_link) == 0,
            "B's link");
    REQUIRE(net_sandbox_set_nfs(&b_link, true, err, sizeof err) == 0, "open 2049 for B: %s", err);
    why = start_echo(&b, a_source);
    CHECK(why[0] != '\0' && strstr(why, "mount NFS Workspace") != NULL,
          "B mounted A's export (or failed unclearly): '%s'", why);
    REQUIRE(net_sandbox_set_nfs(&b_link, false, err, sizeof err) == 0, "close 2049: %s", err);

    /* B attached to the same Workspace: sees A's write, and A sees B's. */
    REQUIRE(driver_qemu.attach_workspace(&cfg, &b.rt, ws, err, sizeof err) == 0, "attach B: %s",
            err);
    CHECK(strcmp(a_source, b.rt.workspace_nfs) != 0, "A and B share one export");
    why = start_echo(&b, b.rt.workspace_nfs);
    REQUIRE(why[0] == '\0', "B did not start with its Workspace mounted: %s", why);
    const char *got = read_file(&b, "/workspace/note.txt");
    CHECK(got != NULL && strcmp(got, "from A") == 0, "B reads '%s'", got ? got : "(error)");
    CHECK(write_file(&b, "/workspace/reply.txt", "from B"), "B cannot write in /workspace");
    got = read_file(&a, "/workspace/reply.txt");
    CHECK(got != NULL && strcmp(got, "from B") == 0, "A reads '%s'", got ? got : "(error)");

    /* A goes: its export and 2049 element with it; the data and B stay. */
    char a_id[sizeof a.rt.sandbox_id];
    snprintf(a_id, sizeof a_id, "%s", a.rt.sandbox_id);
    CHECK(terminate(&cfg, &a) == 0, "terminate A");
    CHECK(!nfs_export_exists(&cfg, a_id), "A's export survived its termination");
    CHECK(!nfs_element(a_id), "A's 2049 element survived its termination");
    CHECK(host_file_is(ws, "note.txt", "from A", (uid_t)cfg.sandbox_uid),
          "A's file is gone with A");
    CHECK(write_file(&b, "/workspace/after.txt", "B alone"), "B lost its Workspace with A");
    char b_id[sizeof b.rt.sandbox_id];
    snprintf(b_id, sizeof b_id, "%s", b.rt.sandbox_id);
    CHECK(terminate(&cfg, &b) == 0, "terminate B");
    CHECK(!nfs_export_exists(&cfg, b_id), "B's export survived its termination");
    CHECK(host_file_is(ws, "after.txt", "B alone", (uid_t)cfg.sandbox_uid),
          "B's file is not in the Workspace");

out:
    for (int i = 0; i < 2; i++)
        terminate(&cfg, vms[i]);
    if (nfs_export_stop(&cfg, err, sizeof err) != 0)
        fprintf(stderr, "stop ganesha: %s\n", err);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    int failures = check_failures();
    if (failures == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", data);
    if (failures)
        fprintf(stderr, "it.nfs.qemu_workspace: %d failure(s) (data kept in %s)\n", failures, data);
    else
        fprintf(stderr, "ok\n");
    return failures ? 1 : 0;
}

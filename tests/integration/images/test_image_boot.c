/*
 * test_image_boot.c: it.images.boot_process and it.images.boot_qemu: Sandboxes booted from App
 * images in the per-host cache (worker/images/image_cache.h), through the process driver or the
 * qemu driver (TCG), as the worker drives them. The images come from build-boot-images.sh: a
 * Debian 12 userspace with python3 and a Python agent, and a tiny busybox image.
 *
 * Checks: the Python agent answers with the image's sys.version and /etc/os-release; the start
 * line's env (replacing sbx's defaults), cwd and user apply (a user name resolved in the image's
 * /etc/passwd; in the process driver the Sandbox's uid stands for it); sbx-agent is sbx's, not the
 * image's; the root is writable, and a file written to / in one Sandbox is gone in the next; the
 * cached tree is never changed (every file's metadata, before and after); the Sandbox records
 * the digest as its image hash. Process driver: bad users and working directories are refused
 * with a reason, the root is an overlay mounted nosuid,nodev with /.sbx read-only, and two
 * Sandboxes of different images at once each see their own. qemu: the image is the digest's
 * rootfs.erofs, built once in its cache directory, attached read-only.
 *
 * Usage: test_image_boot IMAGES_ENV process|qemu [GUEST_DIR]
 */
#include "test_channel.h"
#include "check.h"
#include "config.h"
#include "drivers/driver.h"
#include "id.h"
#include "images/image_cache.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SANDBOX_UID 4242
#define SANDBOX_GID 4343
#define NOBODY_UID 65534

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct sbx_config cfg;
static const struct driver *drv;
static bool is_qemu;
static char debian_digest[80], tiny_digest[80];

/* One Sandbox and the unread part of its channel. */
struct sandbox {
    struct sandbox_runtime rt;
    bool booted;
    struct test_channel ch;
};

/* The host uid a process Sandbox runs as: its own from sandbox_uid_range (the default), else
 * sandbox_uid. */
static int64_t own_uid(const struct sandbox *sb)
{
    return sb->rt.uid > 0 ? sb->rt.uid : SANDBOX_UID;
}

static int boot(struct sandbox *sb, const char *digest, char *err, size_t errlen)
{
    memset(&sb->rt, 0, sizeof sb->rt);
    sb->rt.channel_fd = -1;
    sb->booted = false;
    id_new("sbx", sb->rt.sandbox_id, sizeof sb->rt.sandbox_id);
    snprintf(sb->rt.shape.driver, sizeof sb->rt.shape.driver, "%s", drv->name);
    snprintf(sb->rt.shape.image, sizeof sb->rt.shape.image, "%s", digest);
    sb->rt.shape.vcpu_count = 1;
    sb->rt.shape.mem_size_mib = is_qemu ? 256 : 128;
    int64_t t0 = now_ms();
    if (drv->boot(&cfg, &sb->rt, err, errlen) != 0)
        return -1;
    sb->booted = true;
    /* A Python reply with the image's whole os-release and version fits one line of 1 MiB. */
    if (test_channel_open(&sb->ch, sb->rt.channel_fd, sb->rt.sandbox_id, 1 << 20) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    fprintf(stderr, "booted %s (%s) in %lld ms\n", sb->rt.sandbox_id, digest,
            (long long)(now_ms() - t0));
    return 0;
}

static void terminate(struct sandbox *sb)
{
    if (!sb->booted)
        return;
    char err[512];
    struct store_usage usage;
    CHECK(drv->terminate(&cfg, &sb->rt, &usage, err, sizeof err) == 0, "terminate: %s", err);
    CHECK(access(sb->rt.jail_dir, F_OK) != 0 || sb->rt.jail_dir[0] == '\0', "jail %s survived",
          sb->rt.jail_dir);
    sb->booted = false;
    test_channel_free(&sb->ch);
}

/* Sends a start line and returns the agent's answer type ("started" or "error") and reason. */
static bool start(struct sandbox *sb, const char *line, char *why, size_t whylen)
{
    why[0] = '\0';
    if (test_channel_send(&sb->ch, line) != 0)
        return false;
    json_t *ans = test_channel_read_until(&sb->ch, "type", is_qemu ? 60000 : 10000);
    const char *type = json_string_value(json_object_get(ans, "type"));
    const char *error = json_string_value(json_object_get(ans, "error"));
    snprintf(why, whylen, "%s", error ? error : (type ? type : "no answer"));
    bool started = type && strcmp(type, "started") == 0;
    json_decref(ans);
    return started;
}

/* The start line images-import's worker sends for the Debian image, as user. */
static void python_start(char *out, size_t outlen, const char *user)
{
    snprintf(out, outlen,
             "{\"type\":\"start\",\"argv\":[\"python3\",\"/opt/agent/agent.py\"],"
             "\"workspace\":null,\"env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\","
             "\"AGENT_FLAVOUR=debian\"],\"cwd\":\"/opt/agent\",\"user\":\"%s\"}",
             user);
}

/* Sends one message to the Python agent; returns its reply object (caller decrefs the line). */
static json_t *ask(struct sandbox *sb, const char *id, const char *body, json_t **line)
{
    char msg[4096];
    snprintf(msg, sizeof msg, "{\"id\":\"%s\",\"seq\":1,\"body\":%s}", id, body);
    *line = NULL;
    if (test_channel_send(&sb->ch, msg) != 0)
        return NULL;
    *line = test_channel_read_until(&sb->ch, "id", is_qemu ? 90000 : 20000);
    return json_object_get(*line, "reply");
}

/* ---- the cache must never change: a fingerprint of every entry's metadata ---- */

static uint64_t fingerprint;
static size_t fingerprint_entries;

static int fingerprint_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)type;
    (void)ftw;
    uint64_t v[] = {
        (uint64_t)st->st_ino,         (uint64_t)st->st_mode,         (uint64_t)st->st_uid,
        (uint64_t)st->st_size,        (uint64_t)st->st_mtim.tv_sec,  (uint64_t)st->st_mtim.tv_nsec,
        (uint64_t)st->st_ctim.tv_sec, (uint64_t)st->st_ctim.tv_nsec, (uint64_t)st->st_nlink};
    for (const char *p = path; *p; p++)
        fingerprint = (fingerprint ^ (unsigned char)*p) * 1099511628211ull;
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        fingerprint = (fingerprint ^ v[i]) * 1099511628211ull;
    fingerprint_entries++;
    return 0;
}

/* FNV-1a over path, inode, mode, owner, size, mtime and ctime of every entry of the image's
 * rootfs/ (ctime changes with any write, chmod, chown or link count change). */
static uint64_t tree_fingerprint(const char *digest)
{
    char dir[PATH_MAX], err[256], rootfs[PATH_MAX + 16];
    if (image_cache_dir(&cfg, digest, dir, sizeof dir, err, sizeof err) != 0)
        return 0;
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    fingerprint = 1469598103934665603ull;
    fingerprint_entries = 0;
    if (nftw(rootfs, fingerprint_entry, 32, FTW_PHYS) != 0)
        return 0;
    return fingerprint;
}

/* ---- scenarios ---- */

/* Reads the mount line of target in pid's mount namespace ("" when not mounted). */
static void mount_line(pid_t pid, const char *target, char *out, size_t outlen)
{
    char path[64], line[1024];
    out[0] = '\0';
    snprintf(path, sizeof path, "/proc/%d/mountinfo", (int)pid);
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof line, f)) {
        char mnt[512];
        if (sscanf(line, "%*s %*s %*s %*s %511s", mnt) == 1 && strcmp(mnt, target) == 0)
            snprintf(out, outlen, "%s", line); /* the last one is the visible one */
    }
    if (f)
        fclose(f);
}

/* The first Sandbox of the Debian image: the Python agent answers from the image, as user (whose
 * uid and HOME the image's /etc/passwd gives) and writes a file to /. */
static void check_python_sandbox(struct sandbox *sb, const char *user, json_int_t image_uid,
                                 const char *image_home)
{
    char why[512], start_line[1024];
    python_start(start_line, sizeof start_line, user);
    CHECK(strcmp(sb->rt.image_hash, debian_digest) == 0, "image hash %s, want %s",
          sb->rt.image_hash, debian_digest);
    if (!is_qemu) {
        char line[1024];
        mount_line(sb->rt.pid, "/", line, sizeof line);
        CHECK(strstr(line, " - overlay ") && strstr(line, "nosuid") && strstr(line, "nodev"),
              "the root is not a nosuid,nodev overlay: %s", line);
        mount_line(sb->rt.pid, "/.sbx/sbx-agent", line, sizeof line);
        CHECK(strstr(line, " ro,") != NULL, "/.sbx/sbx-agent is not read-only: %s", line);
        /* Refused with a reason, and the agent still takes a good start afterwards. */
        CHECK(!start(sb,
                     "{\"type\":\"start\",\"argv\":[\"python3\",\"-V\"],\"user\":\"no-such-user\"}",
                     why, sizeof why) &&
                  strstr(why, "not in the image's /etc/passwd"),
              "an unknown user: %s", why);
        CHECK(!start(sb, "{\"type\":\"start\",\"argv\":[\"python3\",\"-V\"],\"cwd\":\"/nowhere\"}",
                     why, sizeof why) &&
                  strstr(why, "working directory /nowhere"),
              "a missing cwd: %s", why);
    }
    if (!CHECK(start(sb, start_line, why, sizeof why), "start the Python agent: %s", why))
        return;
    json_t *line;
    json_t *reply = ask(sb, "msg_1",
                        "{\"write\":[\"/written-by-sandbox\",\"/etc/written-by-sandbox\"],"
                        "\"data\":\"x\",\"mounts\":true,\"stat\":[\"/etc/passwd\"],"
                        "\"write_device\":\"/dev/vda\",\"exists\":[\"/.sbx/sbx-agent\","
                        "\"/.sbx/usr/bin/sbx-agent\",\"/usr/bin/sbx-agent\"]}",
                        &line);
    if (!CHECK(reply != NULL, "no reply from the Python agent")) {
        json_decref(line);
        return;
    }
    const char *version = json_string_value(json_object_get(reply, "version"));
    const char *os_release = json_string_value(json_object_get(reply, "os_release"));
    const char *cwd = json_string_value(json_object_get(reply, "cwd"));
    json_t *env = json_object_get(reply, "env");
    const char *flavour = json_string_value(json_object_get(env, "AGENT_FLAVOUR"));
    const char *home = json_string_value(json_object_get(env, "HOME"));
    json_int_t uid = json_integer_value(json_object_get(reply, "uid"));
    CHECK(version && strncmp(version, "3.11.", 5) == 0, "sys.version %s (Debian 12 has 3.11)",
          version ? version : "(none)");
    CHECK(os_release && strstr(os_release, "VERSION_ID=\"12\"") && strstr(os_release, "bookworm"),
          "os-release: %s", os_release ? os_release : "(none)");
    CHECK(cwd && strcmp(cwd, "/opt/agent") == 0, "cwd %s", cwd ? cwd : "(none)");
    CHECK(flavour && strcmp(flavour, "debian") == 0, "the image's env did not apply");
    CHECK(json_object_get(env, "LANG") == NULL && json_object_get(env, "TMPDIR") == NULL,
          "sbx's default environment was not replaced");
    CHECK(home && strcmp(home, image_home) == 0, "HOME %s, want %s's from the image",
          home ? home : "(none)", user);
    /* In a guest the agent becomes the image's user; in the process driver the Sandbox's uid
     * stands for it. */
    CHECK(uid == (is_qemu ? image_uid : own_uid(sb)), "the agent runs as uid %lld", (long long)uid);
    json_t *exists = json_object_get(reply, "exists");
    /* The process driver binds the agent alone; a guest binds its whole initramfs. */
    const char *agent = is_qemu ? "/.sbx/usr/bin/sbx-agent" : "/.sbx/sbx-agent";
    CHECK(json_is_true(json_object_get(exists, agent)) &&
              json_is_false(json_object_get(exists, "/usr/bin/sbx-agent")),
          "sbx-agent must come from sbx at %s, never from the image", agent);
    if (is_qemu) {
        /* The guest's root is the overlay, sbx's files read-only beside it, and the image's
         * device refuses writes even from the guest's root (QEMU's readonly=on). */
        const char *mounts = json_string_value(json_object_get(reply, "mounts"));
        const char *written = json_string_value(json_object_get(reply, "write_device"));
        CHECK(mounts && strstr(mounts, "overlay / overlay rw"), "guest mounts: %s",
              mounts ? mounts : "?");
        CHECK(mounts && strstr(mounts, " /.sbx ") && strstr(strstr(mounts, " /.sbx "), " ro"),
              "/.sbx is not read-only in the guest");
        CHECK(written && strstr(written, "Operation not permitted"),
              "the guest wrote to its image device: %s", written ? written : "?");
    }
    /* The image's user (root here) is the Sandbox's uid in the process driver: it owns what the
     * image gives root, so even /etc takes the write (in the upper layer). */
    json_int_t passwd_uid =
        json_integer_value(json_object_get(json_object_get(reply, "stat"), "/etc/passwd"));
    CHECK(passwd_uid == (is_qemu ? 0 : own_uid(sb)), "/etc/passwd belongs to uid %lld",
          (long long)passwd_uid);
    CHECK(json_is_true(json_object_get(reply, "written")), "the root is not writable: %s",
          json_string_value(json_object_get(reply, "write_error")));
    json_decref(line);
}

/* The next Sandbox of the same image starts from the image again; this time as nobody. */
static void check_fresh_sandbox(struct sandbox *sb)
{
    char why[512], start_line[1024];
    python_start(start_line, sizeof start_line, "nobody");
    if (!CHECK(start(sb, start_line, why, sizeof why), "start: %s", why))
        return;
    json_t *line;
    json_t *reply = ask(
        sb, "msg_2", "{\"exists\":[\"/written-by-sandbox\",\"/etc/written-by-sandbox\"]}", &line);
    json_t *exists = json_object_get(reply, "exists");
    CHECK(reply && json_is_false(json_object_get(exists, "/written-by-sandbox")) &&
              json_is_false(json_object_get(exists, "/etc/written-by-sandbox")),
          "a file written by the previous Sandbox is still there");
    json_int_t uid = json_integer_value(json_object_get(reply, "uid"));
    const char *home = json_string_value(json_object_get(json_object_get(reply, "env"), "HOME"));
    CHECK(uid == (is_qemu ? NOBODY_UID : own_uid(sb)), "nobody runs as uid %lld", (long long)uid);
    CHECK(home && strcmp(home, "/nonexistent") == 0, "nobody's HOME is %s", home ? home : "?");
    json_decref(line);
}

/* Two Sandboxes of different images at once, each seeing its own. */
static void check_two_images(struct sandbox *a, struct sandbox *b)
{
    char why[512], start_line[1024];
    python_start(start_line, sizeof start_line, "daemon");
    CHECK(strcmp(b->rt.image_hash, tiny_digest) == 0, "tiny image hash %s", b->rt.image_hash);
    if (!CHECK(start(a, start_line, why, sizeof why), "start a: %s", why) ||
        !CHECK(start(b,
                     "{\"type\":\"start\",\"argv\":[\"/usr/bin/sbx-echo-agent\"],"
                     "\"workspace\":null,\"env\":[\"PATH=/bin:/usr/bin\"],\"cwd\":\"/etc\"}",
                     why, sizeof why),
               "start b: %s", why))
        return;
    json_t *la, *lb;
    json_t *ra = ask(a, "msg_a", "{\"exists\":[\"/usr/bin/sbx-echo-agent\"]}", &la);
    json_t *rb = ask(b, "msg_b", "{\"run\":[\"cat\",\"/etc/os-release\"]}", &lb);
    /* The tiny image's user is app (1000): its home is the Sandbox's; root's files stay root's. */
    json_t *lc;
    json_t *rc = ask(b, "msg_c",
                     "{\"run\":[\"sh\",\"-c\",\"echo x > /home/app/f && stat -c %u /home/app "
                     "/etc/passwd && (echo y > /etc/f || echo refused)\"]}",
                     &lc);
    const char *owners = json_string_value(json_object_get(json_object_get(rc, "run"), "output"));
    char want[64];
    snprintf(want, sizeof want, "%lld\n0\n", (long long)own_uid(b));
    CHECK(owners && strncmp(owners, want, strlen(want)) == 0 && strstr(owners, "refused"),
          "the image user's files are not the Sandbox's: %s", owners ? owners : "?");
    json_decref(lc);
    const char *a_release = json_string_value(json_object_get(ra, "os_release"));
    const char *b_release =
        json_string_value(json_object_get(json_object_get(rb, "run"), "output"));
    CHECK(a_release && strstr(a_release, "Debian"), "a sees %s", a_release ? a_release : "?");
    CHECK(json_is_false(json_object_get(json_object_get(ra, "exists"), "/usr/bin/sbx-echo-agent")),
          "a sees the tiny image's files");
    CHECK(b_release && strstr(b_release, "ID=sbx-tiny"), "b sees %s", b_release ? b_release : "?");
    json_decref(la);
    json_decref(lb);
}

/* The digest's rootfs.erofs as first seen, to check at the end that no Sandbox wrote it (its
 * ctime moves: each jail's hard link changes its link count). */
static struct stat erofs_seen;
static char erofs_path[PATH_MAX + 16];

/* qemu: the digest's rootfs.erofs exists in its cache directory and is attached read-only. */
static void check_erofs_attached(struct sandbox *sb)
{
    char dir[PATH_MAX], err[256], erofs[PATH_MAX + 16], path[64], cmdline[8192] = "";
    if (image_cache_dir(&cfg, debian_digest, dir, sizeof dir, err, sizeof err) != 0)
        return;
    snprintf(erofs, sizeof erofs, "%s/rootfs.erofs", dir);
    struct stat st;
    CHECK(stat(erofs, &st) == 0 && st.st_size > 0 && st.st_uid == 0 && !(st.st_mode & 0222),
          "no read-only rootfs.erofs in %s", dir);
    erofs_seen = st;
    snprintf(erofs_path, sizeof erofs_path, "%s", erofs);
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)sb->rt.pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(cmdline, 1, sizeof cmdline - 1, f) : 0;
    if (f)
        fclose(f);
    for (size_t i = 0; i < n; i++)
        if (cmdline[i] == '\0')
            cmdline[i] = ' ';
    CHECK(strstr(cmdline, "readonly=on") != NULL, "the image drive is not read-only: %s", cmdline);
}

/* In a child that dropped to an unprivileged uid (a worker not running as root): the Sandbox is in
 * a user namespace, and the image's overlay still boots, with / writable to the Sandbox. */
static int unprivileged_boot(const char *chroot_base)
{
    int failed_before = check_failures(); /* the parent's count came along with fork() */
    gid_t gid = 65534;
    if (setgroups(1, &gid) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(65534, 65534, 65534) != 0)
        return 100;
    snprintf(cfg.chroot_base, sizeof cfg.chroot_base, "%s", chroot_base);
    static struct sandbox sb;
    char err[1024], why[512];
    if (!CHECK(boot(&sb, tiny_digest, err, sizeof err) == 0, "unprivileged boot: %s", err))
        return 1;
    if (CHECK(start(&sb, "{\"type\":\"start\",\"argv\":[\"/usr/bin/sbx-echo-agent\"]}", why,
                    sizeof why),
              "unprivileged start: %s", why)) {
        json_t *line;
        json_t *reply =
            ask(&sb, "msg_u", "{\"run\":[\"sh\",\"-c\",\"echo w > /w && cat /w /etc/os-release\"]}",
                &line);
        const char *out =
            json_string_value(json_object_get(json_object_get(reply, "run"), "output"));
        CHECK(out && strncmp(out, "w\n", 2) == 0 && strstr(out, "ID=sbx-tiny"),
              "unprivileged Sandbox: %s", out ? out : "(no output)");
        json_decref(line);
    }
    terminate(&sb);
    return check_failures() > failed_before ? 1 : 0;
}

/* An image whose /etc/passwd and /etc/group are FIFOs (copies of the tiny one, in a cache of this
 * run's own): the worker looks the image's user up on the host, and a FIFO must not hold the
 * boot's thread. They count as absent: the tiny image's user, app, is then unknown, and its boot
 * fails at once, with the reason; the same image run as root needs neither file, and boots. */
static void check_fifo_passwd(const char *scratch, const char *image_data, struct sandbox *sb)
{
    char data[PATH_MAX], cmd[4 * PATH_MAX], err[1024];
    char named[80] = "sha256:", root[80] = "sha256:";
    const char *tiny_hex = tiny_digest + 7;
    for (int i = 0; i < 64; i++) {
        named[7 + i] = tiny_hex[i] == 'f' ? '0' : 'f';
        root[7 + i] = tiny_hex[i] == 'e' ? '0' : 'e';
    }
    named[71] = root[71] = '\0';
    snprintf(data, sizeof data, "%.400s/fifo-data", scratch);
    for (int i = 0; i < 2; i++) {
        const char *hex = (i == 0 ? named : root) + 7;
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s/images/sha256' && cp -a '%s/images/sha256/%s' "
                 "'%s/images/sha256/%s' && cd '%s/images/sha256/%s' && "
                 "rm -f rootfs/etc/passwd rootfs/etc/group && "
                 "mkfifo rootfs/etc/passwd rootfs/etc/group%s",
                 data, image_data, tiny_hex, data, hex, data, hex,
                 i == 0 ? "" : " && sed -i 's/\"User\":\"app\"/\"User\":\"\"/' config.json");
        if (!CHECK(system(cmd) == 0, "cannot make the FIFO image: %s", cmd))
            return;
    }
    char saved[sizeof cfg.data_dir];
    snprintf(saved, sizeof saved, "%s", cfg.data_dir);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data);
    CHECK(boot(sb, named, err, sizeof err) != 0 &&
              strstr(err, "user 'app' is not in the image's /etc/passwd"),
          "booting an image with a FIFO passwd and a named user: %s",
          sb->booted ? "it booted" : err);
    terminate(sb);
    CHECK(boot(sb, root, err, sizeof err) == 0, "boot the image with a FIFO passwd as root: %s",
          err);
    terminate(sb);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", saved);
}

static int load_images_env(const char *file, char *data_dir, size_t len)
{
    FILE *f = fopen(file, "re");
    if (!f)
        return -1;
    char line[PATH_MAX + 32];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "DATA_DIR=", 9) == 0)
            snprintf(data_dir, len, "%s", line + 9);
        else if (strncmp(line, "DEBIAN_DIGEST=", 14) == 0)
            snprintf(debian_digest, sizeof debian_digest, "%s", line + 14);
        else if (strncmp(line, "TINY_DIGEST=", 12) == 0)
            snprintf(tiny_digest, sizeof tiny_digest, "%s", line + 12);
    }
    fclose(f);
    return data_dir[0] && debian_digest[0] && tiny_digest[0] ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "process") != 0 && strcmp(argv[2], "qemu") != 0) ||
        (strcmp(argv[2], "qemu") == 0 && argc != 4)) {
        fprintf(stderr, "usage: %s IMAGES_ENV process|qemu [GUEST_DIR]\n", argv[0]);
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: booting images needs root\n");
        return 77;
    }
    is_qemu = strcmp(argv[2], "qemu") == 0;
    drv = is_qemu ? &driver_qemu : &driver_process;
    log_init("test", "info");
    signal(SIGPIPE, SIG_IGN); /* as the worker runs: a VM gone mid-write is an error, not death */
    char image_data[PATH_MAX] = "", err[1024];
    if (load_images_env(argv[1], image_data, sizeof image_data) != 0) {
        fprintf(stderr, "%s does not name the test images\n", argv[1]);
        return 2;
    }
    char tmpl[] = "/tmp/sbx-it-images-XXXXXX";
    char *scratch = mkdtemp(tmpl);
    if (!scratch)
        return 2;
    chmod(scratch, 0755);
    char *cargv[] = {argv[0], NULL};
    setenv("SBX_DATA_DIR", scratch, 1);
    if (config_load(&cfg, 1, cargv, err, sizeof err) != 0) {
        fprintf(stderr, "config: %s\n", err);
        return 2;
    }
    /* The images' cache is the fixture's; jails and everything else are this run's own. */
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", image_data);
    snprintf(cfg.chroot_base, sizeof cfg.chroot_base, "%.400s/jail", scratch);
    snprintf(cfg.rootfs, sizeof cfg.rootfs, "%s/rootfs", SBX_BUILD_DIR);
    cfg.sandbox_uid = SANDBOX_UID;
    cfg.sandbox_gid = SANDBOX_GID;
    if (is_qemu) {
        snprintf(cfg.guest_dir, sizeof cfg.guest_dir, "%s", argv[3]);
        snprintf(cfg.qemu_accel, sizeof cfg.qemu_accel, "tcg");
    }
    static struct sandbox a, b;

    uint64_t before = tree_fingerprint(debian_digest);
    size_t entries = fingerprint_entries;
    REQUIRE(before != 0 && entries > 1000, "cannot read the Debian image (%zu entries)", entries);
    REQUIRE(drv->init(&cfg, err, sizeof err) == 0, "init: %s", err);

    REQUIRE(boot(&a, debian_digest, err, sizeof err) == 0, "boot the Debian image: %s", err);
    if (is_qemu)
        check_erofs_attached(&a);
    check_python_sandbox(&a, "root", 0, "/root");
    terminate(&a);

    REQUIRE(boot(&a, debian_digest, err, sizeof err) == 0, "boot it again: %s", err);
    check_fresh_sandbox(&a);
    if (!is_qemu) {
        REQUIRE(boot(&b, tiny_digest, err, sizeof err) == 0, "boot the tiny image: %s", err);
        terminate(&a);
        REQUIRE(boot(&a, debian_digest, err, sizeof err) == 0, "boot beside it: %s", err);
        check_two_images(&a, &b);
    }
    if (!is_qemu) {
        char base[PATH_MAX];
        snprintf(base, sizeof base, "%.400s/unprivileged", scratch);
        REQUIRE(mkdir(base, 0777) == 0 && chmod(base, 01777) == 0, "mkdir %s", base);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0)
            _exit(unprivileged_boot(base));
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0,
              "the unprivileged worker's Sandbox failed (status %d)", status);
    }
    /* An image not in the cache is refused, with the reason. */
    struct sandbox *missing = &b;
    terminate(&b);
    char absent[80] = "sha256:";
    for (int i = 0; i < 64; i++)
        absent[7 + i] = 'e';
    absent[71] = '\0';
    CHECK(boot(missing, absent, err, sizeof err) != 0 && strstr(err, "not in this host's image"),
          "booting an absent image: %s", missing->booted ? "it booted" : err);
    if (!is_qemu)
        check_fifo_passwd(scratch, image_data, &b);

out:
    terminate(&a);
    terminate(&b);
    if (before != 0) {
        uint64_t after = tree_fingerprint(debian_digest);
        CHECK(after == before && fingerprint_entries == entries,
              "the cached image changed (%zu entries before, %zu after)", entries,
              fingerprint_entries);
    }
    struct stat now;
    if (erofs_path[0])
        CHECK(stat(erofs_path, &now) == 0 && now.st_ino == erofs_seen.st_ino &&
                  now.st_size == erofs_seen.st_size &&
                  now.st_mtim.tv_sec == erofs_seen.st_mtim.tv_sec &&
                  now.st_mtim.tv_nsec == erofs_seen.st_mtim.tv_nsec,
              "%s changed while Sandboxes ran", erofs_path);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", scratch);
    int failures = check_failures();
    fprintf(stderr, failures ? "%d failure(s)\n" : "ok\n", failures);
    return failures ? 1 : 0;
}

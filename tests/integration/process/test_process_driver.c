/*
 * test_process_driver.c: drives the process driver directly (no worker): boots real Sandboxes in
 * namespaces from the built rootfs, speaks the agent channel protocol to sbx-agent and the echo
 * agent, attaches Workspaces, terminates and reaps. Needs root (CI runs as root).
 */
#include "fs.h"
#include "clock.h"
#include "host/cgroup.h"
#include "drivers/driver.h"
#include "drivers/process_child.h"
#include "id.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define SANDBOX_UID 4242
#define SANDBOX_GID 4343

static struct sbx_config cfg;
static char data_dir[256];

/* One booted Sandbox plus a read buffer for its channel. */
struct sandbox {
    struct sandbox_runtime rt;
    char buf[1 << 20];
    size_t len;
};

static bool path_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* True when pid has ended (gone, or a zombie its new parent has not reaped yet) within 2 s. */
static bool process_ended(pid_t pid)
{
    int64_t deadline = clock_mono_ms() + 2000;
    do {
        char path[64], buf[512] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')');
        if (p && p[2] == 'Z')
            return true;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    } while (clock_mono_ms() < deadline);
    return false;
}

static void boot(struct sandbox *sb)
{
    char err[512] = "";
    memset(&sb->rt, 0, sizeof sb->rt);
    sb->len = 0;
    assert_int_equal(id_new("sbx", sb->rt.sandbox_id, sizeof sb->rt.sandbox_id), 0);
    snprintf(sb->rt.shape.driver, sizeof sb->rt.shape.driver, "process");
    sb->rt.shape.mem_size_mib = 128;
    sb->rt.shape.vcpu_count = 1;
    int rc = driver_process.boot(&cfg, &sb->rt, err, sizeof err);
    if (rc != 0)
        fail_msg("boot: %s", err);
}

static void send_line(struct sandbox *sb, const char *fmt, ...)
{
    char line[65536];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    line[n++] = '\n';
    for (int off = 0; off < n;) {
        struct pollfd p = {.fd = sb->rt.channel_fd, .events = POLLOUT};
        assert_true(poll(&p, 1, 5000) == 1);
        ssize_t w = write(sb->rt.channel_fd, line + off, (size_t)(n - off));
        assert_true(w > 0);
        off += (int)w;
    }
}

/* Next channel line as JSON; NULL on timeout or end of stream. Skips log lines. */
static json_t *read_json(struct sandbox *sb, int timeout_ms)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    for (;;) {
        char *nl = memchr(sb->buf, '\n', sb->len);
        if (nl) {
            json_error_t jerr;
            json_t *v = json_loadb(sb->buf, (size_t)(nl - sb->buf), 0, &jerr);
            size_t used = (size_t)(nl - sb->buf) + 1;
            memmove(sb->buf, sb->buf + used, sb->len - used);
            sb->len -= used;
            assert_non_null(v);
            const char *type = json_string_value(json_object_get(v, "type"));
            if (type && strcmp(type, "log") == 0) {
                json_decref(v);
                continue;
            }
            return v;
        }
        int left = (int)(deadline - clock_mono_ms());
        struct pollfd p = {.fd = sb->rt.channel_fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) != 1)
            return NULL;
        ssize_t n = read(sb->rt.channel_fd, sb->buf + sb->len, sizeof sb->buf - sb->len);
        if (n <= 0)
            return NULL;
        sb->len += (size_t)n;
    }
}

static void start_echo(struct sandbox *sb, bool with_workspace)
{
    send_line(sb, "{\"type\":\"start\",\"argv\":[\"/usr/bin/sbx-echo-agent\"],\"workspace\":%s}",
              with_workspace ? "\"/workspace\"" : "null");
    json_t *v = read_json(sb, 5000);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "started");
    json_decref(v);
}

/* Sends message number seq with the given body; returns the "reply" object (the caller owns it). */
static json_t *ask_id(struct sandbox *sb, const char *body, int seq)
{
    send_line(sb, "{\"id\":\"msg_%d\",\"seq\":%d,\"body\":%s}", seq, seq, body);
    json_t *v = read_json(sb, 10000);
    assert_non_null(v);
    char id[32];
    snprintf(id, sizeof id, "msg_%d", seq);
    assert_string_equal(json_string_value(json_object_get(v, "id")), id);
    json_t *reply = json_incref(json_object_get(v, "reply"));
    json_decref(v);
    assert_non_null(reply);
    return reply;
}

static json_t *ask(struct sandbox *sb, const char *body)
{
    static int seq;
    return ask_id(sb, body, ++seq);
}

static void terminate(struct sandbox *sb, struct store_usage *usage)
{
    char err[512] = "";
    struct store_usage ignored;
    int rc = driver_process.terminate(&cfg, &sb->rt, usage ? usage : &ignored, err, sizeof err);
    if (rc != 0)
        fail_msg("terminate: %s", err);
}

/* ---- tests ---- */

static void test_echo_agent_answers(void **state)
{
    (void)state;
    struct sandbox *sb = calloc(1, sizeof *sb);
    boot(sb);
    assert_true(sb->rt.pid > 0);
    assert_true(strncmp(sb->rt.image_hash, "sha256:", 7) == 0);
    assert_true(sb->rt.kernel[0] != '\0');
    assert_true(sb->rt.cgroup_path[0] != '\0');
    assert_true(path_exists(sb->rt.jail_dir));
    start_echo(sb, false);
    json_t *r = ask(sb, "{\"hello\":[1,\"x\"]}");
    json_t *hello = json_object_get(json_object_get(r, "echo"), "hello");
    assert_string_equal(json_string_value(json_array_get(hello, 1)), "x");
    assert_string_equal(json_string_value(json_object_get(r, "hostname")), sb->rt.sandbox_id);
    assert_string_equal(json_string_value(json_object_get(r, "kernel")), sb->rt.kernel);
    json_decref(r);

    char jail[512], cgroup[512];
    snprintf(jail, sizeof jail, "%s", sb->rt.jail_dir);
    snprintf(cgroup, sizeof cgroup, "%s", sb->rt.cgroup_path);
    pid_t pid = sb->rt.pid;
    struct store_usage usage;
    terminate(sb, &usage);
    assert_false(path_exists(jail));
    assert_false(path_exists(cgroup));
    assert_true(kill(pid, 0) != 0);
    assert_true(usage.cpu_usec > 0); /* boot and exec of two programs cost CPU time */
    struct cgroup_host host;
    char report[512];
    cgroup_detect(&cfg, &host, report, sizeof report);
    if (host.v2_memory || host.v1_memory_root[0])
        assert_true(usage.mem_peak_bytes > 0);
    else
        assert_int_equal(usage.mem_peak_bytes, -1);
    free(sb);
}

static void test_crash_reports_exit(void **state)
{
    (void)state;
    struct sandbox *sb = calloc(1, sizeof *sb);
    boot(sb);
    start_echo(sb, false);
    send_line(sb, "{\"id\":\"m\",\"seq\":1,\"body\":{\"crash\":true}}");
    json_t *v = read_json(sb, 5000);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "exit");
    assert_int_equal(json_integer_value(json_object_get(v, "status")), 3);
    json_decref(v);
    terminate(sb, NULL);
    free(sb);
}

static void test_start_error_for_missing_command(void **state)
{
    (void)state;
    struct sandbox *sb = calloc(1, sizeof *sb);
    boot(sb);
    send_line(sb, "{\"type\":\"start\",\"argv\":[\"/no/such/agent\"],\"workspace\":null}");
    json_t *v = read_json(sb, 5000);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "error");
    assert_non_null(strstr(json_string_value(json_object_get(v, "error")), "/no/such/agent"));
    json_decref(v);
    terminate(sb, NULL);
    free(sb);
}

/* A command named without a '/' is looked up on its own PATH (the image's env), never on the
 * agent's: not found on PATH=/nowhere although the agent's PATH has /usr/bin; found past a
 * directory that does not exist. */
static void test_command_searched_on_its_own_path(void **state)
{
    (void)state;
    struct sandbox *sb = calloc(1, sizeof *sb);
    boot(sb);
    send_line(sb, "{\"type\":\"start\",\"argv\":[\"sbx-echo-agent\"],\"workspace\":null,"
                  "\"env\":[\"PATH=/nowhere\"]}");
    json_t *v = read_json(sb, 5000);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "error");
    const char *why = json_string_value(json_object_get(v, "error"));
    assert_non_null(why);
    assert_non_null(strstr(why, "cannot run sbx-echo-agent: No such file or directory"));
    json_decref(v);
    send_line(sb, "{\"type\":\"start\",\"argv\":[\"sbx-echo-agent\"],\"workspace\":null,"
                  "\"env\":[\"PATH=/nowhere:/usr/bin\"]}");
    v = read_json(sb, 5000);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "started");
    json_decref(v);
    json_t *reply = ask_id(sb, "\"searched\"", 1);
    assert_string_equal(json_string_value(json_object_get(reply, "echo")), "searched");
    json_decref(reply);
    terminate(sb, NULL);
    free(sb);
}

static void test_namespaces_isolate_sandboxes(void **state)
{
    (void)state;
    struct sandbox *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    boot(a);
    boot(b);
    start_echo(a, false);
    start_echo(b, false);

    json_t *r = ask(a, "{\"writeFile\":{\"path\":\"/tmp/secret-a\",\"data\":\"a\"},"
                       "\"run\":[\"ps\",\"-o\",\"pid,args\"]}");
    assert_true(json_is_true(json_object_get(json_object_get(r, "writeFile"), "ok")));
    const char *ps = json_string_value(json_object_get(json_object_get(r, "run"), "output"));
    assert_non_null(ps);
    /* Only this Sandbox's processes: its init (sbx-agent), the echo agent, ps itself. */
    int lines = 0;
    for (const char *p = ps; (p = strchr(p, '\n')); p++)
        lines++;
    assert_int_equal(lines, 4); /* header + 3 */
    assert_non_null(strstr(ps, "sbx-agent"));
    assert_non_null(strstr(ps, "sbx-echo-agent"));
    assert_true(json_integer_value(json_object_get(r, "pid")) < 10);
    json_decref(r);

    /* B sees neither A's files nor its processes, and has its own hostname. */
    r = ask(b, "{\"readFile\":{\"path\":\"/tmp/secret-a\"},\"run\":[\"ps\",\"-o\",\"pid,args\"]}");
    assert_non_null(json_object_get(json_object_get(r, "readFile"), "error"));
    assert_string_equal(json_string_value(json_object_get(r, "hostname")), b->rt.sandbox_id);
    ps = json_string_value(json_object_get(json_object_get(r, "run"), "output"));
    lines = 0;
    for (const char *p = ps; (p = strchr(p, '\n')); p++)
        lines++;
    assert_int_equal(lines, 4);
    json_decref(r);

    /* No host network either: loopback and the Sandbox's own link (eth0, its veth end). */
    r = ask(b, "{\"run\":[\"cat\",\"/proc/net/dev\"]}");
    ps = json_string_value(json_object_get(json_object_get(r, "run"), "output"));
    assert_non_null(strstr(ps, "lo:"));
    lines = 0;
    for (const char *p = ps; (p = strchr(p, '\n')); p++)
        lines++;
    assert_non_null(strstr(ps, "eth0:"));
    assert_int_equal(lines, 4); /* two header lines + lo + eth0 */
    json_decref(r);
    terminate(a, NULL);
    terminate(b, NULL);
    free(a);
    free(b);
}

static void make_workspace(char *out, size_t len)
{
    snprintf(out, len, "%s/workspaces/app_x/ws_%d", data_dir, rand());
    char parent[512];
    snprintf(parent, sizeof parent, "%s/workspaces", data_dir);
    mkdir(parent, 0755);
    snprintf(parent, sizeof parent, "%s/workspaces/app_x", data_dir);
    mkdir(parent, 0755);
    assert_int_equal(mkdir(out, 0770), 0);
    assert_int_equal(chown(out, SANDBOX_UID, SANDBOX_GID), 0);
}

static void test_workspace_survives_tmp_does_not(void **state)
{
    (void)state;
    char ws[512], err[512];
    make_workspace(ws, sizeof ws);
    struct sandbox *sb = calloc(1, sizeof *sb);
    boot(sb);
    assert_int_equal(driver_process.attach_workspace(&cfg, &sb->rt, ws, err, sizeof err), 0);
    start_echo(sb, true);
    json_t *r = ask(sb, "{\"writeFile\":{\"path\":\"/workspace/keep.txt\",\"data\":\"kept\"}}");
    assert_true(json_is_true(json_object_get(json_object_get(r, "writeFile"), "ok")));
    json_decref(r);
    r = ask(sb, "{\"writeFile\":{\"path\":\"/tmp/gone.txt\",\"data\":\"gone\"}}");
    assert_true(json_is_true(json_object_get(json_object_get(r, "writeFile"), "ok")));
    json_decref(r);
    char jail[512];
    snprintf(jail, sizeof jail, "%s", sb->rt.jail_dir);
    terminate(sb, NULL);
    assert_false(path_exists(jail));

    /* The data is on the host, untouched by the jail's removal. */
    char keep[600];
    snprintf(keep, sizeof keep, "%s/keep.txt", ws);
    FILE *f = fopen(keep, "r");
    assert_non_null(f);
    char text[16] = "";
    assert_non_null(fgets(text, sizeof text, f));
    fclose(f);
    assert_string_equal(text, "kept");

    boot(sb);
    assert_int_equal(driver_process.attach_workspace(&cfg, &sb->rt, ws, err, sizeof err), 0);
    start_echo(sb, true);
    r = ask(sb, "{\"readFile\":{\"path\":\"/workspace/keep.txt\"}}");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "readFile"), "data")),
                        "kept");
    json_decref(r);
    r = ask(sb, "{\"readFile\":{\"path\":\"/tmp/gone.txt\"}}");
    assert_non_null(json_object_get(json_object_get(r, "readFile"), "error"));
    json_decref(r);
    terminate(sb, NULL);
    assert_true(path_exists(keep));
    free(sb);
}

static void test_rootfs_read_only_and_uid(void **state)
{
    (void)state;
    struct sandbox *sb = calloc(1, sizeof *sb);
    boot(sb);
    start_echo(sb, false);
    json_t *r = ask(sb, "{\"writeFile\":{\"path\":\"/etc/evil\",\"data\":\"x\"}}");
    const char *e = json_string_value(json_object_get(json_object_get(r, "writeFile"), "error"));
    assert_non_null(e);
    json_decref(r);
    /* Even a file the uid could otherwise write: the mount itself is read-only. */
    r = ask(sb, "{\"run\":[\"sh\",\"-c\",\"grep ' / ' /proc/mounts\"]}");
    const char *mounts = json_string_value(json_object_get(json_object_get(r, "run"), "output"));
    assert_non_null(strstr(mounts, " ro,"));
    json_decref(r);
    r = ask(sb, "null");
    /* A uid/gid of its own from sandbox_uid_range (the default 200000-265535), recorded as its
     * entry in the host-wide allocation directory. */
    assert_true(sb->rt.uid >= 200000 && sb->rt.uid <= 265535);
    assert_int_equal(json_integer_value(json_object_get(r, "uid")), sb->rt.uid);
    assert_int_equal(json_integer_value(json_object_get(r, "gid")), sb->rt.uid);
    char entry[64], owner[64] = "";
    snprintf(entry, sizeof entry, "/run/sbx/sandbox-uids/%lld", (long long)sb->rt.uid);
    ssize_t n = readlink(entry, owner, sizeof owner - 1);
    assert_true(n > 0);
    owner[n] = '\0';
    assert_string_equal(owner, sb->rt.sandbox_id);
    json_decref(r);
    /* No capabilities left, and no way to gain any. */
    r = ask(
        sb,
        "{\"run\":[\"sh\",\"-c\",\"grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status\"]}");
    const char *status = json_string_value(json_object_get(json_object_get(r, "run"), "output"));
    assert_non_null(strstr(status, "CapEff:\t0000000000000000"));
    assert_non_null(strstr(status, "CapBnd:\t0000000000000000"));
    assert_non_null(strstr(status, "NoNewPrivs:\t1"));
    json_decref(r);
    terminate(sb, NULL);
    assert_int_equal(readlink(entry, owner, sizeof owner), -1); /* released */
    free(sb);

    /* sandbox_uid_range off: every Sandbox runs as sandbox_uid/sandbox_gid. */
    snprintf(cfg.sandbox_uid_range, sizeof cfg.sandbox_uid_range, "off");
    sb = calloc(1, sizeof *sb);
    boot(sb);
    start_echo(sb, false);
    r = ask(sb, "null");
    assert_int_equal(json_integer_value(json_object_get(r, "uid")), SANDBOX_UID);
    assert_int_equal(json_integer_value(json_object_get(r, "gid")), SANDBOX_GID);
    json_decref(r);
    terminate(sb, NULL);
    free(sb);
    snprintf(cfg.sandbox_uid_range, sizeof cfg.sandbox_uid_range, "200000-265535");
}

/* Boots in a forked "worker" that reports the Sandbox and then stops or dies; reap must clean. */
static void boot_in_doomed_worker(struct store_sandbox *out, pid_t *worker)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    *worker = fork();
    assert_true(*worker >= 0);
    if (*worker == 0) {
        close(p[0]);
        struct sandbox *sb = calloc(1, sizeof *sb);
        char err[512];
        memset(&sb->rt, 0, sizeof sb->rt);
        id_new("sbx", sb->rt.sandbox_id, sizeof sb->rt.sandbox_id);
        snprintf(sb->rt.shape.driver, sizeof sb->rt.shape.driver, "process");
        struct store_sandbox rec = {0};
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rec.created_at = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (driver_process.boot(&cfg, &sb->rt, err, sizeof err) != 0)
            _exit(1);
        snprintf(rec.id, sizeof rec.id, "%s", sb->rt.sandbox_id);
        rec.pid = sb->rt.pid;
        snprintf(rec.jail_dir, sizeof rec.jail_dir, "%s", sb->rt.jail_dir);
        snprintf(rec.cgroup_path, sizeof rec.cgroup_path, "%s", sb->rt.cgroup_path);
        if (write(p[1], &rec, sizeof rec) != sizeof rec)
            _exit(1);
        for (;;)
            pause();
    }
    close(p[1]);
    ssize_t n = read(p[0], out, sizeof *out);
    close(p[0]);
    assert_int_equal(n, (ssize_t)sizeof *out);
}

static void test_reap_after_worker_crash(void **state)
{
    (void)state;
    struct store_sandbox rec;
    pid_t worker;
    boot_in_doomed_worker(&rec, &worker);
    assert_true(path_exists(rec.jail_dir));
    kill(worker, SIGKILL);
    waitpid(worker, NULL, 0);
    char err[512] = "";
    /* A worker restarts: its Sandbox's runtime is gone, the row remains. */
    if (driver_process.reap(&cfg, &rec, err, sizeof err) != 0)
        fail_msg("reap: %s", err);
    assert_false(path_exists(rec.jail_dir));
    assert_false(path_exists(rec.cgroup_path));
    assert_true(process_ended((pid_t)rec.pid));
}

static void test_reap_kills_a_running_sandbox(void **state)
{
    (void)state;
    struct store_sandbox rec;
    pid_t worker;
    boot_in_doomed_worker(&rec, &worker);
    /* The worker is frozen, so its Sandbox lives on: reap must kill it through the cgroup. */
    kill(worker, SIGSTOP);
    assert_false(process_ended((pid_t)rec.pid));
    char err[512] = "";
    if (driver_process.reap(&cfg, &rec, err, sizeof err) != 0)
        fail_msg("reap: %s", err);
    assert_false(path_exists(rec.jail_dir));
    assert_false(path_exists(rec.cgroup_path));
    kill(worker, SIGKILL);
    waitpid(worker, NULL, 0);
    assert_true(process_ended((pid_t)rec.pid));
}

static void test_reap_refuses_foreign_jail_path(void **state)
{
    (void)state;
    struct store_sandbox rec = {0};
    snprintf(rec.id, sizeof rec.id, "sbx_aaaaaaaaaaaaaaaaaaaa");
    snprintf(rec.jail_dir, sizeof rec.jail_dir, "%s", data_dir); /* not a jail */
    char err[512] = "";
    assert_int_equal(driver_process.reap(&cfg, &rec, err, sizeof err), -1);
    assert_non_null(strstr(err, "refusing"));
    assert_true(path_exists(data_dir));
}

static void test_worker_death_kills_sandbox(void **state)
{
    (void)state;
    struct store_sandbox rec;
    pid_t worker;
    boot_in_doomed_worker(&rec, &worker);
    kill(worker, SIGKILL);
    waitpid(worker, NULL, 0);
    /* PR_SET_PDEATHSIG: the Sandbox's init dies with the worker, without anyone reaping. */
    char cg_events[600];
    snprintf(cg_events, sizeof cg_events, "%s", rec.cgroup_path);
    int64_t deadline = clock_mono_ms() + 5000;
    while (cgroup_populated(cg_events) && clock_mono_ms() < deadline) {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    assert_false(cgroup_populated(cg_events));
    char err[512] = "";
    assert_int_equal(driver_process.reap(&cfg, &rec, err, sizeof err), 0);
}

/* Runs in a forked child that dropped root: returns a nonzero step number on the first failure. */
static int unprivileged_boot(const char *chroot_base)
{
    struct sbx_config ucfg = cfg;
    snprintf(ucfg.chroot_base, sizeof ucfg.chroot_base, "%s", chroot_base);
    struct sandbox *sb = calloc(1, sizeof *sb);
    char err[512];
    id_new("sbx", sb->rt.sandbox_id, sizeof sb->rt.sandbox_id);
    snprintf(sb->rt.shape.driver, sizeof sb->rt.shape.driver, "process");
    if (driver_process.boot(&ucfg, &sb->rt, err, sizeof err) != 0) {
        fprintf(stderr, "unprivileged boot: %s\n", err);
        return 1;
    }
    if (driver_process.attach_workspace(&ucfg, &sb->rt, chroot_base, err, sizeof err) == 0)
        return 2; /* cannot work without root on the host, and must say so */
    send_line(sb, "{\"type\":\"start\",\"argv\":[\"/usr/bin/sbx-echo-agent\"],\"workspace\":null}");
    json_t *v = read_json(sb, 5000);
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!type || strcmp(type, "started") != 0)
        return 3;
    json_decref(v);
    send_line(sb, "{\"id\":\"u1\",\"seq\":1,\"body\":{\"run\":[\"sh\",\"-c\","
                  "\"grep CapEff /proc/self/status; touch /etc/x || echo read-only\"]}}");
    v = read_json(sb, 5000);
    json_t *reply = json_object_get(v, "reply");
    const char *out = json_string_value(json_object_get(json_object_get(reply, "run"), "output"));
    const char *host = json_string_value(json_object_get(reply, "hostname"));
    int rc = 0;
    if (!out || !strstr(out, "CapEff:\t0000000000000000") || !strstr(out, "read-only"))
        rc = 4;
    else if (!host || strcmp(host, sb->rt.sandbox_id) != 0)
        rc = 5;
    json_decref(v);
    char jail[512];
    snprintf(jail, sizeof jail, "%s", sb->rt.jail_dir);
    struct store_usage usage;
    if (rc == 0 && driver_process.terminate(&ucfg, &sb->rt, &usage, err, sizeof err) != 0)
        rc = 6;
    if (rc == 0 && path_exists(jail))
        rc = 7;
    free(sb);
    return rc;
}

static void test_unprivileged_worker_uses_user_namespace(void **state)
{
    (void)state;
    char base[600];
    snprintf(base, sizeof base, "%s/unprivileged", data_dir);
    assert_int_equal(mkdir(base, 0777), 0);
    assert_int_equal(chmod(base, 01777), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        gid_t gid = 65534;
        if (setgroups(1, &gid) != 0 || setresgid(gid, gid, gid) != 0 ||
            setresuid(65534, 65534, 65534) != 0)
            _exit(100);
        _exit(unprivileged_boot(base));
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Workers boot from several helper threads at once: each Sandbox must come up intact. */
static void *boot_and_terminate_three(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++) {
        struct sandbox *sb = calloc(1, sizeof *sb);
        boot(sb);
        start_echo(sb, false);
        json_t *r = ask_id(sb, "\"parallel\"", i);
        assert_string_equal(json_string_value(json_object_get(r, "hostname")), sb->rt.sandbox_id);
        json_decref(r);
        char jail[512];
        snprintf(jail, sizeof jail, "%s", sb->rt.jail_dir);
        terminate(sb, NULL);
        assert_false(path_exists(jail));
        free(sb);
    }
    return NULL;
}

static void test_parallel_boots(void **state)
{
    (void)state;
    pthread_t threads[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, boot_and_terminate_three, NULL), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
}

/* Runs sbx-process-init with argv[1..] and the plan fd (-1: none); its stderr and exit status. */
static int run_process_init(char *const *args, int plan_fd, char *out, size_t outlen)
{
    char path[600];
    snprintf(path, sizeof path, "%s/worker/sbx-process-init", SBX_BUILD_DIR);
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 2);
        if (plan_fd >= 0)
            fcntl(plan_fd, F_SETFD, 0);
        char *argv[8] = {"sbx-process-init"};
        for (int i = 0; args[i] && i < 6; i++)
            argv[i + 1] = args[i];
        execv(path, argv);
        _exit(127);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t n;
    while (got < outlen - 1 && (n = read(p[0], out + got, outlen - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(p[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* sbx-process-init takes a plan only from a worker of its own build, and says so otherwise. */
static void test_process_init_refuses_a_foreign_plan(void **state)
{
    (void)state;
    char out[512], fd_arg[16];
    char *none[] = {NULL};
    assert_int_equal(run_process_init(none, -1, out, sizeof out), 1);
    assert_non_null(strstr(out, "started by sbx-worker only"));

    int fd = memfd_create("plan", MFD_CLOEXEC);
    assert_true(fd >= 0);
    snprintf(fd_arg, sizeof fd_arg, "%d", fd);
    char *with_fd[] = {"--plan-fd", fd_arg, NULL};
    assert_int_equal(write(fd, "short", 5), 5);
    assert_int_equal(run_process_init(with_fd, fd, out, sizeof out), 1);
    assert_non_null(strstr(out, "sbx-worker and sbx-process-init differ"));

    /* The right size, but not a plan: the magic is checked before anything is used. */
    static char junk[sizeof(struct process_child_plan)];
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
    assert_int_equal(run_process_init(with_fd, fd, out, sizeof out), 1);
    assert_non_null(strstr(out, "not a plan of this build"));
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    char err[512];
    char *argv[] = {"test_process_driver", NULL};
    log_init("test", "warn");
    if (config_load(&cfg, 1, argv, err, sizeof err) != 0) {
        fprintf(stderr, "config: %s\n", err);
        return -1;
    }
    snprintf(data_dir, sizeof data_dir, "/tmp/sbx-process-test-XXXXXX");
    if (!mkdtemp(data_dir))
        return -1;
    chmod(data_dir, 0755);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
    snprintf(cfg.chroot_base, sizeof cfg.chroot_base, "%s/jail", data_dir);
    snprintf(cfg.rootfs, sizeof cfg.rootfs, "%s/rootfs", SBX_BUILD_DIR);
    cfg.sandbox_uid = SANDBOX_UID;
    cfg.sandbox_gid = SANDBOX_GID;
    if (driver_process.init(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "init: %s\n", err);
        return -1;
    }
    srand((unsigned)getpid());
    return 0;
}

/* Reaps whatever a failed test left (so a failure leaves no jails or cgroups behind), then removes
 * the data directory without crossing into any mount (FTW_MOUNT). */
static int teardown(void **state)
{
    (void)state;
    char jails[600], err[512];
    snprintf(jails, sizeof jails, "%s/jail/process", data_dir);
    DIR *d = opendir(jails);
    int leftovers = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        struct store_sandbox rec = {0};
        snprintf(rec.id, sizeof rec.id, "%.31s", e->d_name);
        snprintf(rec.jail_dir, sizeof rec.jail_dir, "%.440s/%s", jails, rec.id);
        if (driver_process.reap(&cfg, &rec, err, sizeof err) != 0)
            fprintf(stderr, "teardown: reap %s: %s\n", rec.id, err);
        leftovers++;
    }
    if (d)
        closedir(d);
    if (leftovers)
        fprintf(stderr, "teardown: reaped %d Sandbox(es) left by failed tests\n", leftovers);
    if (fs_remove_tree(data_dir) != 0)
        fprintf(stderr, "teardown: could not remove %s\n", data_dir);
    return 0;
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: the process driver tests need root\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_agent_answers),
        cmocka_unit_test(test_crash_reports_exit),
        cmocka_unit_test(test_start_error_for_missing_command),
        cmocka_unit_test(test_command_searched_on_its_own_path),
        cmocka_unit_test(test_namespaces_isolate_sandboxes),
        cmocka_unit_test(test_workspace_survives_tmp_does_not),
        cmocka_unit_test(test_rootfs_read_only_and_uid),
        cmocka_unit_test(test_reap_after_worker_crash),
        cmocka_unit_test(test_reap_kills_a_running_sandbox),
        cmocka_unit_test(test_reap_refuses_foreign_jail_path),
        cmocka_unit_test(test_worker_death_kills_sandbox),
        cmocka_unit_test(test_parallel_boots),
        cmocka_unit_test(test_unprivileged_worker_uses_user_namespace),
        cmocka_unit_test(test_process_init_refuses_a_foreign_plan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

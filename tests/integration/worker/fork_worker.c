/*
 * fork_worker.c: sbx-worker-fork, a test build of the worker whose only driver is "fork": each
 * Sandbox is a plain child process (this binary re-executed as a fake agent) with a jail-like
 * directory under chroot_base. No isolation at all: it exists so that the worker's lifecycle
 * (pool, keep-alive, retries, crashes, timeouts, kill -9 recovery, many workers) is tested on its
 * own, independently of the real drivers, whose end-to-end tests run the real sbx-worker.
 *
 * The fake agent speaks the agent channel of driver.h and behaves like the echo agent for the
 * message bodies the tests send: {"sleepMs":N} sleeps first, {"crash":true} exits with status 3,
 * {"hang":true} never answers, {"fail":"text"} answers {"error":"text"}.
 *
 * SBX_FAKE_BOOT_HANG=N makes the first N boots hang for good once their agent runs (the step
 * "fake hang"), as a boot stuck in the kernel or on a file would; SBX_FAKE_BOOT_DEADLINE_MS sets
 * the driver's boot deadline (driver.h), which fails such a boot.
 */
#include "config.h"
#include "drivers/driver.h"
#include "log.h"
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the fake agent (child side) ---- */

static void agent_write(int fd, json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s)
        return;
    size_t len = strlen(s);
    s[len] = '\n';
    /* json_dumps' buffer has room for the NUL we overwrite; write it as one line. */
    ssize_t off = 0;
    while ((size_t)off < len + 1) {
        ssize_t n = write(fd, s + off, len + 1 - (size_t)off);
        if (n <= 0)
            break;
        off += n;
    }
    free(s);
}

static int fake_agent(int fd, const char *sandbox_id)
{
    FILE *in = fdopen(dup(fd), "r");
    char *line = NULL;
    size_t cap = 0;
    if (!in)
        return 1;
    agent_write(fd, json_pack("{s:s,s:s}", "type", "ready", "kernel", "fake"));
    while (getline(&line, &cap, in) > 0) {
        json_t *msg = json_loads(line, 0, NULL);
        const char *type = json_string_value(json_object_get(msg, "type"));
        if (type && strcmp(type, "start") == 0) {
            agent_write(fd, json_pack("{s:s}", "type", "started"));
        } else if (json_object_get(msg, "id")) {
            json_t *body = json_object_get(msg, "body");
            json_int_t sleep_ms = json_integer_value(json_object_get(body, "sleepMs"));
            if (sleep_ms > 0)
                usleep((useconds_t)sleep_ms * 1000);
            if (json_is_true(json_object_get(body, "crash"))) {
                agent_write(fd, json_pack("{s:s,s:i}", "type", "exit", "status", 3));
                _exit(3);
            }
            if (json_is_true(json_object_get(body, "hang")))
                for (;;)
                    pause();
            const char *fail = json_string_value(json_object_get(body, "fail"));
            if (fail)
                agent_write(
                    fd, json_pack("{s:O,s:s}", "id", json_object_get(msg, "id"), "error", fail));
            else
                agent_write(fd, json_pack("{s:O,s:{s:O,s:s,s:s}}", "id", json_object_get(msg, "id"),
                                          "reply", "echo", body, "kernel", "fake", "hostname",
                                          sandbox_id));
        }
        json_decref(msg);
    }
    free(line);
    fclose(in);
    return 0;
}

/* ---- the driver (worker side) ---- */

static int fork_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
    (void)cfg;
    (void)err;
    (void)errlen;
    log_info("fork driver: test double, no isolation and no usage accounting");
    return 0;
}

/* SBX_FAKE_BOOT_HANG: how many boots are still to hang. */
static atomic_int boots_to_hang;

static int fork_boot(const struct sbx_config *cfg, struct sandbox_runtime *rt, char *err,
                     size_t errlen)
{
    int sv[2];
    char fdarg[16];
    snprintf(rt->jail_dir, sizeof rt->jail_dir, "%.400s/fork/%s", cfg->chroot_base, rt->sandbox_id);
    char parent[600];
    snprintf(parent, sizeof parent, "%.400s/fork", cfg->chroot_base);
    mkdir(cfg->chroot_base, 0755);
    mkdir(parent, 0755);
    if (mkdir(rt->jail_dir, 0755) != 0) {
        snprintf(err, errlen, "mkdir %s: %s", rt->jail_dir, strerror(errno));
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        int fd = dup(sv[1]); /* without CLOEXEC */
        snprintf(fdarg, sizeof fdarg, "%d", fd);
        execl("/proc/self/exe", "sbx-fake-agent", "--fake-agent", fdarg, rt->sandbox_id,
              (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    rt->pid = pid;
    atomic_store(&rt->boot_pid, pid);
    if (atomic_fetch_sub(&boots_to_hang, 1) > 0) {
        /* Never returns: nothing writes to this pipe, and its write end is never closed. */
        int hang[2];
        char b;
        driver_boot_step(rt, "fake hang");
        if (pipe(hang) == 0)
            while (read(hang[0], &b, 1) != 0) {
            }
        pause();
    }
    driver_boot_step(rt, "agent ready");
    /* Wait for "ready", as real drivers do. */
    char buf[256];
    size_t len = 0;
    while (len < sizeof buf - 1) {
        ssize_t n = read(sv[0], buf + len, 1);
        if (n <= 0) {
            snprintf(err, errlen, "fake agent did not become ready");
            close(sv[0]);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        if (buf[len++] == '\n')
            break;
    }
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    rt->channel_fd = sv[0];
    snprintf(rt->image_hash, sizeof rt->image_hash, "fake");
    snprintf(rt->kernel, sizeof rt->kernel, "fake");
    return 0;
}

static int fork_attach(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                       const char *host_dir, char *err, size_t errlen)
{
    (void)cfg;
    if (host_dir) {
        char path[700];
        snprintf(path, sizeof path, "%s/workspace", rt->jail_dir);
        if (symlink(host_dir, path) != 0) {
            snprintf(err, errlen, "symlink %s: %s", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static void remove_jail(const char *jail_dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/workspace", jail_dir);
    unlink(path);
    rmdir(jail_dir);
}

static int fork_terminate(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                          struct store_usage *usage, char *err, size_t errlen)
{
    (void)cfg;
    (void)err;
    (void)errlen;
    if (rt->pid > 0) {
        kill(rt->pid, SIGKILL);
        waitpid(rt->pid, NULL, 0);
        rt->pid = 0;
    }
    if (rt->channel_fd >= 0) {
        close(rt->channel_fd);
        rt->channel_fd = -1;
    }
    remove_jail(rt->jail_dir);
    usage->cpu_usec = -1;
    usage->mem_peak_bytes = -1;
    return 0;
}

static int fork_reap(const struct sbx_config *cfg, const struct store_sandbox *sb, char *err,
                     size_t errlen)
{
    (void)err;
    (void)errlen;
    char path[64], comm[64] = "", jail[600];
    snprintf(path, sizeof path, "/proc/%lld/comm", (long long)sb->pid);
    FILE *f = sb->pid > 0 ? fopen(path, "r") : NULL;
    if (f) {
        if (fgets(comm, sizeof comm, f) && strncmp(comm, "sbx-fake-agent", 14) == 0)
            kill((pid_t)sb->pid, SIGKILL);
        fclose(f);
    }
    /* Derived from the id, as the real drivers do: a worker killed mid-boot made the jail
     * before it could record it. */
    snprintf(jail, sizeof jail, "%.400s/fork/%s", cfg->chroot_base, sb->id);
    remove_jail(jail);
    return 0;
}

static struct driver driver_fork = {
    "fork", fork_init, fork_boot, fork_attach, fork_terminate, fork_reap, NULL, NULL, NULL, 0, NULL,
};

static const struct driver *find_fork_driver(const char *name)
{
    (void)name; /* every App runs on the fork driver in this build */
    return &driver_fork;
}

int main(int argc, char **argv)
{
    struct sbx_config cfg;
    struct worker w;
    char err[1024];

    if (argc == 4 && strcmp(argv[1], "--fake-agent") == 0) {
        signal(SIGPIPE, SIG_DFL);
        return fake_agent(atoi(argv[2]), argv[3]);
    }
    if (config_load(&cfg, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "sbx-worker-fork: %s\n", err);
        return 2;
    }
    log_init("worker", cfg.log_level);
    const char *hang = getenv("SBX_FAKE_BOOT_HANG"),
               *deadline = getenv("SBX_FAKE_BOOT_DEADLINE_MS");
    atomic_store(&boots_to_hang, hang ? atoi(hang) : 0);
    driver_fork.boot_deadline_ms = deadline ? atoi(deadline) : 0;
    /* SIGCHLD keeps its default: each fake agent is waited for by terminate(), like the real
     * drivers wait for their own pids (never waitpid(-1)). */
    if (worker_init(&w, &cfg, find_fork_driver, err, sizeof err) != 0) {
        log_error("worker: %s", err);
        worker_fini(&w);
        return 1;
    }
    int rc = worker_run(&w);
    worker_fini(&w);
    return rc;
}

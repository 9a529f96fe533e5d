/*
 * hostile_agent.c: an App command that misbehaves on request, for hostile_agents.test.mjs. It
 * speaks the agent protocol (one JSON line per message on stdin, one reply line on stdout) and
 * each message's body names one attack in "do":
 *   flood   N MiB of non-protocol lines on stdout, then a reply
 *   huge    one reply line of N MiB (bounded by the relay and reply_limit: never delivered)
 *   hang    never answers (message_timeout)
 *   forks   forks children that sleep until fork fails (RLIMIT_NPROC) or N children exist
 *   filltmp writes /tmp/fill until the write fails (the Sandbox's size-limited /tmp)
 *   longids N lines that answer no message, each with an id of K bytes, then a reply
 *   probe   tries to read host paths and host processes, mount, ptrace, setuid, chroot, ...
 * and reports what happened, so the test can assert containment from the outside.
 * Static, no sanitizers: it runs inside the Sandbox (copied into its Workspace).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

/* The string value of "key":"..." in line (no escapes expected: the test sends plain words). */
static int get_string(const char *line, const char *key, char *out, size_t outlen)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    if (!p)
        return -1;
    p += strlen(pat);
    size_t n = strcspn(p, "\"");
    if (n >= outlen)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

static long get_number(const char *line, const char *key, long def)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? strtol(p + strlen(pat), NULL, 10) : def;
}

static void reply(const char *id, const char *json)
{
    printf("{\"id\":\"%s\",\"reply\":%s}\n", id, json);
    fflush(stdout);
}

static void do_flood(const char *id, long mib)
{
    char line[1024];
    memset(line, 'f', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    long lines = mib * 1024;
    for (long i = 0; i < lines; i++)
        if (fwrite(line, 1, sizeof line, stdout) != sizeof line)
            break;
    char out[64];
    snprintf(out, sizeof out, "{\"flooded\":%ld}", lines * (long)sizeof line);
    reply(id, out);
}

static void do_longids(const char *id, long lines, long id_bytes)
{
    static char fake[1 << 16];
    size_t n = id_bytes > 0 && (size_t)id_bytes < sizeof fake ? (size_t)id_bytes : 4096;
    memset(fake, 'i', n);
    fake[n] = '\0';
    for (long i = 0; i < lines; i++)
        printf("{\"id\":\"%s\",\"reply\":%ld}\n", fake, i);
    char out[64];
    snprintf(out, sizeof out, "{\"lines\":%ld}", lines);
    reply(id, out);
}

static void do_huge(const char *id, long mib)
{
    static char chunk[1 << 16];
    memset(chunk, 'a', sizeof chunk);
    printf("{\"id\":\"%s\",\"reply\":\"", id);
    for (long i = 0; i < mib * 16; i++)
        fwrite(chunk, 1, sizeof chunk, stdout);
    printf("\"}\n");
    fflush(stdout);
}

static void do_forks(const char *id, long max)
{
    long n = 0;
    int err = 0;
    for (; n < max; n++) {
        pid_t p = fork();
        if (p < 0) {
            err = errno;
            break;
        }
        if (p == 0) {
            for (;;)
                pause();
        }
    }
    char out[96];
    snprintf(out, sizeof out, "{\"forked\":%ld,\"errno\":%d}", n, err);
    reply(id, out);
}

static void do_filltmp(const char *id)
{
    static char chunk[1 << 16];
    int fd = open("/tmp/fill", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    long long written = 0;
    int err = 0;
    if (fd < 0) {
        err = errno;
    } else {
        for (;;) {
            ssize_t w = write(fd, chunk, sizeof chunk);
            if (w <= 0) {
                err = w < 0 ? errno : ENOSPC;
                break;
            }
            written += w;
        }
        close(fd);
    }
    char out[96];
    snprintf(out, sizeof out, "{\"written\":%lld,\"errno\":%d}", written, err);
    reply(id, out);
}

/* errno of an attempt, 0 when it succeeded (which the test treats as an escape). */
#define TRY(expr) ((expr) < 0 ? errno : 0)

static int try_read(const char *path)
{
    char buf[64];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return errno;
    ssize_t n = read(fd, buf, sizeof buf);
    int e = n < 0 ? errno : 0;
    close(fd);
    return e;
}

/* Whether any process this Sandbox can see is a host daemon (by its command line). */
static int sees_host_process(void)
{
    char path[64], cmd[256];
    for (int pid = 1; pid < 65536; pid++) {
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        if (n <= 0)
            continue;
        cmd[n] = '\0';
        if (strstr(cmd, "sbx-worker") || strstr(cmd, "sbx-gateway") || strstr(cmd, "node") ||
            strstr(cmd, "systemd") || strstr(cmd, "init"))
            return pid;
    }
    return 0;
}

static void do_probe(const char *id, const char *line)
{
    char host_file[256] = "", other_file[256] = "";
    long host_pid = get_number(line, "hostPid", 1);
    get_string(line, "hostFile", host_file, sizeof host_file);
    get_string(line, "otherFile", other_file, sizeof other_file);
    mkdir("/tmp/m", 0700);
    int kill_host = TRY(kill((pid_t)host_pid, 0));
    int ptrace_host = TRY(ptrace(PTRACE_ATTACH, (pid_t)host_pid, NULL, NULL));
    char out[1024];
    snprintf(out, sizeof out,
             "{\"readHostFile\":%d,\"readOtherSandboxFile\":%d,\"readShadow\":%d,"
             "\"writeSysrq\":%d,\"writeHostname\":%d,\"killHostPid\":%d,\"ptraceHostPid\":%d,"
             "\"seesHostProcess\":%d,\"mountTmpfs\":%d,\"umountWorkspace\":%d,\"setuid0\":%d,"
             "\"setgid0\":%d,\"chroot\":%d,\"mknod\":%d,\"writeRootfs\":%d,\"uid\":%d}",
             try_read(host_file), try_read(other_file), try_read("/etc/shadow"),
             TRY(open("/proc/sysrq-trigger", O_WRONLY)),
             TRY(open("/proc/sys/kernel/hostname", O_WRONLY)), kill_host, ptrace_host,
             sees_host_process(), TRY(mount("tmpfs", "/tmp/m", "tmpfs", 0, "size=1m")),
             TRY(umount2("/workspace", MNT_DETACH)), TRY(setuid(0)), TRY(setgid(0)),
             TRY(chroot("/tmp")), TRY(mknod("/tmp/sda", S_IFBLK | 0600, makedev(8, 0))),
             TRY(open("/bin/evil", O_WRONLY | O_CREAT, 0755)), (int)getuid());
    reply(id, out);
}

int main(void)
{
    static char line[1 << 20];
    signal(SIGCHLD, SIG_IGN); /* children that die are reaped by the kernel */
    while (fgets(line, sizeof line, stdin)) {
        char id[64], what[32] = "";
        if (get_string(line, "id", id, sizeof id) != 0)
            continue;
        get_string(line, "do", what, sizeof what);
        if (strcmp(what, "flood") == 0)
            do_flood(id, get_number(line, "mib", 8));
        else if (strcmp(what, "huge") == 0)
            do_huge(id, get_number(line, "mib", 100));
        else if (strcmp(what, "longids") == 0)
            do_longids(id, get_number(line, "lines", 2000), get_number(line, "idBytes", 4096));
        else if (strcmp(what, "hang") == 0)
            for (;;)
                pause();
        else if (strcmp(what, "forks") == 0)
            do_forks(id, get_number(line, "max", 10000));
        else if (strcmp(what, "filltmp") == 0)
            do_filltmp(id);
        else if (strcmp(what, "probe") == 0)
            do_probe(id, line);
        else
            reply(id, "{\"ok\":true}");
    }
    return 0;
}

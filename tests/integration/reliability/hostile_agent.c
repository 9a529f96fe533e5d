/*
 * hostile_agent.c: an App command that misbehaves on request, for hostile_agents.test.mjs. It
 * speaks the agent protocol (one JSON line per message on stdin, one reply line on stdout) and
 * each message's body names one attack in "do":
 *   flood   N MiB of non-protocol lines on stdout, then a reply
 *   huge    one reply line of N MiB (bounded by the relay and reply_limit: never delivered)
 *   hang    never answers (message_timeout)
 *   forks   forks children that sleep until fork fails (RLIMIT_NPROC) or N children exist
 *   filltmp writes "path" (default /tmp/fill) until a write fails (/tmp, the Workspace)
 *   longids N lines that answer no message, each with an id of K bytes, then a reply
 *   probe   tries to read host paths and host processes, mount, ptrace, setuid, chroot, ...
 *   syscalls calls each system call the Sandbox's seccomp filter denies, with harmless arguments,
 *           and reports each errno, /proc/self/status's Seccomp line and two allowed controls
 *   exec    runs "cmd" (words split on spaces), reports its exit status and output
 *   alloc   allocates and touches N MiB ("mib"), then replies (the memory bound OOM-kills it)
 *   alloc_child  a child allocates and touches N MiB ("mib"); the agent waits for it and replies
 *           how it ended (the memory bound OOM-kills the child, the agent goes on)
 *   spin    runs "procs" busy processes for "ms" milliseconds (the CPU bound)
 *   session the agent's and its own session, controlling terminals, /dev/tty, terminal fds
 *   append  appends "data" to "path" (the Workspace shared by Sandboxes of one App)
 *   read    the content of "path" (at most 1 KiB of plain words)
 * and reports what happened, so the test can assert containment from the outside.
 * Static, no sanitizers: it runs inside the Sandbox (copied into its Workspace).
 *
 * On the host, `sbx-test-hostile-agent --signal-ptrace PID` (run as one Sandbox's uid) prints the
 * errno of kill(PID, 0) and of PTRACE_ATTACH to PID as {"kill":E,"ptrace":E}.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
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

static void do_filltmp(const char *id, const char *path)
{
    static char chunk[1 << 16];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
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

/* ---- the seccomp filter's denied calls (agent/sandbox_filter.c) ---- */

/* A raw clone with flags; a child that was made anyway exits at once. */
static long try_clone(unsigned long flags)
{
    long r = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (r == 0)
        _exit(0);
    if (r > 0) {
        waitpid((pid_t)r, NULL, 0);
        return 0;
    }
    return errno;
}

#define SYS_TRY(...) (syscall(__VA_ARGS__) < 0 ? errno : 0)

/* socket(family, type, protocol): 0 when a socket was made (and closed), or the errno. */
static long try_socket(int family, int type, int protocol)
{
    int fd = socket(family, type, protocol);
    if (fd < 0)
        return errno;
    close(fd);
    return 0;
}

static void do_syscalls(const char *id)
{
    struct {
        const char *name;
        long err;
    } r[] = {
        {"init_module", SYS_TRY(SYS_init_module, NULL, 0, "")},
        {"finit_module", SYS_TRY(SYS_finit_module, -1, "", 0)},
        {"delete_module", SYS_TRY(SYS_delete_module, "sbx_none", 0)},
        {"kexec_load", SYS_TRY(SYS_kexec_load, 0, 0, NULL, 0)},
        {"kexec_file_load", SYS_TRY(SYS_kexec_file_load, -1, -1, 0, "", 0)},
        {"bpf", SYS_TRY(SYS_bpf, 0, NULL, 0)},
        {"perf_event_open", SYS_TRY(SYS_perf_event_open, NULL, 0, -1, -1, 0)},
        {"userfaultfd", SYS_TRY(SYS_userfaultfd, O_CLOEXEC)},
        {"keyctl", SYS_TRY(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0)},
        {"add_key", SYS_TRY(SYS_add_key, "user", "sbx-probe", "x", 1, -2 /* process */)},
        {"request_key", SYS_TRY(SYS_request_key, "user", "sbx-none", NULL, 0)},
        {"mount", SYS_TRY(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL)},
        {"umount2", SYS_TRY(SYS_umount2, "/workspace", MNT_DETACH)},
        {"pivot_root", SYS_TRY(SYS_pivot_root, "/tmp", "/tmp")},
        {"fsopen", SYS_TRY(SYS_fsopen, "tmpfs", 0)},
        {"fsconfig", SYS_TRY(SYS_fsconfig, -1, 0, NULL, NULL, 0)},
        {"fsmount", SYS_TRY(SYS_fsmount, -1, 0, 0)},
        {"fspick", SYS_TRY(SYS_fspick, AT_FDCWD, "/", 0)},
        {"move_mount", SYS_TRY(SYS_move_mount, -1, "", -1, "", 0)},
        {"open_tree", SYS_TRY(SYS_open_tree, AT_FDCWD, "/tmp", 0)},
        {"mount_setattr", SYS_TRY(SYS_mount_setattr, -1, "", 0, NULL, 0)},
        {"swapon", SYS_TRY(SYS_swapon, "/tmp/none", 0)},
        {"swapoff", SYS_TRY(SYS_swapoff, "/tmp/none")},
        {"reboot", SYS_TRY(SYS_reboot, 0, 0, 0, NULL)},
        {"settimeofday", SYS_TRY(SYS_settimeofday, NULL, NULL)},
        {"clock_settime", SYS_TRY(SYS_clock_settime, CLOCK_REALTIME, NULL)},
        {"clock_adjtime", SYS_TRY(SYS_clock_adjtime, CLOCK_REALTIME, NULL)},
        {"acct", SYS_TRY(SYS_acct, NULL)},
        {"quotactl", SYS_TRY(SYS_quotactl, 0, NULL, 0, NULL)},
        {"open_by_handle_at", SYS_TRY(SYS_open_by_handle_at, -1, NULL, 0)},
        {"io_uring_setup", SYS_TRY(SYS_io_uring_setup, 0, NULL)},
        {"io_uring_enter", SYS_TRY(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0)},
        {"io_uring_register", SYS_TRY(SYS_io_uring_register, -1, 0, NULL, 0)},
        {"setns", SYS_TRY(SYS_setns, -1, 0)},
        {"syslog", SYS_TRY(SYS_syslog, 3 /* READ_ALL */, NULL, 0)},
        {"iopl", SYS_TRY(SYS_iopl, 0)},
        {"ioperm", SYS_TRY(SYS_ioperm, 0, 0, 0)},
        {"uselib", SYS_TRY(SYS_uselib, "/none")},
        {"unshare(CLONE_NEWUSER)", SYS_TRY(SYS_unshare, CLONE_NEWUSER)},
        {"unshare(CLONE_NEWNET)", SYS_TRY(SYS_unshare, CLONE_NEWNET)},
        {"unshare(CLONE_NEWNS)", SYS_TRY(SYS_unshare, CLONE_NEWNS)},
        {"unshare(CLONE_NEWPID)", SYS_TRY(SYS_unshare, CLONE_NEWPID)},
        {"unshare(CLONE_NEWCGROUP)", SYS_TRY(SYS_unshare, CLONE_NEWCGROUP)},
        {"unshare(CLONE_NEWTIME)", SYS_TRY(SYS_unshare, 0x80)},
        {"clone(CLONE_NEWUSER)", try_clone(CLONE_NEWUSER)},
        {"clone(CLONE_NEWNET)", try_clone(CLONE_NEWNET)},
        {"clone3", SYS_TRY(SYS_clone3, NULL, 0)},
        /* Socket families and IP protocols of modules of their own: refused before any
         * module is loaded (TIPC 30, RDS 21, AF_ALG 38, DCCP, SCTP). */
        {"socket(AF_TIPC)", try_socket(30, SOCK_DGRAM, 0)},
        {"socket(AF_RDS)", try_socket(21, SOCK_SEQPACKET, 0)},
        {"socket(AF_ALG)", try_socket(38, SOCK_SEQPACKET, 0)},
        {"socket(AF_INET, SOCK_DCCP)", try_socket(AF_INET, 6, 33)},
        {"socket(AF_INET6, SCTP)", try_socket(AF_INET6, SOCK_STREAM, 132)},
        {"socket(family 63)", try_socket(63, SOCK_DGRAM, 0)},
        /* Allowed: the filter must be selective. */
        {"socket(AF_UNIX)", try_socket(AF_UNIX, SOCK_STREAM, 0)},
        {"socket(AF_INET)", try_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)},
        {"socket(AF_INET6, UDP)", try_socket(AF_INET6, SOCK_DGRAM, 0)},
        {"socket(AF_NETLINK)", try_socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */)},
        {"unshare(CLONE_FILES)", SYS_TRY(SYS_unshare, CLONE_FILES)},
        {"clone(plain)", try_clone(0)},
    };
    char seccomp[32] = "";
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Seccomp:", 8) == 0)
            snprintf(seccomp, sizeof seccomp, "%ld", strtol(line + 8, NULL, 10));
    if (f)
        fclose(f);
    static char out[8192];
    size_t n = (size_t)snprintf(out, sizeof out, "{\"seccomp\":\"%s\",\"errno\":{", seccomp);
    for (size_t i = 0; i < sizeof r / sizeof *r; i++)
        n += (size_t)snprintf(out + n, sizeof out - n, "%s\"%s\":%ld", i ? "," : "", r[i].name,
                              r[i].err);
    snprintf(out + n, sizeof out - n, "}}");
    reply(id, out);
}

/* ---- exec, alloc, spin, session ---- */

static void do_exec(const char *id, const char *cmd)
{
    char words[256], *argv[16];
    size_t argc = 0;
    snprintf(words, sizeof words, "%s", cmd);
    for (char *save = NULL, *w = strtok_r(words, " ", &save); w && argc < 15;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    argv[argc] = NULL;
    int pipefd[2];
    if (argc == 0 || pipe(pipefd) != 0) {
        reply(id, "{\"status\":-1,\"output\":\"\"}");
        return;
    }
    /* SIGCHLD is ignored in main(), which reaps children at once: take it back while this one
     * runs so that waitpid gets its status. */
    signal(SIGCHLD, SIG_DFL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pipefd[1]);
    char output[1024];
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof output &&
           (k = read(pipefd[0], output + got, sizeof output - 1 - got)) > 0)
        got += (size_t)k;
    close(pipefd[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        status = 255 << 8;
    signal(SIGCHLD, SIG_IGN);
    for (size_t i = 0; i < got; i++)
        if (output[i] == '"' || output[i] == '\\' || (unsigned char)output[i] < 0x20)
            output[i] = ' ';
    output[got] = '\0';
    char out[1200];
    snprintf(out, sizeof out, "{\"status\":%d,\"output\":\"%s\"}",
             WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output);
    reply(id, out);
}

static void do_alloc(const char *id, long mib)
{
    long touched = 0;
    for (; touched < mib; touched++) {
        char *chunk = malloc(1 << 20);
        if (!chunk)
            break;
        memset(chunk, (int)touched | 1, 1 << 20); /* touched pages are charged, untouched not */
    }
    char out[64];
    snprintf(out, sizeof out, "{\"allocatedMib\":%ld}", touched);
    reply(id, out);
}

static void do_alloc_child(const char *id, long mib)
{
    signal(SIGCHLD, SIG_DFL); /* waited for here (main() ignores SIGCHLD) */
    pid_t pid = fork();
    if (pid == 0) {
        for (long touched = 0; touched < mib; touched++) {
            char *chunk = malloc(1 << 20);
            if (!chunk)
                _exit(3);
            memset(chunk, (int)touched | 1, 1 << 20);
        }
        _exit(0);
    }
    int status = 0;
    char out[96];
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        snprintf(out, sizeof out, "{\"error\":\"fork or wait failed\"}");
    else
        snprintf(out, sizeof out, "{\"exit\":%d,\"signal\":%d}",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    signal(SIGCHLD, SIG_IGN);
    reply(id, out);
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void do_spin(const char *id, long procs, long ms)
{
    long long start = now_us();
    signal(SIGCHLD, SIG_DFL);
    for (long i = 0; i < procs; i++)
        if (fork() == 0) {
            volatile unsigned long x = 0;
            while (now_us() - start < ms * 1000)
                x++;
            _exit(0);
        }
    while (wait(NULL) > 0)
        ;
    signal(SIGCHLD, SIG_IGN);
    char out[64];
    snprintf(out, sizeof out, "{\"spunMs\":%lld}", (now_us() - start) / 1000);
    reply(id, out);
}

/* Fields 6 (session) and 7 (tty_nr) of /proc/<pid>/stat; -1 when unreadable. */
static void session_and_tty(const char *pid, long *sid, long *tty)
{
    char path[64], buf[1024];
    *sid = *tty = -1;
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (p)
        sscanf(p + 2, "%*c %*d %*d %ld %ld", sid, tty);
}

/* Descriptors of pid (its /proc/<pid>/fd links) that are a terminal. */
static int terminal_fds(const char *pid)
{
    char dir[64], path[128], target[256];
    int found = 0;
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(dir, sizeof dir, "/proc/%s/fd", pid);
        snprintf(path, sizeof path, "%s/%d", dir, fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strstr(target, "/dev/pts") || strstr(target, "/dev/tty") ||
            strstr(target, "/dev/console") || strstr(target, "ptmx"))
            found++;
    }
    return found;
}

static void do_session(const char *id)
{
    long agent_sid, agent_tty, self_sid, self_tty;
    session_and_tty("1", &agent_sid, &agent_tty);
    session_and_tty("self", &self_sid, &self_tty);
    struct stat st;
    char out[512];
    snprintf(out, sizeof out,
             "{\"agentPid\":1,\"agentSid\":%ld,\"agentTty\":%ld,\"pid\":%d,\"sid\":%d,"
             "\"tty\":%ld,\"devTty\":%d,\"openDevTty\":%d,\"agentTerminalFds\":%d,"
             "\"terminalFds\":%d}",
             agent_sid, agent_tty, (int)getpid(), (int)getsid(0), self_tty,
             TRY(stat("/dev/tty", &st)), TRY(open("/dev/tty", O_RDWR)), terminal_fds("1"),
             terminal_fds("self"));
    reply(id, out);
}

static void do_append(const char *id, const char *line)
{
    char path[256] = "", data[256] = "";
    get_string(line, "path", path, sizeof path);
    get_string(line, "data", data, sizeof data);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0 && write(fd, data, strlen(data)) != (ssize_t)strlen(data))
        err = errno;
    if (fd >= 0)
        close(fd);
    struct stat st = {0};
    stat(path, &st);
    char out[128];
    snprintf(out, sizeof out, "{\"errno\":%d,\"owner\":%d,\"uid\":%d}", err, (int)st.st_uid,
             (int)getuid());
    reply(id, out);
}

static void do_read(const char *id, const char *line)
{
    char path[256] = "", data[1024];
    get_string(line, "path", path, sizeof path);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, data, sizeof data - 1);
    int err = n < 0 ? errno : 0;
    if (fd >= 0)
        close(fd);
    data[n > 0 ? n : 0] = '\0';
    for (char *c = data; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            *c = ' ';
    char out[1200];
    snprintf(out, sizeof out, "{\"errno\":%d,\"data\":\"%s\"}", err, data);
    reply(id, out);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--signal-ptrace") == 0) {
        pid_t pid = (pid_t)atoi(argv[2]);
        int k = TRY(kill(pid, 0));
        int p = TRY(ptrace(PTRACE_ATTACH, pid, NULL, NULL));
        printf("{\"kill\":%d,\"ptrace\":%d}\n", k, p);
        return 0;
    }
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
        else if (strcmp(what, "filltmp") == 0) {
            char path[256] = "/tmp/fill";
            get_string(line, "path", path, sizeof path);
            do_filltmp(id, path);
        } else if (strcmp(what, "probe") == 0)
            do_probe(id, line);
        else if (strcmp(what, "syscalls") == 0)
            do_syscalls(id);
        else if (strcmp(what, "exec") == 0) {
            char cmd[256] = "";
            get_string(line, "cmd", cmd, sizeof cmd);
            do_exec(id, cmd);
        } else if (strcmp(what, "alloc") == 0)
            do_alloc(id, get_number(line, "mib", 16));
        else if (strcmp(what, "alloc_child") == 0)
            do_alloc_child(id, get_number(line, "mib", 16));
        else if (strcmp(what, "spin") == 0)
            do_spin(id, get_number(line, "procs", 2), get_number(line, "ms", 2000));
        else if (strcmp(what, "session") == 0)
            do_session(id);
        else if (strcmp(what, "append") == 0)
            do_append(id, line);
        else if (strcmp(what, "read") == 0)
            do_read(id, line);
        else
            reply(id, "{\"ok\":true}");
    }
    return 0;
}

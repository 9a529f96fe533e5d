/*
 * relay.c: the Sandbox side of the agent channel (relay_run); its buffers and line reader are
 * relay_buf.c, its JSON reader json_check.c.
 *
 * relay_run is a single-threaded poll loop: it never blocks on one peer while the other
 * waits, and applies back-pressure (stops reading a side whose destination queue is full) instead
 * of buffering without bound.
 */
#include "relay.h"
#include "guest_nfs.h"
#include "image_user.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------
 * The relay
 */

/* Queued bytes towards one peer above which the relay stops reading from the other side. */
#define RELAY_QUEUE_HIGH (8u << 20)
/* Hard cap of a queue: a full line beyond the high mark still fits. */
#define RELAY_QUEUE_LIMIT (RELAY_QUEUE_HIGH + RELAY_MAX_LINE + 4096)
/* Longest stderr line kept in one log line; the rest is cut (logs are for people, not payloads). */
#define RELAY_LOG_LINE_MAX 16384
#define RELAY_MAX_ARGS 256
#define RELAY_MAX_ARG_LEN 4096
#define RELAY_MAX_ENV 1024
/* The command's child runs on a stack of its own until its exec (start_command). */
#define EXEC_STACK_SIZE (64 * 1024)
/* How long the command gets after SIGTERM (host closed the channel) before SIGKILL. */
#define RELAY_KILL_GRACE_MS 2000
/* How long output of an exited command is still drained (a grandchild may keep the pipe open). */
#define RELAY_DRAIN_MS 1000

struct command_pipe {
    int fd;
    struct line_reader reader;
};

struct relay {
    int chan;
    struct line_reader chan_in;
    struct relay_buf chan_out;
    bool chan_closed;

    pid_t cmd_pid; /* 0 before start, -1 after it was reaped */
    int cmd_status;
    int cmd_stdin;
    struct relay_buf cmd_in;
    struct command_pipe out, err;
    int64_t kill_at_ms; /* 0, or when to SIGKILL the command */
    /* Started ahead of its Session (a "prestart" start line): whether it said it is ready and
     * whether the context line came. */
    bool prestart, ready_said, context_given;
    int64_t drain_until_ms; /* after the command exited: give up on its pipes then */

    int sigfd;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Queues one line to the host. A line that cannot be queued is lost; the host sees the gap as a
 * missing reply and times the message out, which is the right outcome for a flooding command. */
static void send_line(struct relay *r, const struct relay_buf *line)
{
    if (r->chan_closed)
        return;
    if (relay_buf_append(&r->chan_out, line->data, line->len) == 0)
        relay_buf_append(&r->chan_out, "\n", 1);
}

static void send_log(struct relay *r, const char *prefix, const char *text, size_t n)
{
    struct relay_buf line;
    relay_buf_init(&line, RELAY_LOG_LINE_MAX * 2 + 256);
    if (n > RELAY_LOG_LINE_MAX)
        n = RELAY_LOG_LINE_MAX;
    size_t plen = strlen(prefix);
    char *joined = malloc(plen + n + 1);
    if (joined) {
        memcpy(joined, prefix, plen);
        memcpy(joined + plen, text, n);
        relay_buf_puts(&line, "{\"type\":\"log\",\"line\":");
        relay_buf_json_string(&line, joined, plen + n);
        relay_buf_puts(&line, "}");
        send_line(r, &line);
        free(joined);
    }
    relay_buf_free(&line);
}

static void send_control(struct relay *r, const char *type, const char *field, const char *text)
{
    struct relay_buf line;
    relay_buf_init(&line, 8192);
    relay_buf_puts(&line, "{\"type\":\"");
    relay_buf_puts(&line, type);
    relay_buf_puts(&line, "\"");
    if (field) {
        relay_buf_puts(&line, ",\"");
        relay_buf_puts(&line, field);
        relay_buf_puts(&line, "\":");
        relay_buf_json_string(&line, text, strlen(text));
    }
    relay_buf_puts(&line, "}");
    send_line(r, &line);
    relay_buf_free(&line);
}

static void send_message_error(struct relay *r, struct json_span id, const char *why)
{
    struct relay_buf line;
    relay_buf_init(&line, RELAY_MAX_LINE);
    relay_buf_puts(&line, "{\"id\":");
    relay_buf_append(&line, id.p, id.len);
    relay_buf_puts(&line, ",\"error\":");
    relay_buf_json_string(&line, why, strlen(why));
    relay_buf_puts(&line, "}");
    send_line(r, &line);
    relay_buf_free(&line);
}

/* The argv of a start line, owned. */
struct start_request {
    char *argv[RELAY_MAX_ARGS + 1];
    size_t argc;
    char workspace[PATH_MAX];
    char workspace_nfs[256]; /* "<host addr>:/<export>" to mount at workspace first, or "" */
    /* From the App's image (driver.h): the environment that replaces the default one (has_env),
     * the directory to start in ("" for the Workspace or /) and the user ("" for the agent's). */
    bool has_env;
    char *env[RELAY_MAX_ENV + 1];
    size_t envc;
    char cwd[PATH_MAX];
    char user[256];
    bool prestart; /* started ahead of its Session: a context line comes later */
};

static void start_request_free(struct start_request *req)
{
    for (size_t i = 0; i < req->argc; i++)
        free(req->argv[i]);
    req->argc = 0;
    for (size_t i = 0; i < req->envc; i++)
        free(req->env[i]);
    req->envc = 0;
}

/* Reads the image's part of a start line: "env" (an array of "K=V"), "cwd" (an absolute path)
 * and "user" (a string), each optional or null. */
static int parse_start_image(struct json_span msg, struct start_request *req, const char **why)
{
    struct json_span env, cwd, user, elem;
    req->has_env = false;
    req->envc = 0;
    req->cwd[0] = req->user[0] = '\0';
    if (jspan_member(msg, "env", &env) == 1 && !jspan_is_null(env)) {
        if (!jspan_is_array(env)) {
            *why = "env must be an array of \"KEY=VALUE\" strings";
            return -1;
        }
        req->has_env = true;
        size_t pos = 0;
        while (jspan_array_next(env, &pos, &elem) == 1) {
            char *kv = malloc(RELAY_MAX_ARG_LEN);
            if (req->envc == RELAY_MAX_ENV || !kv ||
                jspan_string_decode(elem, kv, RELAY_MAX_ARG_LEN) != 0 || kv[0] == '=' ||
                !strchr(kv, '=')) {
                free(kv);
                *why = "env must hold at most 1024 \"KEY=VALUE\" strings of at most 4095 bytes";
                return -1;
            }
            req->env[req->envc++] = kv;
        }
        req->env[req->envc] = NULL;
    }
    if (jspan_member(msg, "cwd", &cwd) == 1 && !jspan_is_null(cwd) &&
        (jspan_string_decode(cwd, req->cwd, sizeof req->cwd) != 0 ||
         (req->cwd[0] != '\0' && req->cwd[0] != '/'))) {
        *why = "cwd must be an absolute path";
        return -1;
    }
    if (jspan_member(msg, "user", &user) == 1 && !jspan_is_null(user) &&
        jspan_string_decode(user, req->user, sizeof req->user) != 0) {
        *why = "user must be a name, uid, name:group or uid:gid";
        return -1;
    }
    return 0;
}

/* The "workspace" of a start or context line into path and nfs ("" for none): a path (already
 * there: the process driver's bind mount), or {"path":...,"nfs":...}: a microVM's Workspace,
 * which the agent mounts itself. 0, or -1 when it is neither. */
static int parse_workspace(struct json_span msg, char *path_out, size_t path_len, char *nfs_out,
                           size_t nfs_len)
{
    struct json_span ws, path, nfs;
    bool ok;
    path_out[0] = nfs_out[0] = '\0';
    if (jspan_member(msg, "workspace", &ws) != 1 || jspan_is_null(ws))
        return 0;
    if (jspan_is_object(ws))
        ok =
            jspan_member(ws, "path", &path) == 1 &&
            jspan_string_decode(path, path_out, path_len) == 0 &&
            (jspan_member(ws, "nfs", &nfs) != 1 || jspan_string_decode(nfs, nfs_out, nfs_len) == 0);
    else
        ok = jspan_string_decode(ws, path_out, path_len) == 0;
    return ok && (!nfs_out[0] || path_out[0] == '/') ? 0 : -1;
}

/* Mounts a Workspace served over NFS, then checks that the Workspace is a directory. 0, or -1
 * with the reason in why. */
static int workspace_ready(const char *path, const char *nfs, char *why, size_t len)
{
    struct stat st;
    if (nfs[0] && guest_nfs_mount(nfs, path, why, len) != 0)
        return -1;
    if (path[0] && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) {
        snprintf(why, len, "workspace %.400s is not a directory in the Sandbox", path);
        return -1;
    }
    return 0;
}

static int parse_start(struct json_span msg, struct start_request *req, const char **why)
{
    struct json_span argv, ws, elem;
    req->argc = 0;
    req->envc = 0;
    req->workspace[0] = '\0';
    if (jspan_member(msg, "argv", &argv) != 1 || !jspan_is_array(argv)) {
        *why = "start needs an argv array";
        return -1;
    }
    size_t pos = 0;
    while (jspan_array_next(argv, &pos, &elem) == 1) {
        char *arg = malloc(RELAY_MAX_ARG_LEN);
        if (req->argc == RELAY_MAX_ARGS || !arg ||
            jspan_string_decode(elem, arg, RELAY_MAX_ARG_LEN) != 0) {
            free(arg);
            start_request_free(req);
            *why = "argv must hold at most 256 strings of at most 4095 bytes without NUL";
            return -1;
        }
        req->argv[req->argc++] = arg;
    }
    req->argv[req->argc] = NULL;
    if (req->argc == 0 || req->argv[0][0] == '\0') {
        start_request_free(req);
        *why = "argv is empty";
        return -1;
    }
    req->workspace_nfs[0] = '\0';
    if (parse_start_image(msg, req, why) != 0) {
        start_request_free(req);
        return -1;
    }
    req->prestart = jspan_member(msg, "prestart", &ws) == 1 && jspan_is_true(ws);
    if (parse_workspace(msg, req->workspace, sizeof req->workspace, req->workspace_nfs,
                        sizeof req->workspace_nfs) != 0) {
        start_request_free(req);
        *why = "workspace must be a path, {\"path\":...,\"nfs\":\"addr:/export\"} or null";
        return -1;
    }
    return 0;
}

/* What the command's child reports when it cannot become the command: the step and its errno. */
enum exec_step { EXEC_STEP_EXEC, EXEC_STEP_CWD, EXEC_STEP_USER };
struct exec_failure {
    int step;
    int error;
};

/* Everything the command's child needs, made before the clone. The child runs on the relay's own
 * memory (CLONE_VM | CLONE_VFORK, start_command) until its exec, so it writes none of the relay's
 * memory but sh_argv, which is its own. */
struct exec_plan {
    const struct start_request *req;
    char *const *envp;
    const struct image_user *user; /* become this user first, or NULL */
    int in, out, err, errpipe;
    const char *search; /* the command's PATH, for a name without '/' */
    char **sh_argv;     /* {"/bin/sh", <file>, argv[1..], NULL}: a file without an exec format */
};

/* execve, and for a file the kernel cannot execute (ENOEXEC) the shell, as execvpe does for a
 * name it found on the PATH. */
static void exec_file(const struct exec_plan *x, const char *file)
{
    execve(file, x->req->argv, x->envp);
    if (errno == ENOEXEC) {
        x->sh_argv[1] = (char *)file;
        execve("/bin/sh", x->sh_argv, x->envp);
        errno = ENOEXEC;
    }
}

/* A name without '/' tried in each directory of the command's own PATH (execvpe would search the
 * relay's). Like execvpe: a directory without it is passed over, and EACCES anywhere is what is
 * reported when no directory has it. */
static void exec_searched(const struct exec_plan *x)
{
    const char *name = x->req->argv[0];
    size_t nlen = strlen(name);
    bool denied = false;
    for (const char *p = x->search;;) {
        const char *end = strchr(p, ':');
        size_t dlen = end ? (size_t)(end - p) : strlen(p);
        char file[PATH_MAX];
        if (dlen + 2 + nlen < sizeof file) {
            size_t at = dlen ? dlen : 1; /* an empty entry is the working directory */
            memcpy(file, dlen ? p : ".", at);
            file[at++] = '/';
            memcpy(file + at, name, nlen + 1);
            exec_file(x, file);
            if (errno == EACCES)
                denied = true;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV &&
                     errno != ETIMEDOUT)
                return;
        }
        if (!end)
            break;
        p = end + 1;
    }
    errno = denied ? EACCES : ENOENT;
}

/* The command's child: becomes the command, as x->user when set. System calls only until the
 * exec; the credential changes raw, since glibc's wrappers would look for the relay's threads. */
static int exec_command(void *arg)
{
    const struct exec_plan *x = arg;
    const struct start_request *req = x->req;
    struct exec_failure failure = {EXEC_STEP_EXEC, 0};
    sigset_t none;
    sigemptyset(&none);
    /* The relay handles no signal (it reads them from a signalfd) and ignores only SIGPIPE:
     * setup_signals set every other disposition to its default. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGPIPE, &dfl, NULL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid(); /* its own process group, so the relay can signal all of it at once */
    if (dup2(x->in, 0) < 0 || dup2(x->out, 1) < 0 || dup2(x->err, 2) < 0)
        goto fail;
    failure.step = EXEC_STEP_USER;
    const struct image_user *user = x->user;
    if (user && (syscall(SYS_setgroups, (size_t)user->ngroups, user->groups) != 0 ||
                 syscall(SYS_setresgid, user->gid, user->gid, user->gid) != 0 ||
                 syscall(SYS_setresuid, user->uid, user->uid, user->uid) != 0))
        goto fail;
    /* The image's working directory, as that user; otherwise the Workspace or /. */
    failure.step = EXEC_STEP_CWD;
    if (req->cwd[0]) {
        if (chdir(req->cwd) != 0)
            goto fail;
    } else {
        const char *dir = req->workspace[0] ? req->workspace : "/";
        if (chdir(dir) != 0 && chdir("/") != 0)
            goto fail;
    }
    failure.step = EXEC_STEP_EXEC;
    if (strchr(req->argv[0], '/'))
        execve(req->argv[0], req->argv, x->envp);
    else
        exec_searched(x);
fail:
    failure.error = errno;
    ssize_t ignored = write(x->errpipe, &failure, sizeof failure);
    (void)ignored;
    _exit(127);
}

/* True when env (NULL-terminated "K=V") sets key. */
static bool env_has(char *const *env, size_t n, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (strncmp(env[i], key, klen) == 0 && env[i][klen] == '=')
            return true;
    return false;
}

/* The command's environment. Without the image's env: sbx's defaults. With it: exactly that list,
 * plus PATH, HOME (the user's, from the image's /etc/passwd; without a user, as by default, the
 * Workspace or /tmp) and SBX_WORKSPACE when it lacks them, as OCI runtimes add PATH and HOME. envp
 * has room for RELAY_MAX_ENV + 4 entries; the strings it points to live in req and in the three
 * buffers. */
static void build_env(const struct start_request *req, const struct image_user *user, char **envp,
                      char *home, size_t homelen, char *wsenv, size_t wslen)
{
    static char default_path[] = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    static char tmpdir[] = "TMPDIR=/tmp", lang[] = "LANG=C.UTF-8";
    size_t n = 0;
    snprintf(wsenv, wslen, "SBX_WORKSPACE=%s", req->workspace);
    if (!req->has_env) {
        snprintf(home, homelen, "HOME=%s",
                 user ? user->home : (req->workspace[0] ? req->workspace : "/tmp"));
        envp[n++] = default_path;
        envp[n++] = home;
        envp[n++] = wsenv;
        envp[n++] = tmpdir;
        envp[n++] = lang;
        envp[n] = NULL;
        return;
    }
    for (size_t i = 0; i < req->envc; i++)
        envp[n++] = req->env[i];
    if (!env_has(req->env, req->envc, "PATH"))
        envp[n++] = default_path;
    if (!env_has(req->env, req->envc, "HOME")) {
        snprintf(home, homelen, "HOME=%s",
                 user ? user->home : (req->workspace[0] ? req->workspace : "/tmp"));
        envp[n++] = home;
    }
    if (req->workspace[0] && !env_has(req->env, req->envc, "SBX_WORKSPACE"))
        envp[n++] = wsenv;
    envp[n] = NULL;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static int start_command(struct relay *r, const struct start_request *req, char *why, size_t len)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, ep[2] = {-1, -1};
    char **envp = NULL, **sh_argv = NULL;
    /* The image's user, looked up in the image (the Sandbox's root). Only a guest's root agent
     * can become it; the process driver's agent holds no capabilities and its uid, the Sandbox's,
     * stands for every user of the image (docs/images.md). */
    struct image_user resolved;
    const struct image_user *user = NULL;
    if (req->user[0]) {
        if (image_user_resolve(req->user, -1, &resolved, why, len) != 0)
            return -1;
        user = &resolved;
    }
    const struct image_user *switch_to = user && image_user_can_switch() ? user : NULL;
    envp = calloc(RELAY_MAX_ENV + 8, sizeof *envp);
    if (!envp) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    char home[PATH_MAX + 8], wsenv[PATH_MAX + 16];
    build_env(req, user, envp, home, sizeof home, wsenv, sizeof wsenv);
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) ||
        pipe2(ep, O_CLOEXEC)) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        goto fail;
    }
    /* The command's PATH: its env's, else the default build_env put there. */
    const char *search = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    for (size_t i = 0; envp[i]; i++)
        if (strncmp(envp[i], "PATH=", 5) == 0) {
            search = envp[i] + 5;
            break;
        }
    sh_argv = calloc(req->argc + 2, sizeof *sh_argv);
    void *stack = mmap(NULL, EXEC_STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (!sh_argv || stack == MAP_FAILED) {
        snprintf(why, len, "out of memory");
        if (stack != MAP_FAILED)
            munmap(stack, EXEC_STACK_SIZE);
        goto fail;
    }
    sh_argv[0] = "/bin/sh";
    for (size_t i = 1; i < req->argc; i++)
        sh_argv[i + 1] = req->argv[i];
    struct exec_plan plan = {req, envp, switch_to, in[0], out[1], err[1], ep[1], search, sh_argv};
    /* No copy of the relay: a fork would copy its page tables, and keep its memory copy-on-write
     * until the exec, at every activation. The relay waits here for the exec instead. */
    pid_t pid = clone(exec_command, (char *)stack + EXEC_STACK_SIZE,
                      CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
    int clone_errno = errno;
    munmap(stack, EXEC_STACK_SIZE);
    if (pid < 0) {
        snprintf(why, len, "clone: %s", strerror(clone_errno));
        goto fail;
    }
    close_fd(&in[0]);
    close_fd(&out[1]);
    close_fd(&err[1]);
    close_fd(&ep[1]);
    struct exec_failure failure = {0, 0};
    ssize_t got;
    do {
        got = read(ep[0], &failure, sizeof failure);
    } while (got < 0 && errno == EINTR);
    close_fd(&ep[0]);
    if (got > 0) {
        /* The child is reaped by the SIGCHLD path like any other. */
        if (failure.step == EXEC_STEP_CWD)
            snprintf(why, len, "cannot change to the working directory %.300s: %s",
                     req->cwd[0] ? req->cwd : "/", strerror(failure.error));
        else if (failure.step == EXEC_STEP_USER)
            snprintf(why, len, "cannot become user %.64s (uid %u gid %u): %s", req->user,
                     (unsigned)user->uid, (unsigned)user->gid, strerror(failure.error));
        else
            snprintf(why, len, "cannot run %s: %s", req->argv[0], strerror(failure.error));
        goto fail;
    }
    free(envp);
    free(sh_argv);
    r->cmd_pid = pid;
    r->cmd_stdin = in[1];
    r->out.fd = out[0];
    r->err.fd = err[0];
    set_nonblocking(r->cmd_stdin);
    set_nonblocking(r->out.fd);
    set_nonblocking(r->err.fd);
    return 0;
fail:
    free(envp);
    free(sh_argv);
    for (int i = 0; i < 2; i++) {
        close_fd(&in[i]);
        close_fd(&out[i]);
        close_fd(&err[i]);
        close_fd(&ep[i]);
    }
    return -1;
}

/* The files of a start line, "files": [{"path": "/abs/path", "content": "..."}], written before
 * the command starts (mode 0644, so the command can read them whatever user it runs as): the
 * installation CA's certificate of SBX_CA_FILE (docs/callbacks.md). At most RELAY_MAX_FILES of
 * RELAY_MAX_FILE_LEN bytes each. A file may also name "prependFirstOf": absolute paths of files
 * of the image, the first of which that is a regular file (at most RELAY_MAX_PREPEND_LEN bytes)
 * is copied in before the content: the CA bundle of an App with secrets, the image's own bundle
 * and the installation CA (docs/secrets.md), made without changing the image. 0, or -1 with the
 * reason in why. */
#define RELAY_MAX_FILES 8
#define RELAY_MAX_FILE_LEN (64u << 10)
#define RELAY_MAX_PREPEND_LEN (8u << 20)

/* Copies the first regular file of the list into fd; none is fine. 0, or -1 with why. */
static int prepend_first_of(struct json_span list, int fd, char *why, size_t whylen)
{
    struct json_span item;
    size_t pos = 0;
    char name[PATH_MAX], buf[16384];
    if (!jspan_is_array(list)) {
        snprintf(why, whylen, "prependFirstOf must be an array of absolute paths");
        return -1;
    }
    while (jspan_array_next(list, &pos, &item) == 1) {
        if (jspan_string_decode(item, name, sizeof name) != 0 || name[0] != '/') {
            snprintf(why, whylen, "prependFirstOf must be an array of absolute paths");
            return -1;
        }
        int in = open(name, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (in < 0)
            continue;
        if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > RELAY_MAX_PREPEND_LEN) {
            close(in);
            continue;
        }
        ssize_t n;
        int rc = 0;
        while (rc == 0 && (n = read(in, buf, sizeof buf)) != 0) {
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 || write(fd, buf, (size_t)n) != n)
                rc = -1;
        }
        /* A bundle not ending in a newline would glue its last line to the next certificate. */
        if (rc == 0 && st.st_size > 0) {
            char last;
            if (pread(in, &last, 1, st.st_size - 1) == 1 && last != '\n' && write(fd, "\n", 1) != 1)
                rc = -1;
        }
        close(in);
        if (rc != 0)
            snprintf(why, whylen, "cannot copy %.200s: %s", name, strerror(errno));
        return rc;
    }
    return 0;
}

static int write_start_files(struct json_span msg, char *why, size_t whylen)
{
    struct json_span files, file, path, content;
    if (jspan_member(msg, "files", &files) != 1 || jspan_is_null(files))
        return 0;
    if (!jspan_is_array(files)) {
        snprintf(why, whylen, "files must be an array of {\"path\",\"content\"}");
        return -1;
    }
    char *text = malloc(RELAY_MAX_FILE_LEN + 1);
    size_t pos = 0, n = 0;
    int rc = text ? 0 : -1;
    if (!text)
        snprintf(why, whylen, "out of memory");
    while (rc == 0 && jspan_array_next(files, &pos, &file) == 1) {
        char name[PATH_MAX];
        if (++n > RELAY_MAX_FILES || jspan_member(file, "path", &path) != 1 ||
            jspan_string_decode(path, name, sizeof name) != 0 || name[0] != '/' ||
            jspan_member(file, "content", &content) != 1 ||
            jspan_string_decode(content, text, RELAY_MAX_FILE_LEN + 1) != 0) {
            snprintf(why, whylen,
                     "files must hold at most %d {\"path\": absolute, \"content\": at most %u "
                     "bytes}",
                     RELAY_MAX_FILES, RELAY_MAX_FILE_LEN);
            rc = -1;
            break;
        }
        size_t len = strlen(text);
        struct json_span prepend;
        bool has_prepend = jspan_member(file, "prependFirstOf", &prepend) == 1;
        int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 || fchmod(fd, 0644) != 0) {
            snprintf(why, whylen, "cannot write %.200s: %s", name, strerror(errno));
            rc = -1;
        } else if (has_prepend && prepend_first_of(prepend, fd, why, whylen) != 0) {
            rc = -1;
        } else if (write(fd, text, len) != (ssize_t)len) {
            snprintf(why, whylen, "cannot write %.200s: %s", name, strerror(errno));
            rc = -1;
        }
        if (fd >= 0)
            close(fd);
    }
    free(text);
    return rc;
}

static void handle_start(struct relay *r, struct json_span msg)
{
    if (r->cmd_pid != 0) {
        send_control(r, "error", "error", "the command was already started");
        return;
    }
    struct start_request req;
    const char *bad = NULL;
    if (parse_start(msg, &req, &bad) != 0) {
        send_control(r, "error", "error", bad);
        return;
    }
    char why[512];
    if (workspace_ready(req.workspace, req.workspace_nfs, why, sizeof why) != 0 ||
        write_start_files(msg, why, sizeof why) != 0 ||
        start_command(r, &req, why, sizeof why) != 0) {
        send_control(r, "error", "error", why);
    } else {
        r->prestart = req.prestart;
        send_control(r, "started", NULL, NULL);
    }
    start_request_free(&req);
}

/* {"type":"context","workspace":...,"context":{...}}: a pre-started command learns its Session.
 * The Workspace is mounted (NFS) or checked first; then "context" goes to the command's stdin as
 * one line, before any message, and the host hears "started" (or an error, as for a start). */
static void handle_context(struct relay *r, struct json_span msg)
{
    struct json_span ctx;
    char path[PATH_MAX], nfs[256], why[512];
    if (!r->prestart || r->context_given || r->cmd_pid <= 0 || r->cmd_stdin < 0) {
        send_control(r, "error", "error",
                     r->context_given ? "the context was already given"
                                      : "no pre-started command is running");
        return;
    }
    if (jspan_member(msg, "context", &ctx) != 1 || !jspan_is_object(ctx) ||
        parse_workspace(msg, path, sizeof path, nfs, sizeof nfs) != 0) {
        send_control(r, "error", "error",
                     "context needs a \"context\" object and a workspace path, "
                     "{\"path\":...,\"nfs\":...} or null");
        return;
    }
    if (workspace_ready(path, nfs, why, sizeof why) != 0) {
        send_control(r, "error", "error", why);
        return;
    }
    if (relay_buf_append(&r->cmd_in, ctx.p, ctx.len) != 0 ||
        relay_buf_append(&r->cmd_in, "\n", 1) != 0) {
        send_control(r, "error", "error", "the App's command is not reading its input");
        return;
    }
    r->context_given = true;
    send_control(r, "started", NULL, NULL);
}

static void handle_host_line(struct relay *r, const char *line, size_t len)
{
    struct json_span msg, type, id;
    if (len == 0)
        return;
    if (jspan_parse(line, len, &msg) != 0 || !jspan_is_object(msg)) {
        send_log(r, "sbx-agent: ignored a line from the host that is not a JSON object", "", 0);
        return;
    }
    if (jspan_member(msg, "type", &type) == 1) {
        char t[32];
        if (jspan_string_decode(type, t, sizeof t) == 0 && strcmp(t, "start") == 0)
            handle_start(r, msg);
        else if (strcmp(t, "context") == 0)
            handle_context(r, msg);
        else
            send_log(r, "sbx-agent: ignored an unknown control line", "", 0);
        return;
    }
    if (jspan_member(msg, "id", &id) != 1) {
        send_log(r, "sbx-agent: ignored a host line with neither type nor id", "", 0);
        return;
    }
    if (r->cmd_pid <= 0 || r->cmd_stdin < 0) {
        send_message_error(r, id, "the App's command is not running");
        return;
    }
    if (relay_buf_append(&r->cmd_in, line, len) != 0 || relay_buf_append(&r->cmd_in, "\n", 1)) {
        send_message_error(r, id, "the App's command is not reading its input");
    }
}

/* A line the command wrote to stdout: relayed only if it is an agent protocol line. A command that
 * prints {"type":...} must not be able to forge control lines (ready, exit) to the worker. */
static void handle_command_stdout(struct relay *r, const char *line, size_t len)
{
    struct json_span msg, v;
    if (len == 0)
        return;
    if (jspan_parse(line, len, &msg) == 0 && jspan_is_object(msg) &&
        jspan_member(msg, "id", &v) == 1 && jspan_member(msg, "type", &v) == 0) {
        if (relay_buf_append(&r->chan_out, line, len) == 0)
            relay_buf_append(&r->chan_out, "\n", 1);
        return;
    }
    /* A pre-started command's {"type":"ready"} (its init is done), before its Session came: said
     * to the host as "app_ready", which no other line can be. */
    char t[8];
    if (r->prestart && !r->context_given && !r->ready_said && jspan_parse(line, len, &msg) == 0 &&
        jspan_is_object(msg) && jspan_member(msg, "type", &v) == 1 &&
        jspan_string_decode(v, t, sizeof t) == 0 && strcmp(t, "ready") == 0) {
        r->ready_said = true;
        send_control(r, "app_ready", NULL, NULL);
        return;
    }
    send_log(r, "stdout: ", line, len);
}

static void handle_command_stderr(struct relay *r, const char *line, size_t len)
{
    send_log(r, "", line, len);
}

static void drain_command_pipe(struct relay *r, struct command_pipe *cp, bool is_stdout)
{
    const char *line;
    size_t len;
    uint64_t dropped = cp->reader.dropped;
    long got = line_reader_fill(&cp->reader, cp->fd);
    while (line_reader_next(&cp->reader, &line, &len) == 1) {
        if (is_stdout)
            handle_command_stdout(r, line, len);
        else
            handle_command_stderr(r, line, len);
    }
    if (cp->reader.dropped != dropped)
        send_log(r, "sbx-agent: dropped a line longer than the relay limit", "", 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        if (line_reader_rest(&cp->reader, &line, &len) == 1) {
            if (is_stdout)
                handle_command_stdout(r, line, len);
            else
                handle_command_stderr(r, line, len);
        }
        close_fd(&cp->fd);
    }
}

static void signal_command(struct relay *r, int sig)
{
    if (r->cmd_pid > 0) {
        kill(-r->cmd_pid, sig);
        kill(r->cmd_pid, sig);
    }
}

static void stop_command(struct relay *r)
{
    if (r->cmd_pid > 0 && r->kill_at_ms == 0) {
        signal_command(r, SIGTERM);
        r->kill_at_ms = now_ms() + RELAY_KILL_GRACE_MS;
    }
}

/* Reaps every child that exited: the command, and, as a pid namespace's init, any orphan. */
static void reap_children(struct relay *r)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid != r->cmd_pid)
            continue;
        r->cmd_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        r->cmd_pid = -1;
        r->drain_until_ms = now_ms() + RELAY_DRAIN_MS;
        close_fd(&r->cmd_stdin);
        /* Processes it left behind get the same end as it did. */
        kill(-pid, SIGKILL);
    }
}

static void handle_signals(struct relay *r)
{
    struct signalfd_siginfo si;
    while (read(r->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD)
            reap_children(r);
        else
            stop_command(r);
    }
}

static void read_channel(struct relay *r)
{
    long got = line_reader_fill(&r->chan_in, r->chan);
    const char *line;
    size_t len;
    uint64_t dropped = r->chan_in.dropped;
    while (line_reader_next(&r->chan_in, &line, &len) == 1)
        handle_host_line(r, line, len);
    if (r->chan_in.dropped != dropped)
        send_log(r, "sbx-agent: dropped a host line longer than the relay limit", "", 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        r->chan_closed = true;
        stop_command(r);
    }
}

static void write_queue(int *fd, struct relay_buf *q, bool *closed)
{
    ssize_t n = write(*fd, q->data, q->len);
    if (n > 0) {
        relay_buf_consume(q, (size_t)n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        q->len = 0;
        if (closed)
            *closed = true;
    }
}

/* True while the command may still produce output worth waiting for. */
static bool command_active(const struct relay *r)
{
    if (r->cmd_pid > 0)
        return true;
    if (r->cmd_pid == 0)
        return false;
    return (r->out.fd >= 0 || r->err.fd >= 0) && now_ms() < r->drain_until_ms;
}

static void relay_step(struct relay *r)
{
    struct pollfd p[5];
    int n = 0, ichan = -1, iin = -1, iout = -1, ierr = -1;
    p[n] = (struct pollfd){.fd = r->sigfd, .events = POLLIN};
    n++;
    if (!r->chan_closed) {
        short ev = 0;
        if (r->cmd_in.len < RELAY_QUEUE_HIGH && r->chan_out.len < RELAY_QUEUE_HIGH)
            ev |= POLLIN;
        if (r->chan_out.len)
            ev |= POLLOUT;
        ichan = n;
        p[n++] = (struct pollfd){.fd = r->chan, .events = ev};
    }
    if (r->cmd_stdin >= 0 && r->cmd_in.len) {
        iin = n;
        p[n++] = (struct pollfd){.fd = r->cmd_stdin, .events = POLLOUT};
    }
    bool room = r->chan_out.len < RELAY_QUEUE_HIGH;
    if (r->out.fd >= 0 && room) {
        iout = n;
        p[n++] = (struct pollfd){.fd = r->out.fd, .events = POLLIN};
    }
    if (r->err.fd >= 0 && room) {
        ierr = n;
        p[n++] = (struct pollfd){.fd = r->err.fd, .events = POLLIN};
    }
    int timeout = 200; /* bounds how late a kill or drain deadline is noticed */
    if (poll(p, (nfds_t)n, timeout) < 0)
        return;
    if (p[0].revents)
        handle_signals(r);
    if (ichan >= 0 && (p[ichan].revents & POLLOUT))
        write_queue(&r->chan, &r->chan_out, &r->chan_closed);
    if (ichan >= 0 && (p[ichan].revents & (POLLIN | POLLHUP | POLLERR)) && !r->chan_closed)
        read_channel(r);
    if (iin >= 0 && p[iin].revents) {
        bool broken = false;
        write_queue(&r->cmd_stdin, &r->cmd_in, &broken);
        if (broken)
            close_fd(&r->cmd_stdin);
    }
    if (iout >= 0 && p[iout].revents)
        drain_command_pipe(r, &r->out, true);
    if (ierr >= 0 && p[ierr].revents)
        drain_command_pipe(r, &r->err, false);
    if (r->kill_at_ms && r->cmd_pid > 0 && now_ms() >= r->kill_at_ms)
        signal_command(r, SIGKILL);
}

/* Writes what is queued for the host, waiting at most timeout_ms. */
static void flush_channel(struct relay *r, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (!r->chan_closed && r->chan_out.len && now_ms() < deadline) {
        struct pollfd p = {.fd = r->chan, .events = POLLOUT};
        if (poll(&p, 1, 100) > 0)
            write_queue(&r->chan, &r->chan_out, &r->chan_closed);
    }
}

static int setup_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return -1;
    /* Every disposition back to its default once, here (an ignored signal stays ignored across
     * exec, and whoever started the relay may have ignored some), so that a command's child
     * has only SIGPIPE to reset (exec_command) instead of NSIG signals at every start. */
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

int relay_run(int channel_fd, struct relay_result *result)
{
    struct relay r = {
        .chan = channel_fd, .cmd_stdin = -1, .cmd_status = -1, .out.fd = -1, .err.fd = -1};
    result->command_status = -1;
    result->channel_closed = false;
    r.sigfd = setup_signals();
    if (r.sigfd < 0)
        return -1;
    set_nonblocking(channel_fd);
    line_reader_init(&r.chan_in, RELAY_MAX_LINE);
    line_reader_init(&r.out.reader, RELAY_MAX_LINE);
    line_reader_init(&r.err.reader, RELAY_MAX_LINE);
    relay_buf_init(&r.chan_out, RELAY_QUEUE_LIMIT);
    relay_buf_init(&r.cmd_in, RELAY_QUEUE_LIMIT);

    struct utsname u;
    send_control(&r, "ready", "kernel", uname(&u) == 0 ? u.release : "unknown");

    /* Before start: only the host. After: until the command and its output are done. */
    while (!r.chan_closed && (r.cmd_pid == 0 || command_active(&r)))
        relay_step(&r);
    /* The host went away: the command is being stopped; wait for it (SIGKILL after the grace). */
    while (r.cmd_pid > 0)
        relay_step(&r);
    if (r.cmd_pid == -1) {
        char status[32];
        snprintf(status, sizeof status, "%d", r.cmd_status);
        struct relay_buf line;
        relay_buf_init(&line, 128);
        relay_buf_puts(&line, "{\"type\":\"exit\",\"status\":");
        relay_buf_puts(&line, status);
        relay_buf_puts(&line, "}");
        send_line(&r, &line);
        relay_buf_free(&line);
    }
    flush_channel(&r, 5000);
    result->command_status = r.cmd_status;
    result->channel_closed = r.chan_closed;

    close_fd(&r.cmd_stdin);
    close_fd(&r.out.fd);
    close_fd(&r.err.fd);
    close_fd(&r.sigfd);
    line_reader_free(&r.chan_in);
    line_reader_free(&r.out.reader);
    line_reader_free(&r.err.reader);
    relay_buf_free(&r.chan_out);
    relay_buf_free(&r.cmd_in);
    return 0;
}

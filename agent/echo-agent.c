/*
 * sbx-echo-agent: the quickstart App's command and the agent every test can rely on.
 *
 * For each line {"id":I,"seq":S,"body":B} on stdin it answers on stdout
 *   {"id":I,"reply":{"echo":B,"kernel":"<uname -r>","hostname":"<uname
 * -n>","pid":P,"uid":U,"gid":G}} When B is an object, these members act before the answer (in this
 * order): "stderr":"text"                   writes text as one line to stderr (the Sandbox's log)
 *   "sleepMs":N                       sleeps N ms (at most 10 minutes)
 *   "crash":true                      exits with status 3 without answering
 *   "writeFile":{"path":P,"data":D}   writes D to P        -> reply
 * "writeFile":{"ok":true}|{"error":..} "readFile":{"path":P}             reads P (up to 1 MiB) ->
 * reply "readFile":{"data":..}|{"error":..} "run":["/bin/ps","-A"]            runs a program,
 * collects stdout+stderr (up to 64 KiB)
 *                                      -> reply "run":{"status":N,"output":".."}|{"error":..}
 * Lines that are not JSON objects with an id get {"id":null,"error":"..."}.
 *
 * Started ahead of its Session (an App with prestart, docs/worker.md) it is told its Session by a
 * line {"type":"context",...} before the first message: it keeps that line and the names in
 * /workspace at that moment, and every reply then carries "context" (the last such line, or
 * null), "contexts" (how many came), "workspaceAtContext" (those names), "sessionEnv" (its
 * SBX_SESSION_ID, or null) and "cwd". For the tests of pre-started agents, from its environment:
 *   SBX_ECHO_READY=1           prints {"type":"ready"} once started
 *   SBX_ECHO_WARM_EXIT_MS=N    exits with status 3 (after a line on stderr) when no line came
 *                              on stdin within N ms of its start: an agent dying while warm
 */
#include "relay.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ECHO_MAX_PATH 4096
#define ECHO_MAX_FILE (1u << 20)
#define ECHO_MAX_RUN_OUTPUT (64u << 10)
#define ECHO_MAX_SLEEP_MS 600000

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            exit(1); /* nobody reads our answers any more */
        p += w;
        n -= (size_t)w;
    }
}

static void reply_error(const char *id_json, size_t id_len, const char *why)
{
    struct relay_buf out;
    relay_buf_init(&out, RELAY_MAX_LINE * 2);
    relay_buf_puts(&out, "{\"id\":");
    relay_buf_append(&out, id_json, id_len);
    relay_buf_puts(&out, ",\"error\":");
    relay_buf_json_string(&out, why, strlen(why));
    relay_buf_puts(&out, "}\n");
    write_all(1, out.data, out.len);
    relay_buf_free(&out);
}

static void error_object(struct relay_buf *out, const char *what, int err)
{
    char why[256];
    snprintf(why, sizeof why, "%s: %s", what, strerror(err));
    relay_buf_puts(out, "{\"error\":");
    relay_buf_json_string(out, why, strlen(why));
    relay_buf_puts(out, "}");
}

static void do_write_file(struct json_span spec, struct relay_buf *out)
{
    struct json_span v;
    char path[ECHO_MAX_PATH];
    char *data = malloc(ECHO_MAX_FILE + 1);
    if (!data || jspan_member(spec, "path", &v) != 1 ||
        jspan_string_decode(v, path, sizeof path) != 0 || jspan_member(spec, "data", &v) != 1 ||
        jspan_string_decode(v, data, ECHO_MAX_FILE + 1) != 0) {
        relay_buf_puts(out,
                       "{\"error\":\"writeFile needs path and data strings (data <= 1 MiB)\"}");
        free(data);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t len = strlen(data);
    if (fd < 0) {
        error_object(out, "open", errno);
    } else if (write(fd, data, len) != (ssize_t)len) {
        error_object(out, "write", errno);
    } else if (fsync(fd) != 0) {
        error_object(out, "fsync", errno);
    } else {
        relay_buf_puts(out, "{\"ok\":true}");
    }
    if (fd >= 0)
        close(fd);
    free(data);
}

static void do_read_file(struct json_span spec, struct relay_buf *out)
{
    struct json_span v;
    char path[ECHO_MAX_PATH];
    if (jspan_member(spec, "path", &v) != 1 || jspan_string_decode(v, path, sizeof path) != 0) {
        relay_buf_puts(out, "{\"error\":\"readFile needs a path string\"}");
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        error_object(out, "open", errno);
        return;
    }
    char *data = malloc(ECHO_MAX_FILE);
    size_t len = 0;
    ssize_t n = 0;
    while (data && len < ECHO_MAX_FILE && (n = read(fd, data + len, ECHO_MAX_FILE - len)) > 0)
        len += (size_t)n;
    if (!data || n < 0) {
        error_object(out, "read", data ? errno : ENOMEM);
    } else {
        relay_buf_puts(out, "{\"data\":");
        relay_buf_json_string(out, data, len);
        relay_buf_puts(out, "}");
    }
    free(data);
    close(fd);
}

static void do_run(struct json_span argv_json, struct relay_buf *out)
{
    char *argv[33] = {0};
    size_t argc = 0, pos = 0;
    struct json_span elem;
    int ok = jspan_is_array(argv_json);
    while (ok && jspan_array_next(argv_json, &pos, &elem) == 1) {
        argv[argc] = malloc(ECHO_MAX_PATH);
        if (argc == 32 || !argv[argc] || jspan_string_decode(elem, argv[argc], ECHO_MAX_PATH)) {
            ok = 0;
            argc++;
            break;
        }
        argc++;
    }
    int pfd[2];
    if (!ok || argc == 0) {
        relay_buf_puts(out, "{\"error\":\"run needs an array of 1 to 32 strings\"}");
    } else if (pipe2(pfd, O_CLOEXEC) != 0) {
        error_object(out, "pipe", errno);
    } else {
        pid_t pid = fork();
        if (pid == 0) {
            int devnull = open("/dev/null", O_RDONLY);
            dup2(devnull >= 0 ? devnull : pfd[1], 0);
            dup2(pfd[1], 1);
            dup2(pfd[1], 2);
            execvp(argv[0], argv);
            _exit(127);
        }
        close(pfd[1]);
        char *buf = malloc(ECHO_MAX_RUN_OUTPUT);
        size_t len = 0;
        ssize_t n;
        char sink[4096];
        /* Read to the end even past the cap, so the program never blocks on a full pipe. */
        while ((n = read(pfd[0], sink, sizeof sink)) > 0 || (n < 0 && errno == EINTR)) {
            size_t take = n > 0 ? (size_t)n : 0;
            if (buf && len + take > ECHO_MAX_RUN_OUTPUT)
                take = ECHO_MAX_RUN_OUTPUT - len;
            if (buf)
                memcpy(buf + len, sink, take);
            len += take;
        }
        close(pfd[0]);
        int status = 0;
        if (pid < 0) {
            error_object(out, "fork", errno);
        } else {
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            char head[64];
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            snprintf(head, sizeof head, "{\"status\":%d,\"output\":", code);
            relay_buf_puts(out, head);
            relay_buf_json_string(out, buf ? buf : "", buf ? len : 0);
            relay_buf_puts(out, "}");
        }
        free(buf);
    }
    for (size_t i = 0; i < argc; i++)
        free(argv[i]);
}

static void log_to_stderr(struct json_span text)
{
    char *line = malloc(RELAY_MAX_LINE);
    if (line && jspan_string_decode(text, line, RELAY_MAX_LINE) == 0) {
        for (char *p = line; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        size_t n = strlen(line);
        line[n] = '\n';
        write_all(2, line, n + 1);
    }
    free(line);
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* What a context line said (see the top). */
static struct relay_buf context_line, workspace_names;
static int contexts;

static void take_context(const char *line, size_t len)
{
    contexts++;
    context_line.len = 0;
    relay_buf_append(&context_line, line, len);
    workspace_names.len = 0;
    relay_buf_puts(&workspace_names, "[");
    DIR *d = opendir("/workspace");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < 64) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n++)
            relay_buf_puts(&workspace_names, ",");
        relay_buf_json_string(&workspace_names, e->d_name, strlen(e->d_name));
    }
    if (d)
        closedir(d);
    relay_buf_puts(&workspace_names, "]");
}

static void put_context(struct relay_buf *out)
{
    char buf[PATH_MAX], head[48];
    const char *sid = getenv("SBX_SESSION_ID");
    relay_buf_puts(out, ",\"context\":");
    if (contexts)
        relay_buf_append(out, context_line.data, context_line.len);
    else
        relay_buf_puts(out, "null");
    snprintf(head, sizeof head, ",\"contexts\":%d,\"workspaceAtContext\":", contexts);
    relay_buf_puts(out, head);
    if (contexts)
        relay_buf_append(out, workspace_names.data, workspace_names.len);
    else
        relay_buf_puts(out, "null");
    relay_buf_puts(out, ",\"sessionEnv\":");
    if (sid)
        relay_buf_json_string(out, sid, strlen(sid));
    else
        relay_buf_puts(out, "null");
    relay_buf_puts(out, ",\"cwd\":");
    if (getcwd(buf, sizeof buf))
        relay_buf_json_string(out, buf, strlen(buf));
    else
        relay_buf_puts(out, "null");
}

static void answer(const char *line, size_t len, const struct utsname *u)
{
    struct json_span msg, id, body, v;
    if (jspan_parse(line, len, &msg) != 0 || !jspan_is_object(msg)) {
        reply_error("null", 4, "not a JSON object");
        return;
    }
    char type[16];
    if (jspan_member(msg, "type", &v) == 1 && jspan_string_decode(v, type, sizeof type) == 0 &&
        strcmp(type, "context") == 0) {
        take_context(line, len);
        return;
    }
    if (jspan_member(msg, "id", &id) != 1) {
        reply_error("null", 4, "the line has no id");
        return;
    }
    if (jspan_member(msg, "body", &body) != 1)
        body = (struct json_span){"null", 4};
    bool is_obj = jspan_is_object(body), crash = false;
    int64_t ms;
    if (is_obj && jspan_member(body, "stderr", &v) == 1)
        log_to_stderr(v);
    if (is_obj && jspan_member(body, "sleepMs", &v) == 1 && jspan_int64(v, &ms) == 0 && ms > 0)
        sleep_ms(ms > ECHO_MAX_SLEEP_MS ? ECHO_MAX_SLEEP_MS : ms);
    if (is_obj && jspan_member(body, "crash", &v) == 1 && jspan_bool(v, &crash) == 0 && crash)
        exit(3);

    struct relay_buf out;
    relay_buf_init(&out, RELAY_MAX_LINE * 3);
    char ids[96];
    relay_buf_puts(&out, "{\"id\":");
    relay_buf_append(&out, id.p, id.len);
    relay_buf_puts(&out, ",\"reply\":{\"echo\":");
    relay_buf_append(&out, body.p, body.len);
    relay_buf_puts(&out, ",\"kernel\":");
    relay_buf_json_string(&out, u->release, strlen(u->release));
    relay_buf_puts(&out, ",\"hostname\":");
    relay_buf_json_string(&out, u->nodename, strlen(u->nodename));
    snprintf(ids, sizeof ids, ",\"pid\":%d,\"uid\":%u,\"gid\":%u", (int)getpid(),
             (unsigned)getuid(), (unsigned)getgid());
    relay_buf_puts(&out, ids);
    put_context(&out);
    if (is_obj && jspan_member(body, "writeFile", &v) == 1) {
        relay_buf_puts(&out, ",\"writeFile\":");
        do_write_file(v, &out);
    }
    if (is_obj && jspan_member(body, "readFile", &v) == 1) {
        relay_buf_puts(&out, ",\"readFile\":");
        do_read_file(v, &out);
    }
    if (is_obj && jspan_member(body, "run", &v) == 1) {
        relay_buf_puts(&out, ",\"run\":");
        do_run(v, &out);
    }
    if (relay_buf_puts(&out, "}}\n") != 0) {
        relay_buf_free(&out);
        reply_error(id.p, id.len, "the reply is too large");
        return;
    }
    write_all(1, out.data, out.len);
    relay_buf_free(&out);
}

int main(void)
{
    struct utsname u;
    if (uname(&u) != 0) {
        perror("sbx-echo-agent: uname");
        return 1;
    }
    relay_buf_init(&context_line, 8192);
    relay_buf_init(&workspace_names, 64 * 1024);
    const char *ready = getenv("SBX_ECHO_READY"), *warm_exit = getenv("SBX_ECHO_WARM_EXIT_MS");
    if (ready && strcmp(ready, "1") == 0)
        write_all(1, "{\"type\":\"ready\"}\n", strlen("{\"type\":\"ready\"}\n"));
    if (warm_exit && atoi(warm_exit) > 0) {
        struct pollfd p = {.fd = 0, .events = POLLIN};
        int rc;
        while ((rc = poll(&p, 1, atoi(warm_exit))) < 0 && errno == EINTR)
            ;
        if (rc == 0) {
            fprintf(stderr, "sbx-echo-agent: no line within %s ms, exiting\n", warm_exit);
            return 3;
        }
    }
    struct line_reader in;
    line_reader_init(&in, RELAY_MAX_LINE);
    for (;;) {
        uint64_t dropped = in.dropped;
        long got = line_reader_fill(&in, 0);
        if (got < 0 && errno == EINTR)
            continue;
        const char *line;
        size_t len;
        while (line_reader_next(&in, &line, &len) == 1)
            if (len > 0)
                answer(line, len, &u);
        if (in.dropped != dropped)
            reply_error("null", 4, "line too long");
        if (got <= 0) {
            if (line_reader_rest(&in, &line, &len) == 1)
                answer(line, len, &u);
            break;
        }
    }
    line_reader_free(&in);
    return 0;
}

/*
 * test_image_user.c: unit.agent.image_user: the image's part of the start line in sbx-agent.
 *
 * image_user_resolve() against a made-up image tree (names, uids, groups, supplementary groups,
 * unknown ones refused with a reason), then the real sbx-agent binary on a socketpair: a start
 * line with env, cwd and user runs the echo agent with exactly that environment (plus HOME from
 * /etc/passwd), in that directory, as that user (the host's root may switch; the host's
 * /etc/passwd stands in for an image's), and bad values are refused without starting anything.
 */
#include "image_user.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tree[64];
static int tree_fd = -1, empty_fd = -1;

static void write_file(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tree, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tree, sizeof tree, "/tmp/sbx-image-user-XXXXXX");
    if (!mkdtemp(tree))
        return -1;
    char etc[128];
    snprintf(etc, sizeof etc, "%s/etc", tree);
    mkdir(etc, 0755);
    write_file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                             "# a comment\n"
                             "broken line\n"
                             "app:x:1000:1000:App:/home/app:/bin/sh\n"
                             "nohome:x:1001:1001::::\n");
    write_file("etc/group", "root:x:0:\n"
                            "app:x:1000:\n"
                            "audio:x:29:app,other\n"
                            "video:x:44:other\n"
                            "staff:x:50:app\n");
    tree_fd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char empty[128];
    snprintf(empty, sizeof empty, "%s/etc/empty", tree);
    mkdir(empty, 0755);
    empty_fd = open(empty, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return tree_fd >= 0 && empty_fd >= 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tree);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_resolves_names_and_ids(void **state)
{
    (void)state;
    struct image_user u;
    char why[256];
    assert_int_equal(image_user_resolve("app", tree_fd, &u, why, sizeof why), 0);
    assert_int_equal(u.uid, 1000);
    assert_int_equal(u.gid, 1000);
    assert_string_equal(u.home, "/home/app");
    assert_string_equal(u.name, "app");
    /* Its primary group first, then the groups that list it. */
    assert_int_equal(u.ngroups, 3);
    assert_int_equal(u.groups[0], 1000);
    assert_int_equal(u.groups[1], 29);
    assert_int_equal(u.groups[2], 50);

    assert_int_equal(image_user_resolve("1000", tree_fd, &u, why, sizeof why), 0);
    assert_string_equal(u.name, "app");
    assert_int_equal(u.gid, 1000);
    /* A uid the image does not list: group 0, home /. */
    assert_int_equal(image_user_resolve("4242", tree_fd, &u, why, sizeof why), 0);
    assert_int_equal(u.uid, 4242);
    assert_int_equal(u.gid, 0);
    assert_string_equal(u.home, "/");
    assert_int_equal(u.ngroups, 1);
    assert_int_equal(image_user_resolve("app:video", tree_fd, &u, why, sizeof why), 0);
    assert_int_equal(u.uid, 1000);
    assert_int_equal(u.gid, 44);
    assert_int_equal(image_user_resolve("4242:4343", tree_fd, &u, why, sizeof why), 0);
    assert_int_equal(u.gid, 4343);
    assert_int_equal(image_user_resolve("nohome", tree_fd, &u, why, sizeof why), 0);
    assert_string_equal(u.home, "/");
}

static void test_refuses_what_the_image_lacks(void **state)
{
    (void)state;
    struct image_user u;
    char why[256];
    assert_int_equal(image_user_resolve("ghost", tree_fd, &u, why, sizeof why), -1);
    assert_non_null(strstr(why, "user 'ghost' is not in the image's /etc/passwd"));
    assert_int_equal(image_user_resolve("app:ghosts", tree_fd, &u, why, sizeof why), -1);
    assert_non_null(strstr(why, "group 'ghosts' is not in the image's /etc/group"));
    assert_int_equal(image_user_resolve("", tree_fd, &u, why, sizeof why), -1);
    assert_int_equal(image_user_resolve(":0", tree_fd, &u, why, sizeof why), -1);
    assert_int_equal(image_user_resolve("99999999999", tree_fd, &u, why, sizeof why), -1);
    /* An image without /etc/passwd knows no names, but numeric ids still work. */
    assert_int_equal(image_user_resolve("app", empty_fd, &u, why, sizeof why), -1);
    assert_int_equal(image_user_resolve("7:8", empty_fd, &u, why, sizeof why), 0);
    assert_int_equal(u.uid, 7);
    assert_int_equal(u.gid, 8);
}

/* A link in the image cannot send the lookup to the host's files: the worker resolves an image's
 * user on the host, in the cached tree, where etc -> /etc must mean the tree's own etc. */
static void test_links_stay_inside_the_tree(void **state)
{
    (void)state;
    char escape[128];
    snprintf(escape, sizeof escape, "%s/escape", tree);
    assert_int_equal(mkdir(escape, 0755), 0);
    char link_path[160];
    snprintf(link_path, sizeof link_path, "%s/etc", escape);
    assert_int_equal(symlink("/etc", link_path), 0);
    int fd = open(escape, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    struct image_user u;
    char why[256];
    /* The host knows root; the tree, whose etc is a link to itself, knows nobody. */
    assert_int_equal(image_user_resolve("root", -1, &u, why, sizeof why), 0);
    assert_int_equal(image_user_resolve("root", fd, &u, why, sizeof why), -1);
    assert_non_null(strstr(why, "not in the image's /etc/passwd"));
    close(fd);
}

/* An image whose /etc/passwd and /etc/group are FIFOs: the lookup (on the worker's thread) must
 * not wait for a writer. They count as absent: numeric ids work, names are refused. */
static void test_fifo_databases_do_not_block(void **state)
{
    (void)state;
    char dir[128], etc[160], fifo[192];
    snprintf(dir, sizeof dir, "%s/fifo", tree);
    snprintf(etc, sizeof etc, "%s/etc", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkdir(etc, 0755), 0);
    snprintf(fifo, sizeof fifo, "%s/passwd", etc);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    snprintf(fifo, sizeof fifo, "%s/group", etc);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    struct image_user u;
    char why[256];
    assert_int_equal(image_user_resolve("0", fd, &u, why, sizeof why), 0);
    assert_int_equal(u.uid, 0);
    assert_int_equal(image_user_resolve("7:8", fd, &u, why, sizeof why), 0);
    assert_int_equal(u.gid, 8);
    assert_int_equal(image_user_resolve("app", fd, &u, why, sizeof why), -1);
    assert_non_null(strstr(why, "not in the image's /etc/passwd"));
    assert_int_equal(image_user_resolve("0:staff", fd, &u, why, sizeof why), -1);
    assert_non_null(strstr(why, "not in the image's /etc/group"));
    close(fd);
}

/* ---- the real sbx-agent ---- */

static char *read_reply(int fd, char *buf, size_t len)
{
    for (;;) {
        size_t got = 0;
        while (got + 1 < len) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 5000) != 1 || read(fd, buf + got, 1) != 1)
                return NULL;
            if (buf[got] == '\n')
                break;
            got++;
        }
        buf[got] = '\0';
        if (!strstr(buf, "\"type\":\"log\""))
            return buf;
    }
}

static void send_text(int fd, const char *text)
{
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
}

static pid_t start_agent(int *fd)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        char num[16];
        snprintf(num, sizeof num, "%d", sv[1]);
        execl(SBX_AGENT_BIN, "sbx-agent", "--channel-fd", num, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    *fd = sv[0];
    char buf[4096];
    assert_non_null(read_reply(*fd, buf, sizeof buf));
    assert_non_null(strstr(buf, "\"type\":\"ready\""));
    return pid;
}

static void stop_agent(pid_t pid, int fd)
{
    close(fd);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

/* Runs argv (a JSON array) through the echo agent; returns its output (caller frees). */
static char *run(int fd, const char *id, const char *argv_json)
{
    char msg[512], buf[65536];
    snprintf(msg, sizeof msg, "{\"id\":\"%s\",\"seq\":1,\"body\":{\"run\":%s}}\n", id, argv_json);
    send_text(fd, msg);
    assert_non_null(read_reply(fd, buf, sizeof buf));
    json_t *line = json_loads(buf, 0, NULL);
    assert_non_null(line);
    json_t *reply = json_object_get(line, "reply");
    const char *out = json_string_value(json_object_get(json_object_get(reply, "run"), "output"));
    char *copy = strdup(out ? out : "");
    json_decref(line);
    return copy;
}

static void test_agent_applies_env_cwd_user(void **state)
{
    (void)state;
    if (geteuid() != 0 || access("/etc/passwd", R_OK) != 0)
        skip();
    signal(SIGPIPE, SIG_IGN);
    int fd;
    pid_t pid = start_agent(&fd);
    char buf[8192];
    send_text(fd, "{\"type\":\"start\",\"argv\":[\"" SBX_ECHO_AGENT_BIN "\"],\"workspace\":null,"
                  "\"env\":[\"FLAVOUR=image\",\"PATH=/usr/bin:/bin\"],\"cwd\":\"/tmp\","
                  "\"user\":\"nobody\"}\n");
    assert_non_null(read_reply(fd, buf, sizeof buf));
    assert_string_equal(buf, "{\"type\":\"started\"}");

    /* The echo agent reports its own uid; run shows the environment and directory. */
    char *env = run(fd, "m_env", "[\"env\"]");
    assert_string_equal(env, "FLAVOUR=image\nPATH=/usr/bin:/bin\nHOME=/nonexistent\n");
    free(env);
    char *dir = run(fd, "m_pwd", "[\"pwd\"]");
    assert_string_equal(dir, "/tmp\n");
    free(dir);
    char *ids = run(fd, "m_id", "[\"id\",\"-u\"]");
    assert_string_equal(ids, "65534\n");
    free(ids);
    stop_agent(pid, fd);
}

static void test_agent_refuses_bad_start_fields(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    int fd;
    pid_t pid = start_agent(&fd);
    char buf[8192];
    static const char *const bad[][2] = {
        {"\"env\":\"A=B\"", "env must be an array"},
        {"\"env\":[\"NOEQUALS\"]", "KEY=VALUE"},
        {"\"env\":[\"=x\"]", "KEY=VALUE"},
        {"\"cwd\":\"relative/dir\"", "cwd must be an absolute path"},
        {"\"cwd\":\"/no/such/dir\"", "cannot change to the working directory /no/such/dir"},
        {"\"user\":\"no-such-user-here\"", "is not in the image's /etc/passwd"},
        {"\"user\":42", "user must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char line[512];
        snprintf(line, sizeof line,
                 "{\"type\":\"start\",\"argv\":[\"" SBX_ECHO_AGENT_BIN "\"],%s}\n", bad[i][0]);
        send_text(fd, line);
        assert_non_null(read_reply(fd, buf, sizeof buf));
        if (!strstr(buf, "\"type\":\"error\"") || !strstr(buf, bad[i][1]))
            fail_msg("start with %s answered %s", bad[i][0], buf);
    }
    /* Nothing started: a good start still works, with sbx's default environment. */
    send_text(fd,
              "{\"type\":\"start\",\"argv\":[\"" SBX_ECHO_AGENT_BIN "\"],\"workspace\":null}\n");
    assert_non_null(read_reply(fd, buf, sizeof buf));
    assert_string_equal(buf, "{\"type\":\"started\"}");
    char *env = run(fd, "m_env", "[\"env\"]");
    assert_non_null(strstr(env, "LANG=C.UTF-8\n"));
    assert_non_null(strstr(env, "HOME=/tmp\n"));
    free(env);
    stop_agent(pid, fd);
}

/* The start line's files: one written as given, one after a copy of the first existing file its
 * "prependFirstOf" names (the image's CA bundle, docs/secrets.md), a newline between them when
 * that file lacks one. */
static void test_agent_writes_start_files(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/sbx-test-files-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char image[128], plain[128], bundle[128], line[1024], buf[8192];
    snprintf(image, sizeof image, "%s/image-bundle.pem", dir);
    snprintf(plain, sizeof plain, "%s/ca.pem", dir);
    snprintf(bundle, sizeof bundle, "%s/bundle.pem", dir);
    FILE *f = fopen(image, "w");
    assert_non_null(f);
    fputs("IMAGE ROOTS", f); /* no final newline */
    fclose(f);
    int fd;
    pid_t pid = start_agent(&fd);
    snprintf(line, sizeof line,
             "{\"type\":\"start\",\"argv\":[\"" SBX_ECHO_AGENT_BIN "\"],\"workspace\":null,"
             "\"files\":[{\"path\":\"%s\",\"content\":\"CA\\n\"},"
             "{\"path\":\"%s\",\"content\":\"CA\\n\",\"prependFirstOf\":[\"%s/none\",\"%s\"]}]}\n",
             plain, bundle, dir, image);
    send_text(fd, line);
    assert_non_null(read_reply(fd, buf, sizeof buf));
    assert_string_equal(buf, "{\"type\":\"started\"}");
    stop_agent(pid, fd);
    char got[256] = "";
    f = fopen(plain, "r");
    assert_non_null(f);
    got[fread(got, 1, sizeof got - 1, f)] = '\0';
    fclose(f);
    assert_string_equal(got, "CA\n");
    f = fopen(bundle, "r");
    assert_non_null(f);
    got[fread(got, 1, sizeof got - 1, f)] = '\0';
    fclose(f);
    assert_string_equal(got, "IMAGE ROOTS\nCA\n");
    struct stat st;
    assert_int_equal(stat(bundle, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    unlink(image);
    unlink(plain);
    unlink(bundle);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolves_names_and_ids),
        cmocka_unit_test(test_refuses_what_the_image_lacks),
        cmocka_unit_test(test_links_stay_inside_the_tree),
        cmocka_unit_test(test_fifo_databases_do_not_block),
        cmocka_unit_test(test_agent_applies_env_cwd_user),
        cmocka_unit_test(test_agent_refuses_bad_start_fields),
        cmocka_unit_test(test_agent_writes_start_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

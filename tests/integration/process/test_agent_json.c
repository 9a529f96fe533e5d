/*
 * test_agent_json.c: the in-Sandbox agents' line-JSON reader (agent/json_check.c) and writer
 * (agent/relay.c) against valid, malformed and hostile input, the line splitter's bounds, and
 * sbx-agent itself surviving a host that sends garbage (run outside any Sandbox, over a
 * socketpair).
 */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static bool parses(const char *s)
{
    struct json_span v;
    return jspan_parse(s, strlen(s), &v) == 0;
}

static void test_accepts_valid_json(void **state)
{
    (void)state;
    const char *ok[] = {
        "{}",
        "[]",
        " {\"a\" : [1, -2.5e+3, true, false, null, \"x\"]} ",
        "\"\\u00e9\\ud83d\\ude00\"",
        "0",
        "-0",
        "1E9",
        "{\"nested\":{\"deeper\":[[[]]]}}",
        "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!parses(ok[i]))
            fail_msg("rejected valid JSON: %s", ok[i]);
}

static void test_rejects_malformed_json(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        " ",
        "{",
        "}",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "[1,]",
        "[1 2]",
        "{a:1}",
        "{'a':1}",
        "01",
        "-",
        "1.",
        "1e",
        ".5",
        "+1",
        "NaN",
        "Infinity",
        "tru",
        "nul",
        "\"abc",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\u12g4\"",
        "\"tab\there\"",
        "{} {}",
        "[1]]",
        "\"\xc0\x80\"",
        "\"\xed\xa0\x80\"",
        "\"\xf5\x80\x80\x80\"",
        "\"\xe2\x82\"",
        "\"\x80\"",
        "\"\xff\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (parses(bad[i]))
            fail_msg("accepted invalid JSON #%zu: %s", i, bad[i]);
    /* A NUL byte inside the line is not JSON either. */
    struct json_span v;
    assert_int_equal(jspan_parse("\"a\0b\"", 5, &v), -1);
}

static void test_bounds_nesting_depth(void **state)
{
    (void)state;
    char deep[2 * (JSON_MAX_DEPTH + 1) + 1];
    for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        deep[2 * depth] = '\0';
        assert_int_equal(parses(deep), depth <= JSON_MAX_DEPTH);
    }
    /* A megabyte of '[' must be refused quickly, not overflow the stack. */
    size_t n = 1 << 20;
    char *huge = malloc(n + 1);
    memset(huge, '[', n);
    huge[n] = '\0';
    assert_false(parses(huge));
    free(huge);
}

static void test_object_lookup(void **state)
{
    (void)state;
    const char *line = "{\"type\":\"start\",\"argv\":[\"/bin/a\",\"b\\n\"],\"\\u0069d\":7,"
                       "\"type\":\"second\",\"workspace\":null}";
    struct json_span msg, v, elem;
    assert_int_equal(jspan_parse(line, strlen(line), &msg), 0);
    char text[64];
    assert_int_equal(jspan_member(msg, "type", &v), 1);
    assert_int_equal(jspan_string_decode(v, text, sizeof text), 0);
    assert_string_equal(text, "start"); /* the first of duplicate keys */
    int64_t id;
    assert_int_equal(jspan_member(msg, "id", &v), 1); /* escaped key "\u0069d" */
    assert_int_equal(jspan_int64(v, &id), 0);
    assert_int_equal(id, 7);
    assert_int_equal(jspan_member(msg, "workspace", &v), 1);
    assert_true(jspan_is_null(v));
    assert_int_equal(jspan_member(msg, "missing", &v), 0);
    assert_int_equal(jspan_member(msg, "argv", &v), 1);
    size_t pos = 0;
    assert_int_equal(jspan_array_next(v, &pos, &elem), 1);
    assert_int_equal(jspan_string_decode(elem, text, sizeof text), 0);
    assert_string_equal(text, "/bin/a");
    assert_int_equal(jspan_array_next(v, &pos, &elem), 1);
    assert_int_equal(jspan_string_decode(elem, text, sizeof text), 0);
    assert_string_equal(text, "b\n");
    assert_int_equal(jspan_array_next(v, &pos, &elem), 0);
    /* Lookups on non-objects find nothing. */
    struct json_span arr;
    assert_int_equal(jspan_parse("[1]", 3, &arr), 0);
    assert_int_equal(jspan_member(arr, "x", &v), 0);
}

static void test_string_decoding_edges(void **state)
{
    (void)state;
    struct json_span v;
    char out[16];
    /* Refused as the worker (jansson) refuses them: NUL, and surrogates not in a high-low pair. */
    assert_int_equal(jspan_parse("\"\\u0000\"", 8, &v), -1);
    assert_int_equal(jspan_parse("\"\\ud800x\"", 9, &v), -1);
    assert_int_equal(jspan_parse("\"\\udc00\"", 8, &v), -1);
    assert_int_equal(jspan_parse("\"\\ud800\\u0041\"", 14, &v), -1);
    assert_int_equal(jspan_parse("\"\\ud83d\\ude00\"", 14, &v), 0);
    assert_int_equal(jspan_string_decode(v, out, sizeof out), 0);
    assert_string_equal(out, "\xf0\x9f\x98\x80");
    assert_int_equal(jspan_parse("\"0123456789abcdef\"", 18, &v), 0);
    assert_int_equal(jspan_string_decode(v, out, sizeof out), -1); /* does not fit */
    assert_int_equal(jspan_parse("1", 1, &v), 0);
    assert_int_equal(jspan_string_decode(v, out, sizeof out), -1); /* not a string */
}

static void test_integers(void **state)
{
    (void)state;
    struct json_span v;
    int64_t n;
    const char *bad[] = {"1.5", "1e3", "9223372036854775808", "-9223372036854775809", "\"1\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(jspan_parse(bad[i], strlen(bad[i]), &v), 0);
        assert_int_equal(jspan_int64(v, &n), -1);
    }
    assert_int_equal(jspan_parse("-9223372036854775808", 20, &v), 0);
    assert_int_equal(jspan_int64(v, &n), 0);
    assert_true(n == INT64_MIN);
}

static void test_writer_always_produces_valid_json(void **state)
{
    (void)state;
    const char raw[] = "quote\" back\\ nl\n nul\0 bad\xff\xc0\x80 ok\xc3\xa9 del\x7f";
    struct relay_buf b;
    relay_buf_init(&b, 4096);
    assert_int_equal(relay_buf_json_string(&b, raw, sizeof raw - 1), 0);
    struct json_span v;
    assert_int_equal(jspan_parse(b.data, b.len, &v), 0);
    assert_true(jspan_is_string(v));
    relay_buf_free(&b);
    /* The cap holds: an append that does not fit fails and leaves the buffer as it was. */
    relay_buf_init(&b, 8);
    assert_int_equal(relay_buf_puts(&b, "12345"), 0);
    assert_int_equal(relay_buf_json_string(&b, "abcdef", 6), -1);
    assert_int_equal(b.len, 5);
    relay_buf_free(&b);
}

static void test_random_bytes_never_crash(void **state)
{
    (void)state;
    /* Deterministic noise biased towards JSON punctuation: parse and, where it parses, look up. */
    static const char alphabet[] = "{}[]\",:\\u0123456789.eE+-tfnrl \t\xc3\xa9\xff\x80";
    unsigned seed = 12345;
    char line[256];
    int parsed = 0;
    for (int i = 0; i < 200000; i++) {
        size_t len = (size_t)(rand_r(&seed) % (int)sizeof line);
        for (size_t j = 0; j < len; j++)
            line[j] = alphabet[rand_r(&seed) % (int)(sizeof alphabet - 1)];
        struct json_span v, m;
        if (jspan_parse(line, len, &v) == 0) {
            parsed++;
            jspan_member(v, "id", &m);
            size_t pos = 0;
            while (jspan_array_next(v, &pos, &m) == 1)
                ;
        }
    }
    assert_true(parsed > 0);
}

static void test_line_reader_bounds_lines(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct line_reader r;
    line_reader_init(&r, 16);
    const char input[] = "short\nthis line is far too long for the limit\nnext\ntail";
    assert_int_equal(write(p[1], input, sizeof input - 1), (ssize_t)(sizeof input - 1));
    close(p[1]);
    const char *line;
    size_t len;
    assert_true(line_reader_fill(&r, p[0]) > 0);
    assert_int_equal(line_reader_next(&r, &line, &len), 1);
    assert_int_equal(len, 5);
    assert_memory_equal(line, "short", 5);
    assert_int_equal(line_reader_next(&r, &line, &len), 1);
    assert_int_equal(len, 4);
    assert_memory_equal(line, "next", 4);
    assert_int_equal(line_reader_next(&r, &line, &len), 0);
    assert_int_equal(r.dropped, 1);
    assert_int_equal(line_reader_fill(&r, p[0]), 0);
    assert_int_equal(line_reader_rest(&r, &line, &len), 1);
    assert_memory_equal(line, "tail", 4);
    line_reader_free(&r);
    close(p[0]);
}

/* ---- sbx-agent against a hostile host ---- */

static char *read_line_fd(int fd, char *buf, size_t len)
{
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
    return buf;
}

/* Next line that is not a log line. */
static char *read_reply(int fd, char *buf, size_t len)
{
    while (read_line_fd(fd, buf, len))
        if (!strstr(buf, "\"type\":\"log\""))
            return buf;
    return NULL;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

static void test_agent_survives_hostile_host(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", sv[1]);
        execl(SBX_AGENT_BIN, "sbx-agent", "--channel-fd", fd, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    signal(SIGPIPE, SIG_IGN);
    char buf[8192];
    assert_non_null(read_line_fd(sv[0], buf, sizeof buf));
    assert_non_null(strstr(buf, "\"type\":\"ready\""));

    /* Garbage, an overlong line (5 MiB, over the relay's 4 MiB bound), a bad start. */
    const char *junk =
        "not json\n{\"type\":\n\xff\xfe\n[1,2]\n{\"type\":\"start\",\"argv\":\"x\"}\n";
    write_all(sv[0], junk, strlen(junk));
    assert_non_null(read_reply(sv[0], buf, sizeof buf));
    assert_non_null(strstr(buf, "\"type\":\"error\""));
    size_t big = 5u << 20;
    char *huge = malloc(big + 1);
    memset(huge, 'a', big);
    huge[big] = '\n';
    write_all(sv[0], huge, big + 1);
    free(huge);

    /* It still works: start the echo agent and get an answer. */
    const char *start = "{\"type\":\"start\",\"argv\":[\"" SBX_ECHO_AGENT_BIN "\"],"
                        "\"workspace\":null}\n";
    write_all(sv[0], start, strlen(start));
    assert_non_null(read_reply(sv[0], buf, sizeof buf));
    assert_string_equal(buf, "{\"type\":\"started\"}");
    const char *msg = "{\"id\":\"m1\",\"seq\":1,\"body\":{\"k\":\"\\u00e9\"}}\n";
    write_all(sv[0], msg, strlen(msg));
    assert_non_null(read_reply(sv[0], buf, sizeof buf));
    assert_non_null(strstr(buf, "{\"id\":\"m1\",\"reply\":{\"echo\":{\"k\":\"\\u00e9\"}"));

    /* Closing the channel stops the command and the agent. */
    close(sv[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
}

/* A start line's file with "prependFirstOf": the first of those files that exists is copied in
 * before the content (the CA bundle of an App with secrets: the image's bundle, then the
 * installation CA), with a newline between them; when none exists, the content alone. */
static void test_start_file_prepend(void **state)
{
    (void)state;
    char dir[] = "/tmp/sbx-agent-prepend-XXXXXX", path[256], line[2048], buf[8192];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/image.crt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("IMAGE-BUNDLE", f);
    fclose(f);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", sv[1]);
        execl(SBX_AGENT_BIN, "sbx-agent", "--channel-fd", fd, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    assert_non_null(read_line_fd(sv[0], buf, sizeof buf));
    snprintf(line, sizeof line,
             "{\"type\":\"start\",\"argv\":[\"" SBX_ECHO_AGENT_BIN "\"],\"workspace\":null,"
             "\"files\":[{\"path\":\"%s/bundle.pem\",\"content\":\"CA-PEM\\n\","
             "\"prependFirstOf\":[\"%s/missing.crt\",\"%s/image.crt\"]},"
             "{\"path\":\"%s/alone.pem\",\"content\":\"CA-PEM\\n\","
             "\"prependFirstOf\":[\"%s/missing.crt\"]}]}\n",
             dir, dir, dir, dir, dir);
    write_all(sv[0], line, strlen(line));
    assert_non_null(read_reply(sv[0], buf, sizeof buf));
    assert_string_equal(buf, "{\"type\":\"started\"}");
    char file[256], got[128];
    snprintf(file, sizeof file, "%s/bundle.pem", dir);
    f = fopen(file, "r");
    assert_non_null(f);
    size_t n = fread(got, 1, sizeof got - 1, f);
    got[n] = '\0';
    fclose(f);
    assert_string_equal(got, "IMAGE-BUNDLE\nCA-PEM\n");
    unlink(file);
    snprintf(file, sizeof file, "%s/alone.pem", dir);
    f = fopen(file, "r");
    assert_non_null(f);
    n = fread(got, 1, sizeof got - 1, f);
    got[n] = '\0';
    fclose(f);
    assert_string_equal(got, "CA-PEM\n");
    unlink(file);
    unlink(path);
    rmdir(dir);
    close(sv[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_valid_json),
        cmocka_unit_test(test_rejects_malformed_json),
        cmocka_unit_test(test_bounds_nesting_depth),
        cmocka_unit_test(test_object_lookup),
        cmocka_unit_test(test_string_decoding_edges),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_writer_always_produces_valid_json),
        cmocka_unit_test(test_random_bytes_never_crash),
        cmocka_unit_test(test_line_reader_bounds_lines),
        cmocka_unit_test(test_agent_survives_hostile_host),
        cmocka_unit_test(test_start_file_prepend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

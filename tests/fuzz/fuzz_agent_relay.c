/*
 * fuzz_agent_relay.c: libFuzzer target for the in-Sandbox agents' strict line-JSON reader
 * (agent/json_check.c) and line splitter (agent/relay.c), which read lines from the host (and, in
 * sbx-agent, from the App's command). Every line the splitter returns must be within its limit and
 * free of newlines; every value jspan_parse() accepts must also be accepted by jansson
 * (differential check), and the lookups sbx-agent and the echo agent make on it must stay inside
 * the span.
 */
#include "fuzz_common.h"
#include "relay.h"

#include "jansson_oracle.h"
#include <unistd.h>

static bool inside(struct json_span outer, struct json_span inner)
{
    return inner.p >= outer.p && inner.p + inner.len <= outer.p + outer.len;
}

static void walk(struct json_span v, int depth)
{
    struct json_span m;
    char text[256];
    int64_t i64;
    bool b;
    static const char *const keys[] = {"id",        "seq",      "body",    "type",
                                       "reply",     "error",    "sleepMs", "crash",
                                       "writeFile", "readFile", "path",    "data"};
    if (depth > JSON_MAX_DEPTH + 1)
        abort();
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        if (jspan_member(v, keys[k], &m) == 1) {
            FUZZ_CHECK(inside(v, m));
            (void)jspan_int64(m, &i64);
            (void)jspan_bool(m, &b);
            if (jspan_string_decode(m, text, sizeof text) == 0)
                FUZZ_CHECK(fuzz_terminated(text, sizeof text));
            walk(m, depth + 1);
        }
    if (jspan_is_array(v)) {
        size_t pos = 0;
        for (int n = 0; n < 1000 && jspan_array_next(v, &pos, &m) == 1; n++) {
            FUZZ_CHECK(inside(v, m));
            walk(m, depth + 1);
        }
    }
}

static void check_line(const char *line, size_t len, size_t max_line)
{
    FUZZ_CHECK(len <= max_line);
    FUZZ_CHECK(memchr(line, '\n', len) == NULL);
    struct json_span v;
    if (jspan_parse(line, len, &v) != 0)
        return;
    FUZZ_CHECK(v.p >= line && v.p + v.len <= line + len && v.len > 0);
    /* What the strict reader accepts, jansson (the host's parser) accepts too. */
    if (jansson_oracle_accepts(line, len) == 0) {
        fprintf(stderr, "relay accepted, jansson rejected: %.*s\n", (int)len, line);
        abort();
    }
    walk(v, 0);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1 || size > 60000)
        return 0;
    /* First: the input up to its first newline as one line, as the echo agent parses one. */
    const char *first = (const char *)data + 1;
    const char *nl = memchr(first, '\n', size - 1);
    check_line(first, nl ? (size_t)(nl - first) : size - 1, size);

    /* Then: through the line splitter over a pipe, with a small limit from the first byte. */
    int p[2];
    FUZZ_CHECK(pipe(p) == 0);
    size_t max_line = 4 + data[0];
    struct line_reader r;
    line_reader_init(&r, max_line);
    size_t off = 1;
    while (off < size) {
        ssize_t w = write(p[1], data + off, size - off);
        FUZZ_CHECK(w > 0);
        off += (size_t)w;
    }
    close(p[1]);
    const char *line;
    size_t len;
    for (int guard = 0; guard < 100000; guard++) {
        while (line_reader_next(&r, &line, &len) == 1)
            check_line(line, len, max_line);
        long got = line_reader_fill(&r, p[0]);
        if (got <= 0)
            break;
    }
    if (line_reader_rest(&r, &line, &len) == 1)
        check_line(line, len, max_line);
    line_reader_free(&r);
    close(p[0]);
    return 0;
}

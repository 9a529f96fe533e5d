/*
 * relay.h: the Sandbox-side end of the agent channel (see worker/drivers/driver.h for the
 * protocol), and the small line-JSON reader and writer that sbx-agent and sbx-echo-agent share.
 *
 * Both programs run inside a Sandbox, statically linked and without jansson, and read lines that
 * untrusted code or a compromised host may have written. So the reader validates a whole line
 * (RFC 8259 syntax, UTF-8, bounded nesting) before anything looks inside it, never allocates while
 * parsing, and every lookup works on spans of the validated line. Its calls are named jspan_*
 * (not json_*): the worker and the tests use jansson, whose json_object_get and json_is_object
 * have other signatures.
 */
#ifndef SBX_RELAY_H
#define SBX_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest line either side relays (a message or a reply); longer lines are dropped and reported. */
#define RELAY_MAX_LINE (4u << 20)
/* Deepest nesting of arrays and objects the reader accepts. */
#define JSON_MAX_DEPTH 64

/* A span of validated JSON text: one value, without surrounding whitespace. */
struct json_span {
    const char *p;
    size_t len;
};

/* Validates that line[0..len) is exactly one JSON value (whitespace around it allowed) and sets
 * *value to it. Returns 0, or -1 when the text is not valid JSON. */
int jspan_parse(const char *line, size_t len, struct json_span *value);
bool jspan_is_object(struct json_span v);
bool jspan_is_array(struct json_span v);
bool jspan_is_string(struct json_span v);
bool jspan_is_null(struct json_span v);

/* In a validated object, finds the first member named key. Returns 1 and sets *value when found,
 * 0 when not (or when obj is not an object). */
int jspan_member(struct json_span obj, const char *key, struct json_span *value);

/* Iterates a validated array: start with *pos = 0; returns 1 with the next element, 0 at the end.
 */
int jspan_array_next(struct json_span arr, size_t *pos, struct json_span *elem);

/* Decodes a validated string value into out (NUL-terminated). Returns 0, or -1 when v is not a
 * string, does not fit in outlen, or contains a NUL character (which C strings cannot carry). */
int jspan_string_decode(struct json_span v, char *out, size_t outlen);

/* Reads an integer value (no fraction or exponent) that fits in int64_t. Returns 0 or -1. */
int jspan_int64(struct json_span v, int64_t *out);
/* Reads true or false. Returns 0 or -1. */
int jspan_bool(struct json_span v, bool *out);

/* A growable byte buffer with a hard cap; appending past the cap fails and leaves it unchanged. */
struct relay_buf {
    char *data;
    size_t len;
    size_t cap;   /* allocated */
    size_t limit; /* most bytes it may ever hold */
};
void relay_buf_init(struct relay_buf *b, size_t limit);
void relay_buf_free(struct relay_buf *b);
int relay_buf_append(struct relay_buf *b, const void *p, size_t n);
int relay_buf_puts(struct relay_buf *b, const char *s);
/* Drops the first n bytes. */
void relay_buf_consume(struct relay_buf *b, size_t n);
/* Appends s[0..n) as a JSON string with quotes; invalid UTF-8 becomes U+FFFD so the result is
 * always valid JSON whatever bytes came in. */
int relay_buf_json_string(struct relay_buf *b, const char *s, size_t n);

/* Splits a byte stream into lines of at most max_line bytes. Longer lines are skipped up to their
 * newline and counted in `dropped`. */
struct line_reader {
    struct relay_buf buf;
    size_t max_line;
    size_t line_start; /* offset of the incomplete line after the last newline */
    size_t consumed;   /* bytes of lines already returned, dropped at the next fill */
    bool skipping;     /* inside an overlong line, discarding until its newline */
    uint64_t dropped;
};
void line_reader_init(struct line_reader *r, size_t max_line);
void line_reader_free(struct line_reader *r);
/* Reads once from fd (non-blocking or after poll). Returns bytes read, 0 at end of file, -1 on
 * error (errno set; EAGAIN means nothing to read now). */
long line_reader_fill(struct line_reader *r, int fd);
/* Returns 1 with the next complete line (without its newline; valid until the next call), 0 when
 * none is complete. */
int line_reader_next(struct line_reader *r, const char **line, size_t *len);
/* At end of file: returns 1 with a final unterminated line if there is one. */
int line_reader_rest(struct line_reader *r, const char **line, size_t *len);

/* How relay_run ends. */
struct relay_result {
    int command_status;  /* exit status (128+signal when killed), -1 when it never started */
    bool channel_closed; /* the host closed the channel */
};

/* Runs the Sandbox side of the agent channel on channel_fd: says ready, waits for start, runs the
 * App's command and relays its lines until the command exits (reported as {"type":"exit"}) or the
 * host closes the channel (then the command is stopped). Reaps every child, so it may run as the
 * init of a pid namespace. SIGTERM/SIGINT are forwarded to the command. Returns 0, or -1 when the
 * channel failed before anything could be reported. */
int relay_run(int channel_fd, struct relay_result *result);

#endif

/*
 * relay.h: the Sandbox-side end of the agent channel (see worker/drivers/driver.h for the
 * protocol), and the line buffers and JSON writer that sbx-agent and sbx-echo-agent share. The
 * line-JSON reader they read with is json_check.h's (included here for them).
 */
#ifndef SBX_RELAY_H
#define SBX_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json_check.h"

/* Longest line either side relays (a message or a reply); longer lines are dropped and reported. */
#define RELAY_MAX_LINE (4u << 20)
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

/*
 * relay_buf.c: the relay's byte buffers, its JSON string writer and its line reader (relay.h):
 * bounded, so that neither peer of the agent channel can make the relay hold more than its
 * limits.
 */
#include "relay.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void relay_buf_init(struct relay_buf *b, size_t limit)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->limit = limit;
}

void relay_buf_free(struct relay_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int relay_buf_append(struct relay_buf *b, const void *p, size_t n)
{
    if (n > b->limit - b->len)
        return -1;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        if (cap > b->limit)
            cap = b->limit;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int relay_buf_puts(struct relay_buf *b, const char *s)
{
    return relay_buf_append(b, s, strlen(s));
}

void relay_buf_consume(struct relay_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

int relay_buf_json_string(struct relay_buf *b, const char *s, size_t n)
{
    size_t saved = b->len;
    int rc = relay_buf_append(b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (rc == 0 && i < n) {
        unsigned char c = u[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            rc = relay_buf_append(b, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            /* A NUL byte becomes U+FFFD: "\u0000" is valid JSON, but the worker refuses it. */
            snprintf(esc, sizeof esc, "\\u%04x", c == 0 ? 0xfffd : c);
            rc = relay_buf_append(b, esc, 6);
            i++;
        } else {
            size_t seq = jspan_utf8_length(u + i, n - i);
            if (seq == 0) {
                rc = relay_buf_append(b, "\xef\xbf\xbd", 3);
                i++;
            } else {
                rc = relay_buf_append(b, u + i, seq);
                i += seq;
            }
        }
    }
    if (rc == 0)
        rc = relay_buf_append(b, "\"", 1);
    if (rc != 0)
        b->len = saved;
    return rc;
}

void line_reader_init(struct line_reader *r, size_t max_line)
{
    /* One read may complete a partial line of max_line bytes and add further whole lines. */
    relay_buf_init(&r->buf, max_line + 65536 + 1);
    r->max_line = max_line;
    r->skipping = false;
    r->dropped = 0;
    r->line_start = 0;
    r->consumed = 0;
}

void line_reader_free(struct line_reader *r)
{
    relay_buf_free(&r->buf);
}

/* Appends one segment of input that either ends with a newline or ends the chunk. */
static void line_reader_take(struct line_reader *r, const char *seg, size_t n, bool has_newline)
{
    if (r->skipping) {
        if (has_newline)
            r->skipping = false;
        return;
    }
    size_t partial = r->buf.len - r->line_start;
    if (partial + n > r->max_line) {
        r->buf.len = r->line_start;
        r->skipping = !has_newline;
        r->dropped++;
        return;
    }
    relay_buf_append(&r->buf, seg, n);
    if (has_newline) {
        relay_buf_append(&r->buf, "\n", 1);
        r->line_start = r->buf.len;
    }
}

long line_reader_fill(struct line_reader *r, int fd)
{
    if (r->consumed > 0) {
        relay_buf_consume(&r->buf, r->consumed);
        r->line_start -= r->consumed;
        r->consumed = 0;
    }
    char chunk[65536];
    size_t room = r->buf.limit - r->buf.len;
    if (room > sizeof chunk)
        room = sizeof chunk;
    if (room == 0) {
        errno = ENOBUFS;
        return -1;
    }
    ssize_t got = read(fd, chunk, room);
    if (got <= 0)
        return (long)got;
    const char *p = chunk, *end = chunk + got;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        line_reader_take(r, p, n, nl != NULL);
        p += n + (nl ? 1 : 0);
    }
    return (long)got;
}

int line_reader_next(struct line_reader *r, const char **line, size_t *len)
{
    if (r->consumed >= r->line_start)
        return 0;
    const char *start = r->buf.data + r->consumed;
    const char *nl = memchr(start, '\n', r->line_start - r->consumed);
    size_t n = (size_t)(nl - start);
    *line = start;
    *len = n;
    r->consumed += n + 1;
    return 1;
}

int line_reader_rest(struct line_reader *r, const char **line, size_t *len)
{
    if (r->skipping || r->buf.len <= r->line_start)
        return 0;
    *line = r->buf.data + r->line_start;
    *len = r->buf.len - r->line_start;
    r->line_start = r->buf.len;
    r->consumed = r->buf.len;
    return 1;
}

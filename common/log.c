/*
 * log.c: one JSON object per line, written with a single write() so that lines from several
 * threads or processes sharing stderr never interleave.
 */
#include "clock.h"
#include "log.h"
#include "timefmt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *log_component = "sbx";
static enum log_level log_threshold = LOG_LEVEL_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_init(const char *component, const char *level)
{
    log_component = component;
    for (int i = 0; level && i < 4; i++)
        if (strcmp(level, level_names[i]) == 0)
            log_threshold = (enum log_level)i;
}

/* Appends s to out as the inside of a JSON string. Returns the new length. */
static size_t json_escape(char *out, size_t len, size_t cap, const char *s)
{
    for (; *s && len + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[len++] = '\\';
            out[len++] = (char)c;
        } else if (c < 0x20) {
            len += (size_t)snprintf(out + len, cap - len, "\\u%04x", c);
        } else {
            out[len++] = (char)c;
        }
    }
    return len;
}

void log_emit(enum log_level lvl, const char *request_id, const char *fmt, ...)
{
    char msg[2048], line[4608], ts[32];
    va_list ap;
    size_t len;

    if (lvl < log_threshold)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    time_format_ms(clock_wall_ms(), ts, sizeof ts);
    len = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"",
                           ts, level_names[lvl]);
    len = json_escape(line, len, sizeof line, log_component);
    if (request_id && *request_id) {
        len += (size_t)snprintf(line + len, sizeof line - len, "\",\"requestId\":\"");
        len = json_escape(line, len, sizeof line, request_id);
    }
    len +=
        (size_t)snprintf(line + len, sizeof line - len, "\",\"pid\":%d,\"msg\":\"", (int)getpid());
    len = json_escape(line, len, sizeof line - 3, msg);
    line[len++] = '"';
    line[len++] = '}';
    line[len++] = '\n';
    if (write(STDERR_FILENO, line, len) < 0) {
        /* Nowhere left to report a failing stderr. */
    }
}

/*
 * json_text.c: JSON answers as text with stored values spliced in (see json_text.h).
 */
#include "json_text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STORED_MAX_DEPTH 2048 /* what json_input.c accepts, so every stored value passes */

/* Room for n more bytes and the terminator; false (and the text dropped) when out of memory. */
static bool reserve(struct json_text *t, size_t n)
{
    if (t->failed)
        return false;
    if (t->len + n + 1 <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + n + 1)
        cap *= 2;
    char *grown = realloc(t->buf, cap);
    if (!grown) {
        json_text_free(t);
        t->failed = true;
        return false;
    }
    t->buf = grown;
    t->cap = cap;
    return true;
}

void json_text_append(struct json_text *t, const char *s, size_t n)
{
    if (!reserve(t, n))
        return;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

void json_text_cstr(struct json_text *t, const char *s)
{
    json_text_append(t, s, strlen(s));
}

void json_text_value(struct json_text *t, json_t *v)
{
    size_t need = v ? json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY) : 0;
    if (need == 0 || !reserve(t, need)) {
        json_decref(v);
        json_text_free(t);
        t->failed = true;
        return;
    }
    json_dumpb(v, t->buf + t->len, need, JSON_COMPACT | JSON_ENCODE_ANY);
    t->len += need;
    t->buf[t->len] = '\0';
    json_decref(v);
}

void json_text_string(struct json_text *t, const char *s)
{
    if (!s)
        json_text_cstr(t, "null");
    else
        json_text_value(t, json_string(s));
}

void json_text_object_with(struct json_text *t, json_t *obj, const struct json_stored *stored,
                           size_t n)
{
    size_t start = t->len;
    bool first = obj && json_object_size(obj) == 0;
    json_text_value(t, obj);
    if (t->failed || t->len == start || t->buf[t->len - 1] != '}')
        return;
    t->len--; /* reopen the object */
    for (size_t i = 0; i < n; i++, first = false) {
        const char *v = stored[i].text;
        size_t vlen = v ? strlen(v) : 0;
        size_t lead = v ? strspn(v, " \t\r\n") : 0;
        bool ok = v && json_text_well_formed(v, vlen, STORED_MAX_DEPTH) &&
                  (!stored[i].object_only || v[lead] == '{');
        json_text_cstr(t, first ? "\"" : ",\"");
        json_text_cstr(t, stored[i].name);
        json_text_cstr(t, "\":");
        json_text_cstr(t, ok ? v : stored[i].fallback);
    }
    json_text_cstr(t, "}");
}

char *json_text_take(struct json_text *t, size_t *len)
{
    char *s = t->failed ? NULL : t->buf;
    *len = t->failed ? 0 : t->len;
    if (!s && !t->failed) {
        s = strdup("");
        *len = 0;
    }
    t->buf = NULL;
    t->len = t->cap = 0;
    return s;
}

void json_text_free(struct json_text *t)
{
    free(t->buf);
    t->buf = NULL;
    t->len = t->cap = 0;
}

/* ---- the well-formedness check: an iterative scanner with a stack of open containers ---- */

struct scan {
    const unsigned char *p, *end;
};

static void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool scan_literal(struct scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return false;
    s->p += n;
    return true;
}

/* A string: quotes, escapes, no control characters, valid UTF-8 (as json_input.c requires). */
static bool scan_string(struct scan *s)
{
    if (s->p >= s->end || *s->p != '"')
        return false;
    s->p++;
    while (s->p < s->end) {
        unsigned c = *s->p;
        if (c == '"') {
            s->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c == '\\') {
            if (++s->p >= s->end)
                return false;
            c = *s->p++;
            if (c == 'u') {
                for (int i = 0; i < 4; i++, s->p++)
                    if (s->p >= s->end || !strchr("0123456789abcdefABCDEF", *s->p) || !*s->p)
                        return false;
            } else if (!strchr("\"\\/bfnrt", (int)c) || c == 0) {
                return false;
            }
            continue;
        }
        if (c < 0x80) {
            s->p++;
            continue;
        }
        int extra = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : -1;
        if (extra < 0 || s->end - s->p <= extra)
            return false;
        for (int i = 1; i <= extra; i++)
            if ((s->p[i] & 0xc0) != 0x80)
                return false;
        /* No overlong forms, no UTF-16 surrogates, nothing above U+10FFFF. */
        unsigned c1 = s->p[1];
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) ||
            (c == 0xf4 && c1 >= 0x90))
            return false;
        s->p += extra + 1;
    }
    return false;
}

static bool scan_number(struct scan *s)
{
    const unsigned char *start = s->p;
    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (s->p >= s->end)
        return false;
    if (*s->p == '0') {
        s->p++;
    } else if (*s->p >= '1' && *s->p <= '9') {
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    } else {
        return false;
    }
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return false;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return false;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    return s->p > start;
}

bool json_text_well_formed(const char *text, size_t n, int max_depth)
{
    struct scan s = {(const unsigned char *)text, (const unsigned char *)text + n};
    char stack[STORED_MAX_DEPTH]; /* '{' or '[' per open container */
    int depth = 0;
    if (max_depth > STORED_MAX_DEPTH)
        max_depth = STORED_MAX_DEPTH;

    for (;;) {
        /* A value. */
        skip_ws(&s);
        if (s.p >= s.end)
            return false;
        switch (*s.p) {
        case '{':
        case '[':
            if (depth == max_depth)
                return false;
            stack[depth++] = (char)*s.p++;
            skip_ws(&s);
            if (s.p < s.end && *s.p == (stack[depth - 1] == '{' ? '}' : ']')) {
                s.p++;
                depth--;
                break; /* an empty container is a whole value */
            }
            if (stack[depth - 1] == '{') {
                if (!scan_string(&s))
                    return false;
                skip_ws(&s);
                if (s.p >= s.end || *s.p++ != ':')
                    return false;
            }
            continue; /* its first value */
        case '"':
            if (!scan_string(&s))
                return false;
            break;
        case 't':
            if (!scan_literal(&s, "true"))
                return false;
            break;
        case 'f':
            if (!scan_literal(&s, "false"))
                return false;
            break;
        case 'n':
            if (!scan_literal(&s, "null"))
                return false;
            break;
        default:
            if (!scan_number(&s))
                return false;
        }
        /* After a value: close containers, or go on to the next member. */
        for (;;) {
            skip_ws(&s);
            if (depth == 0)
                return s.p == s.end;
            if (s.p >= s.end)
                return false;
            char close = stack[depth - 1] == '{' ? '}' : ']';
            if (*s.p == close) {
                s.p++;
                depth--;
                continue;
            }
            if (*s.p != ',')
                return false;
            s.p++;
            if (stack[depth - 1] == '{') {
                skip_ws(&s);
                if (!scan_string(&s))
                    return false;
                skip_ws(&s);
                if (s.p >= s.end || *s.p++ != ':')
                    return false;
            }
            break; /* the next value */
        }
    }
}

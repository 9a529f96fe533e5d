/*
 * json_check.c: the in-Sandbox agents' strict line-JSON reader (json_check.h): an RFC 8259
 * validator over one line at a time, and lookups that re-walk the validated text instead of
 * building a tree, so hostile input costs at most O(line length x depth) and no memory.
 */
#include "json_check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct scanner {
    const unsigned char *s;
    size_t len;
    size_t pos;
};

static void skip_ws(struct scanner *sc)
{
    while (sc->pos < sc->len) {
        unsigned char c = sc->s[sc->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        sc->pos++;
    }
}

/* Length of the valid UTF-8 sequence at p (at most avail bytes), 0 when invalid: rejects overlong
 * forms, UTF-16 surrogates and code points above U+10FFFF. */
size_t jspan_utf8_length(const unsigned char *p, size_t avail)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned int cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The code unit of a "\uXXXX" escape at p, or -1 when p does not hold one. */
static long scan_u_escape(const unsigned char *p, size_t avail)
{
    long unit = 0;
    if (avail < 6 || p[0] != '\\' || p[1] != 'u')
        return -1;
    for (size_t i = 2; i < 6; i++) {
        int h = hex_value(p[i]);
        if (h < 0)
            return -1;
        unit = unit * 16 + h;
    }
    return unit;
}

static int scan_string(struct scanner *sc)
{
    sc->pos++; /* opening quote */
    while (sc->pos < sc->len) {
        unsigned char c = sc->s[sc->pos];
        if (c == '"') {
            sc->pos++;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            if (sc->pos + 1 >= sc->len)
                return -1;
            unsigned char e = sc->s[sc->pos + 1];
            if (e == 'u') {
                /* Refused as the worker's parser (jansson) refuses them, so that sbx-agent never
                 * relays a line the worker would take for a broken channel: \u0000, and UTF-16
                 * surrogates that are not a high-low pair. */
                long unit = scan_u_escape(sc->s + sc->pos, sc->len - sc->pos);
                if (unit <= 0 || (unit >= 0xDC00 && unit <= 0xDFFF))
                    return -1;
                sc->pos += 6;
                if (unit >= 0xD800 && unit <= 0xDBFF) {
                    long low = scan_u_escape(sc->s + sc->pos, sc->len - sc->pos);
                    if (low < 0xDC00 || low > 0xDFFF)
                        return -1;
                    sc->pos += 6;
                }
            } else if (strchr("\"\\/bfnrt", e) && e != '\0') {
                sc->pos += 2;
            } else {
                return -1;
            }
            continue;
        }
        size_t n = jspan_utf8_length(sc->s + sc->pos, sc->len - sc->pos);
        if (n == 0)
            return -1;
        sc->pos += n;
    }
    return -1;
}

static size_t scan_digits(struct scanner *sc)
{
    size_t start = sc->pos;
    while (sc->pos < sc->len && sc->s[sc->pos] >= '0' && sc->s[sc->pos] <= '9')
        sc->pos++;
    return sc->pos - start;
}

static int scan_number(struct scanner *sc)
{
    if (sc->pos < sc->len && sc->s[sc->pos] == '-')
        sc->pos++;
    if (sc->pos >= sc->len)
        return -1;
    if (sc->s[sc->pos] == '0') {
        sc->pos++;
    } else if (scan_digits(sc) == 0) {
        return -1;
    }
    if (sc->pos < sc->len && sc->s[sc->pos] == '.') {
        sc->pos++;
        if (scan_digits(sc) == 0)
            return -1;
    }
    if (sc->pos < sc->len && (sc->s[sc->pos] == 'e' || sc->s[sc->pos] == 'E')) {
        sc->pos++;
        if (sc->pos < sc->len && (sc->s[sc->pos] == '+' || sc->s[sc->pos] == '-'))
            sc->pos++;
        if (scan_digits(sc) == 0)
            return -1;
    }
    return 0;
}

static int scan_literal(struct scanner *sc, const char *word)
{
    size_t n = strlen(word);
    if (sc->len - sc->pos < n || memcmp(sc->s + sc->pos, word, n) != 0)
        return -1;
    sc->pos += n;
    return 0;
}

static int scan_value(struct scanner *sc, int depth);

/* Objects and arrays share one loop: members are "key": value for objects, value for arrays. */
static int scan_container(struct scanner *sc, int depth, bool is_object)
{
    char close = is_object ? '}' : ']';
    if (depth >= JSON_MAX_DEPTH)
        return -1;
    sc->pos++;
    skip_ws(sc);
    if (sc->pos < sc->len && sc->s[sc->pos] == (unsigned char)close) {
        sc->pos++;
        return 0;
    }
    for (;;) {
        skip_ws(sc);
        if (is_object) {
            if (sc->pos >= sc->len || sc->s[sc->pos] != '"' || scan_string(sc) != 0)
                return -1;
            skip_ws(sc);
            if (sc->pos >= sc->len || sc->s[sc->pos] != ':')
                return -1;
            sc->pos++;
            skip_ws(sc);
        }
        if (scan_value(sc, depth + 1) != 0)
            return -1;
        skip_ws(sc);
        if (sc->pos >= sc->len)
            return -1;
        if (sc->s[sc->pos] == ',') {
            sc->pos++;
            continue;
        }
        if (sc->s[sc->pos] == (unsigned char)close) {
            sc->pos++;
            return 0;
        }
        return -1;
    }
}

static int scan_value(struct scanner *sc, int depth)
{
    if (sc->pos >= sc->len)
        return -1;
    switch (sc->s[sc->pos]) {
    case '{':
        return scan_container(sc, depth, true);
    case '[':
        return scan_container(sc, depth, false);
    case '"':
        return scan_string(sc);
    case 't':
        return scan_literal(sc, "true");
    case 'f':
        return scan_literal(sc, "false");
    case 'n':
        return scan_literal(sc, "null");
    default:
        return scan_number(sc);
    }
}

int jspan_parse(const char *line, size_t len, struct json_span *value)
{
    struct scanner sc = {(const unsigned char *)line, len, 0};
    skip_ws(&sc);
    size_t start = sc.pos;
    if (scan_value(&sc, 0) != 0)
        return -1;
    size_t end = sc.pos;
    skip_ws(&sc);
    if (sc.pos != len)
        return -1;
    value->p = line + start;
    value->len = end - start;
    return 0;
}

bool jspan_is_object(struct json_span v)
{
    return v.len >= 2 && v.p[0] == '{';
}

bool jspan_is_array(struct json_span v)
{
    return v.len >= 2 && v.p[0] == '[';
}

bool jspan_is_string(struct json_span v)
{
    return v.len >= 2 && v.p[0] == '"';
}

bool jspan_is_null(struct json_span v)
{
    return v.len == 4 && memcmp(v.p, "null", 4) == 0;
}

bool jspan_is_true(struct json_span v)
{
    return v.len == 4 && memcmp(v.p, "true", 4) == 0;
}

/* Walks one member (or element) of a validated container starting at sc->pos. */
static void next_element(struct scanner *sc, struct json_span *key, struct json_span *value,
                         bool is_object)
{
    skip_ws(sc);
    if (is_object) {
        size_t kstart = sc->pos;
        scan_string(sc);
        key->p = (const char *)sc->s + kstart;
        key->len = sc->pos - kstart;
        skip_ws(sc);
        sc->pos++; /* ':' */
        skip_ws(sc);
    }
    size_t vstart = sc->pos;
    scan_value(sc, 0);
    value->p = (const char *)sc->s + vstart;
    value->len = sc->pos - vstart;
    skip_ws(sc);
}

int jspan_member(struct json_span obj, const char *key, struct json_span *value)
{
    if (!jspan_is_object(obj))
        return 0;
    struct scanner sc = {(const unsigned char *)obj.p, obj.len, 1};
    skip_ws(&sc);
    if (sc.s[sc.pos] == '}')
        return 0;
    char decoded[256];
    for (;;) {
        struct json_span k, v;
        next_element(&sc, &k, &v, true);
        if (jspan_string_decode(k, decoded, sizeof decoded) == 0 && strcmp(decoded, key) == 0) {
            *value = v;
            return 1;
        }
        if (sc.pos >= sc.len || sc.s[sc.pos] != ',')
            return 0;
        sc.pos++;
    }
}

int jspan_array_next(struct json_span arr, size_t *pos, struct json_span *elem)
{
    if (!jspan_is_array(arr))
        return 0;
    struct scanner sc = {(const unsigned char *)arr.p, arr.len, *pos == 0 ? 1 : *pos};
    skip_ws(&sc);
    if (sc.pos >= sc.len || sc.s[sc.pos] == ']')
        return 0;
    if (sc.s[sc.pos] == ',')
        sc.pos++;
    struct json_span unused;
    next_element(&sc, &unused, elem, false);
    *pos = sc.pos;
    return 1;
}

static size_t utf8_encode(unsigned int cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static unsigned int read_hex4(const char *p)
{
    unsigned int v = 0;
    for (int i = 0; i < 4; i++)
        v = (v << 4) | (unsigned int)hex_value((unsigned char)p[i]);
    return v;
}

/* Decodes the escape at p (after the backslash) within end; returns the bytes consumed. Lone
 * surrogates become U+FFFD rather than an error: they are valid JSON, just not valid text. */
static size_t decode_escape(const char *p, const char *end, unsigned int *cp)
{
    switch (*p) {
    case 'b':
        *cp = '\b';
        return 1;
    case 'f':
        *cp = '\f';
        return 1;
    case 'n':
        *cp = '\n';
        return 1;
    case 'r':
        *cp = '\r';
        return 1;
    case 't':
        *cp = '\t';
        return 1;
    case 'u':
        break;
    default:
        *cp = (unsigned char)*p;
        return 1;
    }
    unsigned int hi = read_hex4(p + 1);
    if (hi >= 0xd800 && hi <= 0xdbff && end - p >= 11 && p[5] == '\\' && p[6] == 'u') {
        unsigned int lo = read_hex4(p + 7);
        if (lo >= 0xdc00 && lo <= 0xdfff) {
            *cp = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
            return 11;
        }
    }
    *cp = (hi >= 0xd800 && hi <= 0xdfff) ? 0xfffd : hi;
    return 5;
}

int jspan_string_decode(struct json_span v, char *out, size_t outlen)
{
    if (!jspan_is_string(v) || outlen == 0)
        return -1;
    const char *p = v.p + 1, *end = v.p + v.len - 1;
    size_t n = 0;
    while (p < end) {
        char enc[4];
        size_t enclen;
        if (*p == '\\') {
            unsigned int cp;
            p += 1 + decode_escape(p + 1, end, &cp);
            if (cp == 0)
                return -1;
            enclen = utf8_encode(cp, enc);
        } else {
            enc[0] = *p++;
            enclen = 1;
        }
        if (n + enclen >= outlen)
            return -1;
        memcpy(out + n, enc, enclen);
        n += enclen;
    }
    out[n] = '\0';
    return 0;
}

int jspan_int64(struct json_span v, int64_t *out)
{
    char digits[24];
    if (v.len == 0 || v.len >= sizeof digits)
        return -1;
    for (size_t i = 0; i < v.len; i++) {
        char c = v.p[i];
        if (!(c >= '0' && c <= '9') && !(c == '-' && i == 0))
            return -1;
    }
    memcpy(digits, v.p, v.len);
    digits[v.len] = '\0';
    errno = 0;
    char *end;
    long long n = strtoll(digits, &end, 10);
    if (errno != 0 || *end != '\0' || end == digits)
        return -1;
    *out = n;
    return 0;
}

int jspan_bool(struct json_span v, bool *out)
{
    if (v.len == 4 && memcmp(v.p, "true", 4) == 0) {
        *out = true;
        return 0;
    }
    if (v.len == 5 && memcmp(v.p, "false", 5) == 0) {
        *out = false;
        return 0;
    }
    return -1;
}

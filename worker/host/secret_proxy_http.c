/*
 * secret_proxy_http.c: heads, placeholder replacement and body framing for the brokering proxy
 * (secret_proxy_http.h). Strict where a lax reading could let a request be understood one way
 * here and another way upstream (both Content-Length and Transfer-Encoding, folded lines,
 * conflicting lengths): such a request is refused, never guessed at.
 */
#include "host/secret_proxy_http.h"

#include <ctype.h>
#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

size_t sp_head_end(const char *buf, size_t len)
{
    for (size_t i = 3; i < len; i++)
        if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r')
            return i + 1;
    return 0;
}

/* One line of a head: [p, eol) without its CRLF; the next line starts at eol + 2. */
static const char *line_end(const char *p, const char *end)
{
    for (const char *q = p; q + 1 < end; q++)
        if (q[0] == '\r' && q[1] == '\n')
            return q;
    return NULL;
}

static bool token_in(const char *v, size_t n, const char *tok)
{
    size_t tl = strlen(tok);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
            return true;
    }
    return false;
}

/* The last token of a comma-separated value is tok. */
static bool last_token_is(const char *v, size_t n, const char *tok)
{
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    size_t s = n;
    while (s > 0 && v[s - 1] != ',')
        s--;
    while (s < n && (v[s] == ' ' || v[s] == '\t'))
        s++;
    return n - s == strlen(tok) && strncasecmp(v + s, tok, n - s) == 0;
}

struct head_fields {
    bool has_length, has_te, te_chunked, conn_close, conn_keep_alive;
    uint64_t length;
    char host[256];
    bool has_host;
};

/* Reads the header lines from p to end (the blank line's CRLF included). 0, or -1. */
static int parse_fields(const char *p, const char *end, struct head_fields *f)
{
    memset(f, 0, sizeof *f);
    for (;;) {
        const char *eol = line_end(p, end);
        if (!eol)
            return -1;
        if (eol == p)
            return 0; /* the blank line */
        if (*p == ' ' || *p == '\t')
            return -1; /* obsolete line folding */
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (!colon || colon == p)
            return -1;
        for (const char *c = p; c < colon; c++)
            if (*c <= ' ' || *c >= 127)
                return -1;
        size_t nl = (size_t)(colon - p);
        const char *v = colon + 1;
        while (v < eol && (*v == ' ' || *v == '\t'))
            v++;
        size_t vl = (size_t)(eol - v);
        if (nl == 14 && strncasecmp(p, "content-length", nl) == 0) {
            uint64_t n = 0;
            size_t i = 0;
            while (i < vl && vl - i > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                vl--;
            if (vl == 0 || vl > 18)
                return -1;
            for (i = 0; i < vl; i++) {
                if (!isdigit((unsigned char)v[i]))
                    return -1;
                n = n * 10 + (uint64_t)(v[i] - '0');
            }
            if (f->has_length && f->length != n)
                return -1;
            f->has_length = true;
            f->length = n;
        } else if (nl == 17 && strncasecmp(p, "transfer-encoding", nl) == 0) {
            f->has_te = true;
            f->te_chunked = last_token_is(v, vl, "chunked");
        } else if (nl == 10 && strncasecmp(p, "connection", nl) == 0) {
            f->conn_close = f->conn_close || token_in(v, vl, "close");
            f->conn_keep_alive = f->conn_keep_alive || token_in(v, vl, "keep-alive");
        } else if (nl == 4 && strncasecmp(p, "host", nl) == 0) {
            if (f->has_host)
                return -1;
            f->has_host = true;
            size_t hl = 0;
            for (size_t i = 0; i < vl && v[i] != ':' && v[i] != ' ' && v[i] != '\t'; i++) {
                if (hl + 1 >= sizeof f->host)
                    return -1;
                f->host[hl++] = (char)tolower((unsigned char)v[i]);
            }
            f->host[hl] = '\0';
        }
        p = eol + 2;
    }
}

int sp_parse_request(const char *head, size_t len, struct sp_request *out)
{
    memset(out, 0, sizeof *out);
    const char *end = head + len;
    const char *eol = line_end(head, end);
    if (!eol)
        return -1;
    const char *sp1 = memchr(head, ' ', (size_t)(eol - head));
    if (!sp1 || sp1 == head || (size_t)(sp1 - head) >= sizeof out->method)
        return -1;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (!sp2 || sp2 == sp1 + 1)
        return -1;
    size_t vl = (size_t)(eol - sp2 - 1);
    if (vl != 8 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
        return -1;
    bool http10 = sp2[8] == '0';
    memcpy(out->method, head, (size_t)(sp1 - head));
    const char *t = sp1 + 1;
    size_t tl = 0;
    while (t + tl < sp2 && t[tl] != '?' && t[tl] != '#')
        tl++;
    if (tl >= sizeof out->path)
        tl = sizeof out->path - 1;
    memcpy(out->path, t, tl);
    struct head_fields f;
    if (parse_fields(eol + 2, end, &f) != 0)
        return -1;
    if (f.has_te && f.has_length)
        return -1; /* a classic smuggling shape: refused rather than guessed at */
    if (f.has_te && !f.te_chunked)
        return -1;
    snprintf(out->host, sizeof out->host, "%s", f.host);
    out->body = f.has_te ? SP_BODY_CHUNKED : f.has_length ? SP_BODY_LENGTH : SP_BODY_NONE;
    out->length = f.length;
    out->close = f.conn_close || (http10 && !f.conn_keep_alive);
    return 0;
}

int sp_parse_response(const char *head, size_t len, bool head_request, struct sp_response *out)
{
    memset(out, 0, sizeof *out);
    const char *end = head + len;
    const char *eol = line_end(head, end);
    if (!eol || eol - head < 12 || strncmp(head, "HTTP/1.", 7) != 0 || head[8] != ' ')
        return -1;
    bool http10 = head[7] == '0';
    int st = 0;
    for (int i = 9; i < 12; i++) {
        if (!isdigit((unsigned char)head[i]))
            return -1;
        st = st * 10 + (head[i] - '0');
    }
    out->status = st;
    struct head_fields f;
    if (parse_fields(eol + 2, end, &f) != 0)
        return -1;
    out->close = f.conn_close || (http10 && !f.conn_keep_alive);
    if (head_request || (st >= 100 && st < 200) || st == 204 || st == 304) {
        out->body = SP_BODY_NONE;
    } else if (f.has_te && f.te_chunked) {
        out->body = SP_BODY_CHUNKED;
    } else if (f.has_te || !f.has_length) {
        out->body = SP_BODY_UNTIL_CLOSE;
        out->close = true;
    } else {
        out->body = SP_BODY_LENGTH;
        out->length = f.length;
    }
    return 0;
}

static bool b64url(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_';
}

/* The binding of s whose placeholder starts at head[i], if any. */
static const struct secret_binding *placeholder_at(const struct secret_set *s, const char *head,
                                                   size_t len, size_t i)
{
    size_t pl = strlen(SECRET_PLACEHOLDER_PREFIX);
    if (len - i < SECRET_PLACEHOLDER_LEN || memcmp(head + i, SECRET_PLACEHOLDER_PREFIX, pl) != 0)
        return NULL;
    for (size_t k = pl; k < SECRET_PLACEHOLDER_LEN; k++)
        if (!b64url(head[i + k]))
            return NULL;
    return secret_set_find_placeholder(s, head + i, SECRET_PLACEHOLDER_LEN);
}

/* The rewritten head grows in a buffer that never leaves a copy behind: secret values are in it. */
struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_put(struct sbuf *b, const char *data, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = malloc(cap);
        if (!p) {
            b->failed = true;
            return;
        }
        if (b->p) {
            memcpy(p, b->p, b->len);
            explicit_bzero(b->p, b->cap);
            free(b->p);
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_wipe(struct sbuf *b)
{
    if (b->p) {
        explicit_bzero(b->p, b->cap);
        free(b->p);
    }
    memset(b, 0, sizeof *b);
}

static void note_used(struct sp_rewrite *r, const struct secret_binding *b)
{
    for (size_t k = 0; k < r->nused; k++)
        if (r->used[k] == b)
            return;
    if (r->nused < SP_MAX_USED)
        r->used[r->nused++] = b;
}

/* Copies text[0..n) to out (NULL: only checks), each placeholder of s replaced when replace is
 * set and host is one of its secret's hosts. false on a misuse (r->misused set). */
static bool scan(const struct secret_set *s, const char *host, const char *text, size_t n,
                 bool replace, struct sbuf *out, struct sp_rewrite *r)
{
    size_t from = 0, i = 0;
    while (i < n) {
        const struct secret_binding *b = text[i] == 's' ? placeholder_at(s, text, n, i) : NULL;
        if (!b) {
            i++;
            continue;
        }
        if (!secret_binding_allows_host(b, host)) {
            r->misused = b;
            return false;
        }
        if (replace && out) {
            sb_put(out, text + from, i - from);
            sb_put(out, b->value, b->value_len);
            from = i + SECRET_PLACEHOLDER_LEN;
            note_used(r, b);
        }
        i += SECRET_PLACEHOLDER_LEN;
    }
    if (out)
        sb_put(out, text + from, n - from);
    return true;
}

static bool header_is(const char *line, const char *eol, const char *name)
{
    size_t l = strlen(name);
    return (size_t)(eol - line) > l && strncasecmp(line, name, l) == 0 && line[l] == ':';
}

/* `Authorization: Basic <base64 of user:password>` (and Proxy-Authorization): placeholders are
 * looked for, and replaced, inside the decoded credentials too, which is how git and other
 * clients send a token as a password. 1 when the line was written to out, 0 when it is to be
 * handled as any other line, -1 on a misuse. */
static int basic_auth(const struct secret_set *s, const char *host, const char *line,
                      const char *eol, struct sbuf *out, struct sp_rewrite *r)
{
    const char *colon = memchr(line, ':', (size_t)(eol - line));
    if (!colon ||
        !(header_is(line, eol, "authorization") || header_is(line, eol, "proxy-authorization")))
        return 0;
    const char *v = colon + 1;
    while (v < eol && (*v == ' ' || *v == '\t'))
        v++;
    if (eol - v < 7 || strncasecmp(v, "basic ", 6) != 0)
        return 0;
    const char *t = v + 6;
    while (t < eol && *t == ' ')
        t++;
    size_t tl = (size_t)(eol - t);
    while (tl > 0 && (t[tl - 1] == ' ' || t[tl - 1] == '\t'))
        tl--;
    if (tl == 0 || tl > 16384)
        return 0;
    uint8_t *plain = malloc(BASE64_DECODE_LENGTH(tl) + 1);
    if (!plain)
        return 0;
    struct base64_decode_ctx ctx;
    size_t pl = BASE64_DECODE_LENGTH(tl);
    base64_decode_init(&ctx);
    int rc = 0;
    if (base64_decode_update(&ctx, &pl, plain, tl, t) && base64_decode_final(&ctx)) {
        struct sbuf dec = {0};
        size_t before = r->nused;
        if (!scan(s, host, (const char *)plain, pl, true, &dec, r)) {
            rc = -1;
        } else if (r->nused != before && !dec.failed) {
            char *enc = malloc(BASE64_ENCODE_RAW_LENGTH(dec.len) + 1);
            if (enc) {
                base64_encode_raw(enc, dec.len, (const uint8_t *)dec.p);
                size_t el = BASE64_ENCODE_RAW_LENGTH(dec.len);
                sb_put(out, line, (size_t)(t - line));
                sb_put(out, enc, el);
                sb_put(out, "\r\n", 2);
                explicit_bzero(enc, el);
                free(enc);
                rc = 1;
            } else {
                out->failed = true;
                rc = 1;
            }
        }
        sb_wipe(&dec);
    }
    explicit_bzero(plain, BASE64_DECODE_LENGTH(tl));
    free(plain);
    return rc;
}

int sp_rewrite(const struct secret_set *s, const char *host, const char *head, size_t len,
               struct sp_rewrite *out)
{
    memset(out, 0, sizeof *out);
    host = host ? host : "";
    const char *end = head + len;
    struct sbuf b = {0};
    const char *p = head;
    bool first = true;
    while (p < end) {
        const char *eol = line_end(p, end);
        const char *next = eol ? eol + 2 : end;
        if (!eol)
            eol = end;
        if (first) {
            /* the request line: a misuse is refused, nothing is replaced (paths are recorded) */
            if (!scan(s, host, p, (size_t)(eol - p), false, NULL, out))
                goto misuse;
            sb_put(&b, p, (size_t)(next - p));
            first = false;
        } else if (eol - p >= 7 && strncasecmp(p, "expect:", 7) == 0) {
            /* dropped: the proxy sends the body right behind the head */
        } else {
            int basic = basic_auth(s, host, p, eol, &b, out);
            if (basic < 0)
                goto misuse;
            if (basic == 0 && !scan(s, host, p, (size_t)(next - p), true, &b, out))
                goto misuse;
        }
        p = next;
    }
    if (b.failed) {
        sb_wipe(&b);
        return -1;
    }
    if (!b.p)
        sb_put(&b, "", 0);
    out->head = b.p;
    out->len = b.len;
    return b.failed ? -1 : 0;
misuse:
    sb_wipe(&b);
    out->head = NULL;
    out->len = 0;
    out->nused = 0;
    return 0;
}

void sp_rewrite_free(struct sp_rewrite *r)
{
    if (r->head) {
        explicit_bzero(r->head, r->len);
        free(r->head);
    }
    r->head = NULL;
    r->len = 0;
}

enum {
    CH_SIZE,
    CH_EXT,
    CH_SIZE_LF,
    CH_DATA,
    CH_DATA_CR,
    CH_DATA_LF,
    CH_TRAILER_START,
    CH_TRAILER,
    CH_TRAILER_LF,
    CH_FINAL_LF,
};

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

long sp_chunked_scan(struct sp_chunked *c, const char *buf, size_t len, bool *done)
{
    *done = false;
    size_t i = 0;
    while (i < len) {
        char ch = buf[i];
        switch (c->state) {
        case CH_SIZE: {
            int h = hexval(ch);
            if (h >= 0) {
                if (++c->line > 15)
                    return -1;
                c->left = c->left * 16 + (uint64_t)h;
            } else if (c->line == 0) {
                return -1;
            } else if (ch == ';' || ch == ' ' || ch == '\t') {
                c->state = CH_EXT;
            } else if (ch == '\r') {
                c->state = CH_SIZE_LF;
            } else {
                return -1;
            }
            i++;
            break;
        }
        case CH_EXT:
            if (ch == '\r')
                c->state = CH_SIZE_LF;
            else if (++c->line > 4096)
                return -1;
            i++;
            break;
        case CH_SIZE_LF:
            if (ch != '\n')
                return -1;
            c->line = 0;
            c->state = c->left ? CH_DATA : CH_TRAILER_START;
            i++;
            break;
        case CH_DATA: {
            size_t take = len - i < c->left ? len - i : (size_t)c->left;
            c->left -= take;
            i += take;
            if (c->left == 0)
                c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
            if (ch != '\r')
                return -1;
            c->state = CH_DATA_LF;
            i++;
            break;
        case CH_DATA_LF:
            if (ch != '\n')
                return -1;
            c->state = CH_SIZE;
            c->line = 0;
            i++;
            break;
        case CH_TRAILER_START:
            c->state = ch == '\r' ? CH_FINAL_LF : CH_TRAILER;
            c->line = 0;
            i++;
            break;
        case CH_TRAILER:
            if (ch == '\r')
                c->state = CH_TRAILER_LF;
            else if (++c->line > 8192)
                return -1;
            i++;
            break;
        case CH_TRAILER_LF:
            if (ch != '\n')
                return -1;
            c->state = CH_TRAILER_START;
            i++;
            break;
        case CH_FINAL_LF:
            if (ch != '\n')
                return -1;
            *done = true;
            return (long)(i + 1);
        default:
            return -1;
        }
    }
    return (long)i;
}

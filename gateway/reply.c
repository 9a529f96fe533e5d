/*
 * reply.c: JSON responses and RFC 9457 problems. The problem table (common/problem.c) is the one
 * place where codes, statuses and titles are tied together; handlers name only the code.
 */
#include "reply.h"
#include "json_input.h"
#include "json_text.h"
#include "log.h"
#include "problem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned problem_status(enum problem_code code)
{
    return problem_kind(code)->status;
}

static enum MHD_Result queue(struct request *r, unsigned status, struct MHD_Response *resp)
{
    enum MHD_Result ret;
    if (!resp) {
        log_emit(LOG_LEVEL_ERROR, r->request_id, "cannot create a response");
        return MHD_NO;
    }
    MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    /* Answers are not cached, but for the few that say how long they may be (the published
     * keys, http_wellknown.c). */
    if (!MHD_get_response_header(resp, "Cache-Control"))
        MHD_add_response_header(resp, "Cache-Control", "no-store");
    ret = MHD_queue_response(r->conn, status, resp);
    if (ret != MHD_YES)
        log_emit(LOG_LEVEL_ERROR, r->request_id, "libmicrohttpd refused the %u response", status);
    MHD_destroy_response(resp);
    r->replied = true;
    r->status = status;
    return ret;
}

enum MHD_Result reply_response(struct request *r, unsigned status, struct MHD_Response *resp)
{
    return queue(r, status, resp);
}

enum MHD_Result reply_text(struct request *r, unsigned status, const char *content_type,
                           const char *text, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (resp)
        MHD_add_response_header(resp, "Content-Type", content_type);
    return queue(r, status, resp);
}

static enum MHD_Result reply_json_typed(struct request *r, unsigned status, json_t *body,
                                        const char *content_type, const char *header,
                                        const char *value)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    struct MHD_Response *resp;
    json_decref(body);
    if (!text) {
        log_emit(LOG_LEVEL_ERROR, r->request_id, "cannot encode a response");
        return MHD_NO;
    }
    resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return queue(r, status, NULL);
    }
    MHD_add_response_header(resp, "Content-Type", content_type);
    if (header && value)
        MHD_add_response_header(resp, header, value);
    return queue(r, status, resp);
}

enum MHD_Result reply_json(struct request *r, unsigned status, json_t *body)
{
    return reply_json_typed(r, status, body, "application/json", NULL, NULL);
}

enum MHD_Result reply_json_header(struct request *r, unsigned status, json_t *body,
                                  const char *header, const char *value)
{
    return reply_json_typed(r, status, body, "application/json", header, value);
}

enum MHD_Result reply_json_text(struct request *r, unsigned status, struct json_text *t,
                                const char *header, const char *value)
{
    size_t len;
    char *text = json_text_take(t, &len);
    struct MHD_Response *resp;
    if (!text)
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory rendering the answer");
    resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return queue(r, status, NULL);
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (header && value)
        MHD_add_response_header(resp, header, value);
    return queue(r, status, resp);
}

enum MHD_Result reply_empty(struct request *r, unsigned status)
{
    return queue(r, status, MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT));
}

/* Copies s into out as valid UTF-8 without control characters: a problem echoes paths and field
 * names that came from the caller, and a JSON string must not carry broken sequences (a detail
 * truncated by printf precision may also end inside one). Anything else becomes '?'. */
static void utf8_clean(const char *s, char *out, size_t outlen)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    while (*p && n + 5 < outlen) {
        size_t len = *p < 0x80             ? 1
                     : (*p & 0xe0) == 0xc0 ? 2
                     : (*p & 0xf0) == 0xe0 ? 3
                     : (*p & 0xf8) == 0xf0 ? 4
                                           : 0;
        bool ok = len > 0 && (len == 1 ? *p >= 0x20 && *p != 0x7f : *p >= 0xc2 && *p <= 0xf4);
        for (size_t i = 1; ok && i < len; i++)
            ok = (p[i] & 0xc0) == 0x80;
        if (ok && len == 3)
            ok = !(p[0] == 0xe0 && p[1] < 0xa0) && !(p[0] == 0xed && p[1] >= 0xa0);
        if (ok && len == 4)
            ok = !(p[0] == 0xf0 && p[1] < 0x90) && !(p[0] == 0xf4 && p[1] >= 0x90);
        if (!ok) {
            out[n++] = '?';
            p++;
            continue;
        }
        memcpy(out + n, p, len);
        n += len;
        p += len;
    }
    out[n] = '\0';
}

static enum MHD_Result vproblem(struct request *r, enum problem_code code, const char *field,
                                const char *header, const char *value, const char *fmt, va_list ap)
{
    const struct problem_kind *k = problem_kind(code);
    char detail[512], type[80];
    struct MHD_Response *resp;
    enum MHD_Result ret;

    char raw[512], instance[512], field_clean[128];
    vsnprintf(raw, sizeof raw, fmt, ap);
    utf8_clean(raw, detail, sizeof detail);
    utf8_clean(r->path ? r->path : "", instance, sizeof instance);
    snprintf(type, sizeof type, "urn:sbx:problem:%s", k->code);
    json_t *p = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "type", type, "title", k->title,
                          "status", (int)k->status, "detail", detail, "instance", instance, "code",
                          k->code, "requestId", r->request_id);
    if (!p)
        return MHD_NO;
    if (field) {
        utf8_clean(field, field_clean, sizeof field_clean);
        json_object_set_new(p, "field", json_string(field_clean));
    }
    if (k->status >= 500)
        log_emit(LOG_LEVEL_ERROR, r->request_id, "%s %s -> %u %s: %s", r->method, r->path,
                 k->status, k->code, detail);
    char *text = json_dumps(p, JSON_COMPACT);
    json_decref(p);
    if (!text)
        return MHD_NO;
    resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/problem+json");
    if (k->status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (k->status == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    if (header && value)
        MHD_add_response_header(resp, header, value);
    ret = queue(r, k->status, resp);
    return ret;
}

enum MHD_Result reply_problem(struct request *r, enum problem_code code, const char *field,
                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = vproblem(r, code, field, NULL, NULL, fmt, ap);
    va_end(ap);
    return ret;
}

enum MHD_Result reply_problem_header(struct request *r, enum problem_code code, const char *field,
                                     const char *header, const char *value, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = vproblem(r, code, field, header, value, fmt, ap);
    va_end(ap);
    return ret;
}

enum MHD_Result reply_store_error(struct request *r, enum store_status st, const char *what)
{
    switch (st) {
    case STORE_NOT_FOUND:
        return reply_problem(r, PROBLEM_NOT_FOUND, NULL, "no such %s", what);
    case STORE_CONFLICT:
        return reply_problem(r, PROBLEM_CONFLICT, NULL, "the %s conflicts with the current state",
                             what);
    case STORE_BUSY:
        return reply_problem(r, PROBLEM_STORE_BUSY, NULL,
                             "the database stayed locked beyond the busy timeout; retry");
    case STORE_FULL:
        return reply_problem(r, PROBLEM_STORAGE_FULL, NULL, "the database disk is full");
    case STORE_INVALID:
        return reply_problem(r, PROBLEM_INVALID_VALUE, NULL, "the %s has a value the store refuses",
                             what);
    default:
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "store error (%s) on %s",
                             store_status_name(st), what);
    }
}

enum MHD_Result reply_input_error(struct request *r, const struct input_error *e)
{
    return reply_problem(r, e->code, e->field[0] ? e->field : NULL, "%s", e->detail);
}

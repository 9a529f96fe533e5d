/*
 * json_input.c: validation of request bodies, query parameters and headers (see json_input.h).
 */
#include "json_input.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(struct input_error *e, enum problem_code code, const char *field, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));

static void fail(struct input_error *e, enum problem_code code, const char *field, const char *fmt,
                 ...)
{
    va_list ap;
    e->code = code;
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
}

json_t *input_parse_object(const char *body, size_t len, bool optional, struct input_error *e)
{
    json_error_t err;
    json_t *v;

    if (len == 0) {
        if (optional)
            return json_object();
        fail(e, PROBLEM_MALFORMED_JSON, NULL, "a JSON object body is required");
        return NULL;
    }
    /* Duplicate keys are refused: which of two values counts would otherwise be a guess. */
    v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
    if (!v) {
        fail(e, PROBLEM_MALFORMED_JSON, NULL, "body is not valid JSON: %s (at byte %d)", err.text,
             err.position);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        fail(e, PROBLEM_MALFORMED_JSON, NULL, "body must be a JSON object");
        return NULL;
    }
    return v;
}

bool input_known_fields(json_t *obj, const char *const *allowed, struct input_error *e)
{
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value)
    {
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++)
            known = strcmp(*a, key) == 0;
        if (!known) {
            fail(e, PROBLEM_UNKNOWN_FIELD, key, "field \"%.60s\" is not known to this endpoint",
                 key);
            return false;
        }
    }
    return true;
}

int input_string(json_t *obj, const char *field, size_t minlen, size_t maxlen, bool nullable,
                 const char **out, bool *is_null, struct input_error *e)
{
    json_t *v = json_object_get(obj, field);
    if (!v)
        return 0;
    if (json_is_null(v) && nullable) {
        *out = NULL;
        if (is_null)
            *is_null = true;
        return 1;
    }
    if (!json_is_string(v)) {
        fail(e, PROBLEM_INVALID_FIELD, field, "field \"%s\" must be a string%s", field,
             nullable ? " or null" : "");
        return -1;
    }
    size_t len = json_string_length(v);
    if (len < minlen || len > maxlen || strlen(json_string_value(v)) != len) {
        fail(e, PROBLEM_INVALID_FIELD, field, "field \"%s\" must be %zu to %zu characters", field,
             minlen, maxlen);
        return -1;
    }
    *out = json_string_value(v);
    if (is_null)
        *is_null = false;
    return 1;
}

int input_int(json_t *obj, const char *field, int64_t min, int64_t max, bool nullable, int64_t *out,
              bool *is_null, struct input_error *e)
{
    json_t *v = json_object_get(obj, field);
    if (!v)
        return 0;
    if (json_is_null(v) && nullable) {
        if (is_null)
            *is_null = true;
        return 1;
    }
    if (!json_is_integer(v)) {
        fail(e, PROBLEM_INVALID_FIELD, field, "field \"%s\" must be an integer%s", field,
             nullable ? " or null" : "");
        return -1;
    }
    json_int_t n = json_integer_value(v);
    if (n < min || n > max) {
        fail(e, PROBLEM_INVALID_VALUE, field, "field \"%s\" must be from %lld to %lld", field,
             (long long)min, (long long)max);
        return -1;
    }
    *out = n;
    if (is_null)
        *is_null = false;
    return 1;
}

int input_object(json_t *obj, const char *field, json_t **out, struct input_error *e)
{
    json_t *v = json_object_get(obj, field);
    if (!v)
        return 0;
    if (!json_is_object(v)) {
        fail(e, PROBLEM_INVALID_FIELD, field, "field \"%s\" must be a JSON object", field);
        return -1;
    }
    *out = v;
    return 1;
}

int input_string_array(json_t *obj, const char *field, size_t max_items, size_t max_len,
                       char **out_json, struct input_error *e)
{
    json_t *v = json_object_get(obj, field), *item;
    size_t i;
    if (!v)
        return 0;
    if (!json_is_array(v)) {
        fail(e, PROBLEM_INVALID_FIELD, field, "field \"%s\" must be an array of strings", field);
        return -1;
    }
    if (json_array_size(v) == 0 || json_array_size(v) > max_items) {
        fail(e, PROBLEM_INVALID_VALUE, field, "field \"%s\" must have 1 to %zu items", field,
             max_items);
        return -1;
    }
    json_array_foreach(v, i, item)
    {
        if (!json_is_string(item)) {
            fail(e, PROBLEM_INVALID_FIELD, field, "field \"%s\" item %zu must be a string", field,
                 i);
            return -1;
        }
        size_t len = json_string_length(item);
        if (len == 0 || len > max_len || strlen(json_string_value(item)) != len) {
            fail(e, PROBLEM_INVALID_VALUE, field,
                 "field \"%s\" item %zu must be 1 to %zu characters without NUL", field, i,
                 max_len);
            return -1;
        }
    }
    *out_json = json_dumps(v, JSON_COMPACT);
    if (!*out_json) {
        fail(e, PROBLEM_INVALID_FIELD, field, "field \"%s\" cannot be encoded", field);
        return -1;
    }
    return 1;
}

static bool name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

bool input_is_name(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!name_char(s[n]) || n >= 128)
            return false;
    return n >= 1;
}

bool input_request_id_ok(const char *s)
{
    size_t n = 0;
    if (!s)
        return false;
    for (; s[n]; n++)
        if (!name_char(s[n]) || n >= 64)
            return false;
    return n >= 1;
}

/* A decimal integer of at most maxdigits digits, nothing else. */
static bool parse_uint(const char *s, int maxdigits, long long *out)
{
    int n = 0;
    long long v = 0;
    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= maxdigits)
            return false;
        v = v * 10 + (s[n] - '0');
    }
    if (n == 0)
        return false;
    *out = v;
    return true;
}

bool input_limit(const char *s, size_t *out, struct input_error *e)
{
    long long v;
    if (!s) {
        *out = 50;
        return true;
    }
    if (!parse_uint(s, 9, &v) || v < 1 || v > 200) {
        fail(e, PROBLEM_INVALID_PARAMETER, "limit", "limit must be an integer from 1 to 200");
        return false;
    }
    *out = (size_t)v;
    return true;
}

bool input_cursor(const char *s, struct input_error *e)
{
    long long v;
    if (!s)
        return true;
    if (!parse_uint(s, 18, &v)) {
        fail(e, PROBLEM_INVALID_PARAMETER, "cursor",
             "cursor must be the nextCursor of a previous page");
        return false;
    }
    return true;
}

bool input_wait(const char *s, int64_t *out, struct input_error *e)
{
    long long v;
    if (!s) {
        *out = 0;
        return true;
    }
    if (!parse_uint(s, 9, &v)) {
        fail(e, PROBLEM_INVALID_PARAMETER, "wait",
             "wait must be a whole number of seconds (0 or more)");
        return false;
    }
    *out = v;
    return true;
}

bool input_idempotency_key(const char *s, struct input_error *e)
{
    size_t n = 0;
    for (; s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        if (c < 0x21 || c > 0x7e || n >= 255) {
            fail(e, PROBLEM_INVALID_PARAMETER, "Idempotency-Key",
                 "Idempotency-Key must be 1 to 255 visible ASCII characters");
            return false;
        }
    }
    if (n == 0) {
        fail(e, PROBLEM_INVALID_PARAMETER, "Idempotency-Key",
             "Idempotency-Key must be 1 to 255 visible ASCII characters");
        return false;
    }
    return true;
}

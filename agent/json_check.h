/*
 * json_check.h: the strict line-JSON reader that sbx-agent and sbx-echo-agent share (json_check.c).
 *
 * Both programs run inside a Sandbox, statically linked and without jansson, and read lines that
 * untrusted code or a compromised host may have written. So the reader validates a whole line
 * (RFC 8259 syntax, UTF-8, bounded nesting) before anything looks inside it, never allocates while
 * parsing, and every lookup works on spans of the validated line. Its calls are named jspan_*
 * (not json_*): the worker and the tests use jansson, whose json_object_get and json_is_object
 * have other signatures.
 */
#ifndef SBX_JSON_CHECK_H
#define SBX_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
bool jspan_is_true(struct json_span v);

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

/* Length of the valid UTF-8 sequence at p (at most avail bytes), 0 when invalid: rejects overlong
 * forms, UTF-16 surrogates and code points above U+10FFFF. */
size_t jspan_utf8_length(const unsigned char *p, size_t avail);

#endif

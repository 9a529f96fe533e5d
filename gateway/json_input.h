/*
 * json_input.h: validation of what callers send: JSON bodies (object, known fields, types,
 * ranges), query parameters and headers. Every failure names the offending field or parameter
 * and the problem code it maps to, so the handler replies with one call. No MHD here: these are
 * pure functions, unit-tested and fuzzable on their own.
 */
#ifndef SBX_JSON_INPUT_H
#define SBX_JSON_INPUT_H

#include "problem.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct input_error {
    enum problem_code code; /* malformed-json, invalid-field, unknown-field, invalid-value or
                               invalid-parameter (problem.h) */
    char field[80];
    char detail[256];
};

/* Parses a request body that must be a JSON object. An empty body gives an empty object when
 * optional, else malformed-json. Returns a new reference or NULL with e filled. */
json_t *input_parse_object(const char *body, size_t len, bool optional, struct input_error *e);

/* Refuses any member of obj not in allowed (a NULL-terminated list): unknown-field. */
bool input_known_fields(json_t *obj, const char *const *allowed, struct input_error *e);

/* The getters return 1 when the field is present and valid (writing *out), 0 when absent (out
 * untouched), -1 on error (e filled). With nullable, JSON null is accepted: 1 with *is_null. */
int input_string(json_t *obj, const char *field, size_t minlen, size_t maxlen, bool nullable,
                 const char **out, bool *is_null, struct input_error *e);
int input_int(json_t *obj, const char *field, int64_t min, int64_t max, bool nullable, int64_t *out,
              bool *is_null, struct input_error *e);
/* A JSON object field; *out is a borrowed reference. */
int input_object(json_t *obj, const char *field, json_t **out, struct input_error *e);
/* A non-empty array (at most max_items) of non-empty strings (each at most max_len bytes);
 * *out_json is a new compact JSON text the caller frees. */
int input_string_array(json_t *obj, const char *field, size_t max_items, size_t max_len,
                       char **out_json, struct input_error *e);

/* 1..128 chars of [A-Za-z0-9._-] (App names). */
bool input_is_name(const char *s);

/* ---- query parameters and headers ---- */
/* ?limit=: absent gives 50; 1..200. */
bool input_limit(const char *s, size_t *out, struct input_error *e);
/* ?cursor=: absent or a decimal of at most 18 digits. */
bool input_cursor(const char *s, struct input_error *e);
/* ?wait=: absent gives 0; an integer >= 0 (capped by the caller). */
bool input_wait(const char *s, int64_t *out, struct input_error *e);
/* Idempotency-Key: 1-255 visible ASCII characters. */
bool input_idempotency_key(const char *s, struct input_error *e);
/* X-Request-Id taken from the caller: 1-64 of [A-Za-z0-9._-]. */
bool input_request_id_ok(const char *s);

#endif

/*
 * json_text.h: JSON answers built as text, with stored JSON (message bodies and replies, Session
 * metadata) copied in verbatim instead of parsed back into a jansson tree: a 1 MiB body of
 * `[0,0,...]` is about 20 MiB as a tree, and a page of them would be gigabytes. A stored value is
 * only checked for well-formed JSON (one pass, no allocation); a damaged one shows as null.
 */
#ifndef SBX_JSON_TEXT_H
#define SBX_JSON_TEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A growable text; failed is set (and the text dropped) when memory runs out. */
struct json_text {
    char *buf;
    size_t len, cap;
    bool failed;
};

void json_text_append(struct json_text *t, const char *s, size_t n);
void json_text_cstr(struct json_text *t, const char *s);
/* A JSON string of s, or null for NULL. */
void json_text_string(struct json_text *t, const char *s);
/* v compact (its reference is stolen; NULL: out of memory). */
void json_text_value(struct json_text *t, json_t *v);
/* A stored JSON value to splice into an object: name, its text (NULL when none), and what to
 * write instead when it is NULL, not well-formed, or (object_only) not an object. */
struct json_stored {
    const char *name;
    const char *text;
    const char *fallback;
    bool object_only;
};
/* obj's members, then "name":text for each stored value, as one object. obj is stolen. */
void json_text_object_with(struct json_text *t, json_t *obj, const struct json_stored *stored,
                           size_t n);
/* The text, now the caller's (NULL when failed), and its length. */
char *json_text_take(struct json_text *t, size_t *len);
void json_text_free(struct json_text *t);

/* Whether s (n bytes) is exactly one well-formed JSON value (RFC 8259; whitespace around it
 * allowed), nested at most max_depth deep. */
bool json_text_well_formed(const char *s, size_t n, int max_depth);

#endif

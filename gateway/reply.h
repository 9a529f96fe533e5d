/*
 * reply.h: every response the gateway sends goes through here, so each carries X-Request-Id and
 * every error is one RFC 9457 problem with a stable code (the table in reply.c).
 */
#ifndef SBX_REPLY_H
#define SBX_REPLY_H

#include "gateway.h"
#include "problem.h"

#include <jansson.h>

/* Replies with body as JSON (the reference is stolen). */
enum MHD_Result reply_json(struct request *r, unsigned status, json_t *body);
/* Same, with one extra header (e.g. Location). */
enum MHD_Result reply_json_header(struct request *r, unsigned status, json_t *body,
                                  const char *header, const char *value);
/* Replies with the JSON text t (json_text.h) as application/json, taking its buffer; an extra
 * header when header is not NULL. A text that ran out of memory is a 500. */
struct json_text;
enum MHD_Result reply_json_text(struct request *r, unsigned status, struct json_text *t,
                                const char *header, const char *value);
/* An empty response (204, or a bodiless 202). */
enum MHD_Result reply_empty(struct request *r, unsigned status);
/* A body of the given content type; text is copied. */
enum MHD_Result reply_text(struct request *r, unsigned status, const char *content_type,
                           const char *text, size_t len);

/* Queues a response made elsewhere (e.g. a stream, sse.c) with the common headers; takes resp. */
enum MHD_Result reply_response(struct request *r, unsigned status, struct MHD_Response *resp);

/* A problem: code is one of the stable codes in API.md (it decides the status); field names the
 * offending JSON field or parameter (NULL when none); detail is human text. */
enum MHD_Result reply_problem(struct request *r, enum problem_code code, const char *field,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Same, with one extra header (Allow, Retry-After, WWW-Authenticate are added automatically). */
enum MHD_Result reply_problem_header(struct request *r, enum problem_code code, const char *field,
                                     const char *header, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The problem for a store failure: not-found (naming what), conflict, store-busy, storage-full,
 * internal. */
enum MHD_Result reply_store_error(struct request *r, enum store_status st, const char *what);

/* The problem for a failed input validation (json_input.h). */
struct input_error;
enum MHD_Result reply_input_error(struct request *r, const struct input_error *e);

/* The HTTP status of a problem code (500 for an unknown code). */
unsigned problem_status(enum problem_code code);

#endif

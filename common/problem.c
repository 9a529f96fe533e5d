/*
 * problem.c: the table of problem codes: each stable code with its HTTP status and title.
 */
#include "problem.h"

#include <string.h>

static const struct problem_kind problems[] = {
    {"malformed-json", 400, "Request body is not a JSON object"},
    {"invalid-field", 400, "A field has the wrong type or format"},
    {"unknown-field", 400, "A field is not known to this endpoint"},
    {"invalid-parameter", 400, "A query parameter or header is invalid"},
    {"unauthorized", 401, "Missing, invalid or revoked token"},
    {"forbidden", 403, "This token may not use this endpoint"},
    {"not-found", 404, "Not found"},
    {"method-not-allowed", 405, "Method not allowed"},
    {"conflict", 409, "Conflict with the current state"},
    {"idempotency-conflict", 409, "Idempotency-Key reused with a different request"},
    {"body-too-large", 413, "Request body too large"},
    {"unsupported-media-type", 415, "Request body must be application/json"},
    {"invalid-value", 422, "A field has a value out of range"},
    {"rate-limited", 429, "Too many failed authentication attempts"},
    {"internal", 500, "Internal error"},
    {"store-busy", 503, "The store is busy"},
    {"storage-full", 507, "The store's disk is full"},
    /* Appended rather than sorted in: problem_find's fallback is the entry at index 14. */
    {"too-many-streams", 429, "Too many open event streams"},
    {"too-many-requests", 429, "Too many requests"},
};

const struct problem_kind *problem_find(const char *code)
{
    for (size_t i = 0; i < sizeof problems / sizeof problems[0]; i++)
        if (strcmp(problems[i].code, code) == 0)
            return &problems[i];
    return &problems[14]; /* internal */
}


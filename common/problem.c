/*
 * problem.c: the table of problem codes: each stable code with its HTTP status and title.
 */
#include "problem.h"

static const struct problem_kind problems[PROBLEM_CODE_COUNT] = {
    [PROBLEM_MALFORMED_JSON] = {"malformed-json", 400, "Request body is not a JSON object"},
    [PROBLEM_INVALID_FIELD] = {"invalid-field", 400, "A field has the wrong type or format"},
    [PROBLEM_UNKNOWN_FIELD] = {"unknown-field", 400, "A field is not known to this endpoint"},
    [PROBLEM_INVALID_PARAMETER] = {"invalid-parameter", 400,
                                   "A query parameter or header is invalid"},
    [PROBLEM_UNAUTHORIZED] = {"unauthorized", 401, "Missing, invalid or revoked token"},
    [PROBLEM_FORBIDDEN] = {"forbidden", 403, "This token may not use this endpoint"},
    [PROBLEM_NOT_FOUND] = {"not-found", 404, "Not found"},
    [PROBLEM_METHOD_NOT_ALLOWED] = {"method-not-allowed", 405, "Method not allowed"},
    [PROBLEM_CONFLICT] = {"conflict", 409, "Conflict with the current state"},
    [PROBLEM_IDEMPOTENCY_CONFLICT] = {"idempotency-conflict", 409,
                                      "Idempotency-Key reused with a different request"},
    [PROBLEM_BODY_TOO_LARGE] = {"body-too-large", 413, "Request body too large"},
    [PROBLEM_UNSUPPORTED_MEDIA_TYPE] = {"unsupported-media-type", 415,
                                        "Request body must be application/json"},
    [PROBLEM_INVALID_VALUE] = {"invalid-value", 422, "A field has a value out of range"},
    [PROBLEM_RATE_LIMITED] = {"rate-limited", 429, "Too many failed authentication attempts"},
    [PROBLEM_INTERNAL] = {"internal", 500, "Internal error"},
    [PROBLEM_STORE_BUSY] = {"store-busy", 503, "The store is busy"},
    [PROBLEM_STORAGE_FULL] = {"storage-full", 507, "The store's disk is full"},
    [PROBLEM_TOO_MANY_STREAMS] = {"too-many-streams", 429, "Too many open event streams"},
    [PROBLEM_TOO_MANY_REQUESTS] = {"too-many-requests", 429, "Too many requests"},
    [PROBLEM_QUOTA_SESSIONS] = {"quota-sessions", 429, "The App is at its quota of live Sessions"},
    [PROBLEM_QUOTA_WORKSPACES] = {"quota-workspaces", 429, "The App is at its quota of Workspaces"},
    [PROBLEM_QUOTA_WORKSPACE_MIB] = {"quota-workspace-mib", 429,
                                     "The App's Workspaces would exceed its quota of MiB"},
    [PROBLEM_QUOTA_KEEP_ALIVE] = {"quota-keep-alive-seconds", 422,
                                  "keepAliveSeconds is above the App's quota"},
    [PROBLEM_WORKSPACE_DISK_FULL] = {"workspace-disk-full", 507,
                                     "The data filesystem cannot hold another Workspace this size"},
};

const struct problem_kind *problem_kind(enum problem_code code)
{
    if ((unsigned)code >= PROBLEM_CODE_COUNT || !problems[code].code)
        return &problems[PROBLEM_INTERNAL];
    return &problems[code];
}

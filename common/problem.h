/*
 * problem.h: the stable codes of RFC 9457 problems (openapi.yaml's Problem.code), each with its
 * HTTP status and title, for every HTTP API of sbx: the gateway's and the callback API. Handlers
 * name a code by its enum, so a misspelt code does not compile; its text, status and title are
 * in the one table of problem.c.
 */
#ifndef SBX_PROBLEM_H
#define SBX_PROBLEM_H

enum problem_code {
    PROBLEM_MALFORMED_JSON,
    PROBLEM_INVALID_FIELD,
    PROBLEM_UNKNOWN_FIELD,
    PROBLEM_INVALID_PARAMETER,
    PROBLEM_UNAUTHORIZED,
    PROBLEM_FORBIDDEN,
    PROBLEM_NOT_FOUND,
    PROBLEM_METHOD_NOT_ALLOWED,
    PROBLEM_CONFLICT,
    PROBLEM_IDEMPOTENCY_CONFLICT,
    PROBLEM_BODY_TOO_LARGE,
    PROBLEM_UNSUPPORTED_MEDIA_TYPE,
    PROBLEM_INVALID_VALUE,
    PROBLEM_RATE_LIMITED,
    PROBLEM_INTERNAL,
    PROBLEM_STORE_BUSY,
    PROBLEM_STORAGE_FULL,
    PROBLEM_TOO_MANY_STREAMS,
    PROBLEM_TOO_MANY_REQUESTS,
    /* An App's quotas and the Workspaces' disk (docs/tenants.md). */
    PROBLEM_QUOTA_SESSIONS,
    PROBLEM_QUOTA_WORKSPACES,
    PROBLEM_QUOTA_WORKSPACE_MIB,
    PROBLEM_QUOTA_KEEP_ALIVE,
    PROBLEM_WORKSPACE_DISK_FULL,
    PROBLEM_CODE_COUNT
};

struct problem_kind {
    const char *code; /* the stable code, "not-found" */
    unsigned status;
    const char *title;
};

/* The kind of code; that of PROBLEM_INTERNAL for a value out of the enum's range. */
const struct problem_kind *problem_kind(enum problem_code code);

#endif

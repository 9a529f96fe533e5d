/*
 * problem.h: the stable codes of RFC 9457 problems (openapi.yaml's Problem.code), each with its
 * HTTP status and title, for every HTTP API of sbx: the gateway's and the callback API.
 */
#ifndef SBX_PROBLEM_H
#define SBX_PROBLEM_H

struct problem_kind {
    const char *code;
    unsigned status;
    const char *title;
};

/* The kind of code; "internal" (500) for a code the table does not have. */
const struct problem_kind *problem_find(const char *code);

#endif

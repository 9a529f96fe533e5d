/*
 * secret_proxy_http.h: the HTTP/1.1 pieces of the brokering egress proxy (secret_proxy.h) that
 * need no socket: reading a request's or response's head, replacing a Sandbox's placeholders in
 * a request head for the hosts their secrets name (and telling a misuse apart), and following a
 * message body's framing (Content-Length, chunked) so that keep-alive connections are relayed
 * one message at a time while every byte streams through as it comes.
 */
#ifndef SBX_SECRET_PROXY_HTTP_H
#define SBX_SECRET_PROXY_HTTP_H

#include "secret_set.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A request or response head is at most this long (request: 431 past it). */
#define SP_HEAD_MAX 65536
/* At most this many different secrets are replaced in one request. */
#define SP_MAX_USED 8

/* The offset just past the blank line that ends a head in buf[0..len), or 0 while incomplete. */
size_t sp_head_end(const char *buf, size_t len);

/* What a head says about its body. */
enum sp_body { SP_BODY_NONE, SP_BODY_LENGTH, SP_BODY_CHUNKED, SP_BODY_UNTIL_CLOSE };

struct sp_request {
    char method[16];
    char path[512]; /* the target without its query, for the audit trail (truncated) */
    char host[256]; /* the Host header's name: lower case, without port ("" if none) */
    enum sp_body body;
    uint64_t length;
    bool close; /* Connection: close, or HTTP/1.0 without keep-alive */
};

struct sp_response {
    int status;
    enum sp_body body;
    uint64_t length;
    bool close;
};

/* Parses a request head (head[0..len) ends with the blank line). 0, or -1 when malformed. */
int sp_parse_request(const char *head, size_t len, struct sp_request *out);
/* Parses a response head; head_request says whether it answers a HEAD. 0, or -1. */
int sp_parse_response(const char *head, size_t len, bool head_request, struct sp_response *out);

/* The outcome of sp_rewrite. */
struct sp_rewrite {
    char *head; /* the head to send upstream (malloc'd, NUL-terminated), NULL on misuse */
    size_t len;
    const struct secret_binding *used[SP_MAX_USED]; /* secrets replaced, each once */
    size_t nused;
    const struct secret_binding *misused; /* a placeholder seen for a host not its secret's */
};

/* Replaces each placeholder of set s found in a header value of head (or in the decoded
 * credentials of `Authorization: Basic`, encoded again) by its secret's value when host is one of
 * that secret's hosts. A placeholder of s for any other host (in a header or in
 * the request line) is a misuse: out->misused is set, nothing is replaced and out->head is NULL.
 * Strings that look like placeholders but are not in s (another Sandbox's) are left alone.
 * Drops any `Expect` header (the proxy sends the body right behind the head). 0, or -1 when out
 * of memory. Free out->head (it may hold secret values: it is wiped) with sp_rewrite_free. */
int sp_rewrite(const struct secret_set *s, const char *host, const char *head, size_t len,
               struct sp_rewrite *out);
void sp_rewrite_free(struct sp_rewrite *r);

/* A chunked body's framing, followed byte by byte so that its end is found without changing or
 * holding any byte. */
struct sp_chunked {
    int state;
    uint64_t left; /* bytes of the current chunk's data still to come */
    int line;      /* bytes of the current line (size or trailer) */
};
/* Consumes buf[0..len) up to the end of the body: returns the bytes that belong to it; *done is
 * set when the last one is among them. -1 when the framing is malformed. */
long sp_chunked_scan(struct sp_chunked *c, const char *buf, size_t len, bool *done);

#endif

/*
 * fc_api.h: a small HTTP/1.1 client for Firecracker's API socket (a Unix stream socket).
 *
 * Firecracker speaks a strict subset of HTTP/1.1 with JSON bodies: configuration calls are PUTs
 * that answer 204, and every refusal carries {"fault_message": "..."}. One request uses one
 * connection, so a VMM that dies mid-boot cannot leave a half-read response on a shared stream.
 */
#ifndef SBX_FC_API_H
#define SBX_FC_API_H

#include <stddef.h>

struct fc_response {
    int status; /* HTTP status code */
    char *body; /* NUL-terminated body ("" when none); owned, released by fc_response_clear() */
    size_t body_len;
};

void fc_response_clear(struct fc_response *resp);

/* Sends one request (json_body may be NULL) to the API socket at sock_path and reads the whole
 * response, all within timeout_ms. Returns 0 with resp filled whatever the status, or -1 with the
 * transport error (connect, timeout, malformed response) in err. */
int fc_api_request(const char *sock_path, const char *method, const char *path,
                   const char *json_body, int timeout_ms, struct fc_response *resp, char *err,
                   size_t errlen);

/* A PUT that must succeed (2xx). On any other status returns -1 with
 * "PUT <path>: HTTP <status>: <fault_message>" in err. */
int fc_api_put(const char *sock_path, const char *path, const char *json_body, int timeout_ms,
               char *err, size_t errlen);

/* The fault_message of a Firecracker error body, or the body itself when it has none, written to
 * out (always NUL-terminated). */
void fc_api_fault_message(const char *body, char *out, size_t outlen);

#endif

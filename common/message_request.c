/*
 * message_request.c: the request hash of an idempotent enqueue (message_request.h).
 */
#include "message_request.h"

#include <nettle/base16.h>
#include <nettle/sha2.h>
#include <stdlib.h>
#include <string.h>

void message_request_hash(const char *session_id, json_t *body, char out[65])
{
    struct sha256_ctx c;
    uint8_t digest[SHA256_DIGEST_SIZE];
    char *canonical = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    sha256_init(&c);
    sha256_update(&c, 18, (const uint8_t *)"POST /v1/sessions/");
    sha256_update(&c, strlen(session_id), (const uint8_t *)session_id);
    sha256_update(&c, 10, (const uint8_t *)"/messages\n");
    if (canonical)
        sha256_update(&c, strlen(canonical), (const uint8_t *)canonical);
    sha256_digest(&c, sizeof digest, digest);
    base16_encode_update(out, sizeof digest, digest);
    out[BASE16_ENCODE_LENGTH(SHA256_DIGEST_SIZE)] = '\0';
    free(canonical);
}

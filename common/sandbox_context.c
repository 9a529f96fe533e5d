/*
 * sandbox_context.c: the reserved names of a Sandbox's context and its callback tokens.
 */
#include "sandbox_context.h"

#include "id.h"

#include <nettle/base64.h>
#include <nettle/sha2.h>
#include <string.h>

const char *const sandbox_context_vars[] = {
    "SBX_SESSION_ID", "SBX_APP_ID", "SBX_SANDBOX_ID", "SBX_API_URL", "SBX_TOKEN",
    "SBX_CA_FILE",    NULL};

bool sandbox_context_reserved(const char *name)
{
    for (size_t i = 0; sandbox_context_vars[i]; i++)
        if (strcmp(name, sandbox_context_vars[i]) == 0)
            return true;
    return false;
}

void callback_token_hash(const char *token, size_t len, char hash_hex[65])
{
    static const char hex[] = "0123456789abcdef";
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, len, (const uint8_t *)token);
    sha256_digest(&c, sizeof d, d);
    for (size_t i = 0; i < sizeof d; i++) {
        hash_hex[2 * i] = hex[d[i] >> 4];
        hash_hex[2 * i + 1] = hex[d[i] & 15];
    }
    hash_hex[64] = '\0';
}

int callback_token_new(char *token, char hash_hex[65])
{
    uint8_t raw[32];
    char b64[BASE64_ENCODE_RAW_LENGTH(sizeof raw) + 1];
    if (random_bytes(raw, sizeof raw) != 0)
        return -1;
    base64_encode_raw(b64, sizeof raw, raw);
    /* base64url: '-' and '_' for '+' and '/'; 32 bytes are 43 characters and one '=' of padding,
     * which a token does without. */
    for (size_t i = 0; i < 43; i++)
        b64[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
    size_t n = strlen(CALLBACK_TOKEN_PREFIX);
    memcpy(token, CALLBACK_TOKEN_PREFIX, n);
    memcpy(token + n, b64, 43);
    token[n + 43] = '\0';
    callback_token_hash(token, n + 43, hash_hex);
    return 0;
}

/*
 * webhook_sign.c: Standard Webhooks secrets and signatures with nettle (see webhook_sign.h).
 */
#include "webhook_sign.h"
#include "id.h"

#include <inttypes.h>
#include <nettle/base64.h>
#include <nettle/hmac.h>
#include <stdio.h>
#include <string.h>

#define SECRET_PREFIX "whsec_"
#define SECRET_BYTES 24

int webhook_secret_new(char out[WEBHOOK_SECRET_LEN])
{
    uint8_t key[SECRET_BYTES];
    if (random_bytes(key, sizeof key) != 0)
        return -1;
    memcpy(out, SECRET_PREFIX, sizeof SECRET_PREFIX - 1);
    base64_encode_raw(out + sizeof SECRET_PREFIX - 1, sizeof key, key);
    out[sizeof SECRET_PREFIX - 1 + BASE64_ENCODE_RAW_LENGTH(SECRET_BYTES)] = '\0';
    return 0;
}

int webhook_sign(const char *secret, const char *msg_id, int64_t timestamp, const char *body,
                 size_t body_len, char out[WEBHOOK_SIGNATURE_LEN])
{
    uint8_t key[64], mac[SHA256_DIGEST_SIZE];
    size_t key_len = sizeof key;
    struct base64_decode_ctx dec;
    struct hmac_sha256_ctx h;
    char ts[24];

    if (strncmp(secret, SECRET_PREFIX, sizeof SECRET_PREFIX - 1) != 0)
        return -1;
    const char *b64 = secret + sizeof SECRET_PREFIX - 1;
    size_t b64_len = strlen(b64);
    if (BASE64_DECODE_LENGTH(b64_len) > sizeof key)
        return -1;
    base64_decode_init(&dec);
    if (!base64_decode_update(&dec, &key_len, key, b64_len, b64) || !base64_decode_final(&dec) ||
        key_len == 0)
        return -1;
    int n = snprintf(ts, sizeof ts, "%" PRId64, timestamp);
    hmac_sha256_set_key(&h, key_len, key);
    hmac_sha256_update(&h, strlen(msg_id), (const uint8_t *)msg_id);
    hmac_sha256_update(&h, 1, (const uint8_t *)".");
    hmac_sha256_update(&h, (size_t)n, (const uint8_t *)ts);
    hmac_sha256_update(&h, 1, (const uint8_t *)".");
    hmac_sha256_update(&h, body_len, (const uint8_t *)body);
    hmac_sha256_digest(&h, sizeof mac, mac);
    memcpy(out, "v1,", 3);
    base64_encode_raw(out + 3, sizeof mac, mac);
    out[3 + BASE64_ENCODE_RAW_LENGTH(sizeof mac)] = '\0';
    return 0;
}

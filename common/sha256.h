/*
 * sha256.h: SHA-256 (FIPS 180-4), for API key and admin token hashes and idempotency request
 * hashes, plus a constant-time comparison for secrets.
 */
#ifndef SBX_SHA256_H
#define SBX_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256_ctx {
    uint32_t state[8];
    uint64_t bytes;
    uint8_t buf[64];
    size_t buflen;
};

void sha256_init(struct sha256_ctx *c);
void sha256_update(struct sha256_ctx *c, const void *data, size_t len);
void sha256_final(struct sha256_ctx *c, uint8_t out[32]);
/* One-shot digest. */
void sha256(const void *data, size_t len, uint8_t out[32]);
/* Lowercase hex of a digest; out must hold 65 bytes. */
void sha256_hex(const uint8_t digest[32], char out[65]);
/* 1 when a and b are equal; takes the same time wherever they differ. */
int ct_equal(const void *a, const void *b, size_t len);

#endif

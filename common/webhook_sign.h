/*
 * webhook_sign.h: the Standard Webhooks signature scheme, as sbx signs its webhook requests and
 * as a receiver checks them: a secret is "whsec_" + base64(24 random bytes); a request carries
 * webhook-id, webhook-timestamp (Unix seconds) and webhook-signature = "v1," +
 * base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>")), where key is the secret's decoded bytes.
 */
#ifndef SBX_WEBHOOK_SIGN_H
#define SBX_WEBHOOK_SIGN_H

#include <stddef.h>
#include <stdint.h>

/* Room for a secret and for a signature header value, with their NUL. */
#define WEBHOOK_SECRET_LEN 64
#define WEBHOOK_SIGNATURE_LEN 64

/* A new random secret. Returns 0, or -1 when the CSPRNG fails. */
int webhook_secret_new(char out[WEBHOOK_SECRET_LEN]);

/* The webhook-signature value for one request. Returns 0, or -1 for a malformed secret. */
int webhook_sign(const char *secret, const char *msg_id, int64_t timestamp, const char *body,
                 size_t body_len, char out[WEBHOOK_SIGNATURE_LEN]);

#endif

/*
 * auth.h: bearer tokens. The admin token and App API keys are random secrets stored only as
 * SHA-256 hashes; presented tokens are hashed and compared in constant time. Repeated failures
 * from one client address are rate-limited (429) so that guessing is throttled.
 */
#ifndef SBX_AUTH_H
#define SBX_AUTH_H

#include "gateway.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTH_KEY_PREFIX "sbx_"
#define AUTH_ADMIN_PREFIX "sbx_admin_"
#define AUTH_SECRET_BYTES 32
#define AUTH_KEY_LEN 47          /* "sbx_" + 43 chars of base64url(32 bytes) */
#define AUTH_KEY_SHOWN_PREFIX 10 /* characters of a key shown as its "prefix" */

/* base64url without padding of len bytes; out must hold 4 * len / 3 + 4 bytes. */
void base64url_encode(const uint8_t *in, size_t len, char *out);
/* prefix + base64url(32 bytes from getrandom). Returns 0, or -1 when the CSPRNG fails. */
int auth_new_secret(const char *prefix, char *out, size_t outlen);
/* Whether token has the shape of an App key ("sbx_" + 43 base64url characters). */
bool auth_key_format_ok(const char *token);
void auth_hash(const char *token, uint8_t out[32]);
/* The token of an "Authorization: Bearer <token>" header value, or NULL. */
const char *auth_bearer(const char *header);

/* Whether the App key whose SHA-256 is hash is valid now (not revoked, its App not deleted):
 * STORE_OK with the key in *out, STORE_NOT_FOUND, or a store failure. Through the key cache
 * (key_cache.h), so that it costs a store read at most once per key per auth_cache_ms. Also used
 * by open streams and parked long polls to re-check the key they were opened with. */
enum store_status auth_key_check(struct gateway *gw, const uint8_t hash[32], struct store_key *out);

/* Authenticates r for its route: fills r->is_admin, r->app_id, r->actor, r->ctx. On failure
 * queues the 401/403/429 problem, sets *ret, and returns false. */
bool auth_request(struct request *r, enum MHD_Result *ret);

/* ---- failed-auth rate limiter ---- */
struct ratelimit *ratelimit_new(int64_t limit, int64_t window_ms);
void ratelimit_free(struct ratelimit *rl);
/* Whether addr is blocked now; *retry_after_s says for how long. */
bool ratelimit_blocked(struct ratelimit *rl, const char *addr, int64_t now, int64_t *retry_after_s);
void ratelimit_fail(struct ratelimit *rl, const char *addr, int64_t now);

#endif

/*
 * sandbox_context.h: what the agent in a Sandbox is told about itself (docs/callbacks.md): the
 * environment variables the worker sets for the App's command, which an App's env may not name,
 * and the Sandbox's bearer token for the callback API, of which the store keeps only a hash.
 */
#ifndef SBX_SANDBOX_CONTEXT_H
#define SBX_SANDBOX_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>

/* The variables the worker sets: SBX_SESSION_ID, SBX_APP_ID, SBX_SANDBOX_ID, SBX_API_URL,
 * SBX_TOKEN, SBX_CA_FILE; NULL-terminated. */
extern const char *const sandbox_context_vars[];

/* Whether an App's env may not set name (it is one of sandbox_context_vars). */
bool sandbox_context_reserved(const char *name);

/* Where the agent finds the installation CA's certificate (SBX_CA_FILE): the guest agent writes
 * it there, on the Sandbox's own /tmp, before it starts the App's command. */
#define SANDBOX_CA_PATH "/tmp/sbx-ca.pem"

/* "sbxcb_" and 43 base64url characters (256 random bits). */
#define CALLBACK_TOKEN_PREFIX "sbxcb_"
#define CALLBACK_TOKEN_LEN 49

/* A new token in token (CALLBACK_TOKEN_LEN + 1 bytes) and its hash in hash_hex. 0, or -1 when
 * the kernel's random source fails. */
int callback_token_new(char *token, char hash_hex[65]);
/* The SHA-256 of a token, in hex: what the store keeps and looks up. */
void callback_token_hash(const char *token, size_t len, char hash_hex[65]);

#endif

/*
 * store_keys.h: the store's operations on api keys (keys.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_KEYS_H
#define SBX_STORE_KEYS_H

#include "store_records.h"

struct store;

enum store_status store_key_create(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id, const char *name, const char *prefix,
                                   const uint8_t hash[32], struct store_key *out);
enum store_status store_key_list(struct store *st, const char *app_id, struct store_key **out,
                                 size_t *n);
enum store_status store_key_revoke(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id, const char *key_id);
/* Finds an active (not revoked) key by the SHA-256 of the presented token. */
enum store_status store_key_lookup(struct store *st, const uint8_t hash[32], struct store_key *out);

#endif

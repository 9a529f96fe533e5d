/*
 * key_cache.h: the API keys this gateway authenticated lately, so that a request with a known key
 * costs a hash and a table probe instead of a store read.
 *
 * What bounds a cached key's life: an entry is used for at most auth_cache_ms after the store
 * said the key was valid; a key revoke or an App delete on any gateway clears every cache at once
 * (this gateway's directly, the others' through the "keys" wake-up to role "gateway", notify.h);
 * so a revoke that no gateway made (a change written to the database by hand) takes effect within
 * auth_cache_ms, and one that a gateway made, as soon as its wake-up arrives.
 *
 * Only valid keys are cached; a wrong token always reaches the store (and the rate limiter).
 * Thread-safe. Hidden state: the table and a generation counter, under one lock.
 */
#ifndef SBX_KEY_CACHE_H
#define SBX_KEY_CACHE_H

#include "store_records.h"

#include <stdbool.h>
#include <stdint.h>

struct key_cache;

/* A cache whose entries live ttl_ms (0: a cache that keeps nothing); NULL when out of memory. */
struct key_cache *key_cache_new(int64_t ttl_ms);
void key_cache_free(struct key_cache *kc);

/* True with the key's id and App in *out when hash (the token's SHA-256) is cached and fresh. */
bool key_cache_get(struct key_cache *kc, const uint8_t hash[32], struct store_key *out);
/* The generation to hand to key_cache_put: read it before the store lookup, so that a lookup
 * that raced with a clear (a revoke committed meanwhile) is not cached. */
uint64_t key_cache_generation(struct key_cache *kc);
/* Caches a key the store just found valid, unless the cache was cleared since generation. */
void key_cache_put(struct key_cache *kc, uint64_t generation, const uint8_t hash[32],
                   const struct store_key *key);
/* Forgets every key (after a revoke or an App delete, or a lost wake-up). */
void key_cache_clear(struct key_cache *kc);

#endif

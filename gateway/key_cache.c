/*
 * key_cache.c: the authenticated-key cache (see key_cache.h): a fixed table indexed by the
 * token's SHA-256 (uniform, so its first bytes are the slot), one entry per slot, the newest key
 * taking a slot over.
 */
#include "key_cache.h"
#include "clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KEY_CACHE_SLOTS 1024

struct key_entry {
    uint8_t hash[32];
    int64_t expires_ms; /* monotonic; 0: empty */
    char key_id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
};

struct key_cache {
    pthread_mutex_t lock;
    int64_t ttl_ms;
    uint64_t generation; /* bumped by every clear */
    struct key_entry slots[KEY_CACHE_SLOTS];
};

struct key_cache *key_cache_new(int64_t ttl_ms)
{
    struct key_cache *kc = calloc(1, sizeof *kc);
    if (!kc)
        return NULL;
    pthread_mutex_init(&kc->lock, NULL);
    kc->ttl_ms = ttl_ms;
    return kc;
}

void key_cache_free(struct key_cache *kc)
{
    if (!kc)
        return;
    pthread_mutex_destroy(&kc->lock);
    free(kc);
}

static struct key_entry *slot_of(struct key_cache *kc, const uint8_t hash[32])
{
    return &kc->slots[((unsigned)hash[0] << 8 | hash[1]) % KEY_CACHE_SLOTS];
}

/* The hashes are compared without an early exit, as the store does (keys.c). */
static bool same_hash(const uint8_t *a, const uint8_t *b)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < 32; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

bool key_cache_get(struct key_cache *kc, const uint8_t hash[32], struct store_key *out)
{
    bool hit = false;
    if (!kc || kc->ttl_ms <= 0)
        return false;
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&kc->lock);
    struct key_entry *e = slot_of(kc, hash);
    if (e->expires_ms > now && same_hash(e->hash, hash)) {
        memset(out, 0, sizeof *out);
        memcpy(out->id, e->key_id, sizeof out->id);
        memcpy(out->app_id, e->app_id, sizeof out->app_id);
        hit = true;
    }
    pthread_mutex_unlock(&kc->lock);
    return hit;
}

uint64_t key_cache_generation(struct key_cache *kc)
{
    if (!kc)
        return 0;
    pthread_mutex_lock(&kc->lock);
    uint64_t g = kc->generation;
    pthread_mutex_unlock(&kc->lock);
    return g;
}

void key_cache_put(struct key_cache *kc, uint64_t generation, const uint8_t hash[32],
                   const struct store_key *key)
{
    if (!kc || kc->ttl_ms <= 0)
        return;
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&kc->lock);
    if (generation == kc->generation) {
        struct key_entry *e = slot_of(kc, hash);
        memcpy(e->hash, hash, 32);
        memcpy(e->key_id, key->id, sizeof e->key_id);
        memcpy(e->app_id, key->app_id, sizeof e->app_id);
        e->key_id[sizeof e->key_id - 1] = e->app_id[sizeof e->app_id - 1] = '\0';
        e->expires_ms = now + kc->ttl_ms;
    }
    pthread_mutex_unlock(&kc->lock);
}

void key_cache_clear(struct key_cache *kc)
{
    if (!kc)
        return;
    pthread_mutex_lock(&kc->lock);
    kc->generation++;
    for (size_t i = 0; i < KEY_CACHE_SLOTS; i++)
        kc->slots[i].expires_ms = 0;
    pthread_mutex_unlock(&kc->lock);
}

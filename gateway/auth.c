/*
 * auth.c: bearer tokens and the failed-auth rate limiter (see auth.h).
 */
#include "auth.h"
#include "store_keys.h"
#include "client_addr.h"
#include "id.h"
#include "key_cache.h"
#include "log.h"
#include "reply.h"
#include "clock.h"

#include <ctype.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void base64url_encode(const uint8_t *in, size_t len, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
        out[o++] = tbl[v >> 6 & 63];
        out[o++] = tbl[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
        out[o++] = tbl[v >> 6 & 63];
    }
    out[o] = '\0';
}

int auth_new_secret(const char *prefix, char *out, size_t outlen)
{
    uint8_t rnd[AUTH_SECRET_BYTES];
    char enc[64];
    if (random_bytes(rnd, sizeof rnd) != 0)
        return -1;
    base64url_encode(rnd, sizeof rnd, enc);
    memset(rnd, 0, sizeof rnd);
    if ((size_t)snprintf(out, outlen, "%s%s", prefix, enc) >= outlen)
        return -1;
    return 0;
}

bool auth_key_format_ok(const char *token)
{
    if (strlen(token) != AUTH_KEY_LEN || strncmp(token, AUTH_KEY_PREFIX, 4) != 0)
        return false;
    for (const char *p = token + 4; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return false;
    return true;
}

void auth_hash(const char *token, uint8_t out[32])
{
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, strlen(token), (const uint8_t *)token);
    sha256_digest(&c, SHA256_DIGEST_SIZE, out);
}

const char *auth_bearer(const char *header)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return NULL;
    header += 7;
    while (*header == ' ')
        header++;
    return *header ? header : NULL;
}

/* The failed-auth bucket of a presented token: its first AUTH_KEY_SHOWN_PREFIX characters, the
 * part of a key that is shown (in key lists and logs) and that guesses at one key share. */
static void token_prefix(const char *token, char out[AUTH_KEY_SHOWN_PREFIX + 1])
{
    size_t i = 0;
    for (; i < AUTH_KEY_SHOWN_PREFIX && token[i]; i++)
        out[i] = isprint((unsigned char)token[i]) ? token[i] : '?';
    out[i] = '\0';
}

/* A wrong or revoked token (counted: for its client address and for its prefix) or a missing
 * one (not counted). Once the prefix has failed auth_fail_limit times in the window, wherever
 * from, a wrong token with it is answered 429 too; a right token with that prefix still works,
 * so that nobody can lock a key's owner out by guessing at it. */
static bool auth_fail(struct request *r, const char *addr, const char *token, const char *why,
                      enum MHD_Result *ret)
{
    char prefix[AUTH_KEY_SHOWN_PREFIX + 1], retry[32];
    int64_t now = clock_mono_ms(), retry_after = 0;
    bool prefix_blocked = false;
    if (token) {
        token_prefix(token, prefix);
        /* Like the address: the failures up to the limit are 401, the ones after it 429. */
        prefix_blocked = ratelimit_blocked(r->gw->rl_prefix, prefix, now, &retry_after);
        ratelimit_fail(r->gw->rl, addr, now);
        ratelimit_fail(r->gw->rl_prefix, prefix, now);
    }
    log_emit(LOG_LEVEL_INFO, r->request_id, "auth failed from %s on %s %s: %s", addr, r->method,
             r->path, why);
    if (prefix_blocked) {
        snprintf(retry, sizeof retry, "%lld", (long long)retry_after);
        *ret = reply_problem_header(r, PROBLEM_RATE_LIMITED, NULL, "Retry-After", retry,
                                    "too many failed authentication attempts with tokens "
                                    "starting %s; retry in %lld s",
                                    prefix, (long long)retry_after);
        return false;
    }
    *ret = reply_problem(r, PROBLEM_UNAUTHORIZED, NULL, "%s", why);
    return false;
}

enum store_status auth_key_check(struct gateway *gw, const uint8_t hash[32], struct store_key *out)
{
    if (key_cache_get(gw->keys, hash, out))
        return STORE_OK;
    uint64_t generation = key_cache_generation(gw->keys);
    enum store_status st = store_key_lookup(gw->st, hash, out);
    if (st == STORE_OK)
        key_cache_put(gw->keys, generation, hash, out);
    return st;
}

bool auth_request(struct request *r, enum MHD_Result *ret)
{
    struct gateway *gw = r->gw;
    char addr[CLIENT_ADDR_LEN], retry[32];
    int64_t retry_after;
    uint8_t hash[32];
    const char *token =
        auth_bearer(MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization"));

    client_addr_of(gw->proxies, r->conn, addr);
    /* A blocked address is refused before its token is looked at, so that continued guessing
     * learns nothing. */
    if (ratelimit_blocked(gw->rl, addr, clock_mono_ms(), &retry_after)) {
        snprintf(retry, sizeof retry, "%lld", (long long)retry_after);
        *ret = reply_problem_header(r, PROBLEM_RATE_LIMITED, NULL, "Retry-After", retry,
                                    "too many failed authentication attempts from %s; retry "
                                    "in %lld s",
                                    addr, (long long)retry_after);
        return false;
    }
    if (!token)
        return auth_fail(r, addr, NULL, "an Authorization: Bearer token is required", ret);
    if (strlen(token) > 200)
        return auth_fail(r, addr, token, "the token is invalid", ret);

    auth_hash(token, hash);
    if (memeql_sec(hash, gw->admin_hash, 32)) {
        r->is_admin = true;
        r->app_id[0] = '\0';
        snprintf(r->actor, sizeof r->actor, "admin");
    } else {
        struct store_key key;
        enum store_status st = AUTH_KEY_LEN == strlen(token) && auth_key_format_ok(token)
                                   ? auth_key_check(gw, hash, &key)
                                   : STORE_NOT_FOUND;
        if (st == STORE_NOT_FOUND)
            return auth_fail(r, addr, token, "the token is invalid or revoked", ret);
        if (st != STORE_OK) {
            *ret = reply_store_error(r, st, "API key");
            return false;
        }
        r->is_admin = false;
        memcpy(r->key_hash, hash, sizeof r->key_hash);
        snprintf(r->app_id, sizeof r->app_id, "%s", key.app_id);
        snprintf(r->actor, sizeof r->actor, "key:%s", key.id);
    }
    r->ctx.actor = r->actor;
    r->ctx.request_id = r->request_id;

    enum auth_kind need = r->route->auth;
    if (need == AUTH_ADMIN && !r->is_admin) {
        *ret =
            reply_problem(r, PROBLEM_FORBIDDEN, NULL, "%s needs the admin token", r->route->path);
        return false;
    }
    if (need == AUTH_KEY && r->is_admin) {
        *ret = reply_problem(r, PROBLEM_FORBIDDEN, NULL,
                             "%s needs an App API key (the admin token acts on no App)",
                             r->route->path);
        return false;
    }
    return true;
}

/* ---- rate limiter: a fixed-size table of addresses with a fixed window each ---- */

#define RL_SLOTS 4096

struct rl_slot {
    char addr[48];
    int64_t window_start; /* monotonic ms; 0: free */
    int64_t failures;
};

struct ratelimit {
    pthread_mutex_t lock;
    int64_t limit, window_ms;
    struct rl_slot slots[RL_SLOTS];
};

struct ratelimit *ratelimit_new(int64_t limit, int64_t window_ms)
{
    struct ratelimit *rl = calloc(1, sizeof *rl);
    if (!rl)
        return NULL;
    pthread_mutex_init(&rl->lock, NULL);
    rl->limit = limit;
    rl->window_ms = window_ms;
    return rl;
}

void ratelimit_free(struct ratelimit *rl)
{
    if (!rl)
        return;
    pthread_mutex_destroy(&rl->lock);
    free(rl);
}

static uint32_t addr_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* The slot of addr, or NULL. Linear probing over a short run keeps lookups bounded; when the run
 * is full, a free or expired slot is reused first, else the one with the oldest window. */
static struct rl_slot *rl_find(struct ratelimit *rl, const char *addr, int64_t now, bool create)
{
    uint32_t h = addr_hash(addr);
    struct rl_slot *victim = NULL;
    bool victim_expired = false;
    for (int i = 0; i < 16; i++) {
        struct rl_slot *s = &rl->slots[(h + (uint32_t)i) % RL_SLOTS];
        if (s->window_start && strcmp(s->addr, addr) == 0)
            return s;
        bool expired = s->window_start == 0 || now - s->window_start >= rl->window_ms;
        if (expired) {
            if (!victim_expired) {
                victim = s;
                victim_expired = true;
            }
        } else if (!victim_expired && (!victim || s->window_start < victim->window_start)) {
            victim = s;
        }
    }
    if (!create)
        return NULL;
    snprintf(victim->addr, sizeof victim->addr, "%s", addr);
    victim->window_start = now;
    victim->failures = 0;
    return victim;
}

bool ratelimit_blocked(struct ratelimit *rl, const char *addr, int64_t now, int64_t *retry_after_s)
{
    bool blocked = false;
    if (!rl)
        return false;
    pthread_mutex_lock(&rl->lock);
    struct rl_slot *s = rl_find(rl, addr, now, false);
    if (s && now - s->window_start < rl->window_ms && s->failures >= rl->limit) {
        blocked = true;
        *retry_after_s = (s->window_start + rl->window_ms - now + 999) / 1000;
    }
    pthread_mutex_unlock(&rl->lock);
    return blocked;
}

void ratelimit_fail(struct ratelimit *rl, const char *addr, int64_t now)
{
    if (!rl)
        return;
    pthread_mutex_lock(&rl->lock);
    struct rl_slot *s = rl_find(rl, addr, now, true);
    if (now - s->window_start >= rl->window_ms) {
        s->window_start = now;
        s->failures = 0;
    }
    s->failures++;
    pthread_mutex_unlock(&rl->lock);
}

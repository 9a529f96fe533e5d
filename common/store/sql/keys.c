/*
 * keys.c: the api_keys table: an App's API keys, created with the SHA-256 of their secret (the
 * secret itself is never stored), listed, revoked, and looked up by the hash of a presented token
 * for every authenticated request. No hidden state.
 */
#include "id.h"
#include "clock.h"
#include "store_sql.h"

#include <stdio.h>
#include <string.h>

#define KEY_COLS "id, app_id, name, prefix, created_at, revoked_at"

static void key_from_row(struct sql_stmt *s, struct store_key *k)
{
    memset(k, 0, sizeof *k);
    sql_col_copy(s, 0, k->id, sizeof k->id);
    sql_col_copy(s, 1, k->app_id, sizeof k->app_id);
    sql_col_copy(s, 2, k->name, sizeof k->name);
    sql_col_copy(s, 3, k->prefix, sizeof k->prefix);
    k->created_at = sql_col_int64(s, 4);
    k->revoked_at = sql_col_int64_or(s, 5, 0);
}

enum store_status store_key_create(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id, const char *name, const char *prefix,
                                   const uint8_t hash[32], struct store_key *out)
{
    struct sql_stmt *s;
    enum store_status r;
    struct store_key k = {0};
    char data[64];

    if (id_new("key", k.id, sizeof k.id) != 0)
        return STORE_ERROR;
    snprintf(k.app_id, sizeof k.app_id, "%s", app_id);
    snprintf(k.name, sizeof k.name, "%s", name ? name : "");
    snprintf(k.prefix, sizeof k.prefix, "%s", prefix);
    k.created_at = clock_wall_ms();
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sql_app_exists(st, app_id);
    if (r == STORE_OK) {
        s = sql_stmt(st, "INSERT INTO api_keys (id, app_id, name, prefix, hash, created_at) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, k.id);
        sql_bind_text(s, 2, app_id);
        sql_bind_text_or_null(s, 3, name);
        sql_bind_text(s, 4, prefix);
        sql_bind_blob(s, 5, hash, 32);
        sql_bind_int64(s, 6, k.created_at);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK) {
        snprintf(data, sizeof data, "{\"prefix\":\"%s\"}", k.prefix);
        r = sql_event(st, ctx, "key.created", "key", k.id, app_id, NULL, data);
    }
    r = sql_end(st, r);
    if (r == STORE_OK)
        *out = k;
    return r;
}

static int64_t key_page_row(struct sql_stmt *s, void *item)
{
    key_from_row(s, item);
    return 0;
}

static const struct sql_page key_page = {sizeof(struct store_key), key_page_row, sql_free_items};

enum store_status store_key_list(struct store *st, const char *app_id, struct store_key **out,
                                 size_t *n)
{
    struct sql_stmt *s;
    enum store_status r = sql_app_exists(st, app_id);

    if (r != STORE_OK)
        return r;
    s = sql_stmt(st, "SELECT " KEY_COLS " FROM api_keys WHERE app_id = ?1 ORDER BY rowid");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    return sql_read_all(st, s, &key_page, (void *)out, n);
}

enum store_status store_key_revoke(struct store *st, const struct store_ctx *ctx,
                                   const char *app_id, const char *key_id)
{
    struct sql_stmt *s;
    enum store_status r;
    int64_t revoked_at = 0;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = sql_app_exists(st, app_id);
    if (r == STORE_OK) {
        s = sql_stmt(st, "SELECT COALESCE(revoked_at, 0) FROM api_keys "
                         "WHERE id = ?1 AND app_id = ?2");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, key_id);
        sql_bind_text(s, 2, app_id);
        r = sql_step_int(st, s, &revoked_at);
    }
    if (r == STORE_OK && revoked_at == 0) {
        s = sql_stmt(st, "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1");
        if (!s)
            return sql_end(st, STORE_ERROR);
        sql_bind_text(s, 1, key_id);
        sql_bind_int64(s, 2, clock_wall_ms());
        r = sql_step_done(st, s);
        if (r == STORE_OK)
            r = sql_event(st, ctx, "key.revoked", "key", key_id, app_id, NULL, NULL);
    }
    return sql_end(st, r);
}

/* Compares two hashes without an early exit, so the time taken says nothing about where they
 * differ. (The index lookup before it finds the row by the hash of a 256-bit secret, which an
 * attacker cannot steer towards a stored hash.) */
static int hash_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

enum store_status store_key_lookup(struct store *st, const uint8_t hash[32], struct store_key *out)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT k.id, k.app_id, k.name, k.prefix, k.created_at, "
                     "k.revoked_at, k.hash FROM api_keys k JOIN apps a "
                     "ON a.id = k.app_id WHERE k.hash = ?1 AND k.revoked_at IS NULL "
                     "AND a.deleted_at IS NULL");
    enum store_status r;
    if (!s)
        return STORE_ERROR;
    sql_bind_blob(s, 1, hash, 32);
    int rc = sql_step(s);
    uint8_t stored[32];
    if (rc == SQL_ROW && sql_col_blob(s, 6, stored, sizeof stored) == 32 &&
        hash_equal(stored, hash, 32)) {
        key_from_row(s, out);
        r = STORE_OK;
    } else if (rc == SQL_ROW || rc == SQL_DONE) {
        r = STORE_NOT_FOUND;
    } else {
        r = sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

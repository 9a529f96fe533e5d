/*
 * secrets.c: the store's side of App secrets (store_secrets.h, migration 0018_app_secrets): rows
 * of sealed values, written and deleted with their audit events. Events carry names only.
 */
#include "store_secrets.h"

#include "clock.h"
#include "store_sql.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void store_secret_clear(struct store_secret *s)
{
    if (!s)
        return;
    free(s->hosts_json);
    s->hosts_json = NULL;
    if (s->ciphertext) {
        explicit_bzero(s->ciphertext, s->ciphertext_len);
        free(s->ciphertext);
    }
    s->ciphertext = NULL;
    s->ciphertext_len = 0;
}

void store_secret_list_free(struct store_secret *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        store_secret_clear(&v[i]);
    free(v);
}

#define SECRET_COLS                                                                                \
    "s.app_id, s.name, s.hosts, s.key_id, s.created_at, s.updated_at, s.nonce, s.ciphertext "

/* A row (SECRET_COLS); the sealed value only with with_value. -1: out of memory. */
static int secret_from_row(struct sql_stmt *s, struct store_secret *out, bool with_value)
{
    memset(out, 0, sizeof *out);
    sql_col_copy(s, 0, out->app_id, sizeof out->app_id);
    sql_col_copy(s, 1, out->name, sizeof out->name);
    out->hosts_json = sql_col_dup(s, 2);
    sql_col_copy(s, 3, out->key_id, sizeof out->key_id);
    out->created_at = sql_col_int64(s, 4);
    out->updated_at = sql_col_int64(s, 5);
    if (!out->hosts_json)
        return -1;
    if (!with_value)
        return 0;
    sql_col_blob(s, 6, out->nonce, sizeof out->nonce);
    uint8_t probe;
    size_t n = sql_col_blob(s, 7, &probe, 1);
    out->ciphertext = malloc(n ? n : 1);
    if (!out->ciphertext) {
        store_secret_clear(out);
        return -1;
    }
    out->ciphertext_len = sql_col_blob(s, 7, out->ciphertext, n);
    return 0;
}

enum store_status store_secret_get(struct store *st, const char *app_id, const char *name,
                                   struct store_secret *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " SECRET_COLS "FROM app_secrets s "
                                      "JOIN apps a ON a.id = s.app_id AND a.deleted_at IS NULL "
                                      "WHERE s.app_id = ?1 AND s.name = ?2");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    sql_bind_text_copy(s, 2, name);
    int rc = sql_step(s);
    enum store_status r = STORE_NOT_FOUND;
    if (rc == SQL_ROW)
        r = secret_from_row(s, out, false) == 0 ? STORE_OK : STORE_ERROR;
    else if (rc != SQL_DONE)
        r = sql_status(st, rc);
    sql_done(s);
    return r;
}

enum store_status store_secret_list(struct store *st, const char *app_id, bool with_values,
                                    struct store_secret **out, size_t *n)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT " SECRET_COLS "FROM app_secrets s WHERE s.app_id = ?1 "
                     "ORDER BY s.name");
    struct store_secret *items = NULL;
    size_t count = 0;
    int rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, app_id);
    while ((rc = sql_step(s)) == SQL_ROW) {
        struct store_secret *grown = realloc(items, (count + 1) * sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        if (secret_from_row(s, &items[count], with_values) != 0) {
            rc = SQL_NOMEM;
            break;
        }
        count++;
    }
    sql_done(s);
    if (rc != SQL_DONE) {
        store_secret_list_free(items, count);
        return rc == SQL_NOMEM ? STORE_ERROR : sql_status(st, rc);
    }
    *out = items;
    *n = count;
    return STORE_OK;
}

/* Whether env (a JSON object, or NULL) sets name or, when the App has secrets, one of reserved
 * (NULL-terminated): the first such name into clash. */
static bool env_collision(const json_t *env, const char *name, const char *const *reserved,
                          char *clash, size_t clashlen)
{
    const char *hit = name && json_object_get(env, name) ? name : NULL;
    for (size_t i = 0; !hit && reserved && reserved[i]; i++)
        if (json_object_get(env, reserved[i]))
            hit = reserved[i];
    if (hit)
        snprintf(clash, clashlen, "%s", hit);
    return hit != NULL;
}

enum store_status sql_app_env_check(struct store *st, const char *app_id, const char *env_json,
                                    const char *const *reserved, char *clash, size_t clashlen)
{
    json_t *env = json_loads(env_json, 0, NULL);
    if (json_object_size(env) == 0) {
        json_decref(env);
        return STORE_OK;
    }
    struct sql_stmt *s = sql_stmt(st, "SELECT name FROM app_secrets WHERE app_id = ?1");
    if (!s) {
        json_decref(env);
        return STORE_ERROR;
    }
    sql_bind_text(s, 1, app_id);
    bool any = false, hit = false;
    int rc = SQL_DONE;
    while (!hit && (rc = sql_step(s)) == SQL_ROW) {
        any = true;
        hit = env_collision(env, sql_col_text(s, 0), NULL, clash, clashlen);
    }
    sql_done(s);
    /* The variables sbx sets only for an App with secrets. */
    if (!hit && any)
        hit = env_collision(env, NULL, reserved, clash, clashlen);
    json_decref(env);
    if (!hit && rc != SQL_DONE)
        return sql_status(st, rc);
    return hit ? STORE_INVALID : STORE_OK;
}

/* The App's pre-started Sandboxes hold the secrets as they were when their agents started: a
 * change retires them, as a change of the App's env does (docs/worker.md). */
static enum store_status retire_prestarted(struct store *st, const char *app_id)
{
    struct sql_stmt *s =
        sql_stmt(st, "UPDATE apps SET definition_rev = definition_rev + 1 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, app_id);
    return sql_step_done(st, s);
}

enum store_status store_secret_put(struct store *st, const struct store_ctx *ctx,
                                   const struct store_secret *in, const char *const *reserved,
                                   size_t max_per_app, bool *created, char *conflict,
                                   size_t conflictlen, struct store_secret *out)
{
    enum store_status r;
    int64_t now = clock_wall_ms(), count = 0, exists = 0;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    struct sql_stmt *s = sql_stmt(st, "SELECT env FROM apps WHERE id = ?1 AND deleted_at IS NULL");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, in->app_id);
    int rc = sql_step(s);
    if (rc != SQL_ROW) {
        sql_done(s);
        return sql_end(st, rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc));
    }
    /* Checked inside the transaction that writes: an App update between a check and the write
     * cannot slip a clashing env in (apps rows are written under the same lock). */
    json_t *env = json_loads(sql_col_text(s, 0), 0, NULL);
    bool clash = env_collision(env, in->name, reserved, conflict, conflictlen);
    json_decref(env);
    sql_done(s);
    if (clash)
        return sql_end(st, STORE_CONFLICT);
    s = sql_stmt(st, "SELECT count(*), COALESCE(sum(CASE WHEN name = ?2 THEN 1 ELSE 0 END), 0) "
                     "FROM app_secrets WHERE app_id = ?1");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, in->app_id);
    sql_bind_text(s, 2, in->name);
    if ((rc = sql_step(s)) == SQL_ROW) {
        count = sql_col_int64(s, 0);
        exists = sql_col_int64(s, 1);
    }
    sql_done(s);
    if (rc != SQL_ROW)
        return sql_end(st, sql_status(st, rc));
    if (!exists && (size_t)count >= max_per_app)
        return sql_end(st, STORE_INVALID);
    s = sql_stmt(st, "INSERT INTO app_secrets (app_id, name, hosts, nonce, ciphertext, key_id, "
                     "created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) "
                     "ON CONFLICT (app_id, name) DO UPDATE SET hosts = excluded.hosts, "
                     "nonce = excluded.nonce, ciphertext = excluded.ciphertext, "
                     "key_id = excluded.key_id, updated_at = excluded.updated_at");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, in->app_id);
    sql_bind_text(s, 2, in->name);
    sql_bind_text(s, 3, in->hosts_json);
    sql_bind_blob(s, 4, in->nonce, sizeof in->nonce);
    sql_bind_blob(s, 5, in->ciphertext, in->ciphertext_len);
    sql_bind_text(s, 6, in->key_id);
    sql_bind_int64(s, 7, now);
    r = sql_step_done(st, s);
    if (r == STORE_OK)
        r = retire_prestarted(st, in->app_id);
    if (r == STORE_OK)
        r = sql_event_json(st, ctx, "secret.put", "app", in->app_id, in->app_id, NULL,
                           json_pack("{s:s, s:b}", "name", in->name, "created", !exists));
    if (r == STORE_OK && out)
        r = store_secret_get(st, in->app_id, in->name, out);
    if (r != STORE_OK)
        return sql_end(st, r);
    r = sql_commit(st);
    if (r != STORE_OK && out)
        store_secret_clear(out);
    if (r == STORE_OK)
        *created = !exists;
    return r;
}

enum store_status store_secret_delete(struct store *st, const struct store_ctx *ctx,
                                      const char *app_id, const char *name)
{
    enum store_status r;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    struct sql_stmt *s =
        sql_stmt(st, "DELETE FROM app_secrets WHERE app_id = ?1 AND name = ?2 "
                     "AND app_id IN (SELECT id FROM apps WHERE deleted_at IS NULL)");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, app_id);
    sql_bind_text(s, 2, name);
    r = sql_step_change(st, s, STORE_NOT_FOUND);
    if (r == STORE_OK)
        r = retire_prestarted(st, app_id);
    if (r == STORE_OK)
        r = sql_event_json(st, ctx, "secret.deleted", "app", app_id, app_id, NULL,
                           json_pack("{s:s}", "name", name));
    return sql_end(st, r);
}

/*
 * images.c: the store's Images table (migrations/0006_images.sql) on either SQL engine: the admin's
 * create/get/list/delete, the workers' import queue (claim, finish) and what a host's image cache
 * needs to know (which digests are in use, which are ready, when one was last used).
 *
 * An Image row is the import's whole state: the gateway inserts it `importing` (with the upload's
 * path or the registry reference and, for a pull, the credentials), one worker claims it
 * (claimed_by, claimed_at: the claim of a worker that stopped, or whose heartbeat is older
 * than the caller's stale_ms, belongs to a dead worker and may be taken over), and that worker ends
 * it `ready` or `failed`, which also clears the credentials. Every change writes its audit event in
 * the same transaction; no event carries the credentials.
 */
#include "id.h"
#include "store_sql.h"
#include "clock.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_COLS                                                                                 \
    "rowid, id, name, state, source, upload_path, upload_sha256, upload_bytes, problem_code, "     \
    "problem_detail, digest, layer_count, unpacked_bytes, entrypoint, cmd, env, working_dir, "     \
    "config_user, claimed_by, created_at, ready_at, last_used_at, "                                \
    "(SELECT count(*) FROM apps a WHERE a.image_id = images.id AND a.deleted_at IS NULL), "        \
    "manifest_digest"

static int64_t image_from_row(struct sql_stmt *s, void *item)
{
    struct store_image *im = item;
    sql_col_copy(s, 1, im->id, sizeof im->id);
    sql_col_copy(s, 2, im->name, sizeof im->name);
    sql_col_copy(s, 3, im->state, sizeof im->state);
    sql_col_copy(s, 4, im->source, sizeof im->source);
    sql_col_copy(s, 5, im->upload_path, sizeof im->upload_path);
    sql_col_copy(s, 6, im->upload_sha256, sizeof im->upload_sha256);
    im->upload_bytes = sql_col_int64_or(s, 7, 0);
    sql_col_copy(s, 8, im->problem_code, sizeof im->problem_code);
    im->problem_detail = sql_col_dup(s, 9);
    sql_col_copy(s, 10, im->digest, sizeof im->digest);
    im->layer_count = sql_col_int64_or(s, 11, 0);
    im->unpacked_bytes = sql_col_int64_or(s, 12, 0);
    im->entrypoint_json = sql_col_dup(s, 13);
    im->cmd_json = sql_col_dup(s, 14);
    im->env_json = sql_col_dup(s, 15);
    sql_col_copy(s, 16, im->working_dir, sizeof im->working_dir);
    sql_col_copy(s, 17, im->user, sizeof im->user);
    sql_col_copy(s, 18, im->claimed_by, sizeof im->claimed_by);
    im->created_at = sql_col_int64_or(s, 19, 0);
    im->ready_at = sql_col_int64_or(s, 20, 0);
    im->last_used_at = sql_col_int64_or(s, 21, 0);
    im->app_count = sql_col_int64_or(s, 22, 0);
    sql_col_copy(s, 23, im->manifest_digest, sizeof im->manifest_digest);
    return sql_col_int64(s, 0);
}

void store_image_clear(struct store_image *im)
{
    free(im->problem_detail);
    free(im->entrypoint_json);
    free(im->cmd_json);
    free(im->env_json);
    free(im->credentials_json);
    im->problem_detail = im->entrypoint_json = im->cmd_json = im->env_json = NULL;
    im->credentials_json = NULL;
}

void store_image_list_free(struct store_image *im, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_image_clear(&im[i]);
    free(im);
}

static void image_page_free(void *items, size_t n)
{
    store_image_list_free(items, n);
}

static const struct sql_page image_page = {sizeof(struct store_image), image_from_row,
                                           image_page_free};

static enum store_status load(struct store *st, const char *id_or_name, struct store_image *out)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " IMAGE_COLS " FROM images WHERE deleted_at IS NULL "
                                      "AND (id = ?1 OR name = ?1) "
                                      "ORDER BY CASE WHEN id = ?1 THEN 0 ELSE 1 END LIMIT 1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, id_or_name);
    return sql_read_one(st, s, &image_page, out);
}

enum store_status store_image_create(struct store *st, const struct store_ctx *ctx,
                                     struct store_image *im)
{
    struct sql_stmt *s;
    enum store_status r;
    int64_t now = clock_wall_ms(), taken = 0;

    if (id_new("img", im->id, sizeof im->id) != 0)
        return STORE_ERROR;
    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    /* The name is unique among live Images: say so as a conflict rather than a constraint error. */
    s = sql_stmt(st, "SELECT count(*) FROM images WHERE name = ?1 AND deleted_at IS NULL");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, im->name);
    if (sql_step(s) == SQL_ROW)
        taken = sql_col_int64(s, 0);
    sql_done(s);
    if (taken)
        return sql_end(st, STORE_CONFLICT);
    s = sql_stmt(st, "INSERT INTO images (id, name, state, source, upload_path, upload_sha256, "
                     "upload_bytes, credentials, created_at) "
                     "VALUES (?1, ?2, 'importing', ?3, ?4, ?5, ?6, ?7, ?8)");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, im->id);
    sql_bind_text(s, 2, im->name);
    sql_bind_text(s, 3, im->source);
    sql_bind_text_or_null(s, 4, im->upload_path);
    sql_bind_text_or_null(s, 5, im->upload_sha256);
    if (im->upload_bytes > 0)
        sql_bind_int64(s, 6, im->upload_bytes);
    sql_bind_text_or_null(s, 7, im->credentials_json);
    sql_bind_int64(s, 8, now);
    r = sql_step_done(st, s);
    if (r == STORE_OK) {
        r = sql_event_json(st, ctx, "image.created", "image", im->id, NULL, NULL,
                           json_pack("{s:s,s:s}", "name", im->name, "source", im->source));
    }
    r = sql_end(st, r);
    if (r == STORE_OK) {
        snprintf(im->state, sizeof im->state, "importing");
        im->created_at = now;
    }
    return r;
}

enum store_status store_image_get(struct store *st, const char *id_or_name, struct store_image *out)
{
    return load(st, id_or_name, out);
}

enum store_status store_image_list(struct store *st, const char *after, size_t limit,
                                   struct store_image **out, size_t *n, char *next_cursor)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT " IMAGE_COLS " FROM images WHERE deleted_at IS NULL "
                                      "AND rowid > ?1 ORDER BY rowid LIMIT ?2");
    char *end = NULL;
    long long from = after && *after ? strtoll(after, &end, 10) : 0;

    if ((end && *end) || from < 0)
        return STORE_INVALID;
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, from);
    sql_bind_int64(s, 2, (int64_t)limit + 1);
    return sql_read_page(st, s, limit, &image_page, (void *)out, n, next_cursor);
}

enum store_status store_image_delete(struct store *st, const struct store_ctx *ctx,
                                     const char *image_id, struct store_image *out)
{
    struct store_image im = {0};
    struct sql_stmt *s;
    enum store_status r;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    r = load(st, image_id, &im);
    if (r == STORE_OK && strcmp(im.id, image_id) != 0)
        r = STORE_NOT_FOUND; /* DELETE takes an id, not a name */
    if (r == STORE_OK && im.app_count > 0)
        r = STORE_CONFLICT;
    if (r == STORE_OK) {
        s = sql_stmt(st, "UPDATE images SET deleted_at = ?2, credentials = NULL WHERE id = ?1");
        if (!s) {
            r = STORE_ERROR;
        } else {
            sql_bind_text(s, 1, image_id);
            sql_bind_int64(s, 2, clock_wall_ms());
            r = sql_step_done(st, s);
        }
    }
    if (r == STORE_OK) {
        r = sql_event_json(
            st, ctx, "image.deleted", "image", image_id, NULL, NULL,
            json_pack("{s:s,s:s?}", "name", im.name, "digest", im.digest[0] ? im.digest : NULL));
    }
    r = sql_end(st, r);
    if (r == STORE_OK && out)
        *out = im;
    else
        store_image_clear(&im);
    return r;
}

enum store_status store_image_claim_import(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, int64_t stale_ms,
                                           struct store_image *out)
{
    struct store_image im = {0};
    struct sql_stmt *s;
    enum store_status r;
    int64_t now = clock_wall_ms();
    int rc;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    s = sql_stmt(st, "SELECT " IMAGE_COLS ", credentials FROM images "
                     "WHERE state = 'importing' AND deleted_at IS NULL "
                     "AND (claimed_by IS NULL OR NOT EXISTS (SELECT 1 FROM workers k "
                     "WHERE k.id = images.claimed_by AND k.stopped_at IS NULL "
                     "AND k.heartbeat_at >= ?1)) ORDER BY created_at LIMIT 1");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_int64(s, 1, now - stale_ms);
    rc = sql_step(s);
    if (rc == SQL_ROW) {
        image_from_row(s, &im);
        im.credentials_json = sql_col_dup(s, 24);
    }
    sql_done(s);
    if (rc != SQL_ROW)
        return sql_end(st, rc == SQL_DONE ? STORE_EMPTY : sql_status(st, rc));
    s = sql_stmt(st, "UPDATE images SET claimed_by = ?2, claimed_at = ?3 WHERE id = ?1");
    if (!s) {
        r = STORE_ERROR;
    } else {
        sql_bind_text(s, 1, im.id);
        sql_bind_text(s, 2, worker_id);
        sql_bind_int64(s, 3, now);
        r = sql_step_done(st, s);
    }
    if (r == STORE_OK) {
        r = sql_event_json(st, ctx, "image.claimed", "image", im.id, NULL, NULL,
                           json_pack("{s:s,s:s?}", "workerId", worker_id, "previousWorkerId",
                                     im.claimed_by[0] ? im.claimed_by : NULL));
    }
    r = sql_end(st, r);
    if (r == STORE_OK) {
        snprintf(im.claimed_by, sizeof im.claimed_by, "%s", worker_id);
        *out = im;
    } else {
        store_image_clear(&im);
    }
    return r;
}

enum store_status store_image_finish_import(struct store *st, const struct store_ctx *ctx,
                                            const char *image_id, const char *worker_id,
                                            const struct store_image_result *res)
{
    struct sql_stmt *s;
    enum store_status r;

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    s = sql_stmt(st, "UPDATE images SET state = ?3, problem_code = ?4, problem_detail = ?5, "
                     "digest = ?6, layer_count = ?7, unpacked_bytes = ?8, entrypoint = ?9, "
                     "cmd = ?10, env = ?11, working_dir = ?12, config_user = ?13, ready_at = ?14, "
                     "manifest_digest = ?15, credentials = NULL, upload_path = NULL "
                     "WHERE id = ?1 AND claimed_by = ?2 AND state = 'importing' "
                     "AND deleted_at IS NULL");
    if (!s)
        return sql_end(st, STORE_ERROR);
    sql_bind_text(s, 1, image_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_text(s, 3, res->ok ? "ready" : "failed");
    sql_bind_text_or_null(s, 4, res->ok ? NULL : res->problem_code);
    sql_bind_text_or_null(s, 5, res->ok ? NULL : res->problem_detail);
    sql_bind_text_or_null(s, 6, res->ok ? res->digest : NULL);
    if (res->ok) {
        sql_bind_int64(s, 7, res->layer_count);
        sql_bind_int64(s, 8, res->unpacked_bytes);
    }
    sql_bind_text_or_null(s, 9, res->ok ? res->entrypoint_json : NULL);
    sql_bind_text_or_null(s, 10, res->ok ? res->cmd_json : NULL);
    sql_bind_text_or_null(s, 11, res->ok ? res->env_json : NULL);
    sql_bind_text_or_null(s, 12, res->ok ? res->working_dir : NULL);
    sql_bind_text_or_null(s, 13, res->ok ? res->user : NULL);
    sql_bind_int64(s, 14, clock_wall_ms());
    sql_bind_text_or_null(s, 15, res->ok ? res->manifest_digest : NULL);
    r = sql_step_done(st, s);
    if (r == STORE_OK && sql_changes(st) == 0)
        r = STORE_CONFLICT;
    if (r != STORE_OK)
        return sql_end(st, r);
    json_t *data =
        res->ok ? json_pack("{s:s,s:I,s:I}", "digest", res->digest, "layerCount",
                            (json_int_t)res->layer_count, "unpackedBytes",
                            (json_int_t)res->unpacked_bytes)
                : json_pack("{s:s,s:s?}", "code", res->problem_code, "detail", res->problem_detail);
    r = sql_event_json(st, ctx, res->ok ? "image.imported" : "image.failed", "image", image_id,
                       NULL, NULL, data);
    return sql_end(st, r);
}

enum store_status store_image_touch(struct store *st, const char *digest)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE images SET last_used_at = ?2 WHERE digest = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, digest);
    sql_bind_int64(s, 2, clock_wall_ms());
    return sql_step_done(st, s);
}

/* Reads a one-column list of digests. */
static enum store_status read_digests(struct store *st, struct sql_stmt *s,
                                      char (**out)[STORE_DIGEST_LEN], size_t *n)
{
    char(*items)[STORE_DIGEST_LEN] = NULL;
    size_t count = 0;
    int rc;

    while ((rc = sql_step(s)) == SQL_ROW) {
        void *grown = realloc(items, (count + 1) * sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        sql_col_copy(s, 0, items[count++], STORE_DIGEST_LEN);
    }
    sql_done(s);
    if (rc != SQL_DONE) {
        free(items);
        return sql_status(st, rc);
    }
    *out = items;
    *n = count;
    return STORE_OK;
}

enum store_status store_image_digests_in_use(struct store *st, char (**out)[STORE_DIGEST_LEN],
                                             size_t *n)
{
    struct sql_stmt *s = sql_stmt(
        st, "SELECT image_digest FROM apps WHERE deleted_at IS NULL AND image_digest <> 'default' "
            "UNION SELECT image FROM sandboxes WHERE state IN " SQL_SANDBOX_LIVE " "
            "AND image <> 'default'");
    if (!s)
        return STORE_ERROR;
    return read_digests(st, s, out, n);
}

enum store_status store_image_digests_ready(struct store *st, char (**out)[STORE_DIGEST_LEN],
                                            size_t *n)
{
    /* Least recently used first: what a full cache evicts first. */
    struct sql_stmt *s =
        sql_stmt(st, "SELECT digest FROM images WHERE state = 'ready' AND deleted_at IS NULL "
                     "AND digest IS NOT NULL GROUP BY digest "
                     "ORDER BY max(COALESCE(last_used_at, ready_at, 0)), digest");
    if (!s)
        return STORE_ERROR;
    return read_digests(st, s, out, n);
}

enum store_status store_image_pull_source(struct store *st, const char *digest, char *source,
                                          size_t sourcelen, char *manifest, size_t manifestlen)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT source, manifest_digest FROM images "
                     "WHERE digest = ?1 AND state = 'ready' AND deleted_at IS NULL "
                     "AND manifest_digest IS NOT NULL ORDER BY ready_at DESC LIMIT 1");
    enum store_status r = STORE_OK;
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, digest);
    int rc = sql_step(s);
    if (rc == SQL_ROW) {
        sql_col_copy(s, 0, source, sourcelen);
        sql_col_copy(s, 1, manifest, manifestlen);
    } else {
        r = rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

enum store_status sql_image_check_ready(struct store *st, const char *image_id, const char *digest)
{
    struct sql_stmt *s;
    int64_t ok = 0;
    int rc;

    if (!image_id || !*image_id)
        return STORE_OK;
    s = sql_stmt(st, "SELECT count(*) FROM images WHERE id = ?1 AND state = 'ready' "
                     "AND deleted_at IS NULL AND digest = ?2");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, image_id);
    sql_bind_text_copy(s, 2, digest ? digest : "");
    rc = sql_step(s);
    if (rc == SQL_ROW)
        ok = sql_col_int64(s, 0);
    sql_done(s);
    if (rc != SQL_ROW)
        return sql_status(st, rc);
    return ok ? STORE_OK : STORE_CONFLICT;
}

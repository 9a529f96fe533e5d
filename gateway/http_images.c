/*
 * http_images.c: /v1/images (admin only): upload an image archive, pull one from a registry, list,
 * get, delete; and the App side of images: resolving an App's `image` to the Image's digest.
 *
 * An upload (POST /v1/images?name=N with a tar body, gzip or zstd accepted) is not collected in
 * memory like other bodies: router.c hands each chunk to http_image_upload_chunk(), which writes it
 * to <data_dir>/images/uploads/<image id>.tar and hashes it (nettle SHA-256) as it arrives, up to
 * image_upload_limit (body_limit does not apply). Once the body is whole (and fsynced) the Image is
 * recorded `importing` and the reply is 202: a worker host does the import (worker/images/).
 * The upload's state lives in struct image_upload, owned by the request and freed with it; an
 * upload that never reached the store is removed then.
 */
#include "fs.h"
#include "store_images.h"
#include "gateway.h"
#include "id.h"
#include "json_input.h"
#include "log.h"
#include "notify.h"
#include "render.h"
#include "reply.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

struct image_upload {
    char id[STORE_ID_LEN];
    char name[STORE_NAME_LEN];
    char path[1024];
    int fd;
    struct sha256_ctx hash;
    int64_t bytes;
    bool too_large;
    bool failed; /* a write failed: the disk is full or broken */
    int write_errno;
    bool recorded; /* the store owns the file now */
};

bool http_image_is_upload_type(const char *ct)
{
    static const char *const types[] = {"application/x-tar", "application/tar",
                                        "application/gzip",  "application/x-gzip",
                                        "application/zstd",  "application/octet-stream"};
    if (!ct)
        return false;
    while (*ct == ' ')
        ct++;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t n = strlen(types[i]);
        if (strncasecmp(ct, types[i], n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' '))
            return true;
    }
    return false;
}

bool http_image_upload_begin(struct request *r, long long content_length, enum MHD_Result *ret)
{
    const char *name = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "name");
    struct store_image existing;
    char dir[700];

    if (!name || !input_is_name(name)) {
        *ret = reply_problem(r, PROBLEM_INVALID_PARAMETER, "name",
                             "?name= must be 1 to 128 characters of A-Z a-z 0-9 . _ -");
        return false;
    }
    if (content_length > r->gw->cfg.image_upload_limit) {
        *ret = reply_problem(r, PROBLEM_BODY_TOO_LARGE, NULL,
                             "the archive has %lld bytes; image_upload_limit is %lld",
                             content_length, (long long)r->gw->cfg.image_upload_limit);
        return false;
    }
    /* Refuse a taken name before reading what may be gigabytes (the store checks again). */
    enum store_status s = store_image_get(r->gw->st, name, &existing);
    if (s == STORE_OK) {
        bool same_name = strcmp(existing.name, name) == 0;
        store_image_clear(&existing);
        if (same_name) {
            *ret = reply_problem(r, PROBLEM_CONFLICT, "name",
                                 "an Image named \"%s\" already exists", name);
            return false;
        }
    } else if (s != STORE_NOT_FOUND) {
        *ret = reply_store_error(r, s, "Image");
        return false;
    }
    struct image_upload *u = calloc(1, sizeof *u);
    if (!u || id_new("img", u->id, sizeof u->id) != 0) {
        free(u);
        *ret = reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
        return false;
    }
    snprintf(u->name, sizeof u->name, "%s", name);
    snprintf(dir, sizeof dir, "%.600s/images/uploads", r->gw->cfg.data_dir);
    snprintf(u->path, sizeof u->path, "%s/%s.tar", dir, u->id);
    u->fd = -1;
    if (fs_mkdir_p(dir, 0700) == 0)
        u->fd = open(u->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (u->fd < 0) {
        log_emit(LOG_LEVEL_ERROR, r->request_id, "cannot create %s: %s", u->path, strerror(errno));
        free(u);
        *ret = reply_problem(r, errno == ENOSPC ? PROBLEM_STORAGE_FULL : PROBLEM_INTERNAL, NULL,
                             "cannot store the upload");
        return false;
    }
    sha256_init(&u->hash);
    r->upload = u;
    return true;
}

void http_image_upload_chunk(struct request *r, const char *data, size_t len)
{
    struct image_upload *u = r->upload;
    if (u->too_large || u->failed)
        return;
    if (u->bytes + (int64_t)len > r->gw->cfg.image_upload_limit) {
        /* The rest is read and dropped by the router; the file goes now. */
        u->too_large = true;
        close(u->fd);
        u->fd = -1;
        unlink(u->path);
        return;
    }
    sha256_update(&u->hash, len, (const uint8_t *)data);
    while (len > 0) {
        ssize_t w = write(u->fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            u->failed = true;
            u->write_errno = errno;
            return;
        }
        data += w;
        len -= (size_t)w;
        u->bytes += w;
    }
}

bool http_image_upload_too_large(const struct request *r)
{
    return r->upload && r->upload->too_large;
}

void http_image_request_free(struct request *r)
{
    struct image_upload *u = r->upload;
    if (!u)
        return;
    if (u->fd >= 0)
        close(u->fd);
    if (!u->recorded)
        unlink(u->path);
    free(u);
    r->upload = NULL;
}

static enum MHD_Result reply_image(struct request *r, unsigned status, struct store_image *im)
{
    char location[96];
    json_t *body = render_image(im);
    snprintf(location, sizeof location, "/v1/images/%s", im->id);
    store_image_clear(im);
    if (status == 202)
        return reply_json_header(r, status, body, "Location", location);
    return reply_json(r, status, body);
}

/* The end of an upload: the whole body is on disk. */
static enum MHD_Result upload_finish(struct request *r)
{
    struct image_upload *u = r->upload;
    struct store_image im = {0};
    uint8_t d[SHA256_DIGEST_SIZE];
    enum MHD_Result ret;

    if (u->too_large)
        return reply_problem(r, PROBLEM_BODY_TOO_LARGE, NULL,
                             "the archive is over image_upload_limit "
                             "(%lld bytes)",
                             (long long)r->gw->cfg.image_upload_limit);
    if (u->failed || fsync(u->fd) != 0 || close(u->fd) != 0) {
        int e = u->failed ? u->write_errno : errno;
        u->fd = -1;
        log_emit(LOG_LEVEL_ERROR, r->request_id, "cannot write %s: %s", u->path, strerror(e));
        return reply_problem(r, e == ENOSPC ? PROBLEM_STORAGE_FULL : PROBLEM_INTERNAL, NULL,
                             "cannot store the upload");
    }
    u->fd = -1;
    if (u->bytes == 0)
        return reply_problem(r, PROBLEM_INVALID_VALUE, NULL,
                             "the body is empty: send an image archive");
    sha256_digest(&u->hash, sizeof d, d);
    snprintf(im.upload_sha256, sizeof im.upload_sha256, "sha256:");
    for (size_t i = 0; i < sizeof d; i++)
        snprintf(im.upload_sha256 + 7 + 2 * i, 3, "%02x", d[i]);
    snprintf(im.id, sizeof im.id, "%s", u->id);
    snprintf(im.name, sizeof im.name, "%s", u->name);
    snprintf(im.source, sizeof im.source, "upload");
    snprintf(im.upload_path, sizeof im.upload_path, "%s", u->path);
    im.upload_bytes = u->bytes;
    enum store_status s = store_image_create(r->gw->st, &r->ctx, &im);
    if (s == STORE_CONFLICT)
        return reply_problem(r, PROBLEM_CONFLICT, "name", "an Image named \"%s\" already exists",
                             u->name);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Image");
    u->recorded = true;
    notify_send(r->gw->workers, "images");
    /* Read back so that the reply is what GET shows. */
    struct store_image fresh;
    if (store_image_get(r->gw->st, im.id, &fresh) == STORE_OK) {
        store_image_clear(&im);
        return reply_image(r, 202, &fresh);
    }
    ret = reply_image(r, 202, &im);
    return ret;
}

/* host[:port]/repo[:tag] or .../repo@sha256:<hex>: a registry host is required, so nothing is
 * pulled from a registry the operator did not name. */
static bool reference_ok(const char *ref)
{
    const char *slash = strchr(ref, '/');
    if (!slash || slash == ref)
        return false;
    for (const char *p = ref; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("._-/:@", *p)))
            return false;
    const char *at = strchr(ref, '@');
    if (at) {
        if (strncmp(at + 1, "sha256:", 7) != 0 || strlen(at + 8) != 64 ||
            strspn(at + 8, "0123456789abcdef") != 64)
            return false;
    }
    return strstr(ref, "//") == NULL && ref[strlen(ref) - 1] != '/';
}

static enum MHD_Result pull_create(struct request *r)
{
    static const char *const fields[] = {"name", "reference", "username", "password", NULL};
    enum MHD_Result ret;
    struct input_error e;
    const char *name = NULL, *ref = NULL, *user = NULL, *pass = NULL;
    struct store_image im = {0};
    json_t *obj = request_json(r, fields, &ret);
    if (!obj)
        return ret;
    if (input_string(obj, "name", 1, 128, false, &name, NULL, &e) < 0 ||
        input_string(obj, "reference", 1, 500, false, &ref, NULL, &e) < 0 ||
        input_string(obj, "username", 1, 256, false, &user, NULL, &e) < 0 ||
        input_string(obj, "password", 1, 1024, false, &pass, NULL, &e) < 0) {
        json_decref(obj);
        return reply_input_error(r, &e);
    }
    if (!name || !input_is_name(name) || !ref) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_FIELD, !ref && name ? "reference" : "name",
                             "fields \"name\" (1 to 128 characters of A-Z a-z 0-9 . _ -) and "
                             "\"reference\" are required");
    }
    if (!reference_ok(ref)) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_VALUE, "reference",
                             "\"reference\" must be HOST[:PORT]/REPOSITORY[:TAG] or "
                             "HOST[:PORT]/REPOSITORY@sha256:<64 hex>");
    }
    if (!user != !pass) {
        json_decref(obj);
        return reply_problem(r, PROBLEM_INVALID_FIELD, user ? "password" : "username",
                             "\"username\" and \"password\" go together");
    }
    snprintf(im.name, sizeof im.name, "%s", name);
    snprintf(im.source, sizeof im.source, "%s", ref);
    if (user) {
        json_t *cred = json_pack("{s:s,s:s}", "username", user, "password", pass);
        im.credentials_json = cred ? json_dumps(cred, JSON_COMPACT) : NULL;
        json_decref(cred);
    }
    json_decref(obj);
    enum store_status s = store_image_create(r->gw->st, &r->ctx, &im);
    free(im.credentials_json);
    im.credentials_json = NULL;
    if (s == STORE_CONFLICT)
        return reply_problem(r, PROBLEM_CONFLICT, "name", "an Image named \"%s\" already exists",
                             im.name);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Image");
    notify_send(r->gw->workers, "images");
    struct store_image fresh;
    if (store_image_get(r->gw->st, im.id, &fresh) == STORE_OK)
        return reply_image(r, 202, &fresh);
    return reply_image(r, 202, &im);
}

enum MHD_Result http_image_create(struct request *r)
{
    if (r->upload)
        return upload_finish(r);
    return pull_create(r);
}

enum MHD_Result http_image_list(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN];
    struct store_image *items;
    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    enum store_status s = store_image_list(r->gw->st, cursor, limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Image list");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_image(&items[i]));
    store_image_list_free(items, n);
    return reply_json(r, 200, render_page(arr, next));
}

enum MHD_Result http_image_get(struct request *r)
{
    struct store_image im;
    enum store_status s = store_image_get(r->gw->st, r->params[0], &im);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Image");
    return reply_image(r, 200, &im);
}

enum MHD_Result http_image_delete(struct request *r)
{
    struct store_image im;
    enum store_status s = store_image_delete(r->gw->st, &r->ctx, r->params[0], &im);
    if (s == STORE_CONFLICT)
        return reply_problem(r, PROBLEM_CONFLICT, NULL,
                             "Apps still run on this Image; point them at another image first");
    if (s != STORE_OK)
        return reply_store_error(r, s, "Image");
    /* An upload still waiting for its import is no longer wanted. The cache directory is the
     * worker hosts' to remove once no Sandbox uses it (docs/images.md). */
    if (im.upload_path[0])
        unlink(im.upload_path);
    store_image_clear(&im);
    return reply_empty(r, 204);
}

int http_image_resolve(struct request *r, const char *image, char *image_id, size_t idlen,
                       char *digest, size_t digestlen, enum MHD_Result *ret)
{
    struct store_image im;
    if (strcmp(image, "default") == 0) {
        snprintf(image_id, idlen, "%s", "");
        snprintf(digest, digestlen, "default");
        return 0;
    }
    enum store_status s = store_image_get(r->gw->st, image, &im);
    if (s == STORE_NOT_FOUND) {
        *ret = reply_problem(r, PROBLEM_INVALID_VALUE, "image",
                             "no Image has the id or name \"%s\" (or use \"default\")", image);
        return -1;
    }
    if (s != STORE_OK) {
        *ret = reply_store_error(r, s, "Image");
        return -1;
    }
    if (strcmp(im.state, "ready") != 0) {
        *ret = reply_problem(r, PROBLEM_CONFLICT, "image", "Image \"%s\" is %s, not ready%s%s",
                             image, im.state, im.problem_code[0] ? ": " : "", im.problem_code);
        store_image_clear(&im);
        return -1;
    }
    snprintf(image_id, idlen, "%s", im.id);
    snprintf(digest, digestlen, "%s", im.digest);
    store_image_clear(&im);
    return 0;
}

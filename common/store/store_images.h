/*
 * store_images.h: the store's operations on images (images.c): the admin's, and the workers' that
 * import them.
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_IMAGES_H
#define SBX_STORE_IMAGES_H

#include "store_records.h"

struct store;

/* Inserts an importing Image from im's name, source, upload_path, upload_sha256,
 * upload_bytes and credentials_json (may be NULL); writes its id and times back.
 * STORE_CONFLICT when the name is taken. */
enum store_status store_image_create(struct store *st, const struct store_ctx *ctx,
                                     struct store_image *im);
/* By id, or by name when no id matches; deleted Images are STORE_NOT_FOUND. */
enum store_status store_image_get(struct store *st, const char *id_or_name,
                                  struct store_image *out);
enum store_status store_image_list(struct store *st, const char *after, size_t limit,
                                   struct store_image **out, size_t *n, char *next_cursor);
/* Marks it deleted (its name becomes free). STORE_CONFLICT while a live App names it. out
 * (may be NULL) is the Image as it was, so that the caller can remove its upload. */
enum store_status store_image_delete(struct store *st, const struct store_ctx *ctx,
                                     const char *image_id, struct store_image *out);
/* Claims the oldest importing Image that no live worker is importing (unclaimed, or claimed
 * by a worker that stopped or whose heartbeat is older than stale_ms) for worker_id. out
 * carries the credentials. STORE_EMPTY when there is none. */
enum store_status store_image_claim_import(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, int64_t stale_ms,
                                           struct store_image *out);
/* Ends worker_id's import: ready or failed as res says, with its event (image.imported or
 * image.failed); clears the credentials and the upload path. STORE_CONFLICT when the Image
 * is no longer importing under this worker (deleted, or reclaimed). */
enum store_status store_image_finish_import(struct store *st, const struct store_ctx *ctx,
                                            const char *image_id, const char *worker_id,
                                            const struct store_image_result *res);
/* last_used_at = now for the Images of this digest (a Sandbox booted on it). */
enum store_status store_image_touch(struct store *st, const char *digest);
/* The digests that a host's cache must keep: those of Images that live Apps name, and the
 * images of live Sandboxes (warm ones included). */
enum store_status store_image_digests_in_use(struct store *st, char (**digests)[STORE_DIGEST_LEN],
                                             size_t *n);
/* For a ready, pulled Image of this digest: its source reference and the manifest digest it
 * was pulled by, so that another host can pull the same image. STORE_NOT_FOUND when no pulled
 * Image has the digest. */
enum store_status store_image_pull_source(struct store *st, const char *digest, char *source,
                                          size_t sourcelen, char *manifest_digest,
                                          size_t manifestlen);
/* The digests of ready, not deleted Images (what a host's cache may hold), least recently
 * used (last_used_at, else ready_at) first. */
enum store_status store_image_digests_ready(struct store *st, char (**digests)[STORE_DIGEST_LEN],
                                            size_t *n);

#endif

/*
 * store_secrets.h: the store's operations on App secrets (secrets.c, migration 0018). The store
 * keeps only what common/secret_box.h sealed: nonce, ciphertext, key id; it never sees a value.
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_SECRETS_H
#define SBX_STORE_SECRETS_H

#include "store_records.h"

struct store;

#define STORE_SECRET_NAME_LEN 129 /* SECRET_NAME_MAX + 1 */
#define STORE_SECRET_NONCE_LEN 12 /* SECRET_BOX_NONCE_LEN */
#define STORE_SECRET_KEY_ID_LEN 17

struct store_secret {
    char app_id[STORE_ID_LEN];
    char name[STORE_SECRET_NAME_LEN];
    char *hosts_json; /* a JSON list of strings */
    /* Sealed value: read only by store_secret_list with with_values, and given to put. */
    uint8_t nonce[STORE_SECRET_NONCE_LEN];
    uint8_t *ciphertext;
    size_t ciphertext_len;
    char key_id[STORE_SECRET_KEY_ID_LEN];
    int64_t created_at, updated_at;
};

/* Frees hosts_json and wipes and frees the ciphertext. */
void store_secret_clear(struct store_secret *s);
void store_secret_list_free(struct store_secret *v, size_t n);

/* Admin: creates or replaces (app_id, in->name) with in's hosts and sealed value, and writes
 * secret.put ({"name", "created"}) in the same transaction; *created tells which. STORE_NOT_FOUND:
 * no such App. STORE_CONFLICT: the App's env sets the name or one of the reserved names given
 * (NULL-terminated, may be NULL); that name in conflict. STORE_FULL is never returned for a
 * limit: STORE_INVALID when the App has max_per_app secrets already and this one is new. out,
 * when not NULL, gets the row without its value. */
enum store_status store_secret_put(struct store *st, const struct store_ctx *ctx,
                                   const struct store_secret *in, const char *const *reserved,
                                   size_t max_per_app, bool *created, char *conflict,
                                   size_t conflictlen, struct store_secret *out);
/* One secret without its value. */
enum store_status store_secret_get(struct store *st, const char *app_id, const char *name,
                                   struct store_secret *out);
/* Every secret of the App, by name; the sealed values only with with_values (the worker). An
 * App without secrets (or none at all) gives n 0. */
enum store_status store_secret_list(struct store *st, const char *app_id, bool with_values,
                                    struct store_secret **out, size_t *n);
/* Deletes the row (the sealed value is gone with it) and writes secret.deleted ({"name"}). */
enum store_status store_secret_delete(struct store *st, const struct store_ctx *ctx,
                                      const char *app_id, const char *name);

#endif

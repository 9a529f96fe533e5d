/*
 * secret_box.h: App secrets encrypted at rest (docs/secrets.md). One 256-bit key, kept outside
 * the database in a file (by default <ca_dir>/secrets.key, made at first start like the
 * installation's other keys, pki.h), seals each value with ChaCha20-Poly1305 under a fresh
 * random nonce; the associated data binds the App id and the secret's name, so a row copied to
 * another App or name does not open. The store keeps the nonce, the ciphertext (with its tag) and
 * the key's id; a copy of the database alone reveals no value. Every function is thread-safe.
 */
#ifndef SBX_SECRET_BOX_H
#define SBX_SECRET_BOX_H

#include <stddef.h>
#include <stdint.h>

#define SECRET_BOX_KEY_LEN 32
#define SECRET_BOX_NONCE_LEN 12
#define SECRET_BOX_TAG_LEN 16
/* The key's id: hex of the first 8 bytes of SHA-256 over the key, 16 characters. */
#define SECRET_BOX_KEY_ID_LEN 16
/* The file's name in ca_dir when no secrets_key_file is set. */
#define SECRET_BOX_DEFAULT_FILE "secrets.key"

struct secret_box;

/* Opens the key in path: 64 hex digits and a newline. When create is set and the file does not
 * exist, it is made (0600, or 0660 under a group-sharing umask: config_private_mode) with 256
 * random bits, written whole under a temporary name and linked into place under an exclusive
 * lock on <its directory>/.lock, so two processes starting at once end with one key. A file
 * others may read, or one that is not a key, is an error naming it. 0, or -1 with err. */
int secret_box_open(const char *path, int create, struct secret_box **out, char *err,
                    size_t errlen);
/* The installation's box: secrets_key_file when set (it must exist), otherwise
 * <ca_dir>/secrets.key, made at first start (ca_dir is made 0700 when missing). 0; 1 when
 * <ca_dir>/secrets.key does not exist and cannot be made (a read-only ca_dir): *out NULL, the
 * reason in err, and the process goes on without App secrets; -1 on any other error (a file
 * that is not a key, or that others may read): the process must not start. */
struct sbx_config;
int secret_box_open_config(const struct sbx_config *cfg, struct secret_box **out, char *err,
                           size_t errlen);
/* A box over a key given in memory (tests). */
int secret_box_from_key(const uint8_t key[SECRET_BOX_KEY_LEN], struct secret_box **out);
/* Wipes the key and frees; NULL is allowed. */
void secret_box_free(struct secret_box *b);
/* The key's id (SECRET_BOX_KEY_ID_LEN hex characters). */
const char *secret_box_key_id(const struct secret_box *b);

/* Seals value[0..len) for (app_id, name): a new nonce in nonce, *ct a new buffer of
 * len + SECRET_BOX_TAG_LEN bytes (free it). 0, or -1 (out of memory, no randomness). */
int secret_box_seal(const struct secret_box *b, const char *app_id, const char *name,
                    const void *value, size_t len, uint8_t nonce[SECRET_BOX_NONCE_LEN],
                    uint8_t **ct, size_t *ct_len);
/* Opens what secret_box_seal made for the same (app_id, name): *value a new buffer of
 * *len bytes plus a NUL (wipe and free it). -1 when the tag does not verify (another key,
 * another App or name, or a changed byte) or out of memory. */
int secret_box_unseal(const struct secret_box *b, const char *app_id, const char *name,
                      const uint8_t nonce[SECRET_BOX_NONCE_LEN], const uint8_t *ct, size_t ct_len,
                      char **value, size_t *len);

/* Overwrites len bytes at p in a way the compiler keeps. */
void secret_wipe(void *p, size_t len);

#endif

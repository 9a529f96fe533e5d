/*
 * store_settings.h: the store's operations on settings (settings.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_SETTINGS_H
#define SBX_STORE_SETTINGS_H

#include "store_records.h"

struct store;

/* A key-value map that every process of one database shares. */
enum store_status store_setting_get(struct store *st, const char *key, char *out, size_t outlen);
enum store_status store_setting_put(struct store *st, const char *key, const char *value);
/* Stores value under key unless the key has a value already; either way writes the value the
 * store now holds to out. Several gateways starting at once on one database agree on one
 * value (the first one's). */
enum store_status store_setting_init(struct store *st, const char *key, const char *value,
                                     char *out, size_t outlen);

#endif

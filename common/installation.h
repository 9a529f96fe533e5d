/*
 * installation.h: the installation id, which tells this sbx's kernel state apart from another
 * sbx's on the same host (another data directory or database: staging beside production, a test
 * run beside a running instance). It is made once, by the first gateway or worker to open the
 * store, and kept in the store (settings key "installation_id"), so every process of one
 * installation, on every host, has the same one. Eight characters of [a-z0-9].
 */
#ifndef SBX_INSTALLATION_H
#define SBX_INSTALLATION_H

#include "store_records.h"

#include <stddef.h>

#define INSTALLATION_ID_LEN 9 /* 8 characters and the NUL */

/* The store's installation id in out, made now if it has none. STORE_OK or the store's error. */
enum store_status installation_id(struct store *st, char out[INSTALLATION_ID_LEN]);

#endif

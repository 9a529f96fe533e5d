/*
 * installation.c: the installation id in the store's settings (see installation.h).
 */
#include "installation.h"
#include "store_settings.h"
#include "id.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define INSTALLATION_KEY "installation_id"

enum store_status installation_id(struct store *st, char out[INSTALLATION_ID_LEN])
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    char fresh[INSTALLATION_ID_LEN], stored[64];
    uint8_t rnd[INSTALLATION_ID_LEN - 1];
    enum store_status rc = store_setting_get(st, INSTALLATION_KEY, stored, sizeof stored);

    if (rc == STORE_NOT_FOUND) {
        if (random_bytes(rnd, sizeof rnd) != 0)
            return STORE_ERROR;
        for (size_t i = 0; i < sizeof rnd; i++)
            fresh[i] = alphabet[rnd[i] % (sizeof alphabet - 1)];
        fresh[sizeof rnd] = '\0';
        /* Processes starting together on a new store agree on the first one stored. */
        rc = store_setting_init(st, INSTALLATION_KEY, fresh, stored, sizeof stored);
    }
    if (rc != STORE_OK)
        return rc;
    if (strlen(stored) != INSTALLATION_ID_LEN - 1 || stored[strspn(stored, alphabet)] != '\0')
        return STORE_INVALID; /* edited by hand into something that cannot tag kernel state */
    memcpy(out, stored, INSTALLATION_ID_LEN);
    return STORE_OK;
}

/*
 * id.h: random identifiers and secrets, from getrandom() (ids through a per-thread buffer, id.c).
 */
#ifndef SBX_ID_H
#define SBX_ID_H

#include <stddef.h>
#include <stdint.h>

/* Fills buf with len bytes from the kernel's CSPRNG. Returns 0, or -1 with errno set. */
int random_bytes(void *buf, size_t len);

/* Writes "<prefix>_" followed by 20 lowercase base32 characters (100 random bits) to out, which
 * must hold at least strlen(prefix) + 22 bytes. Returns 0, or -1 when the CSPRNG fails. */
int id_new(const char *prefix, char *out, size_t outlen);

/* The same shape, but the first 9 characters are the time (ms since the epoch, 45 bits) and the
 * other 11 random (55 bits): ids made later sort after earlier ones, so a B-tree keyed on them
 * grows at its right edge instead of touching a random page per insert. For ids that are no
 * capability (every lookup is also scoped to the App), made at a high rate: messages. */
int id_new_ordered(const char *prefix, char *out, size_t outlen);

#endif

/*
 * id.h: random identifiers and secrets, from getrandom().
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

#endif

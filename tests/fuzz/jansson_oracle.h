/* jansson_oracle.h: whether jansson accepts a JSON text (see jansson_oracle.c). */
#ifndef SBX_JANSSON_ORACLE_H
#define SBX_JANSSON_ORACLE_H

#include <stddef.h>

/* 1 when jansson parses text[0..len) as one JSON value, 0 when it rejects it, -1 when it
 * rejects it only for a number out of its range. */
int jansson_oracle_accepts(const char *text, size_t len);

#endif

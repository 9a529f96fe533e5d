/*
 * timefmt.h: the RFC 3339 form of a wall-clock time (clock.h) in ms since the epoch.
 */
#ifndef SBX_TIMEFMT_H
#define SBX_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>

/* "2026-11-29T08:00:00.123Z" (24 chars + NUL); out must hold 32 bytes. */
void time_format_ms(int64_t ms, char *out, size_t outlen);

#endif

/*
 * timefmt.h: the clock sbx uses (milliseconds since the epoch, UTC) and its RFC 3339 form.
 */
#ifndef SBX_TIMEFMT_H
#define SBX_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>

/* Wall-clock time in ms since the epoch: what the database records. */
int64_t now_ms(void);
/* Monotonic time in ms: for timers and durations. */
int64_t mono_ms(void);
/* "2026-11-29T08:00:00.123Z" (24 chars + NUL); out must hold 32 bytes. */
void time_format_ms(int64_t ms, char *out, size_t outlen);

#endif

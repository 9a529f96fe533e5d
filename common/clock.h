/*
 * clock.h: the two clocks sbx reads, named for what they are.
 */
#ifndef SBX_CLOCK_H
#define SBX_CLOCK_H

#include <stdint.h>

/* Wall-clock time in ms since the epoch (UTC): what the store records and what people read. It can
 * jump (NTP, an operator), so never measure an interval or arm a timer with it. */
int64_t clock_wall_ms(void);

/* Monotonic time in ms since some unspecified start: for timers, timeouts and durations within one
 * process. Meaningless across processes or reboots. */
int64_t clock_mono_ms(void);

#endif

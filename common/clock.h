/*
 * clock.h: the two clocks sbx reads, named for what they are.
 */
#ifndef SBX_CLOCK_H
#define SBX_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Wall-clock time in ms since the epoch (UTC): what the store records and what people read. It can
 * jump (NTP, an operator), so never measure an interval or arm a timer with it. */
int64_t clock_wall_ms(void);

/* Monotonic time in ms since some unspecified start: for timers, timeouts and durations within one
 * process. Meaningless across processes or reboots. */
int64_t clock_mono_ms(void);

/* The CLOCK_MONOTONIC time ms from now, for the *_clockwait family (pthread_cond_clockwait,
 * pthread_clockjoin_np, pthread_rwlock_clockwrlock): a deadline a wall-clock step cannot move. */
struct timespec clock_mono_deadline(int64_t ms);

#endif

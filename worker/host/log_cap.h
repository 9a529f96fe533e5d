/*
 * log_cap.h: caps and rotates the logs a VMM writes itself (the guest's serial console, QEMU's
 * own stderr, the jailer's log), which the worker cannot meter line by line as it meters agent
 * output (worker/sandbox/lifecycle.c).
 *
 * A watched file is rotated when it reaches its cap: its content is copied to <path>.1 (the one
 * older generation, replaced) and the file is truncated to zero. The writer must hold it with
 * O_APPEND, so that its next write lands at the new end instead of leaving a hole. One thread
 * (started by the first watch, running for the life of the process) checks the files every
 * LOG_CAP_INTERVAL_MS; a fast writer can pass the cap within one interval, so a driver that can
 * also sets RLIMIT_FSIZE on the writer to make the cap hard (log_cap_child_limit).
 * Hidden state: the list of watched paths and that thread.
 */
#ifndef SBX_LOG_CAP_H
#define SBX_LOG_CAP_H

#include <stdint.h>

#define LOG_CAP_INTERVAL_MS 200

/* Starts watching path with a cap of max_bytes; 0, or -1 (out of memory, no thread). */
int log_cap_watch(const char *path, int64_t max_bytes);
/* Stops watching path (no-op when it is not watched). */
void log_cap_unwatch(const char *path);
/* In a forked child before exec: no file it writes may grow beyond max_bytes (RLIMIT_FSIZE, with
 * SIGXFSZ ignored so that a write past the cap fails with EFBIG instead of killing the writer).
 * Async-signal-safe. */
int log_cap_child_limit(int64_t max_bytes);

#endif

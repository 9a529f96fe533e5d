/*
 * shared.h: what the drivers (and the Sandboxes above them) share rather than copy: comparing
 * Sandbox shapes, the host's cgroup hierarchies detected once, and reading and interpreting the
 * agent's ready line.
 */
#ifndef SBX_DRIVERS_SHARED_H
#define SBX_DRIVERS_SHARED_H

#include "config.h"
#include "drivers/driver.h"
#include "host/cgroup.h"
#include "store_records.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether two shapes are the same (driver, image, vCPUs, memory): a warm Sandbox of one serves
 * the other. */
bool shape_equal(const struct store_shape *a, const struct store_shape *b);

/* The host's cgroup hierarchies (host/cgroup.h), detected at the first call in this process and
 * the same for every later one, from any thread: a worker's drivers share one configuration. The
 * first caller logs what was found, prefixed with who ("qemu driver"). */
const struct cgroup_host *driver_cgroups(const struct sbx_config *cfg, const char *who);

enum driver_line {
    DRIVER_LINE_OK,
    DRIVER_LINE_TIMEOUT,  /* no newline by the deadline */
    DRIVER_LINE_CLOSED,   /* EOF before the newline */
    DRIVER_LINE_TOO_LONG, /* outlen - 1 bytes without a newline */
    DRIVER_LINE_ERROR,    /* a read error (errno) */
    DRIVER_LINE_GONE,     /* gone(gone_arg) said the other side is gone */
};

/* Reads one line (NUL-terminated, without its newline) from the stream socket fd by deadline_ms
 * (clock_mono_ms), consuming nothing after the newline: it peeks, then reads up to the newline
 * only, so what the agent sends next stays in the socket for the event loop, in a few syscalls
 * rather than one per byte. While it waits, gone (when not NULL) is asked every 100 ms whether the
 * other side is gone (the VMM exited). *len gets the line's length. */
enum driver_line driver_read_line(int fd, int64_t deadline_ms, bool (*gone)(void *arg),
                                  void *gone_arg, char *out, size_t outlen, size_t *len);

/* Interprets the agent's first line, which must be {"type":"ready","kernel":"<uname -r>"}: sets
 * rt->kernel and returns 0; otherwise returns -1 with the agent's own "error" text in agent_err
 * ("" when it gave none). */
int driver_ready_line(const char *line, size_t len, struct sandbox_runtime *rt, char *agent_err,
                      size_t agent_errlen);

#endif

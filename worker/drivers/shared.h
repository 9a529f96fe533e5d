/*
 * shared.h: what the drivers (and the Sandboxes above them) share rather than copy: comparing
 * Sandbox shapes, the host's cgroup hierarchies detected once, and the meaning of the agent's
 * ready line. How each driver reads that line stays its own: a socketpair (process), a chardev
 * socket that also carries QMP (qemu) and a vsock handshake (firecracker) wait differently.
 */
#ifndef SBX_DRIVERS_SHARED_H
#define SBX_DRIVERS_SHARED_H

#include "config.h"
#include "drivers/driver.h"
#include "host/cgroup.h"
#include "store.h"

#include <stdbool.h>
#include <stddef.h>

/* Whether two shapes are the same (driver, image, vCPUs, memory): a warm Sandbox of one serves
 * the other. */
bool shape_equal(const struct store_shape *a, const struct store_shape *b);

/* The host's cgroup hierarchies (host/cgroup.h), detected at the first call in this process and
 * the same for every later one, from any thread: a worker's drivers share one configuration. The
 * first caller logs what was found, prefixed with who ("qemu driver"). */
const struct cgroup_host *driver_cgroups(const struct sbx_config *cfg, const char *who);

/* Interprets the agent's first line, which must be {"type":"ready","kernel":"<uname -r>"}: sets
 * rt->kernel and returns 0; otherwise returns -1 with the agent's own "error" text in agent_err
 * ("" when it gave none). */
int driver_ready_line(const char *line, size_t len, struct sandbox_runtime *rt, char *agent_err,
                      size_t agent_errlen);

#endif

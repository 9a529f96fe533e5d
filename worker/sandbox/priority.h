/*
 * priority.h: the CPU priority of the work no reply waits for. Pool refills and teardowns run on
 * the background job threads (jobs.h, nice BACKGROUND_NICE), so that on a busy host they take
 * the CPU only when activations and replies leave it; a Sandbox booted there is put back to
 * the worker's own priority before it can be claimed, since its processes inherited the boot
 * thread's.
 */
#ifndef SBX_SANDBOX_PRIORITY_H
#define SBX_SANDBOX_PRIORITY_H

#include <stdbool.h>
#include <sys/types.h>

#define BACKGROUND_NICE 19

/* Whether pool boots may run in the background: only where the worker can raise a Sandbox's
 * processes back to the worker's nice level afterwards (CAP_SYS_NICE: root). Teardowns always
 * may. */
bool priority_background_boots(void);
/* Every thread of pid and of its descendants back to nice (the worker's own). 0, or -1 with
 * errno. */
int priority_restore_tree(pid_t pid, int nice);

#endif

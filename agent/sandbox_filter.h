/*
 * sandbox_filter.h: the seccomp filter that sbx-agent installs on itself (and so on everything it
 * starts) in a process-driver Sandbox, before the App's command runs. The list of denied system
 * calls and why each is denied is in sandbox_filter.c and docs/process-driver.md.
 */
#ifndef SBX_SANDBOX_FILTER_H
#define SBX_SANDBOX_FILTER_H

#include <stddef.h>

/* Installs the filter on the calling process (needs no_new_privs, which the driver sets). Every
 * denied call then fails with EPERM (clone3 with ENOSYS, so that C libraries fall back to clone,
 * whose flags the filter can read). Returns 0, or -1 with the reason in err. */
int sandbox_filter_install(char *err, size_t errlen);

#endif

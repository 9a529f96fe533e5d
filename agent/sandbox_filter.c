/*
 * sandbox_filter.c: the process driver's seccomp filter (libseccomp, linked statically into
 * sbx-agent). sbx-agent installs it on itself before it reads the first start line, so the App's
 * command and everything it starts inherit it (a filter can never be removed, only narrowed).
 *
 * Everything is allowed except the calls below, which fail with EPERM: a probing program sees
 * "not permitted" and goes on, where a kill would look like a crash. The list starts from the
 * calls Docker's default profile denies to a container without capabilities. Most of them already
 * fail without capabilities; the filter also closes the ones that an unprivileged process may
 * make (user namespaces, keyrings, io_uring, userfaultfd, bpf and perf where the host's sysctls
 * allow them), which is where container escapes reach kernel code that is not namespaced.
 *
 * System calls of other ABIs: i386 calls get the same rules; x32 calls (and any other ABI) kill
 * the process, as libseccomp does for an architecture the filter does not name.
 */
#include "sandbox_filter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Denied outright, each with why (docs/process-driver.md has the same table). */
static const char *const denied[] = {
    /* Loading kernel code or a new kernel. */
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    /* Kernel interfaces behind many privilege escalations; bpf and perf also read kernel memory
     * layouts. */
    "bpf",
    "perf_event_open",
    /* Lets a program stall a kernel copy at will, the usual way to win kernel races. */
    "userfaultfd",
    /* Kernel keyrings are not namespaced: a key is shared with every process of the uid. */
    "keyctl",
    "add_key",
    "request_key",
    /* Mounts, old and new API: the Sandbox's tree is fixed by the driver. */
    "mount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    /* Host-wide state: swap, reboot, the clock, process accounting, disk quotas. */
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "acct",
    "quotactl",
    /* Opens any file of a filesystem by its handle, around every path check (the "shocker"
     * escape). */
    "open_by_handle_at",
    /* io_uring runs system calls on kernel threads, outside this filter, and has been a steady
     * source of kernel bugs. */
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    /* Joining another namespace. */
    "setns",
    /* The kernel log (host addresses and messages), raw I/O ports, legacy loaders. */
    "syslog",
    "iopl",
    "ioperm",
    "uselib",
};

/* unshare() and clone() are denied only with a namespace flag: a new user namespace would give
 * the App every capability inside it, and with them nf_tables, mounts and the rest. */
static const uint64_t namespace_flags[] = {
    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
};

static int deny_with_flag(scmp_filter_ctx ctx, const char *name, uint64_t flag)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return -ENOSYS;
    return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                            SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
}

static int add_rules(scmp_filter_ctx ctx, const char **failed)
{
    int rc;
    for (size_t i = 0; i < sizeof denied / sizeof *denied; i++) {
        *failed = denied[i];
        int nr = seccomp_syscall_resolve_name(denied[i]);
        if (nr == __NR_SCMP_ERROR)
            return -ENOSYS;
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) != 0)
            return rc;
    }
    for (size_t i = 0; i < sizeof namespace_flags / sizeof *namespace_flags; i++) {
        *failed = "unshare";
        if ((rc = deny_with_flag(ctx, "unshare", namespace_flags[i])) != 0)
            return rc;
        /* clone's low byte is the exit signal, so CLONE_NEWTIME (0x80) is only an unshare flag. */
        *failed = "clone";
        if ((rc = deny_with_flag(ctx, "clone", namespace_flags[i])) != 0)
            return rc;
    }
    *failed = "unshare";
    if ((rc = deny_with_flag(ctx, "unshare", CLONE_NEWTIME)) != 0)
        return rc;
    /* clone3 passes its flags in memory, which a filter cannot read. ENOSYS, not EPERM: the C
     * libraries then fall back to clone(), whose flags the rules above do read. */
    *failed = "clone3";
    int nr = seccomp_syscall_resolve_name("clone3");
    if (nr == __NR_SCMP_ERROR)
        return -ENOSYS;
    return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
}

int sandbox_filter_install(char *err, size_t errlen)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        snprintf(err, errlen, "seccomp_init failed");
        return -1;
    }
    const char *failed = "";
    int rc = seccomp_arch_add(ctx, SCMP_ARCH_X86);
    if (rc != 0 && rc != -EEXIST) {
        snprintf(err, errlen, "seccomp_arch_add(x86): %s", strerror(-rc));
        seccomp_release(ctx);
        return -1;
    }
    if ((rc = add_rules(ctx, &failed)) != 0) {
        snprintf(err, errlen, "seccomp rule for %s: %s", failed, strerror(-rc));
        seccomp_release(ctx);
        return -1;
    }
    if ((rc = seccomp_load(ctx)) != 0) {
        snprintf(err, errlen, "seccomp_load: %s", strerror(-rc));
        seccomp_release(ctx);
        return -1;
    }
    seccomp_release(ctx);
    return 0;
}

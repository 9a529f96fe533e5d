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
#include <stdbool.h>
#include <sys/socket.h>
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

/* socket() only for the families a program here has use for: Unix, IPv4, IPv6 and netlink (its
 * route family: glibc's getaddrinfo and getifaddrs ask it). Any other family fails with
 * EAFNOSUPPORT, and the IP protocols of modules of their own with EPROTONOSUPPORT, before the
 * kernel would load the module (TIPC, RDS, AF_ALG, DCCP, SCTP, ...):
 * an autoloaded protocol module is kernel code the Sandbox could reach that nobody asked for.
 * socketpair() makes Unix sockets only anyway. i386 programs that multiplex through
 * socketcall() pass the family in memory, out of the filter's reach (docs/process-driver.md). */
static const int socket_families_allowed[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
#define SOCKET_FAMILY_MAX 64 /* above AF_MAX of any kernel yet: anything from here is refused */

static int deny_socket_families(scmp_filter_ctx ctx)
{
    int nr = seccomp_syscall_resolve_name("socket");
    if (nr == __NR_SCMP_ERROR)
        return -ENOSYS;
    for (int family = 0; family < SOCKET_FAMILY_MAX; family++) {
        bool allowed = false;
        for (size_t i = 0; i < sizeof socket_families_allowed / sizeof *socket_families_allowed;
             i++)
            allowed = allowed || socket_families_allowed[i] == family;
        int rc = allowed ? 0
                         : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
                                            SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)family));
        if (rc != 0)
            return rc;
    }
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
                              SCMP_A0(SCMP_CMP_GE, (scmp_datum_t)SOCKET_FAMILY_MAX));
    /* Within IPv4 and IPv6, the protocols that live in modules of their own: DCCP (its socket
     * type, and its protocol number), SCTP and L2TP. */
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), nr, 1,
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, 6 /* SOCK_DCCP */));
    static const int protocols_denied[] = {33 /* DCCP */, 132 /* SCTP */, 115 /* L2TP */};
    for (size_t i = 0; rc == 0 && i < sizeof protocols_denied / sizeof *protocols_denied; i++)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), nr, 1,
                              SCMP_A2(SCMP_CMP_EQ, (scmp_datum_t)protocols_denied[i]));
    return rc;
}

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
    *failed = "socket";
    if ((rc = deny_socket_families(ctx)) != 0)
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

/*
 * sbx-agent: the Sandbox side of the agent channel (protocol in worker/drivers/driver.h).
 *
 * It says ready, starts the App's command when the worker asks, and relays the command's JSON
 * lines and stderr over the channel until the command exits (see relay.c). In the process driver
 * it is the init of the Sandbox's pid namespace, started as `sbx-agent --channel-fd 3 --seccomp`
 * with the channel on fd 3: it leaves the worker's session (setsid) and filters itself, and so the
 * App, before it reads a line. Other transports (guest init, virtio-serial, vsock) add a mode below
 * that opens their channel and then calls relay_run() the same way.
 */
#include "channel_vm.h"
#include "relay.h"
#include "sandbox_filter.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sbx-agent --channel-fd N [--seccomp] | --guest (--virtio-port NAME | "
            "--vsock-port P)\n"
            "  Relays the agent channel on file descriptor N (a socket or pipe pair end):\n"
            "  announces ready, starts the App's command on {\"type\":\"start\"}, relays\n"
            "  message lines both ways and reports the command's exit.\n"
            "  In a microVM (started by the guest init): the channel is the virtio-serial\n"
            "  port NAME (qemu) or the first host connection to vsock port P (firecracker).\n"
            "  --seccomp: install the Sandbox's system call filter (agent/sandbox_filter.c) on\n"
            "  the agent itself, and so on the App's command, before anything else (the\n"
            "  process driver passes it).\n");
}

/* Parses a file descriptor number; -1 when it is not one that is open. */
static int parse_fd(const char *s)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (errno || *end || end == s || n < 0 || n > 65535)
        return -1;
    if (fcntl((int)n, F_GETFD) < 0)
        return -1;
    return (int)n;
}

int main(int argc, char **argv)
{
    int channel_fd = -1;
    bool seccomp = false;
    char vm_err[256];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--channel-fd") == 0 && i + 1 < argc) {
            channel_fd = parse_fd(argv[++i]);
            if (channel_fd < 0) {
                fprintf(stderr, "sbx-agent: --channel-fd %s is not an open descriptor\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--seccomp") == 0) {
            seccomp = true;
        } else if (strcmp(argv[i], "--guest") == 0) {
            /* Started by the guest init (agent/guest_init.c), which did the PID 1 duties. */
        } else if (channel_vm_parse_option(argc, argv, &i, &channel_fd, vm_err, sizeof vm_err) !=
                   0) {
            /* --virtio-port NAME / --vsock-port P: the microVM channel (agent/channel_vm.h). */
            if (channel_fd < 0) {
                fprintf(stderr, "sbx-agent: %s\n", vm_err);
                return 1;
            }
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    /* Guest transports hook in here: open their channel, set channel_fd. */
    if (channel_fd < 0) {
        usage(stderr);
        return 2;
    }
    /* A session of its own: no controlling terminal of whoever started the worker can reach the
     * Sandbox (EPERM when it already leads one, as a guest init's child may: nothing to do). */
    setsid();
    if (seccomp) {
        char err[256];
        if (sandbox_filter_install(err, sizeof err) != 0) {
            fprintf(stderr, "sbx-agent: %s\n", err);
            return 1;
        }
    }
    fcntl(channel_fd, F_SETFD, FD_CLOEXEC); /* the App's command must not inherit the channel */
    struct relay_result result;
    if (relay_run(channel_fd, &result) != 0) {
        fprintf(stderr, "sbx-agent: cannot run the relay: %s\n", strerror(errno));
        return 1;
    }
    return result.command_status < 0 ? 0 : result.command_status;
}

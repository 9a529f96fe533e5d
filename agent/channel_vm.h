/*
 * channel_vm.h: the guest end of the agent channel inside a microVM.
 *
 * Two transports carry the same JSON-lines stream (see worker/drivers/driver.h):
 *  - virtio-serial (the qemu driver): a virtserialport named e.g. "sbx.agent"; the guest finds it
 *    through /sys/class/virtio-ports/<port>/name and opens /dev/<port>. The host end is connected
 *    before the guest boots, so the port is usable as soon as it exists.
 *  - vsock (the firecracker driver): the guest listens on a vsock port (1024) and the host connects
 *    through Firecracker's unix socket with "CONNECT <port>\n"; the first accepted connection is
 *    the channel.
 * Both return a blocking, close-on-exec file descriptor for reading and writing.
 */
#ifndef SBX_CHANNEL_VM_H
#define SBX_CHANNEL_VM_H

#include <stddef.h>

/* The vsock port the guest agent listens on by default. */
#define CHANNEL_VM_VSOCK_PORT 1024u

/* Opens the virtio-serial port called name, waiting up to timeout_ms for it to appear (its
 * module may still be probing). Returns the fd, or -1 with a reason in err. */
int channel_vm_open_virtio(const char *name, int timeout_ms, char *err, size_t errlen);

/* Listens on vsock port (any CID) and returns the first connection the host makes, or -1 with a
 * reason in err. Waits without limit: the host connects when it is ready to talk. */
int channel_vm_accept_vsock(unsigned port, char *err, size_t errlen);

/* The hook of sbx-agent's main: if argv[*i] is "--virtio-port NAME" or "--vsock-port P", consumes
 * it (advancing *i past its value) and opens that channel into *fd. Returns 1 when it consumed an
 * option, 0 when argv[*i] is not one of them, -1 with a reason in err on failure. */
int channel_vm_parse_option(int argc, char **argv, int *i, int *fd, char *err, size_t errlen);

#endif

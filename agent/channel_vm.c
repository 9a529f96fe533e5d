/*
 * channel_vm.c: opens the guest end of the agent channel (virtio-serial port or vsock listener).
 * See channel_vm.h.
 */
#include "channel_vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* Looks once through /sys/class/virtio-ports for a port called name; on a match writes its device
 * path (/dev/vportNpM) into dev and returns 1. */
static int find_virtio_port(const char *name, char *dev, size_t devlen)
{
    DIR *dir = opendir("/sys/class/virtio-ports");
    if (dir == NULL)
        return 0;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", de->d_name);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue;
        char port_name[256] = "";
        if (fgets(port_name, sizeof port_name, f) != NULL) {
            port_name[strcspn(port_name, "\n")] = '\0';
            if (strcmp(port_name, name) == 0) {
                snprintf(dev, devlen, "/dev/%s", de->d_name);
                found = 1;
            }
        }
        fclose(f);
    }
    closedir(dir);
    return found;
}

int channel_vm_open_virtio(const char *name, int timeout_ms, char *err, size_t errlen)
{
    char dev[PATH_MAX];
    const int step_ms = 20;
    for (int waited = 0;; waited += step_ms) {
        if (find_virtio_port(name, dev, sizeof dev)) {
            /* devtmpfs creates the node asynchronously to sysfs: retry ENOENT for a moment. */
            int fd = open(dev, O_RDWR | O_CLOEXEC | O_NOCTTY);
            if (fd >= 0)
                return fd;
            if (errno != ENOENT || waited >= timeout_ms) {
                snprintf(err, errlen, "open %s: %s", dev, strerror(errno));
                return -1;
            }
        } else if (waited >= timeout_ms) {
            snprintf(err, errlen, "no virtio-serial port named %s after %d ms", name, timeout_ms);
            return -1;
        }
        sleep_ms(step_ms);
    }
}

int channel_vm_accept_vsock(unsigned port, char *err, size_t errlen)
{
    int lfd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        snprintf(err, errlen, "vsock socket: %s (is vmw_vsock_virtio_transport loaded?)",
                 strerror(errno));
        return -1;
    }
    struct sockaddr_vm addr = {.svm_family = AF_VSOCK, .svm_port = port, .svm_cid = VMADDR_CID_ANY};
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 1) != 0) {
        snprintf(err, errlen, "vsock listen on port %u: %s", port, strerror(errno));
        close(lfd);
        return -1;
    }
    int fd;
    do {
        fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        snprintf(err, errlen, "vsock accept on port %u: %s", port, strerror(errno));
    /* One host connection is the whole channel: nobody else may connect later. */
    close(lfd);
    return fd;
}

int channel_vm_parse_option(int argc, char **argv, int *i, int *fd, char *err, size_t errlen)
{
    const char *opt = argv[*i];
    int is_virtio = strcmp(opt, "--virtio-port") == 0;
    int is_vsock = strcmp(opt, "--vsock-port") == 0;
    if (!is_virtio && !is_vsock)
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value", opt);
        return -1;
    }
    const char *value = argv[++*i];
    if (is_virtio) {
        *fd = channel_vm_open_virtio(value, 10000, err, errlen);
    } else {
        char *end = NULL;
        errno = 0;
        unsigned long port = strtoul(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0' || port > UINT32_MAX) {
            snprintf(err, errlen, "--vsock-port: not a port number: %s", value);
            return -1;
        }
        *fd = channel_vm_accept_vsock((unsigned)port, err, errlen);
    }
    return *fd < 0 ? -1 : 1;
}

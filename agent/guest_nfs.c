/*
 * guest_nfs.c: the in-guest NFS mount of a Workspace (guest_nfs.h).
 *
 * The kernel's nfs4 file system takes its options as text through mount(2); with no mount.nfs
 * helper in the guest, the server's address must be given as addr= (the kernel does no name
 * lookups). NFSv4.1 needs no callback address from the client (clientaddr=), unlike 4.0.
 */
#include "guest_nfs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MODULES_NFS "/etc/modules.nfs"
/* In a guest whose root is an App's image the initramfs is at /.sbx (agent/guest_image.h): the
 * list and the modules are found there, never in the image. */
#define SBX_DIR "/.sbx"
/* Mount attempts go on every 500 ms until this deadline. A deadline, not a count: one attempt
 * against an unreachable server can itself take seconds (ARP, TCP SYN retries), and the worker
 * waits for the start answer only message_timeout. */
#define MOUNT_DEADLINE_MS 15000

/* Loads the NFS client (sunrpc ... nfsv4, in dependency order). Already loaded is fine. */
static int load_nfs_modules(char *err, size_t errlen)
{
    const char *prefix = SBX_DIR;
    FILE *f = fopen(SBX_DIR MODULES_NFS, "re");
    if (f == NULL) {
        prefix = "";
        f = fopen(MODULES_NFS, "re");
    }
    if (f == NULL)
        return 0; /* a kernel with NFS built in (or a host test): mount() says if it is missing */
    char line[256], path[300];
    int rc = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '\0')
            continue;
        snprintf(path, sizeof path, "%s%s", prefix, line);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)) {
            snprintf(err, errlen, "load NFS module %s: %s", path, strerror(errno));
            rc = -1;
        }
        if (fd >= 0)
            close(fd);
        if (rc != 0)
            break;
    }
    fclose(f);
    return rc;
}

int guest_nfs_mount(const char *source, const char *dir, char *err, size_t errlen)
{
    char host[64];
    const char *colon = strchr(source, ':');
    struct in_addr a;
    if (colon == NULL || colon == source || (size_t)(colon - source) >= sizeof host ||
        colon[1] != '/') {
        snprintf(err, errlen, "NFS source %.200s is not <address>:/<path>", source);
        return -1;
    }
    memcpy(host, source, (size_t)(colon - source));
    host[colon - source] = '\0';
    if (inet_pton(AF_INET, host, &a) != 1) {
        snprintf(err, errlen, "NFS server %.64s is not an IPv4 address", host);
        return -1;
    }
    if (load_nfs_modules(err, errlen) != 0)
        return -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %.200s: %s", dir, strerror(errno));
        return -1;
    }
    /* hard: a Workspace write must not fail because the server was slow to answer under TCG. */
    char opts[256];
    snprintf(opts, sizeof opts, "vers=4.1,proto=tcp,port=2049,addr=%s,hard,timeo=100,retrans=3",
             host);
    int e = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (mount(source, dir, "nfs4", 0, opts) == 0)
            return 0;
        e = errno;
        if (e == ENODEV || e == EINVAL || e == EPERM)
            break; /* no NFS client, bad options, no privilege: retrying cannot help */
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed_ms =
            (long)(now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000L;
        if (elapsed_ms + 500 >= MOUNT_DEADLINE_MS)
            break;
        struct timespec ts = {0, 500 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* The server hides an export from addresses it does not admit: ENOENT, like EACCES, means
     * "not for this Sandbox". */
    snprintf(err, errlen, "mount NFS Workspace %.200s on %.100s: %s%s", source, dir, strerror(e),
             e == EACCES || e == EPERM || e == ENOENT ? " (not exported to this Sandbox)" : "");
    return -1;
}

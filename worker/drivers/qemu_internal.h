/*
 * qemu_internal.h: what the qemu driver's two files share and nothing else includes.
 *   qemu.c       the driver (driver.h): settings, cgroup, network, boot, Workspace, terminate, reap
 *   qemu_jail.c  a Sandbox's jail and App image in it, the jailed QEMU process, its sockets and QMP
 */
#ifndef SBX_QEMU_INTERNAL_H
#define SBX_QEMU_INTERNAL_H

#include "drivers/driver.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define QEMU_AGENT_PORT "sbx.agent"
#define QEMU_BOOT_TIMEOUT_MS 60000     /* TCG on a busy 2-core host: boots take 1.5 s to ~20 s */
#define QEMU_CONNECT_TIMEOUT_MS 10000  /* QEMU start-up to its connecting the chardev sockets */
#define QEMU_POWERDOWN_TIMEOUT_MS 3000 /* guest init handles the power button and powers off */
#define QEMU_QUIT_TIMEOUT_MS 2000
#define QEMU_TAP_FD 3 /* where the tap fd sits in QEMU's fd table */
/* An App's image in the jail (the digest's rootfs.erofs, linked read-only) and in the guest, where
 * the guest init mounts it under an overlay (agent/guest_image.c). */
#define QEMU_IMAGE_IN_JAIL "/image.erofs"
#define QEMU_IMAGE_DEVICE "/dev/vda"

struct qemu_launch {
    const char *jail_root;  /* <jail>/root */
    const char *usr_target; /* <jail>/root/usr */
    const char *dev_null;   /* <jail>/root/dev/null */
    const char *qemu_log;   /* <jail>/qemu.log: QEMU's own stderr */
    uid_t uid;
    gid_t gid;
    int tap_fd; /* the host's tap for this Sandbox (links.h), -1: a private one */
    char *const *argv;
    int64_t log_max; /* vmm_log_max_kib in bytes: no file QEMU writes grows beyond it */
};

/* ---- qemu_jail.c ---- */

int qemu_build_jail(const char *guest_dir, const char *jail, char *err, size_t errlen);
int qemu_app_image_prepare(const struct sbx_config *cfg, struct sandbox_runtime *rt, char *erofs,
                           size_t erofslen, char *err, size_t errlen);
int qemu_app_image_place(const char *erofs, const char *jail_root, char *err, size_t errlen);
int qemu_listen_unix(const char *path, uid_t uid, gid_t gid, char *err, size_t errlen);
pid_t spawn_qemu(const struct qemu_launch *l, char *err, size_t errlen);
bool qemu_process_alive(pid_t pid);
bool qemu_wait_exit(pid_t pid, int timeout_ms);
void qemu_append_log_tail(const char *jail, const char *name, char *err, size_t errlen);
int accept_from_qemu(int lfd, pid_t pid, int timeout_ms, const char *what, char *err,
                     size_t errlen);
int qmp_execute(int fd, const char *command, int timeout_ms, char *err, size_t errlen);
int qmp_handshake(int fd, char *err, size_t errlen);

#endif

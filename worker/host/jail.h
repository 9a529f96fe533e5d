/*
 * jail.h: the per-Sandbox jail directory on the host, laid out like Firecracker's jailer:
 *
 *   <chroot_base>/<driver>/<tag>/            the jail (rt->jail_dir); <tag> is
 *                                            "<installation>-<sandboxId>" (host_tag.h)
 *   <chroot_base>/<driver>/<tag>/root/       where the Sandbox's root is mounted (in its own mount
 *                                            namespace only; empty on the host)
 *   <chroot_base>/<driver>/<tag>/workspace/  the Workspace slot: a shared mount point on the host
 *                                            whose mounts propagate into the Sandbox's /workspace
 *                                            (see jail_attach_workspace)
 *
 * Removal of a process-driver jail only unmounts and rmdir()s: it never deletes files, so a
 * Workspace that is still mounted somewhere cannot lose data through it. The qemu driver's jails
 * (same path scheme) hold files sbx put there (the kernel's and image's links, sockets, logs) and
 * no Workspace (that one is served over NFS): jail_remove_tree removes them whole.
 */
#ifndef SBX_JAIL_H
#define SBX_JAIL_H

#include <stdbool.h>
#include <stddef.h>

/* Writes <chroot_base>/<driver>/<installation>-<sandbox_id> to out; -1 when it does not fit or the
 * id is unsafe. */
int jail_path(const char *chroot_base, const char *driver, const char *sandbox_id, char *out,
              size_t outlen);
/* True when jail_dir is exactly the jail path of sandbox_id, tagged or (made before installations
 * were tagged) bare (guards reap against a bad row). */
bool jail_path_is(const char *chroot_base, const char *driver, const char *sandbox_id,
                  const char *jail_dir);
/* Creates the jail directories and, with shared_slot, makes the Workspace slot a shared mount
 * point (needs CAP_SYS_ADMIN on the host; without it Workspaces cannot be attached). */
int jail_create(const char *jail_dir, bool shared_slot, char *err, size_t errlen);
/* Writes the root and slot paths of a jail. */
void jail_root_path(const char *jail_dir, char *out, size_t outlen);
void jail_slot_path(const char *jail_dir, char *out, size_t outlen);
/* Bind-mounts host_dir on the slot; it appears at /workspace in the Sandbox. */
int jail_attach_workspace(const char *jail_dir, const char *host_dir, char *err, size_t errlen);
/* Unmounts everything on the slot and removes the jail's (empty) directories. Idempotent. */
int jail_remove(const char *jail_dir, char *err, size_t errlen);

/* Removes a qemu jail with everything in it (fs_remove_tree: never led out of it by a link, and
 * a mount inside is left, not emptied). Idempotent. */
int jail_remove_tree(const char *jail_dir, char *err, size_t errlen);

/* Start-up sweep: removes (with remove: jail_remove for the process driver's jails,
 * jail_remove_tree for qemu's) every jail in <chroot_base>/<driver> tagged with this installation
 * whose Sandbox is_live() says is not live. Another installation's jails and untagged ones (an
 * older sbx may still run them) are left alone. *removed: how many. */
int jail_sweep(const char *chroot_base, const char *driver,
               int (*remove)(const char *jail_dir, char *err, size_t errlen),
               bool (*is_live)(const char *sandbox_id, void *arg), void *arg, size_t *removed);

#endif

/*
 * workspace_idmap.h: a Workspace bind mount whose owner is mapped (an idmapped mount, Linux 5.12+),
 * for Sandboxes that each run as a uid of their own (uid_range.h).
 *
 * A Workspace's files belong on disk to sandbox_uid/sandbox_gid, whichever Sandbox wrote them.
 * Each Sandbox's view maps that owner to its own uid/gid: it reads and writes the files as their
 * owner, and what it creates is stored as sandbox_uid again. So Sandboxes of one App, even
 * concurrently attached, share the files, and nothing on disk changes at attach (a chown on
 * attach would take the files from a Sandbox still using them and cost a walk of the whole tree).
 */
#ifndef SBX_WORKSPACE_IDMAP_H
#define SBX_WORKSPACE_IDMAP_H

#include <stddef.h>
#include <sys/types.h>

/* Mounts host_dir on target (the jail's shared slot, so it propagates into the Sandbox) with
 * on-disk owner disk_uid/disk_gid shown as uid/gid. Needs root. 0, or -1 with the reason. */
int workspace_idmap_mount(const char *host_dir, const char *target, uid_t disk_uid, gid_t disk_gid,
                          uid_t uid, gid_t gid, char *err, size_t errlen);

#endif

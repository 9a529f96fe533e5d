/*
 * guest_nfs.h: in a microVM guest, mounts the Workspace the host exports over NFSv4 (see
 * docs/workspaces.md): loads the NFS client modules of /etc/modules.nfs on first use, then
 * mount(2)s "<host addr>:/<export>" at the Workspace path.
 */
#ifndef SBX_GUEST_NFS_H
#define SBX_GUEST_NFS_H

#include <stddef.h>

/* Mounts source ("a.b.c.d:/path") at dir (made if missing). Retries for a few seconds (the
 * server may still be applying the export); -1 with the last reason in err. */
int guest_nfs_mount(const char *source, const char *dir, char *err, size_t errlen);

#endif

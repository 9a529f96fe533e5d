/*
 * userns_map.h: a user namespace with given uid and gid maps, held by an open descriptor: what an
 * idmapped mount (mount_setattr(MOUNT_ATTR_IDMAP)) takes its mapping from. The process driver maps
 * an image's cached tree with it (drivers/process_image.c), the Workspace slot's bind mount too
 * (host/workspace_idmap.c).
 */
#ifndef SBX_USERNS_MAP_H
#define SBX_USERNS_MAP_H

#include <stddef.h>

/* uid_map and gid_map are the texts written to /proc/PID/uid_map and gid_map (lines of "inside
 * outside count", see user_namespaces(7)). Returns the namespace's descriptor (O_CLOEXEC; the
 * caller closes it), or -1 with a reason. Safe in a threaded process: a short-lived child made
 * by a raw clone(CLONE_NEWUSER), holding no descriptor it waits on, owns the namespace while this
 * process, as root, writes its maps; it is killed once the descriptor is open;
 * the descriptor keeps the namespace after the child is gone. */
int userns_map_open(const char *uid_map, const char *gid_map, char *err, size_t errlen);

#endif

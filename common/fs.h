/*
 * fs.h: the filesystem steps that the gateway, the workers and the drivers share: making a
 * directory with its parents, and removing a tree without being led out of it.
 */
#ifndef SBX_FS_H
#define SBX_FS_H

#include <sys/types.h>

/* mkdir -p: makes each missing component of path with mode; an existing directory is fine. 0, or
 * -1 with errno (ENAMETOOLONG for a path longer than PATH_MAX). */
int fs_mkdir_p(const char *path, mode_t mode);

/* Removes the tree at path depth first, without following symlinks (an agent may have planted
 * them) and without crossing into another filesystem (a mount inside, such as a Workspace still
 * mounted, is left alone, not emptied). An entry that cannot be removed is logged and passed over.
 * 0 when path is gone (or never existed); -1 with errno when it is still there. */
int fs_remove_tree(const char *path);

#endif

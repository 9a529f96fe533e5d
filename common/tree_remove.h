/*
 * tree_remove.h: removing a directory tree that an untrusted Sandbox could write to (a Workspace,
 * a jail) while it may still be changing it, without ever acting outside the tree.
 *
 * The walk goes by directory fds, never by path: each subdirectory is opened relative to its
 * parent's fd with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), each entry is
 * removed with unlinkat() relative to the fd of the directory it was listed in. A directory
 * swapped for a symlink (renameat2(RENAME_EXCHANGE)) at any moment is then at worst a symlink
 * removed as a link: the walk cannot be steered outside, and does not cross into other mounts.
 */
#ifndef SBX_TREE_REMOVE_H
#define SBX_TREE_REMOVE_H

#include <stddef.h>

/* Directory levels below the top that are removed; deeper ones are left (and reported). */
#define TREE_REMOVE_MAX_DEPTH 256

/* Removes path (a directory) and everything under it. The components of path itself are
 * trusted (they belong to sbx); everything under it is not. Returns 0 when path is gone (or
 * was never there), else -1 with what was left and why in err. */
int tree_remove(const char *path, char *err, size_t errlen);

#endif

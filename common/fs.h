/*
 * fs.h: the filesystem steps that the gateway, the workers and the drivers share: making a
 * directory with its parents, removing a tree without being led out of it, and reading the last
 * line of a log.
 */
#ifndef SBX_FS_H
#define SBX_FS_H

#include <stddef.h>
#include <sys/types.h>

/* mkdir -p: makes each missing component of path with mode; an existing directory is fine. 0, or
 * -1 with errno (ENAMETOOLONG for a path longer than PATH_MAX). */
int fs_mkdir_p(const char *path, mode_t mode);

/* The last line of the file at path (a helper program's or a VMM's log, whose last line is
 * usually its reason), without its line end (\n, \r\n): at most outlen - 1 bytes, read from
 * the file's last outlen - 1 bytes, so a longer line comes cut at its front. 0, or -1 when the
 * file cannot be read or holds no line. outlen must be at least 2. */
int fs_last_line(const char *path, char *out, size_t outlen);

/* Removes the tree at path (a Workspace, a jail: what an untrusted Sandbox could write to, maybe
 * while it still changes it) depth first without ever acting outside it. The walk goes by
 * directory fds, never by path: each subdirectory is opened relative to its parent's fd with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), each entry removed with
 * unlinkat() relative to the directory it was listed in. Symlinks are removed as links, never
 * followed, and a directory exchanged for a symlink (renameat2(RENAME_EXCHANGE)) at any moment of
 * the walk is at worst a symlink removed as a link. A mount inside (a Workspace still mounted) is
 * left alone, not emptied; levels below FS_REMOVE_MAX_DEPTH are left. The components of path
 * itself are trusted (sbx's own directories). 0 when path is gone (or never existed); -1 with
 * errno (ENOTEMPTY, EXDEV for a mount inside, ELOOP when too deep) when something is left, which
 * is logged. */
#define FS_REMOVE_MAX_DEPTH 256
int fs_remove_tree(const char *path);

#endif

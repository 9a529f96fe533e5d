/*
 * image_user.h: resolves the user an App's image names ("name", "uid", "name:group", "uid:gid";
 * the OCI config's User) against the image's own /etc/passwd and /etc/group, as sbx-agent sees
 * them: the Sandbox's root is the image, so "/etc/passwd" is the image's file, never the host's.
 * The process driver also reads them on the host, inside the cached tree, to map the user's ids
 * onto the Sandbox's (worker/drivers/process_image.h).
 *
 * Read with stdio only (no NSS: sbx-agent is static and an image may have no libnss at all).
 */
#ifndef SBX_IMAGE_USER_H
#define SBX_IMAGE_USER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define IMAGE_USER_MAX_GROUPS 32

struct image_user {
    uid_t uid;
    gid_t gid;
    char name[64];                       /* "" when the uid has no /etc/passwd entry */
    char home[PATH_MAX];                 /* from /etc/passwd, "/" without an entry */
    gid_t groups[IMAGE_USER_MAX_GROUPS]; /* gid, then the groups /etc/group lists the name in */
    size_t ngroups;
};

/* Resolves spec in the tree whose directory root_fd is (-1: this process's root, as in the
 * Sandbox; the worker passes the cached image's rootfs/, whose links then resolve inside it). A
 * name must have an /etc/passwd entry and a group name an /etc/group entry; a numeric uid needs
 * none (its group is then the entry's, or 0). Returns 0, or -1 with a reason in why. */
int image_user_resolve(const char *spec, int root_fd, struct image_user *out, char *why,
                       size_t whylen);

/* True when this process may change its uid and gid (it holds CAP_SETUID and CAP_SETGID): in a
 * microVM's guest sbx-agent is root; in the process driver it holds no capabilities at all. */
bool image_user_can_switch(void);

#endif

/*
 * host_tag.h: the installation tag in the names of a Sandbox's host directories: its cgroups, its
 * jail (process driver) and its NFS export file are named "<installation>-<sandboxId>", so that a
 * start-up sweep tells this installation's leftovers from another sbx's live Sandboxes on the same
 * host (installation.h; links and firewall elements are tagged by links.c the same way).
 * Hidden state: the process's installation id, set once by the worker before any Sandbox starts
 * ("" until then: names are then the bare Sandbox id, as before installations were tagged).
 */
#ifndef SBX_HOST_TAG_H
#define SBX_HOST_TAG_H

#include <stddef.h>

/* Sets the installation whose tag this process writes and recognises. */
void host_tag_set(const char *installation_id);

/* The installation id set ("" before host_tag_set). */
const char *host_tag_installation(void);

/* Writes "<installation>-<sandbox_id>" (or the bare id before host_tag_set); -1 if it does not
 * fit. */
int host_tag_name(const char *sandbox_id, char *out, size_t outlen);

enum host_tag_owner {
    HOST_TAG_OURS,   /* tagged with this installation: *sandbox_id is the id after the tag */
    HOST_TAG_LEGACY, /* untagged ("sbx_..." or "sbx-..."), made before tagging or by an older sbx */
    HOST_TAG_OTHERS, /* another installation's, or not a Sandbox's name at all */
};

/* Whose a directory name found on the host is. For HOST_TAG_OURS and HOST_TAG_LEGACY the Sandbox
 * id is written to sandbox_id, with a jailer-style "sbx-" (firecracker) read back as "sbx_". */
enum host_tag_owner host_tag_owner(const char *name, char *sandbox_id, size_t len);

#endif

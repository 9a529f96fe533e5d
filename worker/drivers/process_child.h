/*
 * process_child.h: the Sandbox's own side of a process driver boot, from clone() to the agent's
 * exec. The worker (process.c) plans everything, clones into the new namespaces with CLONE_VM |
 * CLONE_VFORK and has the child exec sbx-process-init (worker/process_init.c) at once; that
 * program reads the plan and runs process_child_run. So no copy of the worker's memory ever
 * exists: a fork of the worker would mark its every page copy-on-write for as long as the child
 * lives (it waits for its cgroup and network, then builds its root), and every thread of the
 * worker, the one answering the next activation among them, would pay a page fault and a TLB
 * shootdown for each page it first writes meanwhile.
 *
 * The plan crosses the exec in a memfd, as the raw struct: both sides are built from this header
 * in the same build, and the magic and size are checked. The descriptors it names (sync, error,
 * channel, the image's user namespace) keep their numbers across the exec.
 *
 * A worker that is not root is the exception: its Sandbox is in a user namespace of its own, whose
 * id maps must exist before the exec (an exec as an unmapped uid leaves no capabilities in the
 * namespace), and only the child can write them (the worker dropped root, so its /proc files are
 * root's until the child makes itself dumpable, which with a shared memory would make the worker
 * dumpable too). That child is a fork-like clone, as before, and writes the maps before its exec.
 */
#ifndef SBX_PROCESS_CHILD_H
#define SBX_PROCESS_CHILD_H

#include "drivers/process_image.h"

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* The program the clone execs: its path in the build directory, and its name in argv[0]. */
#define PROCESS_INIT_NAME "sbx-process-init"
#define PROCESS_CHILD_PLAN_MAGIC 0x73627870u /* "sbxp" */

/* Everything the child needs, computed by the worker before clone(). */
struct process_child_plan {
    uint32_t magic; /* PROCESS_CHILD_PLAN_MAGIC */
    uint32_t size;  /* sizeof (struct process_child_plan) */
    char rootfs[PATH_MAX];
    char root[PATH_MAX];
    char slot[PATH_MAX];
    char root_tmp[PATH_MAX + 8];
    char root_proc[PATH_MAX + 8];
    char root_dev[PATH_MAX + 8];
    char root_workspace[PATH_MAX + 16];
    char dev_files[5][PATH_MAX + 16];
    char tmp_options[64];
    char resolv_src[PATH_MAX]; /* sbx's resolv.conf for Sandboxes ("" for none) */
    char hostname[64];
    uid_t uid;
    gid_t gid;
    rlim_t nproc;
    bool drop_privileges; /* false in a user namespace, where only the worker's uid is mapped */
    struct process_image_plan image; /* the App's image as the root, unless image.enabled false */
    sigset_t sigmask;                /* the cloning thread's mask, restored in sbx-process-init */
    int sync_fd;  /* read end: one byte when the parent is done, EOF when it died */
    int error_fd; /* write end: "<step>: <errno>" when a step fails */
    int channel_fd;
};

/* The Sandbox's /dev: the host nodes bound into it. No tty: the host's /dev/tty would be the
 * controlling terminal of whoever started the worker. */
extern const char *const process_child_dev_names[5];

/* In sbx-process-init, the Sandbox's init before its agent: waits for the worker's go-ahead on
 * sync_fd (it has put the child in its cgroup and set up its network), builds the root, drops
 * privileges and execs the agent. Never returns: a failed step is reported on error_fd as
 * "<step>: <reason>" and the process exits. */
__attribute__((noreturn)) void process_child_run(const struct process_child_plan *p);

/* In the child: mounts the writable layer and the overlay at plan->root, makes the mount points
 * the driver needs (replacing an image's symlink or file there, in the upper layer only, so that
 * no mount follows a link the image chose), and /.sbx. The upper layer's root directory belongs to
 * owner_uid:owner_gid when chown_root (the Sandbox's uid, so / is writable to it). Returns NULL,
 * or the step that failed (errno set). */
const char *process_image_mount(const struct process_image_plan *plan, bool chown_root,
                                uid_t owner_uid, gid_t owner_gid);

#endif

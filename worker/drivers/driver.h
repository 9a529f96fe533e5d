/*
 * driver.h: the interface every Sandbox driver implements (process, qemu, firecracker).
 *
 * A driver turns "a Sandbox of this shape" into running isolated compute with an agent channel,
 * and back. Its functions block (a boot can take seconds): the worker calls them from its helper
 * threads, never from the event loop. They return 0, or -1 with a human-readable reason in err.
 *
 * The agent channel is a byte stream of JSON lines between the worker and the agent side of the
 * Sandbox (sbx-agent in a VM, the sandbox init for the process driver):
 *   agent -> host  {"type":"ready","kernel":"<uname -r>"}        once, when booted (boot() waits)
 *   host -> agent  {"type":"start","argv":[...],"workspace":"/workspace" or null}
 *                  or, for a Workspace over NFS (microVMs, docs/workspaces.md):
 *                  {"type":"start","argv":[...],"workspace":{"path":"/workspace",
 *                                                         "nfs":"<host addr>:/sbx/<sandboxId>"}}
 *                  with "env":["K=V",...] (the image's Env, then the App's env, then the
 *                  Sandbox's context, sandbox_context.h), "files":[{"path","content"}] to write
 *                  before the command starts (the CA of SBX_CA_FILE) and, when the image sets
 *                  them, "cwd":"<WorkingDir>" and "user":"<User>" (image_run.h)
 *                  and "prestart":true for a pre-started agent (the App's prestart: no Session
 *                  yet, no "workspace", no SBX_SESSION_ID in "env")
 *   agent -> host  {"type":"started"} | {"type":"error","error":"..."}
 *   agent -> host  {"type":"app_ready"}   a pre-started command printed {"type":"ready"} (once,
 *                                         before its context)
 *   host -> agent  {"type":"context","workspace":<as in start>,"context":{"type":"context",
 *                  "sessionId","appId","sandboxId","workspace","apiUrl"?}}: a pre-started agent's
 *                  Session claimed it; the agent mounts (NFS) or checks the Workspace, writes
 *                  "context" as one line to the command's stdin, then answers as to a start
 *   host -> agent  {"id":"msg_...","seq":N,"body":...}           one per message (agent protocol)
 *   agent -> host  {"id":"msg_...","reply":...} | {"id":"msg_...","error":"..."}
 *   agent -> host  {"type":"log","line":"..."}                   the command's stderr
 *   agent -> host  {"type":"exit","status":N}                    the command ended
 * Lines with "type" are control lines; lines with "id" are the App's agent protocol, relayed as is.
 */
#ifndef SBX_DRIVER_H
#define SBX_DRIVER_H

#include "config.h"
#include "store_records.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

/* What a driver made for one Sandbox. Owned by the worker; released by terminate(). */
struct sandbox_runtime {
    char sandbox_id[STORE_ID_LEN];
    struct store_shape shape;
    pid_t pid;             /* the process whose exit means the Sandbox is gone (VMM or init) */
    int channel_fd;        /* host end of the agent channel, non-blocking, close-on-exec */
    char jail_dir[512];    /* <chroot_base>/<driver>/<sandboxId> */
    char cgroup_path[512]; /* "" when no cgroup could be made */
    char net_address[64];  /* the Sandbox's address, "" without a network */
    char image_hash[80];   /* content hash of the rootfs or guest image */
    char kernel[128];      /* what the agent reported as its kernel release */
    void *driver_state;    /* the driver's own */
    int64_t uid;           /* the Sandbox's own host uid (= gid) from sandbox_uid_range, -1: none */
    /* Set by attach_workspace when the agent must mount the Workspace over NFS
     * ("<host addr>:/<export>"), "" otherwise. */
    char workspace_nfs[160];
    /* Written by boot() as it goes (driver_boot_step), read by the worker's boot deadline on the
     * event loop thread (sandbox/boot.c): the step the boot is at, for the reason a boot that
     * overran its deadline fails with, and the process it made (0: none yet), which is killed. */
    _Atomic(const char *) boot_step;
    _Atomic pid_t boot_pid;
};

/* Says that boot() is now at step (a string literal: "image user", "agent ready", ...). */
static inline void driver_boot_step(struct sandbox_runtime *rt, const char *step)
{
    atomic_store(&rt->boot_step, step);
}

struct driver {
    const char *name;
    /* Checks the host once at worker start; says on the log what cannot be measured here. */
    int (*init)(const struct sbx_config *cfg, char *err, size_t errlen);
    /* Boots a fresh Sandbox of rt->shape for rt->sandbox_id and waits until its agent is ready. */
    int (*boot)(const struct sbx_config *cfg, struct sandbox_runtime *rt, char *err, size_t errlen);
    /* Makes the Workspace directory (host path, NULL for none) available to the Sandbox before
     * the App's command starts; the agent then sees it at /workspace. */
    int (*attach_workspace)(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                            const char *host_dir, char *err, size_t errlen);
    /* Stops everything (gracefully, then by force), measures usage, removes the jail, cgroup and
     * network state; detaches the Workspace without touching its data. Idempotent. */
    int (*terminate)(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                     struct store_usage *usage, char *err, size_t errlen);
    /* Reconciliation: removes what a Sandbox recorded in the store left on the host (its process if
     * still alive, jail, cgroup, network) when no runtime exists any more (the worker restarted).
     */
    int (*reap)(const struct sbx_config *cfg, const struct store_sandbox *sb, char *err,
                size_t errlen);
    /* Optional: how many processes the OOM killer ended inside the Sandbox (its memory bound);
     * -1 when unknown. Cheap (a cgroup file): called on the event loop when the agent or the
     * App's command ended. */
    int64_t (*oom_kills)(const struct sbx_config *cfg, const struct sandbox_runtime *rt);
    /* Optional: the bounds of the App's size this host cannot apply to Sandboxes of this driver,
     * comma-separated ("memory", "cpu"), "" when all apply. Valid after init. */
    void (*unbounded)(const struct sbx_config *cfg, char *out, size_t len);
    /* Optional (microVM drivers): caps the VMM process of a claimed Sandbox at mem_mib MiB and
     * cpus CPUs through its cgroup (the App's limits; 0: that cap is not asked). Blocking: called
     * from a helper thread before attach_workspace. */
    int (*apply_host_caps)(const struct sbx_config *cfg, struct sandbox_runtime *rt,
                           int64_t mem_mib, int64_t cpus, char *err, size_t errlen);
    /* The longest a boot() may take, failure and its cleanup included: past it the worker fails
     * the Sandbox without waiting for boot() (sandbox/boot.c). 0: SANDBOX_BOOT_DEADLINE_MS. */
    int boot_deadline_ms;
    /* Optional: whether this host has what the driver needs (its binaries, the guest image), by
     * cheap file checks and without touching the host; NULL: it always can. Called at worker start
     * and on each heartbeat, before or without init, to record what this worker can run. */
    int (*probe)(const struct sbx_config *cfg, char *err, size_t errlen);
};

/* The drivers; driver_find() returns NULL for an unknown name. */
extern const struct driver driver_process;
extern const struct driver driver_qemu; /* worker/drivers/qemu.c */
extern const struct driver driver_firecracker;
const struct driver *driver_find(const char *name);

#endif

/*
 * lifecycle.h: one Sandbox's life in this worker, and the calls the rest of the worker makes on
 * it. States in memory mirror the store's: booting, warm, activating (claimed, agent starting),
 * idle and busy (both "running" in the store), stopping.
 */
#ifndef SBX_LIFECYCLE_H
#define SBX_LIFECYCLE_H

#include "worker.h"

enum sandbox_phase { SB_BOOTING, SB_WARM, SB_ACTIVATING, SB_IDLE, SB_BUSY, SB_STOPPING };

struct agent_channel;

struct sandbox {
    struct sandbox *next;
    struct worker *w;
    const struct driver *drv;
    struct sandbox_runtime rt;
    enum sandbox_phase phase;
    bool cold;
    bool reaping;     /* left behind by a dead worker: reap, never start */
    bool job_running; /* a boot or attach job is using rt */
    /* Claimed from the pool: its refill waits for the first reply (or the end), so the refill's
     * boot does not compete for the CPUs with the App starting and answering. */
    bool refill_pending;
    bool stop_wanted; /* terminate as soon as that job is done */
    bool stop_failed;
    char stop_reason[128];
    char app_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    int64_t keep_alive_ms;
    int64_t boot_started; /* mono ms */
    struct agent_channel *chan;
    struct event *keepalive_ev;      /* keep-alive deadline while idle */
    struct event *timeout_ev;        /* agent start or message deadline */
    struct store_delivery *delivery; /* the message being activated for or delivered */
    struct store_sandbox record;     /* for reaping: what the store knew */
    /* written by job threads, read in the done callbacks */
    int job_rc;
    char job_err[512];
    char workspace_dir[600];
    struct store_usage usage;
    /* The agent's log lines (its stderr) are budgeted per Sandbox, so an App cannot flood the
     * host's logs: LOG_BUDGET_BYTES per LOG_BUDGET_MS window, then a count of what was dropped. */
    int64_t log_window_start; /* mono ms */
    int64_t log_window_bytes;
    int64_t log_dropped_lines;
    /* The App's egress policy applied to it (sandbox/egress.c): digest of its text, and mode. */
    char egress_applied[65];
    int egress_mode;
};

/* A Sandbox of this worker serving the Session (activating, idle or busy), or NULL. */
struct sandbox *lifecycle_find_session(struct worker *w, const char *session_id);
struct sandbox *lifecycle_find(struct worker *w, const char *sandbox_id);
/* A Sandbox booting cold for the Session, or NULL. */
struct sandbox *lifecycle_find_cold_boot(struct worker *w, const char *session_id);
/* Boots a fresh Sandbox: for the pool (d NULL) or cold for the claimed delivery d (owned). */
void lifecycle_boot(struct worker *w, const struct driver *drv, const struct store_shape *shape,
                    struct store_delivery *d);
/* Gives the claimed delivery d (owned) a Sandbox: a warm one, else a cold boot. */
void lifecycle_activate(struct worker *w, struct store_delivery *d);
/* Sends d (owned) to an idle Sandbox of its Session. */
void lifecycle_deliver(struct sandbox *sb, struct store_delivery *d);
/* Stops the Sandbox (once); its delivery, if any, fails (or is released while shutting down). */
void lifecycle_terminate(struct sandbox *sb, const char *reason, bool failed);
/* Reaps a Sandbox a dead worker left behind (the store row, already adopted by this worker). */
void lifecycle_reap(struct worker *w, const struct store_sandbox *rec);
/* Terminates the Sandboxes whose stop was requested (DELETE) or whose Session was deleted. */
void lifecycle_check_stop_requests(struct worker *w);
/* Renews the leases of the messages this worker is delivering. */
void lifecycle_renew_leases(struct worker *w);
/* SIGTERM: terminate what is not delivering; with grace_expired, everything. */
void lifecycle_shutdown(struct worker *w);
/* Warm or booting-for-the-pool Sandboxes of a shape. */
size_t lifecycle_count_pool(struct worker *w, const struct store_shape *shape, size_t *booting);

#endif

/*
 * sandbox.h: one Sandbox in this worker: its record, its states and the calls that move it from
 * one to the next. The record is the Sandbox's; the message it carries (sb->delivery) belongs to
 * delivery/, which the Sandbox tells what happened through the hooks below.
 *
 * States (enum sandbox_state) and the store's state each one is recorded as:
 *
 *   SB_BOOTING     booting    the driver's boot job runs: for the pool, or cold for sb->delivery;
 *                             for a pre-started Sandbox also while its App's command starts and,
 *                             with readiness "line", until the command says it is ready
 *                             (prestart_phase; the ready deadline runs)
 *   SB_WARM        warm       booted, agent ready, in the pool, unclaimed
 *   SB_ACTIVATING  claimed    claimed for a Session: Workspace attach, then the App's command
 *                             starting (the start deadline runs)
 *   SB_IDLE        running    the App runs, no message in flight; the keep-alive timer runs
 *   SB_BUSY        running    one message in flight (sb->delivery); the message deadline runs;
 *                  (claimed)  just after ACTIVATING, until `running` is written (running_pending)
 *   SB_STOPPING    stopping   the terminate (or reap) job runs; then the record is freed
 *
 * Transitions, and the function that makes each (through sandbox_set_state, sandbox.c, which
 * checks each change against this table):
 *
 *   (new)       -> BOOTING      sandbox_boot           boot.c            pool refill, cold boot
 *   (new)       -> STOPPING     sandbox_reap           expiry.c          a dead worker's Sandbox
 *   BOOTING     -> WARM         boot_done              boot.c            a pool boot finished;
 *                                                                        then hooks->warm
 *   BOOTING     -> WARM         prestart_warm          agent_protocol.c  a pre-started agent
 *                                                                        started (and was ready)
 *   BOOTING     -> ACTIVATING   boot_done              boot.c            a cold boot finished;
 *                                                                        then hooks->activating
 *   WARM        -> ACTIVATING   sandbox_claimed        boot.c            the store gave it a
 *                                                                        Session
 *   ACTIVATING  -> BUSY         sandbox_send_message   agent_protocol.c  "started" (hooks->started
 *                                                                        sends the first message)
 *   IDLE        -> BUSY         sandbox_send_message   agent_protocol.c  the Session's next one
 *   BUSY        -> IDLE         sandbox_idle           expiry.c          the reply is recorded
 *   BOOTING     -> STOPPING     boot_overran           boot.c            the boot deadline passed:
 *                                                                        failed, unlinked, freed
 *                                                                        once its job returns
 *   any other   -> STOPPING     sandbox_terminate      expiry.c          keep-alive over, deadline
 *                                                                        missed, agent gone or
 *                                                                        failed, stop requested,
 *                                                                        shutdown, boot failed
 *   STOPPING    -> (freed)      terminate_done         expiry.c          then hooks->gone
 *
 * Invariants:
 *   - sb->delivery is set only in BOOTING (cold), ACTIVATING and BUSY; sandbox_terminate hands it
 *     to hooks->lost before the Sandbox is STOPPING, so a STOPPING Sandbox carries none.
 *   - w->n_serving counts the Sandboxes claimed for a Session: ACTIVATING, IDLE, BUSY, and BOOTING
 *     with cold set.
 *   - While job_running, a job thread uses sb->rt: a terminate asked meanwhile is only recorded
 *     (stop_wanted) and done by the job's done callback.
 *   - keepalive_ev is armed only in IDLE; timeout_ev only in ACTIVATING (after the start line) and
 *     BUSY.
 *   - Every state change is written to the store before the next step (BUSY and IDLE are both
 *     "running" there), but one: ACTIVATING -> BUSY. The first message goes out at once and
 *     `running` (sandbox running, Session active) is written with the first of: its reply (in
 *     the reply's own transaction, queue_complete_first), an error reply, a chunk, the Sandbox's
 *     end, or RUNNING_RECORD_MS later (running_ev). Until then running_pending is set and the
 *     store still says "claimed"; every event comes in the order the steps happened.
 */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include "sandbox_context.h"
#include "secret_set.h"
#include "worker.h"

#include <jansson.h>
#include <stdatomic.h>

enum sandbox_state { SB_BOOTING, SB_WARM, SB_ACTIVATING, SB_IDLE, SB_BUSY, SB_STOPPING };

/* A pre-started Sandbox on its way to WARM, after its boot job (docs/worker.md). */
enum prestart_phase {
    PRESTART_NONE,      /* not pre-started, or past these steps */
    PRESTART_STARTING,  /* the start line went out; waiting for "started" */
    PRESTART_READY_WAIT /* started; readiness "line": waiting for the command's ready line */
};

struct agent_channel;
struct chunk_stream;

struct sandbox {
    struct sandbox *next;
    struct worker *w;
    const struct driver *drv;
    struct sandbox_runtime rt;
    enum sandbox_state state;
    bool cold;
    bool reaping;         /* left behind by a dead worker: reap, never start */
    bool job_running;     /* a boot or attach job is using rt */
    bool background_boot; /* booted by a background job thread (sandbox/priority.h) */
    /* Claimed from the pool: its refill waits for the first reply (or the end), so the refill's
     * boot does not compete for the CPUs with the App starting and answering. */
    bool refill_pending;
    bool stop_wanted; /* terminate as soon as that job is done */
    /* Its boot overran the boot deadline (boot.c): failed in the store and unlinked from
     * w->sandboxes; the record waits for the boot job, still using it, to return. */
    bool abandoned;
    struct event *boot_ev; /* the boot deadline, while BOOTING */
    /* Shared with the boot job's thread: when it started the boot (mono ms, 0: still queued),
     * and the deadline's word that a boot still queued must not start (boot.c). */
    _Atomic int64_t boot_job_started;
    atomic_bool boot_cancelled;
    /* BUSY with its first message, and `running` not written yet (running_ev is armed). */
    bool running_pending;
    /* BUSY, and its message's line waits until the gateway's commit of it is on disk
     * (durable.c). */
    bool line_held;
    bool stop_failed;
    char stop_reason[128];
    /* Pre-started for app_id (set from its boot) at the App's definition_rev prestart_rev; 0: an
     * ordinary pool or cold Sandbox. It serves at most one Session, like any other. */
    int64_t prestart_rev;
    enum prestart_phase prestart_phase;
    bool readiness_line;
    /* The last line of its agent's log, kept for the reason of an end while warm. */
    char last_log[160];
    char app_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    /* Its bearer token for the callback API (sandbox_context.h), made at boot; the store has its
     * hash. The App's command gets it as SBX_TOKEN. */
    char callback_token[CALLBACK_TOKEN_LEN + 1];
    int64_t oom_kills_seen; /* the driver's count of OOM kills inside it, at the last reply */
    int64_t keep_alive_ms;
    int64_t idle_since;   /* mono ms: when it last became IDLE (eviction ends the longest idle) */
    int64_t boot_started; /* mono ms */
    struct agent_channel *chan;
    struct event *keepalive_ev;      /* keep-alive deadline while idle */
    struct event *timeout_ev;        /* agent start or message deadline */
    struct event *running_ev;        /* writes `running` if no reply came first */
    struct store_delivery *delivery; /* the message carried; owned by delivery/ */
    struct store_sandbox record;     /* for reaping: what the store knew */
    /* written by job threads, read in the done callbacks */
    int job_rc;
    char job_err[512];
    bool caps_failed; /* the attach job failed at the App's VMM limits, not at the Workspace */
    char workspace_dir[600];
    int64_t workspace_size_mib; /* its filesystem's size (0: a plain directory) */
    struct store_usage usage;
    /* The agent's log lines (its stderr) are budgeted per Sandbox, so an App cannot flood the
     * host's logs: LOG_BUDGET_BYTES per LOG_BUDGET_MS window, then a count of what was dropped. */
    int64_t log_window_start; /* mono ms */
    int64_t log_window_bytes;
    int64_t log_dropped_lines;
    /* The partial output of the message carried, gathered for the store; owned by delivery/
     * (chunks.h), which frees it when the delivery ends. */
    struct chunk_stream *chunks;
    /* The App's egress policy applied to it (sandbox/egress.c): digest of its text, and mode. */
    char egress_applied[65];
    int egress_mode;
    /* The App's secrets while it serves (sandbox/secrets.h): values and this Sandbox's
     * placeholders, filled at activation (or at a pre-started agent's start), wiped when it
     * stops. The egress proxy has its own copy in its registry (sandbox/secret_broker.h), found
     * by the Sandbox's address under a lock. */
    struct secret_set secrets;
};

/* What a Sandbox tells the layers above it (news goes up only through these; loop.c sets them in
 * worker_init). Each may free the Sandbox unless it says otherwise. */
struct sandbox_hooks {
    /* To the delivery it carries (delivery/). */
    void (*activating)(struct sandbox *sb); /* cold boot done, assigned: attach, start the App */
    void (*started)(struct sandbox *sb);    /* the App's command started: deliver sb->delivery */
    void (*replied)(struct sandbox *sb, json_t *line); /* the agent answered sb->delivery */
    /* the agent printed {"id","chunk"} for sb->delivery: value is the chunk; sb stays */
    void (*chunk)(struct sandbox *sb, json_t *value);
    /* sb ends while carrying sb->delivery: the hook fails or releases it and clears the pointer;
     * sb is not freed by it. */
    void (*lost)(struct sandbox *sb, const char *reason);
    /* To the loop. */
    void (*warm)(struct worker *w); /* a pool Sandbox became warm */
    /* a Sandbox's change committed events: the gateways' event feeds are told (sb may be gone) */
    void (*events)(struct worker *w);
    void (*gone)(struct worker *w); /* a Sandbox ended and was freed */
};

/* A boot's deadline when its driver names none (driver.h's boot_deadline_ms). */
#define SANDBOX_BOOT_DEADLINE_MS 120000

/* ---- sandbox.c: the records ---- */

/* A new record (state BOOTING, linked into w->sandboxes), or NULL when out of memory. */
struct sandbox *sandbox_new(struct worker *w, const struct driver *drv,
                            const struct store_shape *shape);
/* Unlinks and frees the record; it carries no delivery any more. */
void sandbox_free(struct sandbox *sb);
/* Takes the record out of w->sandboxes without freeing it (an abandoned boot's, boot.c). */
void sandbox_unlink(struct sandbox *sb);
/* Frees every record (worker_fini: the loop is gone; deliveries were dropped first). */
void sandbox_free_all(struct worker *w);
/* Claimed for a Session: ACTIVATING, IDLE, BUSY, or BOOTING cold with its delivery. */
bool sandbox_serving(const struct sandbox *sb);
/* Moves sb to state to: the one place sb->state changes. A change the transition table above does
 * not have is logged, and aborts a debug build (NDEBUG unset). */
void sandbox_set_state(struct sandbox *sb, enum sandbox_state to);
/* Whether the table above has from -> to. */
bool sandbox_transition_ok(enum sandbox_state from, enum sandbox_state to);
/* "BOOTING", "WARM", ...: for logs. */
const char *sandbox_state_name(enum sandbox_state s);

/* A Sandbox of this worker serving the Session (activating, idle or busy), or NULL. */
struct sandbox *sandbox_find_session(struct worker *w, const char *session_id);
struct sandbox *sandbox_find(struct worker *w, const char *sandbox_id);
/* A Sandbox booting cold for the Session, or NULL. */
struct sandbox *sandbox_find_cold_boot(struct worker *w, const char *session_id);
/* Whether a claimed Sandbox is between its claim and its first answer (ACTIVATING, or BUSY with
 * `running` pending): a cold boot for a delivery does not count. */
bool sandbox_activations_under_way(struct worker *w);
/* Warm or booting-for-the-pool Sandboxes of a shape (pre-started ones not counted). */
size_t sandbox_count_pool(struct worker *w, const struct store_shape *shape, size_t *booting);
/* A pre-started Sandbox of the App ended before it was claimed (its agent exited, or was not
 * ready in time): its next one waits 1 s, doubling per failure in a row up to 60 s, so an agent
 * that cannot start does not make the pool boot without pause. */
void sandbox_prestart_failed(struct worker *w, const char *app_id);
/* One became warm: the App's pre-started agents start again without waiting. */
void sandbox_prestart_succeeded(struct worker *w, const char *app_id);
/* Whether the pool may boot a pre-started Sandbox for the App now. */
bool sandbox_prestart_due(struct worker *w, const char *app_id);
/* Warm or starting Sandboxes pre-started for the App at revision rev; booting: those whose boot
 * job still runs. */
size_t sandbox_count_prestarted(struct worker *w, const char *app_id, int64_t rev, size_t *booting);
/* The driver of that name, initialised on first use; NULL (logged once) when unavailable. */
const struct driver *sandbox_driver(struct worker *w, const char *name);
/* Records in the store (workers.drivers) which drivers this worker can run here, when that
 * changed since it last did: the initialised ones, and the others by their probe. */
void sandbox_record_drivers(struct worker *w);

/* ---- boot.c: the way up ---- */

/* Boots a fresh Sandbox: for the pool (d NULL) or cold for the claimed delivery d, which it then
 * carries. -1 with a reason in err when nothing was started (d is then not carried). */
int sandbox_boot(struct worker *w, const struct driver *drv, const struct store_shape *shape,
                 struct store_delivery *d, char *err, size_t errlen);
/* Boots a Sandbox pre-started for app (prestart): once booted, the App's command starts in it
 * without a Session and it is WARM when started (readiness "none") or ready ("line"). */
int sandbox_boot_prestarted(struct worker *w, const struct driver *drv, const struct store_app *app,
                            char *err, size_t errlen);
/* The store claimed this warm Sandbox for d's Session: WARM -> ACTIVATING, carrying d. */
void sandbox_claimed(struct sandbox *sb, struct store_delivery *d);

/* ---- expiry.c: deadlines, keep-alive, `running`, stop requests, terminate, reap ----
 * (boot.c and agent_protocol.c call into expiry.c, which calls into neither: no circle) */

/* How long after the first message went out `running` is written on its own, when no reply
 * came first to write it with (sandbox.h, the invariants). */
#define RUNNING_RECORD_MS 50
/* The App started and its first message went out (BUSY): `running` is now pending. */
void sandbox_running_pending(struct sandbox *sb);
/* Writes a pending `running` now (the store's "claimed" ends); STORE_OK when none was pending.
 * The caller terminates the Sandbox on a refusal (STORE_CONFLICT: its Session was deleted). */
enum store_status sandbox_record_running(struct sandbox *sb);
/* queue_complete_first wrote the pending `running` with the reply; the caller then sends the
 * "msg" hint, which also stands for the events this wrote. */
void sandbox_running_recorded(struct sandbox *sb);
/* Arms the agent-start or message deadline (message_timeout); missing it terminates. */
void sandbox_arm_deadline(struct sandbox *sb);
/* Arms a pre-started Sandbox's ready deadline (prestart_ready_timeout): missing it ends the
 * Sandbox as "not ready: ...". */
void sandbox_arm_ready_deadline(struct sandbox *sb);
/* A delivery ended on a Sandbox that is still fine: BUSY -> IDLE, keep-alive armed (or, while
 * the worker stops, terminated). May free sb. */
void sandbox_idle(struct sandbox *sb);
/* Stops the Sandbox (once); its delivery, if any, goes to hooks->lost first. */
void sandbox_terminate(struct sandbox *sb, const char *reason, bool failed);
/* Reaps a Sandbox a dead worker left behind (the store row, already adopted by this worker). */
void sandbox_reap(struct worker *w, const struct store_sandbox *rec);
/* Terminates the Sandboxes whose stop was requested (DELETE) or whose Session was deleted. */
void sandbox_check_stop_requests(struct worker *w);
/* SIGTERM: terminate what is not delivering; with grace_expired, everything. */
void sandbox_shutdown(struct worker *w);

/* ---- agent_protocol.c: what the worker and the agent say to each other (driver.h) ---- */

/* Watches the agent channel the boot left in sb->rt.channel_fd; -1 when it cannot. */
int agent_protocol_watch(struct sandbox *sb);
/* Sends the start line for the App: its command (or its image's entrypoint and cmd), env, cwd
 * and user (images/image_run.h) and the Workspace (sb->workspace_dir, sb->rt.workspace_nfs). 0, or
 * -1 with the reason in err when there is nothing to run or it could not be sent. */
int agent_protocol_send_start(struct sandbox *sb, const struct store_app *app, char *err,
                              size_t errlen);
/* A pre-started Sandbox's boot is done: its App (the worker's copy, app) gets its egress policy
 * and its command starts, without a Session (prestart_phase STARTING, the ready deadline armed).
 * Terminates it when that cannot be done. */
void prestart_begin(struct sandbox *sb, const struct store_app *app);
/* A claimed pre-started Sandbox (ACTIVATING, its Workspace attached): the context line tells the
 * agent its Session (and mounts the Workspace over NFS where the driver serves it so); the agent
 * answers "started" as to a start line. 0, or -1 with the reason in err. */
int agent_protocol_send_context(struct sandbox *sb, char *err, size_t errlen);
/* Sends d to the agent (ACTIVATING or IDLE -> BUSY, carrying d) and starts the message deadline;
 * a closed channel terminates the Sandbox (hooks->lost then gets d). */
void sandbox_send_message(struct sandbox *sb, struct store_delivery *d);
/* Writes the line of sb->delivery to the agent (sandbox_send_message's second half, or once a
 * held line's batch is on disk: durable.c). */
void sandbox_send_held_line(struct sandbox *sb);

/* ---- durable.c: a message reaches the agent only once its 202 is on disk ---- */

/* The gateway's commit batch every message visible now was in (commit_watermark.h), read right
 * after a claim; 0 when no gateway overlaps its fsync with the claims. */
uint64_t sandbox_commit_gen(struct worker *w);
/* True when sb->delivery's batch is on disk; otherwise holds its line (sb->line_held) until the
 * gateway says "durable" (sandbox_release_held) or, past a bound, the worker syncs the WAL. */
bool sandbox_durable_or_hold(struct sandbox *sb);
/* Sends the held lines whose batch is on disk now ("durable" from the gateway). */
void sandbox_release_held(struct worker *w);

#endif

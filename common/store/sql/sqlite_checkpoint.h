/*
 * sqlite_checkpoint.h: the SQLite store's WAL checkpointer, a thread of its own, so that no
 * COMMIT (and no batch of 202s behind it) waits for a checkpoint.
 *
 * Private to the SQLite engine (sql_sqlite.c), which installs sq_checkpoint_wal_hook on every
 * connection it opens: that replaces SQLite's automatic checkpoint, which would run inside the
 * COMMIT that crossed the threshold.
 *
 * The policy, and the bound it keeps on the WAL:
 *   - once a commit leaves SQLCHECKPOINT_PASSIVE_PAGES pages in the WAL, the thread runs a
 *     PASSIVE checkpoint: it copies what no reader still needs into the database and never waits
 *     for a lock, so writers go on meanwhile. Once a checkpoint has copied every frame (the
 *     writers paused), the next writer starts the WAL over from its beginning.
 *   - under a steady stream of commits a PASSIVE checkpoint never catches up with the last frame
 *     (the next commit is always in), and a reader that keeps an old snapshot pins the frames
 *     after it; more PASSIVE rounds would copy the same hot pages again and sync the database each
 *     time. So the next round comes when the WAL holds SQLCHECKPOINT_RESTART_PAGES pages: a RESTART
 *     checkpoint, which waits (up to the busy timeout) for the writer in progress and the
 *     readers of old snapshots, copies the rest, and the next writer starts the WAL over; writers
 *     wait for it meanwhile (the copy of the pages written since the PASSIVE round). The
 *     process's own writers let it through (the write gate, sql_sqlite.c): SQLite's busy handler
 *     alone would almost never find the write lock free between the committer's transactions.
 * So the WAL file stays under SQLCHECKPOINT_RESTART_PAGES pages plus what the commits add while
 * the RESTART checkpoint waits for the writer in progress, unless a read transaction stays open
 * for longer than the busy timeout (then the checkpoint gives up, and the next commit over the
 * bound asks again). The file is not truncated: its frames are written over.
 *
 * Hidden state: the thread is started by the first commit that crosses the PASSIVE threshold (a
 * process that writes little never starts it) and has a connection of its own. Should the thread
 * not start, that commit checkpoints (PASSIVE) itself, as SQLite's automatic checkpoint would.
 */
#ifndef SBX_SQLITE_CHECKPOINT_H
#define SBX_SQLITE_CHECKPOINT_H

#include <pthread.h>
#include <sqlite3.h>

#define SQLCHECKPOINT_PASSIVE_PAGES                                                                \
    1000 /* SQLite's own automatic threshold: 4 MiB of 4 KiB pages */
#define SQLCHECKPOINT_RESTART_PAGES 8000 /* 32 MiB */

/* The busy wait of every connection of the engine (the store's and the checkpointer's): a try
 * every step_us for up to wait_ms, instead of SQLite's back-off (1, 2, 5 ... then one try per
 * 100 ms after 300 ms), which keeps missing the short gaps between the other writers'
 * transactions. Time is counted in tries, each of which sleeps at least step_us, so a wait lasts
 * at least wait_ms. Returns what a busy handler returns: nonzero to try again. */
int sq_busy_wait(int tries, int wait_ms, int step_us);

struct sq_checkpointer;

/* A checkpointer for the database file at path (its thread not started yet), checkpointing with
 * the store's busy timeout and synchronous setting. write_gate is held shared by the process's
 * writer transactions; a RESTART checkpoint takes it exclusively (waiting at most the busy
 * timeout), so that it is not starved by them. NULL when out of memory. */
struct sq_checkpointer *sq_checkpointer_new(const char *path, int busy_timeout_ms,
                                            const char *synchronous, pthread_rwlock_t *write_gate);
/* Stops the thread (after the checkpoint it is running, if any) and frees c; NULL is allowed. */
void sq_checkpointer_free(struct sq_checkpointer *c);

/* The WAL hook (sqlite3_wal_hook) to install with the checkpointer as its argument: called by
 * SQLite after each commit with the pages now in the WAL; wakes the thread when there is work. */
int sq_checkpoint_wal_hook(void *checkpointer, sqlite3 *db, const char *db_name, int pages);

/* Counts, for tests and the log: checkpoints run of each kind. */
struct sq_checkpoint_counts {
    long passive, restart, failed;
};
void sq_checkpointer_counts(struct sq_checkpointer *c, struct sq_checkpoint_counts *out);

#endif

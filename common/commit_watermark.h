/*
 * commit_watermark.h: how far the gateway's enqueue commits are on disk, shared with the workers
 * of the host through a small file mapped by both (<data_dir>/run/commit-watermark), for the claim
 * that overlaps the enqueue's fsync (SQLite, `claim_overlap`; docs/decisions/0016).
 *
 * The gateway's committer commits a batch without syncing it (visible to the workers at once),
 * wakes the workers, then syncs the WAL and only then answers its 202s. Before the COMMIT it
 * raises `written` to the batch's number, after the sync `durable`. A worker that claimed a
 * message reads `written` after its claim: the message's batch is at most that (its COMMIT was
 * visible, so `written` had been raised). It writes the message to the agent only once `durable`
 * reached it, so no agent sees a message whose 202 is not on disk; and a power loss before the
 * sync loses the worker's claim with the message, because SQLite's WAL recovers a prefix of its
 * frames and the claim's frames come after the message's.
 */
#ifndef SBX_COMMIT_WATERMARK_H
#define SBX_COMMIT_WATERMARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct commit_watermark;

/* Maps <run_dir>/commit-watermark; create: make it when missing (the gateway), otherwise NULL
 * when it is missing (a worker: no gateway ever overlapped, so nothing need wait). Once made, the
 * file is never removed, so a worker's mapping stays the gateway's. NULL with err on failure. */
struct commit_watermark *commit_watermark_open(const char *run_dir, bool create, char *err,
                                               size_t errlen);
void commit_watermark_close(struct commit_watermark *wm);

/* Gateway: the number of the batch about to be committed (written + 1, published). */
uint64_t commit_watermark_begin(struct commit_watermark *wm);
/* Gateway: batches up to g are on disk. Returns whether a worker waits for it (send a wake-up). */
bool commit_watermark_durable(struct commit_watermark *wm, uint64_t g);

/* Worker: the number every message visible now was committed at or before. */
uint64_t commit_watermark_written(const struct commit_watermark *wm);
/* Worker: whether batch g is on disk. */
bool commit_watermark_reached(const struct commit_watermark *wm, uint64_t g);
/* Worker: it waits (+1) or stopped waiting (-1); a waiting worker checks reached() again after
 * its +1, so that the gateway, which reads this after raising durable, never misses it. */
void commit_watermark_waiting(struct commit_watermark *wm, int delta);

/* Syncs the WAL of db_path (<db_path>-wal) to disk: every commit visible before the call is
 * durable after it. 0, or -1 with errno. */
int commit_watermark_sync_wal(const char *db_path);

#endif

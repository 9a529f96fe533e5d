/*
 * jobs.h: a small thread pool for the calls that block (driver boot, attach, terminate, reap), so
 * the event loop never waits on them. A job's work() runs on a pool thread; its done() runs
 * afterwards on the event loop thread, where all of the worker's state lives.
 */
#ifndef SBX_JOBS_H
#define SBX_JOBS_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

struct jobs;

typedef void (*job_fn)(void *arg);

/* Starts nthreads threads; done() callbacks are delivered through base. NULL on failure. With
 * nice > 0 the threads run at that nice level (a background pool: work no reply waits for), and
 * so does every process they start, which inherits it. */
struct jobs *jobs_new(struct event_base *base, size_t nthreads, int nice);
/* Queues a job; work and done both get arg. Returns 0, or -1 when out of memory. */
int jobs_submit(struct jobs *j, job_fn work, job_fn done, void *arg);
/* Stops the threads after the queued jobs ran (their done() callbacks are not called), waiting
 * at most wait_ms for them (-1: however long it takes). A thread still busy then (a job stuck in
 * a system call) is left to the process's exit, and the pool to it: false then. */
bool jobs_free(struct jobs *j, int wait_ms);

#endif

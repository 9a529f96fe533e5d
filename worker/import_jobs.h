/*
 * import_jobs.h: the worker's side of Images: it claims importing Images from the store and runs
 * one import at a time on a job thread (an upload through importer.h, a pull through
 * registry_pull.h), then records the outcome; and it keeps this host's image cache to what the
 * store still needs (cache_sweep.h).
 */
#ifndef SBX_IMPORT_JOBS_H
#define SBX_IMPORT_JOBS_H

struct worker;

/* Claims the next importing Image unless an import already runs here; from the poll and from
 * wake-ups. */
void images_poll(struct worker *w);

#endif

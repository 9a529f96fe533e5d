/*
 * cache_sweep.h: this host's image cache holds what the store still needs. A cache directory no
 * ready Image names and no live or warm Sandbox runs is removed (after a DELETE, once its last
 * Sandbox is gone); above image_cache_limit, the least recently used ready images that no App
 * names and no Sandbox runs are evicted (a pulled one is pulled again by digest when wanted).
 */
#ifndef SBX_CACHE_SWEEP_H
#define SBX_CACHE_SWEEP_H

struct worker;

/* From the worker's poll; does its work at most every few seconds. */
void images_sweep(struct worker *w);

#endif

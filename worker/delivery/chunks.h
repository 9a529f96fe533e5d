/*
 * chunks.h: an agent's partial output for the message in flight ({"id":..,"chunk":..} lines),
 * gathered per Sandbox and committed a batch at a time (store chunk_append): at once after a quiet
 * spell, else at most one commit per chunk_flush_ms (and at once when a batch is large), and
 * always before the reply or the failure is recorded, so that a message's chunks are in the store
 * before it ends. Bounded per message by chunk_max_count and chunk_max_bytes across its attempts;
 * what passes the bound is counted, not stored. After each commit the gateways are told "chunk
 * <messageId>" (their streams read on).
 *
 * Hidden state: one struct chunk_stream per Sandbox (sb->chunks) while its delivery prints chunks:
 * made on the first, freed when the delivery ends (deliver.c); it holds a libevent timer for the
 * next flush.
 */
#ifndef SBX_CHUNKS_H
#define SBX_CHUNKS_H

#include <jansson.h>

struct sandbox;

/* sandbox_hooks: the agent printed a chunk for sb->delivery (value: the "chunk" member). */
void delivery_chunk(struct sandbox *sb, json_t *value);
/* Commits what is gathered now (before the message's reply or failure is stored). */
void chunks_flush(struct sandbox *sb);
/* Frees sb->chunks (what is not flushed is dropped): when the delivery ends. */
void chunks_free(struct sandbox *sb);

#endif

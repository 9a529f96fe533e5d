/*
 * render.h: store records as the JSON objects of openapi.yaml (camelCase, RFC 3339 times, null
 * for what has not happened), for the gateway's REST API and the Sandboxes' callback API alike.
 * Each returns a new reference, NULL only when out of memory.
 */
#ifndef SBX_RENDER_H
#define SBX_RENDER_H

#include "store_records.h"

#include <jansson.h>

json_t *render_time(int64_t ms); /* null for 0 */
json_t *render_app(const struct store_app *a);
/* An Image; never its credentials. */
json_t *render_image(const struct store_image *im);
json_t *render_key(const struct store_key *k);
json_t *render_sandbox(const struct store_sandbox *b);
json_t *render_workspace(const struct store_workspace *w);
json_t *render_event(const struct store_event *e);
json_t *render_pool_shape(const struct store_pool_stat *p, int64_t target);
/* One App's pool of pre-started Sandboxes (GET /v1/pool "apps"). */
json_t *render_pool_app(const struct store_pool_app_stat *p);
/* {"items": items, "nextCursor": cursor or null}; items is stolen. */
json_t *render_page(json_t *items, const char *next_cursor);

/* The same as text, with the stored JSON (bodies, replies, metadata) copied in, never parsed
 * (json_text.h). A page is render_page_begin, the items (with render_page_item before each),
 * render_page_end. */
struct json_text;
void render_message_text(struct json_text *t, const struct store_message *m);
/* The same text for a message that an enqueue just wrote (the 202), built from a template; any
 * other message goes through render_message_text. */
void render_message_queued_text(struct json_text *t, const struct store_message *m);
/* The Message as a stream's final event shows it: with how many chunks its bounds dropped. */
void render_message_end_text(struct json_text *t, const struct store_message *m,
                             int64_t chunks_dropped);
void render_session_text(struct json_text *t, const struct store_session *s);
void render_page_begin(struct json_text *t);
void render_page_item(struct json_text *t, size_t index);
void render_page_end(struct json_text *t, const char *next_cursor);
/* A page of messages: begin, each message, end. */
void render_message_page_text(struct json_text *t, const struct store_message *items, size_t n,
                              const char *next_cursor);

#endif

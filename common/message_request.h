/*
 * message_request.h: what makes two message requests "the same" for Idempotency-Key, whichever
 * API queued them (the gateway's REST POST or a Sandbox's callback to a sibling Session), so a
 * key replays alike on both.
 */
#ifndef SBX_MESSAGE_REQUEST_H
#define SBX_MESSAGE_REQUEST_H

#include <jansson.h>

/* The hex SHA-256 of the Session and the body, with object keys sorted so that member order
 * does not matter: struct store_enqueue's request_hash. */
void message_request_hash(const char *session_id, json_t *body, char out[65]);

#endif

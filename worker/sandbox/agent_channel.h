/*
 * agent_channel.h: the worker's end of a Sandbox's agent channel (see driver.h for the protocol):
 * reads JSON lines without blocking the event loop and writes lines to the agent.
 */
#ifndef SBX_AGENT_CHANNEL_H
#define SBX_AGENT_CHANNEL_H

#include <event2/event.h>
#include <jansson.h>
#include <stddef.h>

struct agent_channel;

/* on_line gets each parsed line (a JSON object; borrowed for the call). on_closed is called once,
 * when the agent side is gone (EOF, error, an unparsable or oversized line), with a reason. Either
 * callback may free the channel. */
struct agent_channel_handlers {
    void (*on_line)(void *arg, json_t *line);
    void (*on_closed)(void *arg, const char *reason);
    void *arg;
};

/* Takes ownership of fd (closed by agent_channel_free). max_line bounds one line in bytes. */
struct agent_channel *agent_channel_new(struct event_base *base, int fd, size_t max_line,
                                        const struct agent_channel_handlers *h);
/* Queues one line (a newline is added). Returns 0, or -1 when the channel is closed. */
int agent_channel_send(struct agent_channel *c, const char *line, size_t len);
void agent_channel_free(struct agent_channel *c);

#endif

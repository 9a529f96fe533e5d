/*
 * test_channel.h: the tests' side of a Sandbox's agent channel (the JSON-lines protocol of
 * DESIGN.md), as the integration tests that drive a driver directly speak it: write one line,
 * read lines until one carries a given member. The channel fd is the driver's non-blocking
 * sandbox_runtime.channel_fd. (The worker's own end, worker/sandbox/agent_channel.h, runs on its
 * event loop; these tests wait on the channel instead.)
 */
#ifndef SBX_TESTS_TEST_CHANNEL_H
#define SBX_TESTS_TEST_CHANNEL_H

#include <jansson.h>
#include <stddef.h>

struct test_channel {
    int fd;
    const char *label; /* prefixes every line read when it is printed */
    char *line;        /* the line being read: cap bytes */
    size_t cap;
};

/* Reads fd from now on with a line buffer of cap bytes, allocated on first use and kept. Returns 0,
 * or -1 when it cannot be allocated. */
int test_channel_open(struct test_channel *ch, int fd, const char *label, size_t cap);

/* Writes line and its newline, waiting while the channel is full. Returns 0, or -1. */
int test_channel_send(struct test_channel *ch, const char *line);

/* The next line that is a JSON object with a member named key (caller decrefs); the lines before
 * it (logs, other replies) are printed, the first 600 bytes of each, and skipped. Lines are read
 * as the drivers read the ready line (driver_read_line), so nothing past the line is taken. NULL
 * on timeout, at the end of the stream, or when a line does not fit the buffer. */
json_t *test_channel_read_until(struct test_channel *ch, const char *key, int timeout_ms);

/* Frees the line buffer. */
void test_channel_free(struct test_channel *ch);

#endif

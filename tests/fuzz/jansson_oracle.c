/*
 * jansson_oracle.c: jansson (the host side's JSON parser) as an oracle for fuzz_agent_relay.c,
 * in its own file because agent/relay.h and jansson.h both define json_object_get().
 */
#include "jansson_oracle.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jansson_oracle_accepts(const char *text, size_t len)
{
    json_error_t err;
    /* The flags of worker/sandbox/agent_channel.c, which reads what sbx-agent relays. */
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &err);
    if (j) {
        json_decref(j);
        return 1;
    }
    /* jansson refuses numbers beyond int64/double range, which are valid JSON. */
    if (strstr(err.text, "too big") || strstr(err.text, "overflow"))
        return -1;
    fprintf(stderr, "jansson: %s\n", err.text);
    return 0;
}

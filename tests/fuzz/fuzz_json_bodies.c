/*
 * fuzz_json_bodies.c: libFuzzer target for the request bodies of every endpoint that takes one.
 * The first input byte picks the endpoint; the rest is the body, run through the same
 * json_input.h calls, with the same field lists and bounds, as the endpoint's handler in
 * gateway/http_*.c (the handlers themselves need a live MHD connection). Every rejection must
 * name a problem code with terminated field and detail texts; every accepted value must respect
 * its bounds.
 */
#include "fuzz_common.h"
#include "json_input.h"
#include "store.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static void check_error(const struct input_error *e)
{
    FUZZ_CHECK(e->code < PROBLEM_CODE_COUNT);
    FUZZ_CHECK(fuzz_terminated(e->field, sizeof e->field));
    FUZZ_CHECK(fuzz_terminated(e->detail, sizeof e->detail));
}

static void check_string(int rc, const char *s, size_t minlen, size_t maxlen, bool is_null)
{
    if (rc == 1 && !is_null) {
        FUZZ_CHECK(s != NULL);
        size_t n = strlen(s);
        FUZZ_CHECK(n >= minlen && n <= maxlen);
    }
}

static void check_int(int rc, int64_t v, int64_t min, int64_t max, bool is_null)
{
    if (rc == 1 && !is_null)
        FUZZ_CHECK(v >= min && v <= max);
}

/* POST/PATCH /v1/apps (http_apps.c: app_input_read). */
static int app_body(json_t *obj, struct input_error *e)
{
    static const char *const fields[] = {"name",        "keepAliveSeconds", "vcpuCount",
                                         "memSizeMib",  "driver",           "image",
                                         "maxAttempts", "command",          NULL};
    const char *s = NULL;
    int64_t v = 0;
    char *command = NULL;
    int rc;
    if (!input_known_fields(obj, fields, e))
        return -1;
    if ((rc = input_string(obj, "name", 1, 128, false, &s, NULL, e)) < 0)
        return -1;
    check_string(rc, s, 1, 128, false);
    if (rc > 0)
        (void)input_is_name(s);
    static const struct {
        const char *field;
        int64_t min, max;
    } ints[] = {{"keepAliveSeconds", 1, 86400},
                {"vcpuCount", 1, 32},
                {"memSizeMib", 32, 65536},
                {"maxAttempts", 1, 100}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        if ((rc = input_int(obj, ints[i].field, ints[i].min, ints[i].max, false, &v, NULL, e)) < 0)
            return -1;
        check_int(rc, v, ints[i].min, ints[i].max, false);
    }
    if ((rc = input_string(obj, "driver", 1, 15, false, &s, NULL, e)) < 0)
        return -1;
    check_string(rc, s, 1, 15, false);
    if ((rc = input_string(obj, "image", 1, 128, false, &s, NULL, e)) < 0)
        return -1;
    check_string(rc, s, 1, 128, false);
    if ((rc = input_string_array(obj, "command", 64, 4096, &command, e)) < 0)
        return -1;
    if (rc > 0) {
        /* The stored command must be a JSON array that parses back. */
        FUZZ_CHECK(command != NULL);
        json_t *back = json_loads(command, 0, NULL);
        FUZZ_CHECK(json_is_array(back) && json_array_size(back) >= 1 &&
                   json_array_size(back) <= 64);
        json_decref(back);
    }
    free(command);
    return 0;
}

/* POST /v1/apps/{appId}/keys and POST /v1/workspaces: an optional name. */
static int name_body(json_t *obj, struct input_error *e)
{
    static const char *const fields[] = {"name", NULL};
    const char *s = NULL;
    if (!input_known_fields(obj, fields, e))
        return -1;
    int rc = input_string(obj, "name", 1, 128, true, &s, NULL, e);
    check_string(rc, s, 1, 128, s == NULL);
    return rc < 0 ? -1 : 0;
}

/* POST /v1/sessions (http_sessions.c: http_session_create). */
static int session_create_body(json_t *obj, struct input_error *e)
{
    static const char *const fields[] = {"name", "keepAliveSeconds", "workspaceId", "metadata",
                                         NULL};
    const char *name = NULL, *ws = NULL;
    int64_t keep = 0;
    bool keep_null = false;
    json_t *metadata = NULL;
    int rc;
    if (!input_known_fields(obj, fields, e))
        return -1;
    if ((rc = input_string(obj, "name", 1, 128, true, &name, NULL, e)) < 0)
        return -1;
    check_string(rc, name, 1, 128, name == NULL);
    if ((rc = input_int(obj, "keepAliveSeconds", 1, 86400, true, &keep, &keep_null, e)) < 0)
        return -1;
    check_int(rc, keep, 1, 86400, keep_null);
    if ((rc = input_string(obj, "workspaceId", 1, STORE_ID_LEN - 1, true, &ws, NULL, e)) < 0)
        return -1;
    check_string(rc, ws, 1, STORE_ID_LEN - 1, ws == NULL);
    if ((rc = input_object(obj, "metadata", &metadata, e)) < 0)
        return -1;
    if (rc > 0) {
        FUZZ_CHECK(json_is_object(metadata));
        char *dump = json_dumps(metadata, JSON_COMPACT);
        FUZZ_CHECK(dump != NULL);
        free(dump);
    }
    return 0;
}

/* PATCH /v1/sessions/{sessionId}. */
static int session_patch_body(json_t *obj, struct input_error *e)
{
    static const char *const fields[] = {"metadata", "keepAliveSeconds", NULL};
    json_t *metadata = NULL;
    int64_t keep = 0;
    bool keep_null = false;
    int rc;
    if (!input_known_fields(obj, fields, e))
        return -1;
    if (input_object(obj, "metadata", &metadata, e) < 0)
        return -1;
    if ((rc = input_int(obj, "keepAliveSeconds", 1, 86400, true, &keep, &keep_null, e)) < 0)
        return -1;
    check_int(rc, keep, 1, 86400, keep_null);
    return 0;
}

/* POST /v1/sessions/{sessionId}/messages: any JSON value under "body", stored re-encoded. */
static int message_body(json_t *obj, struct input_error *e)
{
    static const char *const fields[] = {"body", NULL};
    if (!input_known_fields(obj, fields, e))
        return -1;
    json_t *body = json_object_get(obj, "body");
    if (!body)
        return 0;
    char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    FUZZ_CHECK(text != NULL);
    /* What is stored must load back as an equal value (the agent receives this text). */
    json_t *back = json_loads(text, JSON_DECODE_ANY, NULL);
    FUZZ_CHECK(back != NULL && json_equal(back, body));
    json_decref(back);
    free(text);
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static int (*const endpoints[])(json_t *, struct input_error *) = {
        app_body, name_body, session_create_body, session_patch_body, message_body};
    static const bool optional[] = {false, true, true, false, false};
    if (size < 1)
        return 0;
    size_t which = data[0] % (sizeof endpoints / sizeof *endpoints);
    struct input_error e;
    memset(&e, 0, sizeof e);
    e.code = PROBLEM_CODE_COUNT; /* none: a failure must set one */
    /* The gateway hands the collected body over as bytes without a terminator. */
    char *body = malloc(size - 1 ? size - 1 : 1);
    FUZZ_CHECK(body != NULL);
    memcpy(body, data + 1, size - 1);
    json_t *obj = input_parse_object(body, size - 1, optional[which], &e);
    if (!obj) {
        check_error(&e);
    } else {
        FUZZ_CHECK(json_is_object(obj));
        if (endpoints[which](obj, &e) < 0)
            check_error(&e);
        json_decref(obj);
    }
    free(body);
    return 0;
}

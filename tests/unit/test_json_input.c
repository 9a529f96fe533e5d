/*
 * test_json_input.c: request body, query parameter and header validation: each failure has the
 * right problem code and names the offending field or parameter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gateway.h"
#include "json_input.h"

#include <stdlib.h>
#include <string.h>

static json_t *parse_ok(const char *text)
{
    struct input_error e = {0};
    json_t *v = input_parse_object(text, strlen(text), false, &e);
    assert_non_null(v);
    return v;
}

static void expect_parse_error(const char *text, size_t len, bool optional)
{
    struct input_error e = {0};
    assert_null(input_parse_object(text, len, optional, &e));
    assert_int_equal(e.code, PROBLEM_MALFORMED_JSON);
}

static void test_parse_object(void **state)
{
    (void)state;
    struct input_error e = {0};
    json_t *v = input_parse_object("", 0, true, &e);
    assert_true(json_is_object(v) && json_object_size(v) == 0);
    json_decref(v);
    expect_parse_error("", 0, false);
    expect_parse_error("[]", 2, false);
    expect_parse_error("42", 2, false);
    expect_parse_error("{\"a\":", 5, false);
    expect_parse_error("{\"a\":1,\"a\":2}", 13, false);
    expect_parse_error("{\"a\":\"\xff\"}", 9, false);
    expect_parse_error("{\"a\":1} trailing", 16, false);
    /* NUL inside a string would cut C strings short: refused at parse. */
    expect_parse_error("{\"a\":\"x\\u0000y\"}", 16, false);
    expect_parse_error("{\"a\":1}\0{}", 10, false);
    /* Deep nesting is refused, not a stack overflow. */
    size_t depth = 100000;
    char *deep = malloc(depth * 2 + 16);
    size_t n = (size_t)sprintf(deep, "{\"a\":");
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    strcpy(deep + n + 2 * depth, "}");
    expect_parse_error(deep, strlen(deep), false);
    free(deep);
}

static void test_known_fields(void **state)
{
    (void)state;
    static const char *const allowed[] = {"name", "metadata", NULL};
    struct input_error e = {0};
    json_t *v = parse_ok("{\"name\":\"x\",\"metadata\":{}}");
    assert_true(input_known_fields(v, allowed, &e));
    json_decref(v);
    v = parse_ok("{\"name\":\"x\",\"colour\":1}");
    assert_false(input_known_fields(v, allowed, &e));
    assert_int_equal(e.code, PROBLEM_UNKNOWN_FIELD);
    assert_string_equal(e.field, "colour");
    assert_non_null(strstr(e.detail, "colour"));
    json_decref(v);
}

static void test_typed_fields(void **state)
{
    (void)state;
    struct input_error e = {0};
    const char *s = NULL;
    int64_t i = 0;
    bool is_null = false;
    json_t *obj, *v = parse_ok("{\"s\":\"abc\",\"n\":5,\"z\":null,\"f\":1.5,\"big\":99,"
                               "\"o\":{},\"a\":[\"x\",\"y\"],\"e\":[],\"m\":[\"x\",2]}");
    assert_int_equal(input_string(v, "s", 1, 10, false, &s, NULL, &e), 1);
    assert_string_equal(s, "abc");
    assert_int_equal(input_string(v, "missing", 1, 10, false, &s, NULL, &e), 0);
    assert_int_equal(input_string(v, "n", 1, 10, false, &s, NULL, &e), -1);
    assert_int_equal(e.code, PROBLEM_INVALID_FIELD);
    assert_string_equal(e.field, "n");
    assert_int_equal(input_string(v, "s", 4, 10, false, &s, NULL, &e), -1);
    assert_string_equal(e.field, "s");
    assert_int_equal(input_string(v, "z", 1, 10, false, &s, NULL, &e), -1);
    assert_int_equal(input_string(v, "z", 1, 10, true, &s, &is_null, &e), 1);
    assert_true(is_null);

    assert_int_equal(input_int(v, "n", 1, 10, false, &i, NULL, &e), 1);
    assert_int_equal(i, 5);
    assert_int_equal(input_int(v, "big", 1, 10, false, &i, NULL, &e), -1);
    assert_int_equal(e.code, PROBLEM_INVALID_VALUE);
    assert_string_equal(e.field, "big");
    assert_int_equal(input_int(v, "f", 1, 10, false, &i, NULL, &e), -1);
    assert_int_equal(e.code, PROBLEM_INVALID_FIELD);
    assert_int_equal(input_int(v, "s", 1, 10, false, &i, NULL, &e), -1);
    assert_int_equal(e.code, PROBLEM_INVALID_FIELD);
    is_null = false;
    assert_int_equal(input_int(v, "z", 1, 10, true, &i, &is_null, &e), 1);
    assert_true(is_null);

    assert_int_equal(input_object(v, "o", &obj, &e), 1);
    assert_int_equal(input_object(v, "a", &obj, &e), -1);
    assert_string_equal(e.field, "a");

    char *json = NULL;
    assert_int_equal(input_string_array(v, "a", 64, 100, &json, &e), 1);
    assert_string_equal(json, "[\"x\",\"y\"]");
    free(json);
    assert_int_equal(input_string_array(v, "e", 64, 100, &json, &e), -1);
    assert_int_equal(e.code, PROBLEM_INVALID_VALUE);
    assert_int_equal(input_string_array(v, "m", 64, 100, &json, &e), -1);
    assert_int_equal(e.code, PROBLEM_INVALID_FIELD);
    assert_int_equal(input_string_array(v, "s", 64, 100, &json, &e), -1);
    assert_int_equal(input_string_array(v, "a", 1, 100, &json, &e), -1);
    json_decref(v);
}

static void test_names(void **state)
{
    (void)state;
    char long_name[200];
    assert_true(input_is_name("echo"));
    assert_true(input_is_name("A-b_c.9"));
    assert_false(input_is_name(""));
    assert_false(input_is_name("has space"));
    assert_false(input_is_name("slash/"));
    assert_false(input_is_name("\xc3\xa9"));
    memset(long_name, 'a', 128);
    long_name[128] = '\0';
    assert_true(input_is_name(long_name));
    long_name[128] = 'a';
    long_name[129] = '\0';
    assert_false(input_is_name(long_name));
    assert_true(input_request_id_ok("req_abc.1-2"));
    assert_false(input_request_id_ok(""));
    assert_false(input_request_id_ok(NULL));
    assert_false(input_request_id_ok("a b"));
}

static void test_query_parameters(void **state)
{
    (void)state;
    struct input_error e = {0};
    size_t limit = 0;
    int64_t wait = -1;
    assert_true(input_limit(NULL, &limit, &e));
    assert_int_equal(limit, 50);
    assert_true(input_limit("200", &limit, &e));
    assert_int_equal(limit, 200);
    const char *bad_limits[] = {"0", "201", "abc", "", "-1", "1.5", "99999999999999"};
    for (size_t i = 0; i < sizeof bad_limits / sizeof bad_limits[0]; i++) {
        assert_false(input_limit(bad_limits[i], &limit, &e));
        assert_int_equal(e.code, PROBLEM_INVALID_PARAMETER);
        assert_string_equal(e.field, "limit");
    }
    assert_true(input_cursor(NULL, &e));
    assert_true(input_cursor("12345", &e));
    assert_false(input_cursor("x", &e));
    assert_string_equal(e.field, "cursor");
    assert_false(input_cursor("1234567890123456789", &e));
    assert_true(input_wait(NULL, &wait, &e));
    assert_int_equal(wait, 0);
    assert_true(input_wait("30", &wait, &e));
    assert_int_equal(wait, 30);
    assert_false(input_wait("-1", &wait, &e));
    assert_string_equal(e.field, "wait");
    assert_false(input_wait("1s", &wait, &e));
}

static void test_idempotency_key(void **state)
{
    (void)state;
    struct input_error e = {0};
    char key[300];
    assert_true(input_idempotency_key("order-17", &e));
    assert_true(input_idempotency_key("!~", &e));
    assert_false(input_idempotency_key("", &e));
    assert_string_equal(e.field, "Idempotency-Key");
    assert_false(input_idempotency_key("a b", &e));
    assert_false(input_idempotency_key("a\x7f", &e));
    assert_false(input_idempotency_key("\xc3\xa9", &e));
    memset(key, 'k', 255);
    key[255] = '\0';
    assert_true(input_idempotency_key(key, &e));
    key[255] = 'k';
    key[256] = '\0';
    assert_false(input_idempotency_key(key, &e));
    assert_int_equal(e.code, PROBLEM_INVALID_PARAMETER);
}

static void test_route_matching(void **state)
{
    (void)state;
    char params[ROUTE_MAX_PARAMS][ROUTE_PARAM_LEN], allow[128];
    int path_route, i;

    i = gateway_route_match("GET", "/v1/sessions/ses_1/messages/msg_2", params, allow, sizeof allow,
                            &path_route);
    assert_true(i >= 0);
    assert_string_equal(gateway_routes[i].path, "/v1/sessions/{sessionId}/messages/{messageId}");
    assert_string_equal(params[0], "ses_1");
    assert_string_equal(params[1], "msg_2");

    i = gateway_route_match("DELETE", "/v1/apps/app_1/keys/key_9", params, allow, sizeof allow,
                            &path_route);
    assert_true(i >= 0);
    assert_string_equal(params[0], "app_1");
    assert_string_equal(params[1], "key_9");

    /* A {...Name} parameter may be longer than an id (a secret's name, up to 128 characters);
     * an id parameter of that length names nothing. */
    char long_path[256];
    snprintf(long_path, sizeof long_path, "/v1/apps/app_1/secrets/%0100d", 7);
    i = gateway_route_match("PUT", long_path, params, allow, sizeof allow, &path_route);
    assert_true(i >= 0);
    assert_int_equal(strlen(params[1]), 100);
    snprintf(long_path, sizeof long_path, "/v1/apps/app_1/secrets/%0129d", 7);
    assert_int_equal(
        gateway_route_match("PUT", long_path, params, allow, sizeof allow, &path_route), -1);
    snprintf(long_path, sizeof long_path, "/v1/apps/%0100d/secrets", 7);
    assert_int_equal(
        gateway_route_match("GET", long_path, params, allow, sizeof allow, &path_route), -1);

    /* 405: the path exists with other methods. */
    assert_int_equal(
        gateway_route_match("PUT", "/v1/sessions", params, allow, sizeof allow, &path_route), -1);
    assert_string_equal(allow, "POST, GET");
    assert_string_equal(gateway_routes[path_route].path, "/v1/sessions");
    /* 404: no such path, empty or over-long segments, trailing slash, extra segments. */
    const char *missing[] = {"/v1/session",
                             "/v1/sessions/",
                             "/v1/sessions//messages",
                             "/v1/sessions/ses_1/messages/msg_2/x",
                             "/",
                             "",
                             "/v1/sessions/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t k = 0; k < sizeof missing / sizeof missing[0]; k++) {
        assert_int_equal(
            gateway_route_match("GET", missing[k], params, allow, sizeof allow, &path_route), -1);
        assert_string_equal(allow, "");
        assert_int_equal(path_route, -1);
    }
    /* A tiny Allow buffer truncates instead of overflowing. */
    char small[6];
    assert_int_equal(
        gateway_route_match("PUT", "/v1/apps/app_1", params, small, sizeof small, &path_route), -1);
    assert_true(strlen(small) < sizeof small);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_object),     cmocka_unit_test(test_known_fields),
        cmocka_unit_test(test_typed_fields),     cmocka_unit_test(test_names),
        cmocka_unit_test(test_query_parameters), cmocka_unit_test(test_idempotency_key),
        cmocka_unit_test(test_route_matching),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

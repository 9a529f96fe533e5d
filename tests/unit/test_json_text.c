/*
 * test_json_text.c: the JSON text builder and its well-formedness check, which decides whether a
 * stored value is copied into an answer verbatim: it must agree with a real parser.
 */
#include "json_text.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>

static const char *const good[] = {
    "{}",
    "[]",
    "0",
    "-0",
    "1.5e-3",
    "\"\"",
    "true",
    "false",
    "null",
    " {\"a\" : [1, {\"b\":null}]} ",
    "\"\\u00e9\\n\\\\\"",
    "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
    "[[[[]]]]",
    "{\"a\":{\"b\":{}}}",
};
static const char *const bad[] = {
    "",
    " ",
    "{",
    "[",
    "}",
    "[1,]",
    "{\"a\":}",
    "{\"a\" 1}",
    "{1:2}",
    "01",
    "1.",
    ".5",
    "-",
    "1e",
    "tru",
    "nul",
    "\"abc",
    "\"\\x\"",
    "\"\\u12g4\"",
    "\"\x01\"",
    "\"\xc3\"",
    "\"\xff\"",
    "[1] [2]",
    "{\"a\":1,}",
    "[1 2]",
    "{\"a\":1 \"b\":2}",
    "\"\xed\xa0\x80\"",
    "\"\xe0\x80\xaf\"",
    "\"\xf4\x90\x80\x80\"",
};

static void test_well_formed_agrees_with_jansson(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        json_t *v = json_loads(good[i], JSON_DECODE_ANY, NULL);
        assert_non_null(v);
        json_decref(v);
        if (!json_text_well_formed(good[i], strlen(good[i]), 64))
            fail_msg("refused well-formed %s", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (json_text_well_formed(bad[i], strlen(bad[i]), 64))
            fail_msg("accepted malformed %s", bad[i]);
    /* Depth is bounded. */
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_true(json_text_well_formed(deep, 200, 100));
    assert_false(json_text_well_formed(deep, 200, 99));
}

static void test_objects_with_stored_values(void **state)
{
    struct json_text t = {0};
    size_t len;
    (void)state;
    const struct json_stored stored[] = {
        {"body", "[0,0,0]", "null", false},
        {"reply", "{\"broken\":", "null", false},
        {"meta", "[1]", "{}", true},
        {"none", NULL, "null", false},
    };
    json_text_object_with(&t, json_pack("{s:s}", "id", "msg_1"), stored, 4);
    char *text = json_text_take(&t, &len);
    assert_string_equal(
        text, "{\"id\":\"msg_1\",\"body\":[0,0,0],\"reply\":null,\"meta\":{},\"none\":null}");
    json_t *v = json_loads(text, 0, NULL);
    assert_non_null(v);
    json_decref(v);
    free(text);
    /* An object without members of its own. */
    json_text_object_with(&t, json_object(), stored, 1);
    text = json_text_take(&t, &len);
    assert_string_equal(text, "{\"body\":[0,0,0]}");
    free(text);
    json_text_string(&t, "a\"b");
    text = json_text_take(&t, &len);
    assert_string_equal(text, "\"a\\\"b\"");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed_agrees_with_jansson),
        cmocka_unit_test(test_objects_with_stored_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

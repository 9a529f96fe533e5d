/*
 * test_json_merge_patch.c: JSON Merge Patch (common/json_merge_patch.h) as RFC 7396 specifies
 * it: every example of its Appendix A and section 3, a patch that is not an object replacing the
 * target, and neither input changed, since the store merges into the metadata it read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "json_merge_patch.h"

#include <stdio.h>
#include <stdlib.h>

static json_t *parse(const char *text)
{
    json_error_t err;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &err);
    if (!v)
        fail_msg("bad JSON in the test: %s: %s", text, err.text);
    return v;
}

/* Applies patch to target and checks the result; also that neither input was changed. */
static void check(const char *target, const char *patch, const char *result)
{
    json_t *t = parse(target), *p = parse(patch), *want = parse(result);
    json_t *t0 = json_deep_copy(t), *p0 = json_deep_copy(p);
    json_t *got = json_merge_patch(t, p);
    assert_non_null(got);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
        print_error("%s patched with %s: got %s, want %s\n", target, patch, g, result);
        free(g);
        fail();
    }
    assert_true(json_equal(t, t0));
    assert_true(json_equal(p, p0));
    json_decref(t);
    json_decref(p);
    json_decref(want);
    json_decref(t0);
    json_decref(p0);
    json_decref(got);
}

/* RFC 7396 Appendix A, in its order. */
static void test_rfc7396_appendix_a(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        {"{\"a\":\"b\"}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
        {"{\"a\":\"b\"}", "{\"b\":\"c\"}", "{\"a\":\"b\",\"b\":\"c\"}"},
        {"{\"a\":\"b\"}", "{\"a\":null}", "{}"},
        {"{\"a\":\"b\",\"b\":\"c\"}", "{\"a\":null}", "{\"b\":\"c\"}"},
        {"{\"a\":[\"b\"]}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
        {"{\"a\":\"c\"}", "{\"a\":[\"b\"]}", "{\"a\":[\"b\"]}"},
        {"{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"d\",\"c\":null}}", "{\"a\":{\"b\":\"d\"}}"},
        {"{\"a\":[{\"b\":\"c\"}]}", "{\"a\":[1]}", "{\"a\":[1]}"},
        {"[\"a\",\"b\"]", "[\"c\",\"d\"]", "[\"c\",\"d\"]"},
        {"{\"a\":\"b\"}", "[\"c\"]", "[\"c\"]"},
        {"{\"a\":\"foo\"}", "null", "null"},
        {"{\"a\":\"foo\"}", "\"bar\"", "\"bar\""},
        {"{\"e\":null}", "{\"a\":1}", "{\"e\":null,\"a\":1}"},
        {"[1,2]", "{\"a\":\"b\",\"c\":null}", "{\"a\":\"b\"}"},
        {"{}", "{\"a\":{\"bb\":{\"ccc\":null}}}", "{\"a\":{\"bb\":{}}}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check(cases[i][0], cases[i][1], cases[i][2]);
}

/* RFC 7396 section 3's example: a member changed, one removed, one added, one nested. */
static void test_rfc7396_section_3(void **state)
{
    (void)state;
    check("{\"title\":\"Goodbye!\",\"author\":{\"givenName\":\"John\",\"familyName\":\"Doe\"},"
          "\"tags\":[\"example\",\"sample\"],\"content\":\"This will be unchanged\"}",
          "{\"title\":\"Hello!\",\"phoneNumber\":\"+01-123-456-7890\","
          "\"author\":{\"familyName\":null},\"tags\":[\"example\"]}",
          "{\"title\":\"Hello!\",\"author\":{\"givenName\":\"John\"},\"tags\":[\"example\"],"
          "\"content\":\"This will be unchanged\",\"phoneNumber\":\"+01-123-456-7890\"}");
}

/* A patch that is not an object replaces whatever the target was, object or not. */
static void test_non_object_patch_replaces(void **state)
{
    (void)state;
    check("{\"a\":{\"b\":1}}", "42", "42");
    check("{\"a\":1}", "true", "true");
    check("\"text\"", "[{\"a\":null}]", "[{\"a\":null}]");
    check("{\"a\":{\"b\":1}}", "{\"a\":7}", "{\"a\":7}");
    /* and an object patch makes an object of a target that was not one */
    check("\"text\"", "{\"a\":{\"b\":null,\"c\":1}}", "{\"a\":{\"c\":1}}");
}

/* No target at all (a Session without metadata): the patch applied to an empty object. */
static void test_no_target(void **state)
{
    (void)state;
    json_t *p = parse("{\"a\":1,\"b\":null}");
    json_t *got = json_merge_patch(NULL, p);
    json_t *want = parse("{\"a\":1}");
    assert_true(json_equal(got, want));
    json_decref(p);
    json_decref(got);
    json_decref(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc7396_appendix_a),
        cmocka_unit_test(test_rfc7396_section_3),
        cmocka_unit_test(test_non_object_patch_replaces),
        cmocka_unit_test(test_no_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

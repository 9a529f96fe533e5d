/*
 * test_render.c: the 202's template (render_message_queued_text) writes exactly the text that the
 * general renderer (render_message_text) writes for a message just queued, and hands any other
 * message to the general renderer.
 */
#include "json_text.h"
#include "render.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *render(void (*fn)(struct json_text *, const struct store_message *),
                    const struct store_message *m)
{
    struct json_text t = {0};
    size_t len;
    fn(&t, m);
    char *s = json_text_take(&t, &len);
    assert_non_null(s);
    return s;
}

static struct store_message queued(const char *request_id, const char *body)
{
    struct store_message m = {0};
    snprintf(m.id, sizeof m.id, "msg_0abcdefgh1234567890a");
    snprintf(m.session_id, sizeof m.session_id, "ses_0123456789abcdefghjk");
    snprintf(m.app_id, sizeof m.app_id, "app_0123456789abcdefghjk");
    m.seq = 42;
    snprintf(m.state, sizeof m.state, "queued");
    m.body_json = (char *)body;
    m.max_attempts = 3;
    snprintf(m.request_id, sizeof m.request_id, "%s", request_id);
    m.created_at = m.updated_at = 1764590400123;
    return m;
}

static void assert_same(const struct store_message *m)
{
    char *general = render(render_message_text, m), *fast = render(render_message_queued_text, m);
    assert_string_equal(fast, general);
    free(general);
    free(fast);
}

static void test_template_matches_the_general_renderer(void **state)
{
    (void)state;
    struct store_message m = queued("req_abc-123.x", "{\"n\":1,\"s\":\"\\u00e9\"}");
    assert_same(&m);
    m = queued("", "[1,2,3]"); /* no request id: null */
    assert_same(&m);
    m = queued("req_1", "\"text\"");
    m.seq = 9007199254740993LL;
    m.max_attempts = 1;
    assert_same(&m);
}

static void test_other_messages_take_the_general_path(void **state)
{
    (void)state;
    struct store_message m = queued("req_1", "{}");
    m.attempts = 1;
    snprintf(m.state, sizeof m.state, "delivering");
    snprintf(m.sandbox_id, sizeof m.sandbox_id, "sbx_0123456789abcdefghjk");
    m.updated_at = m.created_at + 5;
    assert_same(&m);
    m = queued("req_1", "{}");
    m.reply_json = "{\"ok\":true}";
    m.error = "boom";
    m.completed_at = m.created_at + 9;
    snprintf(m.state, sizeof m.state, "completed");
    assert_same(&m);
    m = queued("req_\"quoted\"", "{}"); /* not an id: escaped by the general path */
    assert_same(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_matches_the_general_renderer),
        cmocka_unit_test(test_other_messages_take_the_general_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
